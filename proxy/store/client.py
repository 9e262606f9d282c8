"""The connection to OpenSearch: one async opensearch-py client and one aiohttp session per app.

``proxy.store`` is the only package that talks to OpenSearch, and this module is where its two boundaries are
drawn once: :func:`url` builds the paths the store sends (each segment quoted here, in one place), and
:func:`node_error` maps every error the node answers to a typed :class:`OpenSearchError` by its status, as
opensearch-py's ``HTTP_EXCEPTIONS`` does: 404 is :class:`NodeNotFound` (:class:`IndexMissing` when the index
itself is missing), 409 :class:`NodeConflict`, and so on. Each kind is also the project's own kind
(``NodeNotFound`` is a :class:`proxy.errors.NotFound`), so the core writes ``except NotFound`` /
``except IndexMissing`` / ``except Conflict`` and never tests a status by hand; and each keeps the node's
status and ``error`` object, which the OpenSearch front-end relays verbatim. An unreachable node is
:class:`proxy.errors.Unavailable`.

A cluster in failover (a node gone, a cluster manager being elected, a shard without a copy) answers
503, an overloaded one 429: those reach callers as 503 / 429 with a ``Retry-After`` header
(:class:`NodeUnavailable`, :class:`NodeOverloaded`), and so do the transport errors a node reports with a
500 while another node goes away (``failover.TRANSIENT_TYPES``): a caller may retry them, and never sees a
500 for a failover. With several node URLs, a call that found its node unreachable goes to the next one when
that is safe (:mod:`proxy.store.failover`).
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
from opensearchpy import AsyncOpenSearch
from opensearchpy import exceptions as os_exc

from proxy.config import Settings
from proxy.errors import (
    BadRequest,
    Conflict,
    DeadlineExceeded,
    Forbidden,
    MemproxyError,
    NotFound,
    Overloaded,
    Unauthenticated,
    Unavailable,
)
from proxy.observability import current_request_id
from proxy.store.failover import DEAD_S, HostRing, cancelled_at_deadline, may_resend, never_sent, transient
from proxy.store.layout import IndexLayouts
from proxy.store.templates import MemoryLayout

__all__ = [
    "CallObserver",
    "IndexBlocked",
    "IndexExists",
    "IndexMissing",
    "NodeBadRequest",
    "NodeConflict",
    "NodeForbidden",
    "NodeNotFound",
    "NodeOverloaded",
    "NodeUnauthenticated",
    "NodeUnavailable",
    "OpenSearchError",
    "SearchCancelled",
    "SentRequest",
    "Store",
    "capture_requests",
    "endpoint_of",
    "node_error",
    "opaque_id_headers",
    "unreachable",
    "url",
]

# Told of every call the store makes: (method, endpoint, seconds, error). ``endpoint`` is the path's first
# ``_``-segment (``_search``, ``_doc``, ``_bulk``; ``index`` for a bare index path), never a name or an id;
# ``error`` is None on success, else the status class (``4xx``, ``5xx``) or the exception's type name. The
# metrics (proxy.core.metrics) listen here, so the store itself knows nothing of Prometheus.
CallObserver = Callable[[str, str, float, str | None], None]


def url(*segments: str) -> str:
    """The path of one node endpoint, each segment percent-quoted (an id may hold ``/``, ``?`` or ``#``):
    ``url(index, "_doc", doc_id)``. Every store module builds its paths with this."""
    return "/" + "/".join(quote(segment, safe="") for segment in segments)


class OpenSearchError(MemproxyError):
    """An error answered by the node itself; ``body`` is its ``error`` value (an object or a string), or the
    whole answer when it has none (a 404 ``GET``/``DELETE`` of a missing document)."""

    def __init__(self, status: int, body: Any):
        reason = body.get("reason", str(body)) if isinstance(body, dict) else str(body)
        os_type = body.get("type", "exception") if isinstance(body, dict) else "exception"
        super().__init__(reason, os_type=os_type)
        self.status = status
        self.body = body


class NodeBadRequest(OpenSearchError, BadRequest):
    """400 from the node."""


class IndexExists(NodeBadRequest):
    """400 ``resource_already_exists_exception``: the index to create is there already."""


class NodeUnauthenticated(OpenSearchError, Unauthenticated):
    """401 from the node."""


class NodeForbidden(OpenSearchError, Forbidden):
    """403 from the node."""


class NodeNotFound(OpenSearchError, NotFound):
    """404 from the node: a missing document (or a ``not_found`` delete)."""


class IndexMissing(NodeNotFound):
    """404 ``index_not_found_exception``: the index itself does not exist."""


class NodeConflict(OpenSearchError, Conflict):
    """409 from the node: a version conflict, or ``op_type=create`` on an existing id."""


# Seconds a caller is asked to wait before retrying (``Retry-After``): a cluster manager election or a
# replica's promotion takes a few seconds; a full queue drains faster.
RETRY_AFTER_UNAVAILABLE_S = 2
RETRY_AFTER_OVERLOADED_S = 1


class NodeOverloaded(OpenSearchError, Overloaded):
    """429 from the node: ``rejected_execution_exception`` (a full queue), a circuit breaker, a
    flood-stage block. Retry later."""

    def __init__(self, status: int, body: Any):
        super().__init__(status, body)
        self.headers = {"Retry-After": str(RETRY_AFTER_OVERLOADED_S)}


class NodeUnavailable(OpenSearchError, Unavailable):
    """503 from the node (no cluster manager, a shard without a live copy, a retryable cluster block, a
    cluster-state update that timed out), or a transport error while a node goes away. Retry later."""

    def __init__(self, status: int, body: Any):
        super().__init__(status, body)
        self.headers = {"Retry-After": str(RETRY_AFTER_UNAVAILABLE_S)}


class IndexBlocked(NodeUnavailable):
    """403 ``cluster_block_exception``: the index takes no writes for now (a layout migration blocks the old
    index until the alias switches): a 503 the client retries, not a refusal of its rights."""

    def __init__(self, status: int, body: Any):
        super().__init__(status, body)
        self.status = Unavailable.status


class SearchCancelled(OpenSearchError, DeadlineExceeded):
    """The node cancelled a search at memproxy's deadline (``--search-timeout-s``, sent as
    ``cancel_after_time_interval``): the node answers 500 "all shards failed"; memproxy answers 504, a
    gateway whose upstream did not answer in time, which clients retry (the cluster is busy now, the
    request is not wrong)."""

    def __init__(self, status: int, body: Any):
        super().__init__(status, body)
        self.status = DeadlineExceeded.status
        self.message = (
            "The search did not finish within memproxy's search timeout (--search-timeout-s) and the "
            "cluster cancelled it; retry later"
        )
        self.headers = {"Retry-After": str(RETRY_AFTER_UNAVAILABLE_S)}


# The one status → kind map; a few error types refine their status's kind.
_BY_STATUS: dict[int, type[OpenSearchError]] = {
    400: NodeBadRequest,
    401: NodeUnauthenticated,
    403: NodeForbidden,
    404: NodeNotFound,
    409: NodeConflict,
    429: NodeOverloaded,
    503: NodeUnavailable,
}


_BY_TYPE: dict[tuple[int, str], type[OpenSearchError]] = {
    (400, "resource_already_exists_exception"): IndexExists,
    (404, "index_not_found_exception"): IndexMissing,
    (403, "cluster_block_exception"): IndexBlocked,
}


def node_error(status: int, body: Any) -> OpenSearchError:
    """The typed error for one node answer (a status and its ``error`` value)."""
    kind = body.get("type") if isinstance(body, dict) else None
    cls = _BY_TYPE.get((status, kind)) if isinstance(kind, str) else None
    if cls is None and status >= 500 and status != 503 and transient(body):
        return NodeUnavailable(503, body)
    if cls is None and status >= 500 and cancelled_at_deadline(body):
        return SearchCancelled(status, body)
    return (cls or _BY_STATUS.get(status, OpenSearchError))(status, body)


def unreachable(message: str) -> Unavailable:
    """No node answered: 503, and the caller may retry shortly (another node, or this one restarted)."""
    return Unavailable(message, headers={"Retry-After": str(RETRY_AFTER_UNAVAILABLE_S)})


_ENDPOINT = re.compile(r"^_[a-z_]{1,40}$")


def endpoint_of(path: str) -> str:
    """The API a path calls, bounded for a metric label: index names never start with ``_``, and the
    first ``_``-segment comes before any document id."""
    for segment in path.split("?", 1)[0].split("/"):
        if segment.startswith("_"):
            return segment if _ENDPOINT.match(segment) else "other"
    return "index"


def opaque_id_headers() -> dict[str, str]:
    """``X-Opaque-Id`` for a call made on behalf of the request being served (the node shows it in its
    tasks, slow logs and deprecation logs), nothing outside a request."""
    request_id = current_request_id.get()
    return {"X-Opaque-Id": request_id} if request_id else {}


def _error_label(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    if isinstance(exc, os_exc.TransportError) and isinstance(status, int):
        return f"{status // 100}xx"
    return type(exc).__name__


def _ssl_context(settings: Settings, *, client_cert: bool = True) -> ssl.SSLContext | None:
    """TLS to the cluster; ``client_cert=False`` for the pass-through session, which acts for callers and so
    must never present memproxy's own certificate."""
    if not settings.opensearch_url.startswith("https"):
        return None
    ctx = ssl.create_default_context(cafile=settings.opensearch_ca_certs)
    if not settings.opensearch_verify_certs:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if client_cert and settings.opensearch_client_cert:
        ctx.load_cert_chain(settings.opensearch_client_cert, settings.opensearch_client_key)
    return ctx


