"""GoodMem API keys: issue, list, get, update (status/labels), delete. Keys are stored as sha256 hashes.

``INACTIVE`` is a permanent revocation, as in Gen B; a revoked key cannot be made ACTIVE again.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.ids import check_uuid, new_id, now_ms
from proxy.core.goodmem.paging import Page, Window
from proxy.core.goodmem.users import is_active_user
from proxy.core.goodmem.validation import LabelChange
from proxy.core.identity import IdentityState, Principal, hash_key
from proxy.errors import BadRequest, Conflict, Forbidden, NotFound
from proxy.store.goodmem import APIKEYS
from proxy.store.query import Filter, Or, Term, all_of

__all__ = [
    "LIFECYCLE_STATES",
    "ApiKey",
    "ApiKeyUpdate",
    "IssuedKey",
    "NewApiKey",
    "create_api_key",
    "delete_api_key",
    "get_api_key",
    "issue_key",
    "list_api_keys",
    "update_api_key",
]

KEY_PREFIX_LEN = 10
LIFECYCLE_STATES = ("NOT_YET_VALID", "USABLE", "EXPIRED", "REVOKED")


@dataclass(frozen=True)
class ApiKey:
    """An API key's metadata (never the key itself)."""

    api_key_id: str
    user_id: str
    owner_id: str
    key_prefix: str
    status: str | None
    labels: dict[str, str]
    created_at: int
    updated_at: int
    created_by_id: str
    updated_by_id: str
    valid_from: int | None = None
    expires_at: int | None = None
    last_used_at: int | None = None
    revoked_at: int | None = None
    revoked_by_id: str | None = None

    @classmethod
    def from_source(cls, doc: Mapping[str, Any]) -> ApiKey:
        user_id = doc["user_id"]
        return cls(
            api_key_id=doc["api_key_id"],
            user_id=user_id,
            owner_id=doc.get("owner_id") or user_id,
            key_prefix=doc["key_prefix"],
            status=doc.get("status"),
            labels=dict(doc.get("labels") or {}),
            created_at=int(doc["created_at"]),
            updated_at=int(doc["updated_at"]),
            created_by_id=doc.get("created_by_id") or user_id,
            updated_by_id=doc.get("updated_by_id") or user_id,
            valid_from=doc.get("valid_from"),
            expires_at=doc.get("expires_at"),
            last_used_at=doc.get("last_used_at"),
            revoked_at=doc.get("revoked_at"),
            revoked_by_id=doc.get("revoked_by_id"),
        )

    def lifecycle(self, now: int) -> str:
        if self.revoked_at or self.status == "INACTIVE":
            return "REVOKED"
        if self.expires_at is not None and int(self.expires_at) <= now:
            return "EXPIRED"
        if self.valid_from is not None and int(self.valid_from) > now:
            return "NOT_YET_VALID"
        return "USABLE"


@dataclass(frozen=True)
class IssuedKey:
    raw_key: str
    key: ApiKey


@dataclass(frozen=True)
class NewApiKey:
    """``POST /v1/apikeys``, validated: a key for the caller, or for ``subject_id`` (admins)."""

    labels: dict[str, str] = field(default_factory=dict)
    expires_at: int | None = None
    valid_from: int | None = None
    subject_id: str | None = None
    api_key_id: str | None = None


@dataclass(frozen=True)
class ApiKeyUpdate:
    """``PUT /v1/apikeys/{id}``, validated: ``status`` ACTIVE / INACTIVE / None, and labels."""

    status: str | None = None
    labels: LabelChange = field(default_factory=LabelChange)


async def issue_key(
    gm: IdentityState,
    *,
    user_id: str,
    actor_id: str,
    labels: Mapping[str, str] | None = None,
    expires_at: int | None = None,
    valid_from: int | None = None,
    api_key_id: str | None = None,
) -> IssuedKey:
    """Create and store a new key for ``user_id``; the raw key is returned once and never stored."""
    raw = "gm_" + secrets.token_urlsafe(32)
    now = now_ms()
    doc: dict[str, Any] = {
        "api_key_id": api_key_id or new_id(),
        "user_id": user_id,
        "owner_id": user_id,
        "status": "ACTIVE",
        "key_prefix": raw[:KEY_PREFIX_LEN],
        "labels": dict(labels or {}),
        "valid_from": valid_from if valid_from is not None else now,
        "created_at": now,
        "updated_at": now,
        "created_by_id": actor_id,
        "updated_by_id": actor_id,
    }
    if expires_at is not None:
        doc["expires_at"] = expires_at
    await gm.docs.put(APIKEYS, hash_key(raw), doc, create=True)
    return IssuedKey(raw, ApiKey.from_source(doc))


