"""OpenAI's embeddings protocol (``/openai/v1/embeddings``, ``/openai/v1/models``) over the local embedders.

Errors under ``/openai/`` are rendered in OpenAI's shape by :mod:`proxy.api.errors`. Unknown paths under the
prefix answer an OpenAI 404 here instead of being forwarded to OpenSearch.
"""

from __future__ import annotations

from aiohttp import web

from proxy.api.openai.routes import PREFIX, routes, unknown

__all__ = ["PREFIX", "mount"]


def mount(app: web.Application) -> None:
    """Add the routes; call before the pass-through catch-all so they win."""
    app.add_routes(routes)
    app.router.add_route("*", "/openai/{tail:.*}", unknown)
    app.router.add_route("*", "/openai", unknown)
