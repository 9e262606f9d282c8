"""What every ml-commons memory handler shares: reading bodies, the services, mapping node failures."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

from proxy.api import body as body_reader
from proxy.api.guards import current_limits
from proxy.api.opensearch_memory.lenient import token_error
from proxy.app_keys import SERVICES
from proxy.core.container_record import Container
from proxy.core.containers import get_container
from proxy.core.services import Services
from proxy.errors import BadRequest, DeadlineExceeded, MemproxyError, Overloaded, Unavailable
from proxy.store.client import NodeBadRequest, OpenSearchError

__all__ = [
    "Handler",
    "json_response",
    "load_container",
    "object_body",
    "read_json",
    "refuse_other_container",
    "search_failures",
    "services",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The node's answer when the search *ran* and failed (every shard refused it: a sort on an unmapped field,
# a script error). ml-commons wraps those in a 500. Any other 400 is the node refusing the caller's search
# source while parsing it (bad DSL, "size": -1, a number out of range, ...), which ml-commons' REST layer,
# parsing the same source with the same parser, answers as that 400 itself. (The fuzz suite found the
# parse-time kinds one by one; naming the one execution kind instead covers them all.)
EXECUTION_FAILURE = "search_phase_execution_exception"
# The node's reason when ``from + size`` passes ``index.max_result_window``.
RESULT_WINDOW = "Result window is too large"


def services(request: web.Request) -> Services:
    return request.app[SERVICES]


# The routes that store what their body says (working memory, long-term memories): each text in such a
# body is the text of a memory, bounded by max_memory_chars.
_WRITE_ROUTES = frozenset(
    {
        "/_plugins/_ml/memory_containers/{memory_container_id}/memories",
        "/_plugins/_ml/memory_containers/{memory_container_id}/memories/long-term/_memproxy_add",
        "/_plugins/_ml/memory_containers/{memory_container_id}/memories/long-term/_memproxy_bulk",
    }
)


def _check_memory_texts(request: web.Request, body: Any) -> None:
    """413 when a write route's body holds a text longer than one memory may be (``max_memory_chars``)."""
    limit = current_limits().max_memory_chars
    if request.method != "POST" or request.match_info.route.resource is None:
        return
    if request.match_info.route.resource.canonical not in _WRITE_ROUTES:
        return
    if request.content_length is not None and request.content_length <= limit:
        return  # a JSON string is never longer, in characters, than the bytes that spell it
    where, length = body_reader.longest_text(body)
    if length > limit:
        raise body_reader.PayloadTooLarge(
            f"The text at {where} has {length} characters, more than the {limit} one memory may hold "
            "(max_memory_chars)"
        )


async def read_json(request: web.Request) -> Any:
    """The JSON body (or the ``source`` query parameter, as OpenSearch allows); ``None`` when empty."""
    try:
        body = await body_reader.read_json(request)
        source = request.query.get("source")
        if body is None and source:
            body = body_reader.decode_json(source, max_depth=current_limits().max_json_depth)
    except body_reader.MalformedJson as exc:
        raise BadRequest(
            f"Failed to parse request body: {exc.detail}", os_type="json_parse_exception"
        ) from None
    _check_memory_texts(request, body)
    return body


async def object_body(
    request: web.Request,
    empty_reason: str,
    *,
    empty_error: type[MemproxyError] = BadRequest,
    empty_type: str | None = None,
) -> dict[str, Any]:
    """A JSON object body; an absent body is ``empty_error(empty_reason)``."""
    body = await read_json(request)
    if body is None:
        raise empty_error(empty_reason, os_type=empty_type)
    if not isinstance(body, dict):
        raise token_error("START_OBJECT", body)
    return body


async def load_container(
    request: web.Request, container_id: str | None = None, *, cached: bool = False
) -> Container:
    """The container the route names; ``cached`` (search routes only) may reuse a read from the last
    seconds (proxy.core.cache)."""
    container_id = container_id or request.match_info["memory_container_id"]
    return await get_container(services(request), container_id, cached=cached)


def refuse_other_container(request: web.Request, body: Any) -> None:
    """400 when a write body's ``memory_container_id`` names another container than the path.

    The path is what the access check read, so it alone says where a write goes: ml-commons lets the body's
    id override it (the write would land in a container the caller was never checked for). Repeating the
    path's id is fine.
    """
    if not isinstance(body, dict) or body.get("memory_container_id") is None:
        return
    named = body["memory_container_id"]
    path = request.match_info["memory_container_id"]
    if not isinstance(named, str) or named != path:
        raise BadRequest(
            f"memory_container_id in the request body [{named}] differs from the memory container of the "
            f"path [{path}]"
        )


def json_response(body: Any, *, status: int = 200) -> web.Response:
    # A lone surrogate in a stored document (written before input was checked, or straight into the node)
    # becomes U+FFFD instead of failing the answer (proxy.api.body.dumps).
    return web.Response(
        body=body_reader.utf8(body_reader.dumps(body)),
        status=status,
        content_type="application/json",
        charset="utf-8",
    )


def _refused_argument(exc: OpenSearchError) -> bool:
    """An execution failure that is the caller's own argument refused on every shard (``from + size`` over
    the index's result window): a 400 the node wrote, not a failure of the search (the schemathesis run's
    find: a 500 before)."""
    causes = exc.body.get("root_cause") if isinstance(exc.body, dict) else None
    return (
        isinstance(causes, list)
        and bool(causes)
        and all(isinstance(c, dict) and str(c.get("reason", "")).startswith(RESULT_WINDOW) for c in causes)
    )


@contextmanager
def search_failures(prefix: str) -> Iterator[None]:
    """Node failures during a search: refusals of the source stay 400; a cluster that cannot answer now
    (503 unavailable, 429 overloaded, 504 cancelled at the search deadline) keeps its status and
    Retry-After, so clients retry instead of giving up on a 500 (issue 25: never a 500 during a failover);
    execution failures (and anything else) become ml-commons' wrapped 500."""
    try:
        yield
    except OpenSearchError as exc:
        if isinstance(exc, NodeBadRequest) and (exc.os_type != EXECUTION_FAILURE or _refused_argument(exc)):
            raise
        if isinstance(exc, Unavailable | Overloaded | DeadlineExceeded):
            raise
        cause = exc.body if isinstance(exc.body, dict) else {"type": "exception", "reason": str(exc.body)}
        raise MemproxyError(
            f"{prefix}: {exc.message}",
            os_type="exception",
            details={"caused_by": {k: cause[k] for k in ("type", "reason") if k in cause}},
        ) from exc
