"""GoodMem API keys: issue, list, get, update (status/labels), delete. Keys are stored as sha256 hashes.

Responses carry the union of both generations' required fields (Gen A ``userId``; Gen B
``subjectPrincipalId``,
``ownerPrincipalId``, ``authorityMode``, ``lifecycleState``, ...). ``INACTIVE`` is a permanent revocation, as
in Gen B; a revoked key cannot be made ACTIVE again.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.goodmem._svc import Svc, new_id, now_ms
from proxy.core.goodmem.auth import Principal, hash_key
from proxy.core.goodmem.paging import Page, decode_offset, encode_offset
from proxy.core.goodmem.validation import apply_labels, check_labels, check_uuid
from proxy.errors import BadRequest, Conflict, Forbidden, NotFound
from proxy.store import goodmem as gstore

__all__ = [
    "IssuedKey",
    "api_key_json",
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
class IssuedKey:
    raw_key: str
    doc: dict[str, Any]


def _lifecycle(doc: Mapping[str, Any], now: int) -> str:
    if doc.get("revoked_at") or doc.get("status") == "INACTIVE":
        return "REVOKED"
    if doc.get("expires_at") is not None and int(doc["expires_at"]) <= now:
        return "EXPIRED"
    if doc.get("valid_from") is not None and int(doc["valid_from"]) > now:
        return "NOT_YET_VALID"
    return "USABLE"


def api_key_json(doc: Mapping[str, Any], now: int | None = None) -> dict[str, Any]:
    """ApiKeyResponse with the fields both client generations require."""
    state = _lifecycle(doc, now_ms() if now is None else now)
    out: dict[str, Any] = {
        "apiKeyId": doc["api_key_id"],
        "userId": doc["user_id"],
        "subjectPrincipalId": doc["user_id"],
        "ownerPrincipalId": doc.get("owner_id") or doc["user_id"],
        "authorityMode": "INHERIT_SUBJECT",
        "ceiling": [],
        "ceilingOmitted": False,
        "keyPrefix": doc["key_prefix"],
        "status": "ACTIVE" if state == "USABLE" else "INACTIVE",
        "lifecycleState": state,
        "labels": dict(doc.get("labels") or {}),
        "validFrom": int(doc.get("valid_from") or doc["created_at"]),
        "createdAt": int(doc["created_at"]),
        "updatedAt": int(doc["updated_at"]),
        "createdById": doc.get("created_by_id") or doc["user_id"],
        "updatedById": doc.get("updated_by_id") or doc["user_id"],
    }
    for src, dst in (
        ("expires_at", "expiresAt"),
        ("last_used_at", "lastUsedAt"),
        ("revoked_at", "revokedAt"),
        ("revoked_by_id", "revokedById"),
    ):
        if doc.get(src) is not None:
            out[dst] = doc[src]
    return out


async def issue_key(
    svc: Svc,
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
    await gstore.index_doc(svc.store, gstore.APIKEYS, hash_key(raw), doc, create=True)
    return IssuedKey(raw, doc)


def _opt_int(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise BadRequest(f"{key} must be an integer (milliseconds since the epoch)")
    return int(value)


async def create_api_key(svc: Svc, principal: Principal, body: Mapping[str, Any]) -> IssuedKey:
    """POST /v1/apikeys: a key for the caller, or (admin only) for ``subjectPrincipalId``."""
    labels = check_labels(body.get("labels"))
    expires_at = _opt_int(body, "expiresAt")
    valid_from = _opt_int(body, "validFrom")
    now = now_ms()
    if expires_at is not None and expires_at <= now:
        raise BadRequest("expiresAt must be in the future")
    if expires_at is not None and valid_from is not None and valid_from >= expires_at:
        raise BadRequest("validFrom must be before expiresAt")
    mode = body.get("authorityMode")
    if mode not in (None, "INHERIT_SUBJECT", "AUTHORITY_MODE_UNSPECIFIED") or body.get("ceiling"):
        raise BadRequest("Only INHERIT_SUBJECT API keys are supported (no scoped ceilings)")
    subject = principal.user_id
    if body.get("subjectPrincipalId") is not None:
        subject = check_uuid(body["subjectPrincipalId"], "subjectPrincipalId")
        if subject != principal.user_id and not principal.is_admin:
            raise Forbidden("Permission denied: only an administrator may issue keys for another principal")
        user = await gstore.get_doc(svc.store, gstore.USERS, subject)
        if user is None or user.get("deleted_at"):
            raise NotFound("Principal not found")
    key_id = None
    if body.get("apiKeyId") is not None:
        key_id = check_uuid(body["apiKeyId"], "apiKeyId")
        if await _find(svc, key_id) is not None:
            raise Conflict("An API key with this ID already exists")
    return await issue_key(
        svc,
        user_id=subject,
        actor_id=principal.user_id,
        labels=labels,
        expires_at=expires_at,
        valid_from=valid_from,
        api_key_id=key_id,
    )


async def _find(svc: Svc, api_key_id: str) -> tuple[str, dict[str, Any]] | None:
    """(document id, source) of the key with this public id."""
    res = await gstore.search(
        svc.store, gstore.APIKEYS, {"size": 1, "query": {"term": {"api_key_id": api_key_id}}}
    )
    hits = res.get("hits", {}).get("hits", [])
    return (hits[0]["_id"], hits[0]["_source"]) if hits else None


def _visible(principal: Principal, doc: Mapping[str, Any]) -> bool:
    return principal.is_admin or principal.user_id in (doc.get("user_id"), doc.get("owner_id"))


async def _load(svc: Svc, principal: Principal, api_key_id: str) -> tuple[str, dict[str, Any]]:
    found = await _find(svc, check_uuid(api_key_id, "id"))
    if found is None:
        raise NotFound("API key not found")
    if not _visible(principal, found[1]):
        raise Forbidden("Permission denied: the API key belongs to another principal")
    return found


async def get_api_key(svc: Svc, principal: Principal, api_key_id: str) -> dict[str, Any]:
    return (await _load(svc, principal, api_key_id))[1]


async def list_api_keys(
    svc: Svc,
    principal: Principal,
    *,
    subject_id: str | None = None,
    owner_id: str | None = None,
    lifecycle_state: str | None = None,
    max_results: int | None = None,
    next_token: str | None = None,
) -> Page:
    """The caller's keys (admins may name another subject/owner), in stable id order, paginated."""
    if lifecycle_state is not None and lifecycle_state not in LIFECYCLE_STATES:
        raise BadRequest(f"lifecycleState must be one of {', '.join(LIFECYCLE_STATES)}")
    filters: list[dict[str, Any]] = []
    for field, value in (("user_id", subject_id), ("owner_id", owner_id)):
        if value is not None:
            value = check_uuid(value, field)
            if value != principal.user_id and not principal.is_admin:
                raise Forbidden("Permission denied: only an administrator may list another principal's keys")
            filters.append({"term": {field: value}})
    if not filters:
        filters.append(
            {
                "bool": {
                    "should": [
                        {"term": {"user_id": principal.user_id}},
                        {"term": {"owner_id": principal.user_id}},
                    ]
                }
            }
        )
    res = await gstore.search(
        svc.store,
        gstore.APIKEYS,
        {"size": 10_000, "query": {"bool": {"filter": filters}}, "sort": [{"api_key_id": "asc"}]},
    )
    now = now_ms()
    docs = [h["_source"] for h in res.get("hits", {}).get("hits", [])]
    if lifecycle_state is not None:
        docs = [d for d in docs if _lifecycle(d, now) == lifecycle_state]
    size = max(1, min(int(max_results or 50), 1000))
    start = decode_offset(next_token)
    window = docs[start : start + size]
    more = start + size < len(docs)
    return Page(items=window, next_token=encode_offset(start + size) if more else None)


