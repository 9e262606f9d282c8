"""Gen B access-policy grants, the subset memproxy enforces: space operations for a principal or for all
authenticated principals, on one space (``EXACT`` / ``DIRECT_MEMBERS_OF``) or on every space (``ANY``, admins
only).

``POST /v1/access-policy/grants`` needs MANAGE_ACCESS on the space (its owner or an admin); a delete revokes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.core.goodmem._svc import Svc, new_id, now_ms
from proxy.core.goodmem.auth import SPACE_OPS, Principal, authorize_space, require_admin
from proxy.core.goodmem.paging import Page, clamp, decode_offset, encode_offset
from proxy.core.goodmem.spaces import get_space
from proxy.core.goodmem.validation import check_uuid
from proxy.errors import BadRequest, Conflict, Forbidden, NotFound
from proxy.store import goodmem as gstore

__all__ = ["create_grant", "get_grant", "grant_json", "list_grants", "revoke_grant"]

SELECTORS = ("ANY", "EXACT", "DIRECT_MEMBERS_OF")
GRANTABLE = SPACE_OPS - {"MANAGE_ACCESS"}


def grant_json(doc: Mapping[str, Any]) -> dict[str, Any]:
    audience: dict[str, Any] = (
        {"allAuthenticated": True} if doc.get("all_authenticated") else {"principalId": doc["principal_id"]}
    )
    rule: dict[str, Any] = {"operation": doc["operation"], "selector": doc["selector"]}
    if doc.get("resource_id"):
        rule["assignedResource"] = {"kind": doc["resource_kind"], "resourceId": doc["resource_id"]}
    out: dict[str, Any] = {
        "grantId": doc["grant_id"],
        "audience": audience,
        "rule": rule,
        "createdAt": doc["created_at"],
        "createdById": doc["created_by_id"],
    }
    if doc.get("revoked_at"):
        out["revokedAt"] = doc["revoked_at"]
        out["revokedById"] = doc.get("revoked_by_id")
    return out


def _audience(value: Any) -> tuple[str | None, bool]:
    if not isinstance(value, Mapping):
        raise BadRequest("audience is required: {principalId} or {allAuthenticated: true}")
    principal = value.get("principalId")
    everyone = value.get("allAuthenticated")
    if (principal is None) == (everyone is None):
        raise BadRequest("audience must set exactly one of principalId and allAuthenticated")
    if everyone is not None and everyone is not True:
        raise BadRequest("audience.allAuthenticated must be true")
    return (
        check_uuid(principal, "audience.principalId") if principal is not None else None
    ), everyone is True


async def create_grant(svc: Svc, principal: Principal, body: Mapping[str, Any]) -> dict[str, Any]:
    """Store one grant (the assigned space must exist: 404 otherwise)."""
    principal_id, everyone = _audience(body.get("audience"))
    rule = body.get("rule")
    if not isinstance(rule, Mapping):
        raise BadRequest("rule is required: {operation, selector, assignedResource}")
    operation, selector = rule.get("operation"), rule.get("selector")
    if operation not in GRANTABLE:
        raise BadRequest(f"rule.operation must be one of {', '.join(sorted(GRANTABLE))}")
    if selector not in SELECTORS:
        raise BadRequest(f"rule.selector must be one of {', '.join(SELECTORS)}")
    resource = rule.get("assignedResource")
    space_id: str | None = None
    if selector == "ANY":
        if resource is not None:
            raise BadRequest("rule.assignedResource must be omitted for the ANY selector")
        if everyone:
            raise BadRequest("ALL_AUTHENTICATED grants require an assigned-resource selector")
        require_admin(principal, "an ANY grant")
    else:
        if not isinstance(resource, Mapping) or resource.get("kind") != "SPACE":
            raise BadRequest("rule.assignedResource must be {kind: SPACE, resourceId} for this selector")
        space_id = check_uuid(resource.get("resourceId"), "rule.assignedResource.resourceId")
        container = await get_space(svc, space_id)
        await authorize_space(svc, principal, container, "MANAGE_ACCESS")
    grant_id = check_uuid(body["grantId"], "grantId") if body.get("grantId") is not None else new_id()
    doc = {
        "grant_id": grant_id,
        "principal_id": principal_id,
        "all_authenticated": everyone,
        "operation": operation,
        "selector": selector,
        "resource_kind": "SPACE" if space_id else None,
        "resource_id": space_id,
        "created_at": now_ms(),
        "created_by_id": principal.user_id,
    }
    try:
        await gstore.index_doc(svc.store, gstore.GRANTS, grant_id, doc, create=True)
    except Conflict:
        raise Conflict("A grant with this ID already exists") from None
    svc.caches.access_changed()  # a cached "no grant" answer is now wrong
    return doc


async def _load(svc: Svc, principal: Principal, grant_id: str) -> dict[str, Any]:
    doc = await gstore.get_doc(svc.store, gstore.GRANTS, check_uuid(grant_id, "id"))
    if doc is None:
        raise NotFound("Grant not found")
    if not principal.is_admin:
        if not doc.get("resource_id"):
            raise Forbidden("Permission denied: MANAGE_ACCESS")
        await authorize_space(svc, principal, await get_space(svc, doc["resource_id"]), "MANAGE_ACCESS")
    return doc


async def get_grant(svc: Svc, principal: Principal, grant_id: str) -> dict[str, Any]:
    return await _load(svc, principal, grant_id)


async def revoke_grant(svc: Svc, principal: Principal, grant_id: str) -> dict[str, Any]:
    doc = await _load(svc, principal, grant_id)
    if not doc.get("revoked_at"):
        doc["revoked_at"] = now_ms()
        doc["revoked_by_id"] = principal.user_id
        await gstore.index_doc(svc.store, gstore.GRANTS, doc["grant_id"], doc)
        svc.caches.access_changed()
    return doc


async def list_grants(
    svc: Svc,
    principal: Principal,
    *,
    resource_kind: str | None,
    resource_id: str | None,
    include_revoked: bool,
    max_results: int | None,
    next_token: str | None,
) -> Page:
    if resource_kind not in ("SPACE", "INSTANCE"):
        raise BadRequest("resourceKind must be SPACE or INSTANCE")
    filters: list[dict[str, Any]] = []
    if resource_kind == "SPACE":
        if resource_id is None:
            raise BadRequest("resourceId is required for resourceKind SPACE")
        space_id = check_uuid(resource_id, "resourceId")
        await authorize_space(svc, principal, await get_space(svc, space_id), "MANAGE_ACCESS")
        filters.append({"term": {"resource_id": space_id}})
    else:
        require_admin(principal, "listing instance grants")
        filters.append({"term": {"selector": "ANY"}})
    query: dict[str, Any] = {"bool": {"filter": filters}}
    if not include_revoked:
        query["bool"]["must_not"] = [{"exists": {"field": "revoked_at"}}]
    size = clamp(max_results, 50, 1000)
    start = decode_offset(next_token)
    res = await gstore.search(
        svc.store,
        gstore.GRANTS,
        {"from": start, "size": size + 1, "query": query, "sort": [{"grant_id": "asc"}]},
    )
    docs = [h["_source"] for h in res.get("hits", {}).get("hits", [])]
    more = len(docs) > size
    return Page(items=docs[:size], next_token=encode_offset(start + size) if more else None)
