"""Request ids: every request gets one, every answer carries it, and so does every call made for it.

The id is the caller's ``X-Request-Id`` when it is usable (1..128 printable ASCII characters, no spaces:
:func:`proxy.observability.accept_request_id`), else a fresh uuid4 hex. The middleware is the outermost
one, so the id is known to everything below it: the store sends it to OpenSearch as ``X-Opaque-Id`` (pass-
through forwards the caller's own ``X-Opaque-Id`` instead, when it sent one), and every log line written
for the request carries it (both read :data:`proxy.observability.current_request_id`).

The answer's header is set when the response is prepared (``on_response_prepare``), not by the middleware:
a streamed answer (pass-through, GoodMem retrieve) sends its headers from inside the handler, and an error
is rendered by the error middleware below this one; both are covered by the signal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from proxy.app_keys import REQUEST_ID
from proxy.observability import accept_request_id, current_request_id

__all__ = ["REQUEST_ID_HEADER", "echo_request_id", "request_id_middleware"]

REQUEST_ID_HEADER = "X-Request-Id"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    request_id = accept_request_id(request.headers.get(REQUEST_ID_HEADER))
    request[REQUEST_ID] = request_id
    token = current_request_id.set(request_id)
    try:
        return await handler(request)
    finally:
        current_request_id.reset(token)


async def echo_request_id(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the request's id on its answer, whatever produced it."""
    request_id = request.get(REQUEST_ID)
    if request_id is not None:
        response.headers[REQUEST_ID_HEADER] = request_id