def translate_error(exc: Exception) -> MemproxyError:
    """Map an opensearch-py exception to the project's tree."""
    if isinstance(exc, os_exc.ConnectionError | os_exc.ConnectionTimeout):
        return unreachable(f"OpenSearch is unreachable: {exc.error if hasattr(exc, 'error') else exc}")
    if isinstance(exc, os_exc.TransportError) and isinstance(exc.status_code, int):
        info = exc.info
        body = info.get("error", info) if isinstance(info, dict) else (info or exc.error)
        return node_error(exc.status_code, body)
    return MemproxyError(f"OpenSearch call failed: {exc}")


@dataclass(frozen=True)
class SentRequest:
    """One call :meth:`Store.request` sent to the node, as it sent it."""

    method: str
    path: str
    body: Any
    params: dict[str, Any]


# The calls of the code running inside :func:`capture_requests` (None: nobody is capturing). A context
# variable, so concurrent requests never see each other's calls; a list, so tasks the captured code gathers
# (which run on copies of the context) append to the same one.
_captured: ContextVar[list[SentRequest] | None] = ContextVar("memproxy_captured_requests", default=None)


@contextmanager
def capture_requests() -> Iterator[list[SentRequest]]:
    """Record every node call made inside the block, in order: the console shows the exact requests a real
    search compiled, taken where they are sent rather than rebuilt beside it."""
    sent: list[SentRequest] = []
    token = _captured.set(sent)
    try:
        yield sent
    finally:
        _captured.reset(token)


