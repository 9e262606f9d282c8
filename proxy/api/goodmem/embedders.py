"""``/v1/embedders``: the local embedding models (list, get, update descriptive fields); create → 501."""

from __future__ import annotations

from aiohttp import web

from proxy.api.goodmem._common import json_body, labels_query, principal, q_str, reply, services
from proxy.core.goodmem import embedders as core

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/v1/embedders")
async def list_embedders(request: web.Request) -> web.Response:
    await principal(request)
    found = await core.list_embedders(
        services(request),
        provider_type=q_str(request, "providerType"),
        owner_id=q_str(request, "ownerId"),
        labels=labels_query(request),
    )
    return reply({"embedders": found})


@routes.post("/v1/embedders")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    return reply(await core.create_embedder(services(request), who, await json_body(request)), status=201)


@routes.get("/v1/embedders/{id}")
async def get(request: web.Request) -> web.Response:
    await principal(request)
    return reply(await core.get_embedder(services(request), request.match_info["id"]))


@routes.put("/v1/embedders/{id}")
async def update(request: web.Request) -> web.Response:
    who = await principal(request)
    body = await json_body(request)
    return reply(await core.update_embedder(services(request), who, request.match_info["id"], body))


@routes.delete("/v1/embedders/{id}")
async def delete(request: web.Request) -> web.Response:
    who = await principal(request)
    await core.delete_embedder(services(request), who, request.match_info["id"])
    return web.Response(status=204)
