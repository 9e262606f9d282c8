"""Input that cannot poison or freeze the service: the checks every request passes before its handler.

:func:`input_guard_middleware` sits right inside the error middleware (so its refusals come back in each
API's own error shape) and before identity (so no credential lookup ever sees an unreadable header). It

* answers 400 when a header value or the request target is not valid UTF-8: aiohttp decodes their bytes
  with ``surrogateescape``, so such bytes arrive as lone surrogates, which nothing downstream can encode;
* on memproxy's own routes (GoodMem, OpenAI, ml-commons memory containers), answers 413 when the declared
  ``Content-Length`` is over ``max_body_bytes`` (before a byte of it is read) and 400 for a multipart body
  whose ``Content-Type`` names no boundary; pass-through requests stream to the node untouched;
* makes the request's bounds (:class:`Limits`, from the settings) what :func:`current_limits` returns, for
  the wire models that check a memory's text and have no request at hand.

:class:`QuietRequestHandler` is aiohttp's connection protocol except for one answer: a request aiohttp cannot
even parse (a malformed header line) gets a bare ``400 Bad Request``; aiohttp's own answer quotes the raw
bytes it choked on, API key included, in the response body and in the log. It also applies the read
deadlines and the per-address connection cap of :mod:`proxy.api.connections`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass

from aiohttp import web
from aiohttp.helpers import parse_mimetype
from aiohttp.http_exceptions import HttpProcessingError

from proxy.api.body import body_too_large, has_surrogate
from proxy.api.connections import ConnectionGuard, ConnectionLimits
from proxy.api.errors import is_goodmem_path, is_openai_path
from proxy.app_keys import SETTINGS
from proxy.config import Settings
from proxy.errors import BadRequest

__all__ = [
    "DEFAULT_LIMITS",
    "Limits",
    "QuietRequestHandler",
    "current_limits",
    "input_guard_middleware",
    "install_quiet_request_handler",
    "is_own_route",
]

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The ml-commons slice's prefix (proxy.api.opensearch_memory.PREFIX; a shared module does not import a slice).
_ML_COMMONS_PREFIX = "/_plugins/_ml/memory_containers"
# RFC 2046's longest boundary, which aiohttp's multipart reader also enforces (with a ValueError).
_MAX_BOUNDARY = 70


@dataclass(frozen=True)
class Limits:
    """The input bounds of one request (docs/security.md); the defaults are the settings' defaults."""

    max_body_bytes: int = Settings.max_body_bytes
    max_json_depth: int = Settings.max_json_depth
    max_memory_chars: int = Settings.max_memory_chars
    max_chunks_per_memory: int = Settings.max_chunks_per_memory
    document_max_bytes: int = Settings.document_max_bytes

    @staticmethod
    @functools.lru_cache(maxsize=16)
    def of(settings: Settings) -> Limits:
        return Limits(
            max_body_bytes=settings.max_body_bytes,
            max_json_depth=settings.max_json_depth,
            max_memory_chars=settings.max_memory_chars,
            max_chunks_per_memory=settings.max_chunks_per_memory,
            document_max_bytes=settings.document_max_bytes,
        )


DEFAULT_LIMITS = Limits()
# Set for each request by the middleware; outside a request (unit tests) the defaults apply.
_limits: ContextVar[Limits | None] = ContextVar("memproxy_input_limits", default=None)


def current_limits() -> Limits:
    """The bounds of the request being served (the settings' defaults outside one)."""
    return _limits.get() or DEFAULT_LIMITS


def is_own_route(path: str) -> bool:
    """memproxy's own API routes (whose bodies it reads), as opposed to pass-through."""
    return (
        is_goodmem_path(path)
        or is_openai_path(path)
        or path == _ML_COMMONS_PREFIX
        or path.startswith(_ML_COMMONS_PREFIX + "/")
    )


def _check_text_of_request(request: web.Request) -> None:
    if has_surrogate(request.raw_path):
        raise BadRequest("The request target is not valid UTF-8")
    for name, value in request.headers.items():
        if has_surrogate(value) or has_surrogate(name):
            # The name is an HTTP token (ASCII) whenever the value is the culprit; never echo the value.
            shown = name if not has_surrogate(name) else "a"
            raise BadRequest(f"The {shown} header is not valid UTF-8")


def _check_body_framing(request: web.Request, limits: Limits) -> None:
    length = request.content_length
    if length is not None and length > limits.max_body_bytes:
        raise body_too_large(limits.max_body_bytes)
    if request.content_type.startswith("multipart/"):
        boundary = parse_mimetype(request.headers.get("Content-Type", "")).parameters.get("boundary", "")
        if not 0 < len(boundary) <= _MAX_BOUNDARY:
            raise BadRequest(
                f"A multipart body needs a boundary parameter (1 to {_MAX_BOUNDARY} characters) in its "
                "Content-Type"
            )


@web.middleware
async def input_guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    _check_text_of_request(request)
    settings = request.app.get(SETTINGS)
    limits = Limits.of(settings) if settings is not None else DEFAULT_LIMITS
    if is_own_route(request.path):
        _check_body_framing(request, limits)
    token = _limits.set(limits)
    try:
        return await handler(request)
    finally:
        _limits.reset(token)


class QuietRequestHandler(web.RequestHandler):
    """aiohttp's protocol, answering a request it cannot parse with a bare ``400 Bad Request``, and with the
    read deadlines and per-address cap of :mod:`proxy.api.connections` once ``limits`` is set."""

    limits: ConnectionLimits | None = None
    _guard: ConnectionGuard | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.limits is not None:
            self._guard = ConnectionGuard(self.limits, self, transport)
            if self._guard.refused:
                self.force_close()

    def data_received(self, data: bytes) -> None:
        if self._guard is None or not data:  # aiohttp feeds b"" itself when it resumes reading
            super().data_received(data)
            return
        requests = self._request_count
        # Bytes that arrive while a body is being read are that body's, even the last ones: they do not
        # begin the next request's head (whose deadline would then cut a busy handler off).
        in_body = self._guard.reading_body()
        super().data_received(data)
        completed = self._request_count > requests and self._messages
        self._guard.received(self._messages[-1][1] if completed else None, in_body=in_body)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._guard is not None:
            self._guard.lost()
        super().connection_lost(exc)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status != 400 or not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        # The parser's message quotes the raw bytes (a header line, a key in it): neither logged nor sent.
        log.info("refused a request that is not valid HTTP from %s: %s", request.remote, type(exc).__name__)
        if request.writer.output_size > 0:  # as aiohttp does: nothing more can be said on this connection
            raise ConnectionError("Response is sent already, cannot send another response")
        response = web.Response(status=400, text="400 Bad Request", content_type="text/plain")
        response.force_close()
        return response


def install_quiet_request_handler(limits: ConnectionLimits | None = None) -> None:
    """Make aiohttp's server speak :class:`QuietRequestHandler` on every connection; call before serving.
    ``limits``: the connections' read deadlines and per-address cap (None: as aiohttp has it).

    aiohttp has no parameter for the protocol class: ``web.Server.__call__`` (the protocol factory every
    runner hands to the event loop) instantiates the name ``RequestHandler`` of ``aiohttp.web_server``, so
    that name is rebound. Idempotent; tests/adversarial/test_limits.py pins that it takes effect.
    """
    import aiohttp.web_server

    QuietRequestHandler.limits = limits
    aiohttp.web_server.RequestHandler = QuietRequestHandler  # type: ignore[misc]
