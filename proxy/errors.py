"""The one exception tree every layer raises.

The layers below the HTTP slices (core, store, embedding, filters) raise these kinds; one middleware,
``proxy.api.errors``, renders each in the shape of the API the request came through (OpenSearch's
envelope, GoodMem's, or OpenAI's). A handler never builds an error body itself. Errors the node answers are
these kinds too (``proxy.store.client``: a node 404 is a ``NotFound``, a 409 a ``Conflict``), and keep the
node's own body, which the OpenSearch envelope relays verbatim.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadGateway",
    "BadRequest",
    "Conflict",
    "DeadlineExceeded",
    "Forbidden",
    "MemproxyError",
    "NotFound",
    "Overloaded",
    "PreconditionFailed",
    "RangeNotSatisfiable",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
]


class MemproxyError(Exception):
    """Base of every error memproxy reports to a client.

    ``status`` is the HTTP status; ``os_type`` is the OpenSearch ``error.type`` the OpenSearch front-end
    uses (ml-commons' own texts); ``details`` carries extra keys for the error body (e.g. a filter error's
    position; ``caused_by`` for the OpenSearch envelope) and ``headers`` extra response headers.
    """

    status: int = 500
    os_type: str = "status_exception"

    def __init__(
        self,
        message: str,
        *,
        os_type: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.message = message
        if os_type is not None:
            self.os_type = os_type
        self.details: dict[str, Any] = details or {}
        self.headers: dict[str, str] = headers or {}


class BadRequest(MemproxyError):
    status = 400
    os_type = "illegal_argument_exception"


class Unauthenticated(MemproxyError):
    status = 401


class Forbidden(MemproxyError):
    status = 403


class NotFound(MemproxyError):
    status = 404


class Conflict(MemproxyError):
    status = 409


class PreconditionFailed(MemproxyError):
    """A conditional request's precondition (``If-Match``) does not hold."""

    status = 412


class RangeNotSatisfiable(MemproxyError):
    """A ``Range`` that is malformed or lies outside the content (``Content-Range: bytes */N`` is set)."""

    status = 416


class Overloaded(MemproxyError):
    """Refused at once because a bounded queue is full (the embedder's, say): retry later."""

    status = 429
    os_type = "rejected_execution_exception"


class Unimplemented(MemproxyError):
    status = 501


class BadGateway(MemproxyError):
    """The cluster answered something memproxy cannot read."""

    status = 502


class Unavailable(MemproxyError):
    """OpenSearch (or another backend) cannot be reached."""

    status = 503


class DeadlineExceeded(MemproxyError):
    status = 504
