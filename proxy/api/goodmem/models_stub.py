"""Rerankers and LLMs: memproxy has none. Lists are empty, lookups 404, registration 501 (clearly said)."""

from __future__ import annotations

from aiohttp import web

from proxy.api.goodmem.state import principal
from proxy.api.goodmem.wire import reply
from proxy.errors import NotFound, Unimplemented

__all__ = ["routes"]

routes = web.RouteTableDef()

_KINDS = {"rerankers": "Reranker", "llms": "LLM"}


def _kind(request: web.Request) -> str:
    return request.match_info["kind"]


@routes.get(r"/v1/{kind:rerankers|llms}")
async def list_models(request: web.Request) -> web.Response:
    await principal(request)
    return reply({_kind(request): []})


@routes.post(r"/v1/{kind:rerankers|llms}")
async def create_model(request: web.Request) -> web.Response:
    await principal(request)
    raise Unimplemented(
        f"memproxy does not support {_kind(request)}; retrieval runs without post-processing models"
    )


@routes.route("*", r"/v1/{kind:rerankers|llms}/{id}")
async def one_model(request: web.Request) -> web.Response:
    await principal(request)
    raise NotFound(f"{_KINDS[_kind(request)]} not found")
