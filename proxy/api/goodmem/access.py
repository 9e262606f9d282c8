"""``/v1/access-policy/grants``: grant / list / get / revoke space permissions (Gen B access policy
subset)."""

from __future__ import annotations

from aiohttp import web

from proxy.api.goodmem._common import json_body, principal, q_bool, q_int, q_str, reply, services
from proxy.core.goodmem import grants as core

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.post("/v1/access-policy/grants")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    doc = await core.create_grant(services(request), who, await json_body(request))
    return reply(core.grant_json(doc), status=201)


@routes.get("/v1/access-policy/grants")
async def list_grants(request: web.Request) -> web.Response:
    who = await principal(request)
    page = await core.list_grants(
        services(request),
        who,
        resource_kind=q_str(request, "resourceKind"),
        resource_id=q_str(request, "resourceId"),
        include_revoked=q_bool(request, "includeRevoked"),
        max_results=q_int(request, "maxResults"),
        next_token=q_str(request, "nextToken"),
    )
    body: dict[str, object] = {"grants": [core.grant_json(d) for d in page.items]}
    if page.next_token:
        body["nextToken"] = page.next_token
    return reply(body)


@routes.get("/v1/access-policy/grants/{id}")
async def get(request: web.Request) -> web.Response:
    who = await principal(request)
    return reply(core.grant_json(await core.get_grant(services(request), who, request.match_info["id"])))


@routes.delete("/v1/access-policy/grants/{id}")
async def revoke(request: web.Request) -> web.Response:
    who = await principal(request)
    return reply(core.grant_json(await core.revoke_grant(services(request), who, request.match_info["id"])))
