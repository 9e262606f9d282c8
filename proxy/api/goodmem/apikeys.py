"""``/v1/apikeys``: create (201, raw key shown once), list, get, update, delete (204)."""

from __future__ import annotations

from aiohttp import web

from proxy.api.goodmem._common import json_body, principal, q_int, q_str, reply, services
from proxy.core.goodmem import apikeys as core

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.post("/v1/apikeys")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    issued = await core.create_api_key(services(request), who, await json_body(request, required=False))
    return reply({"apiKeyMetadata": core.api_key_json(issued.doc), "rawApiKey": issued.raw_key}, status=201)


@routes.get("/v1/apikeys")
async def list_keys(request: web.Request) -> web.Response:
    who = await principal(request)
    page = await core.list_api_keys(
        services(request),
        who,
        subject_id=q_str(request, "subjectPrincipalId"),
        owner_id=q_str(request, "ownerPrincipalId"),
        lifecycle_state=q_str(request, "lifecycleState"),
        max_results=q_int(request, "maxResults"),
        next_token=q_str(request, "nextToken"),
    )
    body: dict[str, object] = {"keys": [core.api_key_json(d) for d in page.items]}
    if page.next_token:
        body["nextToken"] = page.next_token
    return reply(body)


@routes.get("/v1/apikeys/{id}")
async def get(request: web.Request) -> web.Response:
    who = await principal(request)
    return reply(core.api_key_json(await core.get_api_key(services(request), who, request.match_info["id"])))


@routes.put("/v1/apikeys/{id}")
async def update(request: web.Request) -> web.Response:
    who = await principal(request)
    doc = await core.update_api_key(
        services(request), who, request.match_info["id"], await json_body(request)
    )
    return reply(core.api_key_json(doc))


@routes.delete("/v1/apikeys/{id}")
async def delete(request: web.Request) -> web.Response:
    who = await principal(request)
    await core.delete_api_key(services(request), who, request.match_info["id"])
    return web.Response(status=204)