async def create_api_key(gm: GoodMem, principal: Principal, req: NewApiKey) -> IssuedKey:
    """POST /v1/apikeys: a key for the caller, or (admin only) for ``subject_id``."""
    subject = principal.user_id
    if req.subject_id is not None:
        subject = req.subject_id
        if subject != principal.user_id and not principal.is_admin:
            raise Forbidden("Permission denied: only an administrator may issue keys for another principal")
        if not await is_active_user(gm, subject):
            raise NotFound("Principal not found")
    if req.api_key_id is not None and await _find(gm, req.api_key_id) is not None:
        raise Conflict("An API key with this ID already exists")
    return await issue_key(
        gm,
        user_id=subject,
        actor_id=principal.user_id,
        labels=req.labels,
        expires_at=req.expires_at,
        valid_from=req.valid_from,
        api_key_id=req.api_key_id,
    )


async def _find(gm: GoodMem, api_key_id: str) -> tuple[str, dict[str, Any]] | None:
    """(document id, source) of the key with this public id."""
    hits = await gm.docs.search(APIKEYS, Term("api_key_id", api_key_id), size=1)
    return (hits[0]["_id"], hits[0]["_source"]) if hits else None


def _visible(principal: Principal, doc: Mapping[str, Any]) -> bool:
    return principal.is_admin or principal.user_id in (doc.get("user_id"), doc.get("owner_id"))


async def _load(gm: GoodMem, principal: Principal, api_key_id: str) -> tuple[str, dict[str, Any]]:
    found = await _find(gm, check_uuid(api_key_id, "id"))
    if found is None:
        raise NotFound("API key not found")
    if not _visible(principal, found[1]):
        raise Forbidden("Permission denied: the API key belongs to another principal")
    return found


async def get_api_key(gm: GoodMem, principal: Principal, api_key_id: str) -> ApiKey:
    return ApiKey.from_source((await _load(gm, principal, api_key_id))[1])


async def list_api_keys(
    gm: GoodMem,
    principal: Principal,
    *,
    subject_id: str | None = None,
    owner_id: str | None = None,
    lifecycle_state: str | None = None,
    max_results: int | None = None,
    next_token: str | None = None,
) -> Page[ApiKey]:
    """The caller's keys (admins may name another subject/owner), in stable id order, paginated."""
    if lifecycle_state is not None and lifecycle_state not in LIFECYCLE_STATES:
        raise BadRequest(f"lifecycleState must be one of {', '.join(LIFECYCLE_STATES)}")
    filters: list[Filter] = []
    for name, value in (("user_id", subject_id), ("owner_id", owner_id)):
        if value is not None:
            value = check_uuid(value, name)
            if value != principal.user_id and not principal.is_admin:
                raise Forbidden("Permission denied: only an administrator may list another principal's keys")
            filters.append(Term(name, value))
    if not filters:
        filters.append(Or((Term("user_id", principal.user_id), Term("owner_id", principal.user_id))))
    hits = await gm.docs.search_all(APIKEYS, all_of(filters), key="api_key_id")
    now = now_ms()
    keys = [ApiKey.from_source(h["_source"]) for h in hits]
    if lifecycle_state is not None:
        keys = [k for k in keys if k.lifecycle(now) == lifecycle_state]
    # maxResults 0 (or none) means the default here.
    return Window.of(max_results or None, next_token, default=50, high=1000).cut(keys)


async def update_api_key(gm: GoodMem, principal: Principal, api_key_id: str, req: ApiKeyUpdate) -> ApiKey:
    doc_id, doc = await _load(gm, principal, api_key_id)
    now = now_ms()
    if req.status == "INACTIVE" and not doc.get("revoked_at"):
        doc["status"] = "INACTIVE"
        doc["revoked_at"] = now
        doc["revoked_by_id"] = principal.user_id
    elif req.status == "ACTIVE" and doc.get("revoked_at"):
        raise BadRequest("A revoked API key cannot be reactivated; create a new key")
    doc["labels"] = req.labels.apply(doc.get("labels") or {})
    doc["updated_at"] = now
    doc["updated_by_id"] = principal.user_id
    await gm.docs.put(APIKEYS, doc_id, doc)
    gm.caches.access_changed()
    return ApiKey.from_source(doc)


async def delete_api_key(gm: GoodMem, principal: Principal, api_key_id: str) -> None:
    doc_id, _ = await _load(gm, principal, api_key_id)
    await gm.docs.delete(APIKEYS, doc_id)
    gm.caches.access_changed()
