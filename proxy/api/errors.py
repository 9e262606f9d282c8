"""Errors → HTTP, in one place.

Each API has one error shape: OpenSearch's ``{"error": {...}, "status": N}`` for everything that is not
GoodMem or OpenAI, GoodMem's ``{"error": "...", "status": N}`` under ``/v1/``, and OpenAI's
``{"error": {"message", "type", "param", "code"}}`` under ``/openai/``. Handlers raise
:class:`proxy.errors.MemproxyError` kinds; this middleware renders them. Anything unexpected is logged with
its traceback and answered as a clean 500 in the caller's shape, never as a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from proxy.api.body import DEFAULT_MAX_BODY_BYTES, body_too_large, dumps, utf8
from proxy.app_keys import SETTINGS
from proxy.errors import MemproxyError
from proxy.store.client import OpenSearchError

__all__ = [
    "error_middleware",
    "goodmem_error_body",
    "is_goodmem_path",
    "is_openai_path",
    "openai_error_body",
    "opensearch_error_body",
    "render_error",
]

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_goodmem_path(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/")


def is_openai_path(path: str) -> bool:
    return path == "/openai" or path.startswith("/openai/")


def opensearch_error_body(exc: MemproxyError) -> dict[str, Any]:
    """The OpenSearch envelope; errors answered by the node itself are relayed as the node wrote them."""
    if isinstance(exc, OpenSearchError):
        return {"error": exc.body, "status": exc.status}
    cause: dict[str, Any] = {"type": exc.os_type, "reason": exc.message}
    cause.update({k: v for k, v in exc.details.items() if k != "caused_by"})
    error: dict[str, Any] = {"root_cause": [dict(cause)], **cause}
    if exc.details.get("caused_by"):
        error["caused_by"] = exc.details["caused_by"]
    return {"error": error, "status": exc.status}


def goodmem_error_body(exc: MemproxyError) -> dict[str, Any]:
    body: dict[str, Any] = {"error": exc.message, "status": exc.status}
    body.update({k: v for k, v in exc.details.items() if k not in body})
    return body


_OPENAI_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_exceeded"}


def openai_error_body(exc: MemproxyError) -> dict[str, Any]:
    """OpenAI's envelope; ``details`` may name the offending ``param`` and a machine-readable ``code``."""
    kind = "server_error" if exc.status >= 500 else _OPENAI_TYPES.get(exc.status, "invalid_request_error")
    code = exc.details.get("code", "rate_limit_exceeded" if exc.status == 429 else None)
    return {"error": {"message": exc.message, "type": kind, "param": exc.details.get("param"), "code": code}}


def render_error(request: web.Request, exc: MemproxyError) -> web.Response:
    if is_openai_path(request.path):
        body = openai_error_body(exc)
    elif is_goodmem_path(request.path):
        body = goodmem_error_body(exc)
    else:
        body = opensearch_error_body(exc)
    # A node error relayed verbatim may quote a stored text with a lone surrogate: U+FFFD, never a 500.
    return web.Response(
        status=exc.status,
        body=utf8(dumps(body)),
        content_type="application/json",
        charset="utf-8",
        headers=exc.headers or None,
    )


def _from_aiohttp(request: web.Request, exc: web.HTTPException) -> MemproxyError:
    """aiohttp's own refusal (a body over ``client_max_size``, say) as an error of the caller's API."""
    if exc.status == 413:
        settings = request.app.get(SETTINGS)
        return body_too_large(settings.max_body_bytes if settings is not None else DEFAULT_MAX_BODY_BYTES)
    keep = {k: v for k, v in exc.headers.items() if k.lower() not in ("content-type", "content-length")}
    error = MemproxyError(exc.text or exc.reason, headers=keep)
    error.status = exc.status
    error.os_type = "illegal_argument_exception" if exc.status < 500 else error.os_type
    return error


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        # aiohttp's refusals are plain text; every API's clients parse their own JSON error shape instead.
        if exc.status < 400:
            raise
        return render_error(request, _from_aiohttp(request, exc))
    except MemproxyError as exc:
        if exc.status >= 500:
            log.warning("%s %s -> %d %s", request.method, request.path, exc.status, exc.message)
        return render_error(request, exc)
    except Exception:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return render_error(request, MemproxyError("Internal server error"))
