"""The GoodMem slice's state on the application, and the caller of a request.

:data:`GOODMEM` (the core's per-application GoodMem state) and :data:`RETRIEVER` (retrieval over it) are set
up by :func:`goodmem_ctx`, a ``cleanup_ctx`` the slice adds when it is mounted (after the shared services
exist), and closed with the application, which cancels GoodMem's background work. The keys live here, not in
``proxy.app_keys``, because ``proxy.core.goodmem`` is the GoodMem slice's alone.

The API key is read here, the only place GoodMem looks at a request's headers for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from aiohttp import web

from proxy.app_keys import SERVICES
from proxy.core.goodmem.auth import Principal, authenticate
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.retrieve import Retriever

__all__ = ["GOODMEM", "RETRIEVER", "extract_api_key", "goodmem", "goodmem_ctx", "principal", "retriever"]

GOODMEM = web.AppKey("goodmem", GoodMem)
RETRIEVER = web.AppKey("goodmem_retriever", Retriever)
_PRINCIPAL = web.RequestKey("goodmem_principal", Principal)


async def goodmem_ctx(app: web.Application) -> AsyncIterator[None]:
    gm = GoodMem.create(app[SERVICES])
    app[GOODMEM] = gm
    app[RETRIEVER] = Retriever(gm)
    yield
    await gm.close()


def goodmem(request: web.Request) -> GoodMem:
    return request.app[GOODMEM]


def retriever(request: web.Request) -> Retriever:
    return request.app[RETRIEVER]


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    lower = name.lower()
    for key, val in headers.items():  # plain dicts are not case-insensitive
        if key.lower() == lower:
            return val
    return None


def extract_api_key(headers: Mapping[str, str]) -> str | None:
    """The raw key from ``x-api-key`` or ``Authorization: Bearer``; None when neither is present."""
    key = _header(headers, "x-api-key")
    if key and key.strip():
        return key.strip()
    auth = _header(headers, "authorization")
    if auth:
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


async def principal(request: web.Request) -> Principal:
    """The authenticated caller (once per request); 401 without a usable key."""
    cached = request.get(_PRINCIPAL)
    if cached is not None:
        return cached
    who = await authenticate(goodmem(request), extract_api_key(request.headers))
    request[_PRINCIPAL] = who
    return who
