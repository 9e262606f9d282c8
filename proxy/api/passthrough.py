"""Every request that is not memproxy's own goes to OpenSearch unchanged, streamed both ways."""

from __future__ import annotations

from aiohttp import web

from proxy.app_keys import STORE
from proxy.store.forward import forward

__all__ = ["passthrough"]


async def passthrough(request: web.Request) -> web.StreamResponse:
    # request.raw_path keeps the client's own percent-encoding and query string byte for byte.
    body = request.content.iter_any() if request.body_exists else None
    upstream = await forward(request.app[STORE], request.method, request.raw_path, request.headers, body)
    try:
        response = web.StreamResponse(
            status=upstream.status, reason=upstream.reason, headers=upstream.headers
        )
        if "Content-Length" not in upstream.headers:
            response.enable_chunked_encoding()
        await response.prepare(request)
        async for chunk in upstream.chunks():
            await response.write(chunk)
        await response.write_eof()
        return response
    finally:
        upstream.release()
