"""The GoodMem REST API (``/v1/...``), one module per noun; ``setup(app)`` mounts every route.

Mount before the pass-through catch-all. Unknown ``/v1`` paths answer a GoodMem 404 here instead of being
forwarded to OpenSearch.
"""

from __future__ import annotations

import importlib
import importlib.util

from aiohttp import web

from proxy.api.goodmem import access, apikeys, embedders, memories, models_stub, spaces, system, users
from proxy.errors import NotFound

__all__ = ["route_tables", "setup"]


def _retrieve_routes() -> list[web.RouteTableDef]:
    # >>> RETRIEVE: proxy/api/goodmem/retrieve.py (the retrieve helper's module) defines `routes`, a
    # web.RouteTableDef for GET/POST /v1/memories:retrieve; it is mounted here, before the /v1 catch-all.
    # Import errors inside that module are real errors and propagate.
    if importlib.util.find_spec("proxy.api.goodmem.retrieve") is None:
        return []
    module = importlib.import_module("proxy.api.goodmem.retrieve")
    return [module.routes]


def route_tables() -> list[web.RouteTableDef]:
    """Every GoodMem route table, in mounting order (literal paths before parameterised ones)."""
    return [
        system.routes,
        apikeys.routes,
        users.routes,
        embedders.routes,
        models_stub.routes,
        *_retrieve_routes(),
        memories.routes,
        spaces.routes,
        access.routes,
    ]


async def _unknown(request: web.Request) -> web.Response:
    raise NotFound(f"No GoodMem endpoint {request.method} {request.path}")


def setup(app: web.Application) -> None:
    for table in route_tables():
        app.add_routes(table)
    app.router.add_route("*", "/v1/{tail:.*}", _unknown)
    app.router.add_route("*", "/v1", _unknown)
