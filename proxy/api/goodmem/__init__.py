"""The GoodMem REST API (``/v1/...``), one module per noun; ``setup(app)`` mounts every route and the
GoodMem state (``state.goodmem_ctx``).

Mount before the pass-through catch-all. Unknown ``/v1`` paths answer a GoodMem 404 here instead of being
forwarded to OpenSearch.
"""

from __future__ import annotations

from aiohttp import web

from proxy.api.goodmem import (
    access,
    admin,
    apikeys,
    embedders,
    memories,
    models,
    ocr,
    ping,
    retrieve,
    spaces,
    system,
    users,
)
from proxy.api.goodmem.state import goodmem_ctx
from proxy.errors import NotFound

__all__ = ["route_tables", "setup"]


def route_tables() -> list[web.RouteTableDef]:
    """Every GoodMem route table, in mounting order (literal paths before parameterised ones)."""
    return [
        system.routes,
        admin.routes,
        apikeys.routes,
        users.routes,
        embedders.routes,
        models.routes,
        ocr.routes,
        ping.routes,
        retrieve.routes,
        memories.routes,
        spaces.routes,
        access.routes,
    ]


async def _unknown(request: web.Request) -> web.Response:
    raise NotFound(f"No GoodMem endpoint {request.method} {request.path}")


def setup(app: web.Application) -> None:
    """Mount the routes; the GoodMem state is set up after the shared services (so call this after the
    application's own ``cleanup_ctx`` entries are in place) and closed with the application."""
    app.cleanup_ctx.append(goodmem_ctx)
    for table in route_tables():
        app.add_routes(table)
    app.router.add_route("*", "/v1/{tail:.*}", _unknown)
    app.router.add_route("*", "/v1", _unknown)
