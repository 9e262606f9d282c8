"""Gen B access-policy grants, the subset memproxy enforces: space operations for a principal or for all
authenticated principals, on one space (``EXACT`` / ``DIRECT_MEMBERS_OF``) or on every space (``ANY``, admins
only).

``POST /v1/access-policy/grants`` needs MANAGE_ACCESS on the space (its owner or an admin); a delete revokes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.ids import check_uuid, new_id, now_ms
from proxy.core.goodmem.paging import Page, Window
from proxy.core.goodmem.spaces import get_space
from proxy.core.identity import SPACE_OPS, Principal, authorize_space, require_admin
from proxy.errors import BadRequest, Forbidden, NotFound
from proxy.store.goodmem import GRANTS
from proxy.store.query import Exists, Filter, Not, Term, all_of

__all__ = [
    "GRANTABLE",
    "SELECTORS",
    "Grant",
    "NewGrant",
    "create_grant",
    "get_grant",
    "list_grants",
    "revoke_grant",
]

SELECTORS = ("ANY", "EXACT", "DIRECT_MEMBERS_OF")
GRANTABLE = SPACE_OPS - {"MANAGE_ACCESS"}


@dataclass(frozen=True)
class Grant:
    grant_id: str
    principal_id: str | None
    all_authenticated: bool
    operation: str
    selector: str
    resource_kind: str | None
    resource_id: str | None
    created_at: int
    created_by_id: str
    revoked_at: int | None = None
    revoked_by_id: str | None = None

    @classmethod
    def from_source(cls, doc: Mapping[str, Any]) -> Grant:
        return cls(
            grant_id=doc["grant_id"],
            principal_id=doc.get("principal_id"),
            all_authenticated=bool(doc.get("all_authenticated")),
            operation=doc["operation"],
            selector=doc["selector"],
            resource_kind=doc.get("resource_kind"),
            resource_id=doc.get("resource_id"),
            created_at=doc["created_at"],
            created_by_id=doc["created_by_id"],
            revoked_at=doc.get("revoked_at") or None,
            revoked_by_id=doc.get("revoked_by_id"),
        )


@dataclass(frozen=True)
class NewGrant:
    """``POST /v1/access-policy/grants``, validated: the audience is ``principal_id`` or everyone
    authenticated; ``space_id`` is None exactly for the ANY selector."""

    principal_id: str | None
    all_authenticated: bool
    operation: str
    selector: str
    space_id: str | None = None
    grant_id: str | None = None


async def create_grant(gm: GoodMem, principal: Principal, req: NewGrant) -> Grant:
    """Store one grant (the assigned space must exist: 404 otherwise)."""
    if req.space_id is None:
        require_admin(principal, "an ANY grant")
    else:
        await authorize_space(gm, principal, await get_space(gm, req.space_id), "MANAGE_ACCESS")
    grant_id = req.grant_id or new_id()
    doc = {
        "grant_id": grant_id,
        "principal_id": req.principal_id,
        "all_authenticated": req.all_authenticated,
        "operation": req.operation,
        "selector": req.selector,
        "resource_kind": "SPACE" if req.space_id else None,
        "resource_id": req.space_id,
        "created_at": now_ms(),
        "created_by_id": principal.user_id,
    }
    await gm.docs.put(
        GRANTS, grant_id, doc, create=True, conflict_message="A grant with this ID already exists"
    )
    gm.caches.access_changed()  # a cached "no grant" answer is now wrong
    return Grant.from_source(doc)


async def _load(gm: GoodMem, principal: Principal, grant_id: str) -> dict[str, Any]:
    doc = await gm.docs.get(GRANTS, check_uuid(grant_id, "id"))
    if doc is None:
        raise NotFound("Grant not found")
    if not principal.is_admin:
        if not doc.get("resource_id"):
            raise Forbidden("Permission denied: MANAGE_ACCESS")
        await authorize_space(gm, principal, await get_space(gm, doc["resource_id"]), "MANAGE_ACCESS")
    return doc


async def get_grant(gm: GoodMem, principal: Principal, grant_id: str) -> Grant:
    return Grant.from_source(await _load(gm, principal, grant_id))


async def revoke_grant(gm: GoodMem, principal: Principal, grant_id: str) -> Grant:
    doc = await _load(gm, principal, grant_id)
    if not doc.get("revoked_at"):
        doc["revoked_at"] = now_ms()
        doc["revoked_by_id"] = principal.user_id
        await gm.docs.put(GRANTS, doc["grant_id"], doc)
        gm.caches.access_changed()
    return Grant.from_source(doc)


async def list_grants(
    gm: GoodMem,
    principal: Principal,
    *,
    resource_kind: str | None,
    resource_id: str | None,
    include_revoked: bool,
    max_results: int | None,
    next_token: str | None,
) -> Page[Grant]:
    if resource_kind not in ("SPACE", "INSTANCE"):
        raise BadRequest("resourceKind must be SPACE or INSTANCE")
    filters: list[Filter] = []
    if resource_kind == "SPACE":
        if resource_id is None:
            raise BadRequest("resourceId is required for resourceKind SPACE")
        space_id = check_uuid(resource_id, "resourceId")
        await authorize_space(gm, principal, await get_space(gm, space_id), "MANAGE_ACCESS")
        filters.append(Term("resource_id", space_id))
    else:
        require_admin(principal, "listing instance grants")
        filters.append(Term("selector", "ANY"))
    if not include_revoked:
        filters.append(Not(Exists("revoked_at")))
    window = Window.of(max_results, next_token, default=50, high=1000)
    start, size = window.probe()
    hits = await gm.docs.search(GRANTS, all_of(filters), start=start, size=size, sort=("grant_id",))
    return window.page([Grant.from_source(h["_source"]) for h in hits])
