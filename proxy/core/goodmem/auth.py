"""GoodMem authentication (API keys) and space authorization (owners, root/admin, grants, publicRead).

A request authenticates with ``x-api-key: <key>`` or ``Authorization: Bearer <key>``. The key's sha256 is the
id of its document, so authentication is one realtime GET of the key plus one of its user, kept for a couple
of seconds in the read cache (proxy.core.cache; expiry and validity windows are still checked on every
request). Missing or unusable keys are 401; an authenticated caller without the permission is 403.

Space permissions (the Gen B operation names): root/admin may do everything; the owner of a space may do
everything on it; anyone else needs a grant. A grant names an audience (one principal or all authenticated
principals), an operation and a selector (``EXACT``/``DIRECT_MEMBERS_OF`` a space, or ``ANY`` space). Gen A's
``publicRead`` is an all-authenticated grant of READ_SPACE, LIST_MEMORY and READ_MEMORY. Any grant on a space
also lets its audience see the space itself (READ_SPACE), because one cannot use a space one cannot see.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.goodmem import instance
from proxy.core.goodmem._svc import Svc, now_ms
from proxy.errors import Forbidden, Unauthenticated
from proxy.store import goodmem as gstore

__all__ = [
    "ADMIN_ROLES",
    "PUBLIC_READ_OPS",
    "SPACE_OPS",
    "Principal",
    "authenticate",
    "authorize_space",
    "can_access_space",
    "extract_api_key",
    "hash_key",
    "require_admin",
    "space_owner_id",
]

log = logging.getLogger(__name__)

SPACE_OPS = frozenset(
    {
        "READ_SPACE",
        "UPDATE_SPACE",
        "DELETE_SPACE",
        "LIST_MEMORY",
        "READ_MEMORY",
        "CREATE_MEMORY",
        "DELETE_MEMORY",
        "MANAGE_ACCESS",
    }
)
PUBLIC_READ_OPS = frozenset({"READ_SPACE", "LIST_MEMORY", "READ_MEMORY"})
ADMIN_ROLES = frozenset({"ROOT", "ADMIN"})
# lastUsedAt is refreshed at most this often per key, off the request path.
_TOUCH_EVERY_MS = 60_000
_touch_tasks: set[asyncio.Task[None]] = set()


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: a user acting through one API key."""

    user_id: str
    api_key_id: str
    roles: tuple[str, ...] = ()

    @property
    def is_admin(self) -> bool:
        return any(r in ADMIN_ROLES for r in self.roles)


def hash_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    lower = name.lower()
    for key, val in headers.items():  # plain dicts are not case-insensitive
        if key.lower() == lower:
            return val
    return None


def extract_api_key(headers: Mapping[str, str]) -> str | None:
    """The raw key from ``x-api-key`` or ``Authorization: Bearer``; None when neither is present."""
    key = _header(headers, "x-api-key")
    if key and key.strip():
        return key.strip()
    auth = _header(headers, "authorization")
    if auth:
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


async def authenticate(svc: Svc, headers: Mapping[str, str]) -> Principal:
    """The caller behind the request's API key; 401 when there is none or it is not usable now."""
    raw = extract_api_key(headers)
    if raw is None:
        raise Unauthenticated("No API key provided.")
    key_hash = hash_key(raw)
    try:
        doc, user = await svc.caches.principals.get(key_hash, lambda: _load_key(svc, key_hash))
    except _NoSuchKey:
        raise Unauthenticated("Invalid or expired API key.") from None
    now = now_ms()
    # Validity windows are checked on every request, cached or not.
    if not _usable(doc, now) or user.get("deleted_at"):
        raise Unauthenticated("Invalid or expired API key.")
    _touch(svc, key_hash, doc, now)
    return Principal(
        user_id=str(doc["user_id"]), api_key_id=str(doc["api_key_id"]), roles=tuple(user.get("roles") or ())
    )


class _NoSuchKey(Exception):
    """Raised, not returned, so that the cache (which keeps only successful loads) never keeps it."""


