"""``GET /v1/system/info`` and ``POST /v1/system/init`` (both without authentication); ``GET
/v1/instance``."""

from __future__ import annotations

from aiohttp import web

from proxy.api.goodmem.render import init_json, instance_json, system_info
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.wire import reply
from proxy.core.goodmem.system import get_instance, init_system

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/v1/system/info")
async def info(request: web.Request) -> web.Response:
    return reply(system_info())


@routes.post("/v1/system/init")
async def init(request: web.Request) -> web.Response:
    return reply(init_json(await init_system(goodmem(request))))


@routes.get("/v1/instance")
async def instance_info(request: web.Request) -> web.Response:
    await principal(request)
    return reply(instance_json(await get_instance(goodmem(request))))
