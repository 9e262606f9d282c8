"""``/v1/users``: me, get by id / email / username, and (admin) create, list, update, delete."""

from __future__ import annotations

from urllib.parse import unquote

from aiohttp import web

from proxy.api.goodmem._common import json_body, principal, q_bool, q_int, q_str, reply, services
from proxy.core.goodmem import users as core

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/v1/users/me")
async def me(request: web.Request) -> web.Response:
    who = await principal(request)
    return reply(core.user_json(await core.get_user(services(request), who, who.user_id)))


@routes.get("/v1/users/email/{email}")
async def by_email(request: web.Request) -> web.Response:
    who = await principal(request)
    email = unquote(request.match_info["email"])
    return reply(core.user_json(await core.get_user_by(services(request), who, "email", email)))


@routes.get("/v1/users/username/{username}")
async def by_username(request: web.Request) -> web.Response:
    who = await principal(request)
    name = unquote(request.match_info["username"])
    return reply(core.user_json(await core.get_user_by(services(request), who, "username", name)))


@routes.post("/v1/users")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    doc = await core.create_user(services(request), who, await json_body(request))
    return reply(core.user_json(doc), status=201)


@routes.get("/v1/users")
async def list_users(request: web.Request) -> web.Response:
    who = await principal(request)
    page = await core.list_users(
        services(request),
        who,
        max_results=q_int(request, "maxResults"),
        next_token=q_str(request, "nextToken"),
    )
    body: dict[str, object] = {"users": [core.user_json(d) for d in page.items]}
    if page.next_token:
        body["nextToken"] = page.next_token
    return reply(body)


@routes.get("/v1/users/{id}")
async def get(request: web.Request) -> web.Response:
    who = await principal(request)
    doc = await core.get_user(
        services(request), who, request.match_info["id"], include_deleted=q_bool(request, "includeDeleted")
    )
    return reply(core.user_json(doc))


@routes.put("/v1/users/{id}")
async def update(request: web.Request) -> web.Response:
    who = await principal(request)
    doc = await core.update_user(services(request), who, request.match_info["id"], await json_body(request))
    return reply(core.user_json(doc))


@routes.delete("/v1/users/{id}")
async def delete(request: web.Request) -> web.Response:
    who = await principal(request)
    await core.delete_user(services(request), who, request.match_info["id"])
    return web.Response(status=204)
