"""``GET /v1/system/info`` and ``POST /v1/system/init`` (both without authentication); ``GET
/v1/instance``."""

from __future__ import annotations

from aiohttp import web

from proxy.api.goodmem._common import principal, reply, services
from proxy.core.goodmem.system import init_system, instance_json, system_info

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/v1/system/info")
async def info(request: web.Request) -> web.Response:
    return reply(system_info())


@routes.post("/v1/system/init")
async def init(request: web.Request) -> web.Response:
    return reply(await init_system(services(request)))


@routes.get("/v1/instance")
async def instance_info(request: web.Request) -> web.Response:
    await principal(request)
    return reply(await instance_json(services(request)))