class Store:
    """Owns the clients; data operations live in sibling modules that take a ``Store``."""

    def __init__(self, settings: Settings):
        self.settings = settings
        # The layout of the memory indices this store creates (docs/data-model.md, "Index layout").
        self.memory_layout = MemoryLayout(shards=settings.memory_shards, replicas=settings.memory_replicas)
        self.layouts = IndexLayouts(self.request, url)
        auth = None
        if settings.opensearch_username:
            auth = (settings.opensearch_username, settings.opensearch_password or "")
        # Every node given: opensearch-py takes them in turn and sets aside one it could not reach (for
        # DEAD_S seconds, doubling on each failure in a row); Store.request itself decides what is sent
        # again (max_retries=0: the client would resend anything, a timed-out or non-idempotent call too).
        self.client = AsyncOpenSearch(
            hosts=list(settings.opensearch_hosts),
            http_auth=auth,
            ssl_context=_ssl_context(settings),
            timeout=settings.opensearch_timeout_s,
            max_retries=0,
            dead_timeout=DEAD_S,
            timeout_cutoff=4,
        )
        # The pass-through session acts for callers: it has no credentials and no client certificate of
        # memproxy's (a caller's own Authorization header is all it may carry). It must relay bytes exactly:
        # it never decompresses and adds none of the headers aiohttp would otherwise invent (an
        # Accept-Encoding the client never sent gets gzip back).
        self.passthrough_http = aiohttp.ClientSession(
            auto_decompress=False,
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
            connector=aiohttp.TCPConnector(limit=256, ssl=_ssl_context(settings, client_cert=False) or True),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        # The nodes the pass-through session (and the authinfo call) take in turn.
        self.passthrough_hosts = HostRing(settings.opensearch_hosts)
        self.observer: CallObserver | None = None

    async def close(self) -> None:
        await self.client.close()
        # opensearch-py closes the connections of the nodes it holds live, not those set aside as dead.
        pool: Any = getattr(self.client.transport, "connection_pool", None)
        live = getattr(pool, "connections", ())
        for connection in getattr(pool, "orig_connections", ()):
            if connection not in live:
                await connection.close()
        await self.passthrough_http.close()

    async def request(
        self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """One call to the node; raises the project's errors (:func:`node_error`), never opensearch-py's."""
        captured = _captured.get()
        if captured is not None:
            captured.append(SentRequest(method, path, body, dict(params or {})))
        began = time.perf_counter()
        error: str | None = None
        try:
            return await self._perform(method, path, body, params)
        except asyncio.CancelledError:
            error = "cancelled"  # the caller went away: not the node's failure, but not a success either
            raise
        except Exception as exc:
            error = _error_label(exc)
            raise translate_error(exc) from exc
        finally:
            if self.observer is not None:
                self.observer(method, endpoint_of(path), time.perf_counter() - began, error)

    async def _perform(self, method: str, path: str, body: Any, params: dict[str, Any] | None) -> Any:
        """One call, sent to the next node when its node could not be reached and sending it again is
        safe (:mod:`proxy.store.failover`): at most once per node given."""
        hosts = len(self.settings.opensearch_hosts)
        for attempt in range(hosts):
            try:
                return await self.client.transport.perform_request(
                    method, path, body=body, params=params, headers=opaque_id_headers() or None
                )
            except os_exc.ConnectionTimeout:
                raise  # the node may still act on it: never twice, and never a second wait
            except os_exc.ConnectionError as exc:
                cause = exc.info if isinstance(exc.info, BaseException) else None
                if attempt + 1 >= hosts or not (
                    never_sent(cause) or may_resend(method, endpoint_of(path), path, params, body)
                ):
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def cluster_health(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", url("_cluster", "health"))
        return result
