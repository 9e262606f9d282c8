"""``/v1/access-policy/grants``: grant / list / get / revoke space permissions (Gen B access policy
subset); the grant body as a wire model, read into ``proxy.core.goodmem.grants.NewGrant``. And
``/v1/access-policy:check``: whether the caller may perform operations (``proxy.core.goodmem.checks``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from aiohttp import web
from pydantic import BeforeValidator, ValidationInfo, field_validator

from proxy.api.goodmem.render import grant_json
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.wire import Query, WireModel, json_body, page_reply, reply, uuid_or_none, wire_field
from proxy.core.goodmem import grants as core
from proxy.core.goodmem.checks import (
    MAX_CHECKS,
    OPERATIONS,
    RESOURCE_KINDS,
    UNCHECKABLE,
    AccessCheck,
    check_access,
)
from proxy.core.goodmem.grants import GRANTABLE, SELECTORS, NewGrant
from proxy.core.goodmem.ids import check_uuid
from proxy.errors import BadRequest

__all__ = ["routes"]

routes = web.RouteTableDef()


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


@dataclass(frozen=True)
class _Rule:
    operation: str
    selector: str
    space_id: str | None


class NewGrantBody(WireModel):
    audience: Annotated[tuple[str | None, bool], BeforeValidator(_audience)] = wire_field("audience")
    rule: _Rule = wire_field("rule")
    grant_id: Annotated[str | None, uuid_or_none("grantId")] = wire_field("grantId")

    @field_validator("rule", mode="before")
    @classmethod
    def _rule(cls, rule: Any, info: ValidationInfo) -> _Rule:
        if not isinstance(rule, Mapping):
            raise BadRequest("rule is required: {operation, selector, assignedResource}")
        operation, selector = rule.get("operation"), rule.get("selector")
        if operation not in GRANTABLE:
            raise BadRequest(f"rule.operation must be one of {', '.join(sorted(GRANTABLE))}")
        if selector not in SELECTORS:
            raise BadRequest(f"rule.selector must be one of {', '.join(SELECTORS)}")
        resource = rule.get("assignedResource")
        if selector == "ANY":
            if resource is not None:
                raise BadRequest("rule.assignedResource must be omitted for the ANY selector")
            if info.data["audience"][1]:
                raise BadRequest("ALL_AUTHENTICATED grants require an assigned-resource selector")
            return _Rule(operation, selector, None)
        if not isinstance(resource, Mapping) or resource.get("kind") != "SPACE":
            raise BadRequest("rule.assignedResource must be {kind: SPACE, resourceId} for this selector")
        return _Rule(
            operation, selector, check_uuid(resource.get("resourceId"), "rule.assignedResource.resourceId")
        )

    def to_core(self) -> NewGrant:
        principal_id, everyone = self.audience
        return NewGrant(
            principal_id=principal_id,
            all_authenticated=everyone,
            operation=self.rule.operation,
            selector=self.rule.selector,
            space_id=self.rule.space_id,
            grant_id=self.grant_id,
        )


def _check(index: int, item: Any) -> AccessCheck:
    where = f"checks[{index}]"
    if not isinstance(item, Mapping):
        raise BadRequest(f"{where} must be an object {{operation, target}}")
    operation, target = item.get("operation"), item.get("target")
    if operation not in OPERATIONS:
        raise BadRequest(f"{where}.operation must be a GoodMem operation, got {operation!r}")
    if operation in UNCHECKABLE:
        raise BadRequest(f"{where}: {operation} cannot be checked")
    if not isinstance(target, Mapping) or target.get("kind") not in RESOURCE_KINDS:
        raise BadRequest(
            f"{where}.target must be {{kind, resourceId}} with kind one of {', '.join(RESOURCE_KINDS)}"
        )
    kind, resource_id = target["kind"], target.get("resourceId")
    if kind == "INSTANCE":
        return AccessCheck(operation, kind)
    if not isinstance(resource_id, str) or not resource_id:
        raise BadRequest(f"{where}.target.resourceId is required for {kind}")
    return AccessCheck(operation, kind, resource_id)


def _checks(value: Any) -> tuple[AccessCheck, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_CHECKS:
        raise BadRequest(f"checks must be an array of 1 to {MAX_CHECKS} checks")
    return tuple(_check(i, item) for i, item in enumerate(value))


class CheckBody(WireModel):
    checks: Annotated[tuple[AccessCheck, ...], BeforeValidator(_checks)] = wire_field("checks")


@routes.post("/v1/access-policy:check")
async def check(request: web.Request) -> web.Response:
    who = await principal(request)
    body = CheckBody.parse(await json_body(request))
    allowed = await check_access(goodmem(request), who, body.checks)
    return reply({"results": [{"allowed": a} for a in allowed]})


@routes.post("/v1/access-policy/grants")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    req = NewGrantBody.parse(await json_body(request)).to_core()
    return reply(grant_json(await core.create_grant(goodmem(request), who, req)), status=201)


@routes.get("/v1/access-policy/grants")
async def list_grants(request: web.Request) -> web.Response:
    who = await principal(request)
    q = Query(request)
    page = await core.list_grants(
        goodmem(request),
        who,
        resource_kind=q.text("resourceKind"),
        resource_id=q.text("resourceId"),
        include_revoked=q.flag("includeRevoked"),
        max_results=q.integer("maxResults"),
        next_token=q.text("nextToken"),
    )
    return page_reply("grants", [grant_json(g) for g in page.items], page)


@routes.get("/v1/access-policy/grants/{id}")
async def get(request: web.Request) -> web.Response:
    who = await principal(request)
    return reply(grant_json(await core.get_grant(goodmem(request), who, request.match_info["id"])))


@routes.delete("/v1/access-policy/grants/{id}")
async def revoke(request: web.Request) -> web.Response:
    who = await principal(request)
    return reply(grant_json(await core.revoke_grant(goodmem(request), who, request.match_info["id"])))