async def _load_key(svc: Svc, key_hash: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The key's document and its user's."""
    doc = await gstore.get_doc(svc.store, gstore.APIKEYS, key_hash)
    if doc is None:
        raise _NoSuchKey
    user = await gstore.get_doc(svc.store, gstore.USERS, str(doc["user_id"]))
    if user is None:
        raise _NoSuchKey
    return doc, user


def _usable(doc: Mapping[str, Any], now: int) -> bool:
    if doc.get("status") != "ACTIVE" or doc.get("revoked_at"):
        return False
    if doc.get("expires_at") is not None and int(doc["expires_at"]) <= now:
        return False
    return not (doc.get("valid_from") is not None and int(doc["valid_from"]) > now)


def _touch(svc: Svc, doc_id: str, doc: dict[str, Any], now: int) -> None:
    """Record lastUsedAt without delaying the request (and without a write per request)."""
    if now - int(doc.get("last_used_at") or 0) < _TOUCH_EVERY_MS:
        return
    doc["last_used_at"] = now  # the cached copy too, so the next requests do not write again

    async def run() -> None:
        try:
            await svc.store.request(
                "POST", f"/{gstore.APIKEYS}/_update/{doc_id}", body={"doc": {"last_used_at": now}}
            )
        except Exception as exc:  # best effort: a lost lastUsedAt is not worth failing anything
            log.debug("lastUsedAt update failed: %s", exc)

    task = asyncio.get_running_loop().create_task(run())
    _touch_tasks.add(task)
    task.add_done_callback(_touch_tasks.discard)


def require_admin(principal: Principal, what: str = "this operation") -> None:
    if not principal.is_admin:
        raise Forbidden(f"Permission denied: {what} requires an administrator")


def _goodmem_attrs(container: Any) -> Mapping[str, Any]:
    attrs = getattr(container, "goodmem", None)
    return attrs if isinstance(attrs, Mapping) else {}


def _container_id(container: Any) -> str:
    for name in ("id", "container_id", "memory_container_id"):
        value = getattr(container, name, None)
        if value:
            return str(value)
    raise TypeError(f"not a container: {container!r}")


async def space_owner_id(svc: Svc, container: Any) -> str | None:
    """The space's owner; a container created through the OpenSearch API belongs to root."""
    owner = _goodmem_attrs(container).get("owner_id")
    if owner:
        return str(owner)
    return await instance.root_user_id(svc)


async def can_access_space(svc: Svc, principal: Principal, container: Any, op: str) -> bool:
    if op not in SPACE_OPS:
        raise ValueError(f"unknown space operation {op!r}")
    if principal.is_admin:
        return True
    if await space_owner_id(svc, container) == principal.user_id:
        return True
    if op == "MANAGE_ACCESS":
        return False
    if op in PUBLIC_READ_OPS and _goodmem_attrs(container).get("public_read"):
        return True
    ops = tuple(sorted(SPACE_OPS)) if op == "READ_SPACE" else (op,)
    space_id = _container_id(container)
    return await svc.caches.grants.get(
        (principal.user_id, space_id, ops), lambda: _has_grant(svc, principal, space_id, list(ops))
    )


async def authorize_space(svc: Svc, principal: Principal, container: Any, op: str) -> None:
    """Raise 403 unless ``principal`` may perform ``op`` on the space ``container``."""
    if not await can_access_space(svc, principal, container, op):
        raise Forbidden(f"Permission denied: {op} on space {_container_id(container)}")


async def _has_grant(svc: Svc, principal: Principal, space_id: str, ops: list[str]) -> bool:
    query = {
        "bool": {
            "filter": [
                {"terms": {"operation": ops}},
                {
                    "bool": {
                        "should": [
                            {"term": {"principal_id": principal.user_id}},
                            {"term": {"all_authenticated": True}},
                        ],
                        "minimum_should_match": 1,
                    }
                },
                {
                    "bool": {
                        "should": [
                            {"term": {"selector": "ANY"}},
                            {
                                "bool": {
                                    "filter": [
                                        {"term": {"resource_kind": "SPACE"}},
                                        {"term": {"resource_id": space_id}},
                                    ]
                                }
                            },
                        ],
                        "minimum_should_match": 1,
                    }
                },
            ],
            "must_not": [{"exists": {"field": "revoked_at"}}],
        }
    }
    return await gstore.count(svc.store, gstore.GRANTS, query) > 0
