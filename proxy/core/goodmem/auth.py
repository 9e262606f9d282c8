"""GoodMem authentication (API keys) and space authorization (owners, root/admin, grants, publicRead).

The GoodMem slice takes the key from ``x-api-key: <key>`` or ``Authorization: Bearer <key>``; the key's
sha256 is the id of its document, so authentication is one realtime GET of the key plus one of its user, kept
for a couple of seconds in the read cache (proxy.core.cache; expiry and validity windows are still checked on
every request). Missing or unusable keys are 401; an authenticated caller without the permission is 403.

Space permissions (the Gen B operation names): root/admin may do everything; the owner of a space may do
everything on it; anyone else needs a grant. A grant names an audience (one principal or all authenticated
principals), an operation and a selector (``EXACT``/``DIRECT_MEMBERS_OF`` a space, or ``ANY`` space). Gen A's
``publicRead`` is an all-authenticated grant of READ_SPACE, LIST_MEMORY and READ_MEMORY. Any grant on a space
also lets its audience see the space itself (READ_SPACE), because one cannot use a space one cannot see.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.container_record import Container
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.ids import now_ms
from proxy.errors import Forbidden, Unauthenticated
from proxy.store.goodmem import APIKEYS, GRANTS, USERS
from proxy.store.query import And, Exists, Not, Or, Term, Terms

__all__ = [
    "ADMIN_ROLES",
    "PUBLIC_READ_OPS",
    "SPACE_OPS",
    "Principal",
    "authenticate",
    "authorize_space",
    "can_access_space",
    "hash_key",
    "require_admin",
    "space_owner_id",
]

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


async def authenticate(gm: GoodMem, raw_key: str | None) -> Principal:
    """The caller behind an API key (None: the request had none); 401 when it is not usable now."""
    if raw_key is None:
        raise Unauthenticated("No API key provided.")
    key_hash = hash_key(raw_key)
    try:
        doc, user = await gm.caches.principals.get(key_hash, lambda: _load_key(gm, key_hash))
    except _NoSuchKey:
        raise Unauthenticated("Invalid or expired API key.") from None
    now = now_ms()
    # Validity windows are checked on every request, cached or not.
    if not _usable(doc, now) or user.get("deleted_at"):
        raise Unauthenticated("Invalid or expired API key.")
    _touch(gm, key_hash, doc, now)
    return Principal(
        user_id=str(doc["user_id"]), api_key_id=str(doc["api_key_id"]), roles=tuple(user.get("roles") or ())
    )


class _NoSuchKey(Exception):
    """Raised, not returned, so that the cache (which keeps only successful loads) never keeps it."""


async def _load_key(gm: GoodMem, key_hash: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The key's document and its user's."""
    doc = await gm.docs.get(APIKEYS, key_hash)
    if doc is None:
        raise _NoSuchKey
    user = await gm.docs.get(USERS, str(doc["user_id"]))
    if user is None:
        raise _NoSuchKey
    return doc, user


def _usable(doc: Mapping[str, Any], now: int) -> bool:
    if doc.get("status") != "ACTIVE" or doc.get("revoked_at"):
        return False
    if doc.get("expires_at") is not None and int(doc["expires_at"]) <= now:
        return False
    return not (doc.get("valid_from") is not None and int(doc["valid_from"]) > now)


def _touch(gm: GoodMem, doc_id: str, doc: dict[str, Any], now: int) -> None:
    """Record lastUsedAt without delaying the request (and without a write per request)."""
    if now - int(doc.get("last_used_at") or 0) < _TOUCH_EVERY_MS:
        return
    doc["last_used_at"] = now  # the cached copy too, so the next requests do not write again
    gm.background.spawn(gm.docs.update_fields(APIKEYS, doc_id, {"last_used_at": now}), "lastUsedAt update")


def require_admin(principal: Principal, what: str = "this operation") -> None:
    if not principal.is_admin:
        raise Forbidden(f"Permission denied: {what} requires an administrator")


def _goodmem_attrs(container: Container) -> Mapping[str, Any]:
    return container.goodmem or {}


async def space_owner_id(gm: GoodMem, container: Container) -> str | None:
    """The space's owner; a container created through the OpenSearch API belongs to root."""
    owner = _goodmem_attrs(container).get("owner_id")
    if owner:
        return str(owner)
    return await gm.instance.root_user_id()


async def can_access_space(gm: GoodMem, principal: Principal, container: Container, op: str) -> bool:
    if op not in SPACE_OPS:
        raise ValueError(f"unknown space operation {op!r}")
    if principal.is_admin:
        return True
    if await space_owner_id(gm, container) == principal.user_id:
        return True
    if op == "MANAGE_ACCESS":
        return False
    if op in PUBLIC_READ_OPS and _goodmem_attrs(container).get("public_read"):
        return True
    ops = tuple(sorted(SPACE_OPS)) if op == "READ_SPACE" else (op,)
    space_id = container.id
    return await gm.caches.grants.get(
        (principal.user_id, space_id, ops), lambda: _has_grant(gm, principal, space_id, list(ops))
    )


async def authorize_space(gm: GoodMem, principal: Principal, container: Container, op: str) -> None:
    """Raise 403 unless ``principal`` may perform ``op`` on the space ``container``."""
    if not await can_access_space(gm, principal, container, op):
        raise Forbidden(f"Permission denied: {op} on space {container.id}")


async def _has_grant(gm: GoodMem, principal: Principal, space_id: str, ops: list[str]) -> bool:
    where = And(
        (
            Terms("operation", tuple(ops)),
            Or((Term("principal_id", principal.user_id), Term("all_authenticated", True))),
            Or(
                (
                    Term("selector", "ANY"),
                    And((Term("resource_kind", "SPACE"), Term("resource_id", space_id))),
                )
            ),
            Not(Exists("revoked_at")),
        )
    )
    return await gm.docs.count(GRANTS, where) > 0
