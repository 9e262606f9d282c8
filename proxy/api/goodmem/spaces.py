"""``/v1/spaces``: create (201), list, get, update, delete (204). A space is a memory container."""

from __future__ import annotations

from aiohttp import web

from proxy.api.goodmem._common import json_body, labels_query, principal, q_int, q_str, reply, services
from proxy.core.goodmem import instance
from proxy.core.goodmem import spaces as core

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.post("/v1/spaces")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    svc = services(request)
    container = await core.create_space(svc, who, await json_body(request))
    return reply(core.space_json(container, default_owner=await instance.root_user_id(svc)), status=201)


@routes.get("/v1/spaces")
async def list_spaces(request: web.Request) -> web.Response:
    who = await principal(request)
    page, root = await core.list_spaces(
        services(request),
        who,
        owner_id=q_str(request, "ownerId"),
        name_filter=q_str(request, "nameFilter"),
        labels=labels_query(request),
        max_results=q_int(request, "maxResults"),
        next_token=q_str(request, "nextToken"),
        sort_by=q_str(request, "sortBy"),
        sort_order=q_str(request, "sortOrder"),
    )
    body: dict[str, object] = {"spaces": [core.space_json(c, default_owner=root) for c in page.items]}
    if page.next_token:
        body["nextToken"] = page.next_token
    return reply(body)


@routes.get("/v1/spaces/{id}")
async def get(request: web.Request) -> web.Response:
    who = await principal(request)
    svc = services(request)
    container = await core.read_space(svc, who, request.match_info["id"])
    return reply(core.space_json(container, default_owner=await instance.root_user_id(svc)))


@routes.put("/v1/spaces/{id}")
async def update(request: web.Request) -> web.Response:
    who = await principal(request)
    svc = services(request)
    container = await core.update_space(svc, who, request.match_info["id"], await json_body(request))
    return reply(core.space_json(container, default_owner=await instance.root_user_id(svc)))


@routes.delete("/v1/spaces/{id}")
async def delete(request: web.Request) -> web.Response:
    who = await principal(request)
    await core.delete_space(services(request), who, request.match_info["id"])
    return web.Response(status=204)