async def update_api_key(
    svc: Svc, principal: Principal, api_key_id: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    doc_id, doc = await _load(svc, principal, api_key_id)
    status = body.get("status")
    if status not in (None, "ACTIVE", "INACTIVE", "STATUS_UNSPECIFIED"):
        raise BadRequest("status must be ACTIVE or INACTIVE")
    now = now_ms()
    if status == "INACTIVE" and not doc.get("revoked_at"):
        doc["status"] = "INACTIVE"
        doc["revoked_at"] = now
        doc["revoked_by_id"] = principal.user_id
    elif status == "ACTIVE" and doc.get("revoked_at"):
        raise BadRequest("A revoked API key cannot be reactivated; create a new key")
    doc["labels"] = apply_labels(doc.get("labels") or {}, body.get("replaceLabels"), body.get("mergeLabels"))
    doc["updated_at"] = now
    doc["updated_by_id"] = principal.user_id
    await gstore.index_doc(svc.store, gstore.APIKEYS, doc_id, doc)
    svc.caches.access_changed()
    return doc


async def delete_api_key(svc: Svc, principal: Principal, api_key_id: str) -> None:
    doc_id, _ = await _load(svc, principal, api_key_id)
    await gstore.delete_doc(svc.store, gstore.APIKEYS, doc_id)
    svc.caches.access_changed()
