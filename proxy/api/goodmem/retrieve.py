"""``POST`` and ``GET /v1/memories:retrieve``: parse, plan, then stream NDJSON or SSE.

Everything that can fail with an HTTP status happens before the first byte: headers, body, permissions on
every space, filters, query embedding and the searches (``proxy.core.goodmem.retrieve.plan_retrieval``).
After that the stream carries failures in-band: a ``status`` event, then the terminal record (SSE
``event: error`` always; NDJSON ``{"type":"error",...}`` with ``GoodMem-Stream-Terminal: true``).

Deadlines: ``GoodMem-Timeout-Ms`` starts when the handler starts (reading the body counts); if it passes
before the first byte the answer is 504, afterwards the pending load is abandoned and reported in-band.
Disconnects: the work runs as a task that is cancelled when the client's connection closes (whether or
not aiohttp cancels the handler itself), so no embedding or search keeps running for nobody.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import math
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from aiohttp import web
from multidict import MultiMapping

from proxy.api.goodmem._common import principal, services
from proxy.api.goodmem.streaming import STREAM_TERMINAL_HEADER, EventStream, negotiate_format
from proxy.core.goodmem.retrieve import (
    CHAT_POST_PROCESSOR,
    DEFAULT_REQUESTED_SIZE,
    ITERATIVE_SCAN_MODES,
    MAX_MESSAGE_CHARS,
    MAX_REQUESTED_SIZE,
    ChatConfig,
    EmbedderWeight,
    HnswOptions,
    RetrievalPlan,
    RetrieveRequest,
    SpaceKey,
    StreamFailure,
    grpc_code,
    load_memories,
    parse_chat_config,
    plan_retrieval,
    retrieval_events,
    status_event,
)
from proxy.errors import BadRequest, DeadlineExceeded, MemproxyError

__all__ = [
    "MAX_TIMEOUT_MS",
    "TIMEOUT_HEADER",
    "parse_get_query",
    "parse_post_body",
    "parse_stream_terminal",
    "parse_timeout_ms",
    "retrieve_get",
    "retrieve_post",
    "routes",
]

log = logging.getLogger(__name__)

TIMEOUT_HEADER = "GoodMem-Timeout-Ms"
MAX_TIMEOUT_MS = 86_400_000
# How often the disconnect watcher looks at the connection (aiohttp offers no callback for it).
DISCONNECT_POLL_S = 0.05

T = TypeVar("T")

routes = web.RouteTableDef()


# --------------------------------------------------------------------------------------------------------
# Headers
# --------------------------------------------------------------------------------------------------------


def parse_timeout_ms(headers: MultiMapping[str]) -> int | None:
    """``GoodMem-Timeout-Ms``: one decimal integer 1..86 400 000; duplicates, signs, fractions → 400."""
    values = headers.getall(TIMEOUT_HEADER, [])
    if not values:
        return None
    if len(values) > 1:
        raise BadRequest(f"{TIMEOUT_HEADER} must be given once")
    text = values[0].strip()
    if not re.fullmatch(r"[0-9]{1,12}", text):
        raise BadRequest(f"{TIMEOUT_HEADER} must be a decimal integer between 1 and {MAX_TIMEOUT_MS}")
    value = int(text)
    if not 1 <= value <= MAX_TIMEOUT_MS:
        raise BadRequest(f"{TIMEOUT_HEADER} must be between 1 and {MAX_TIMEOUT_MS}, got {value}")
    return value


def parse_stream_terminal(headers: MultiMapping[str]) -> bool:
    """``GoodMem-Stream-Terminal``: ``true`` opts in; ``false`` or absent does not; anything else → 400."""
    values = headers.getall(STREAM_TERMINAL_HEADER, [])
    if not values:
        return False
    if len(values) > 1:
        raise BadRequest(f"{STREAM_TERMINAL_HEADER} must be given once")
    text = values[0].strip().lower()
    if text not in ("true", "false"):
        raise BadRequest(f"{STREAM_TERMINAL_HEADER} must be 'true'")
    return text == "true"


# --------------------------------------------------------------------------------------------------------
# Body and query parsing (both spellings: camelCase as documented, snake_case for lenient clients)
# --------------------------------------------------------------------------------------------------------


def _get(obj: Mapping[str, Any], camel: str, snake: str | None = None) -> Any:
    value = obj.get(camel)
    if value is None and snake is not None:
        value = obj.get(snake)
    return value


_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,511}$")


def _check_id(value: Any, what: str) -> str:
    """A UUID (canonicalised), or another plain id memproxy itself issued (a registry alias such as
    ``all-minilm-l6-v2``, an OpenSearch-API container id); anything else is 400."""
    if not isinstance(value, str):
        raise BadRequest(f"Invalid {what}: expected a UUID string")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        pass
    if not _ID.match(value):
        raise BadRequest(f"Invalid UUID format for {what}: {value!r}")
    return value


def _as_bool(value: Any, what: str, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise BadRequest(f"{what} must be a boolean")


def _as_int(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{what} must be an integer")
    return value


def _message(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise BadRequest("message is required and must be a non-empty string")
    if len(value) > MAX_MESSAGE_CHARS:
        raise BadRequest(f"message must be at most {MAX_MESSAGE_CHARS} characters")
    return value


def _requested_size(value: Any) -> int:
    size = _as_int(value, "requestedSize")
    if size is None or size == 0:
        return DEFAULT_REQUESTED_SIZE
    if size < 0:
        raise BadRequest("requestedSize must not be negative")
    if size > MAX_REQUESTED_SIZE:
        raise BadRequest(f"requestedSize must be at most {MAX_REQUESTED_SIZE}")
    return size


def _filter_text(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a string")
    # An empty expression constrains nothing; it is the same as no filter.
    return value if value.strip() else None


def _embedder_weights(value: Any, where: str) -> tuple[EmbedderWeight, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadRequest(f"{where}.embedderWeights must be an array")
    out: list[EmbedderWeight] = []
    seen: set[str] = set()
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise BadRequest(f"{where}.embedderWeights[{i}] must be an object")
        what = f"{where}.embedderWeights[{i}]"
        embedder_id = _check_id(_get(entry, "embedderId", "embedder_id"), f"{what}.embedderId")
        if embedder_id in seen:
            raise BadRequest(f"{where}.embedderWeights lists embedder {embedder_id} twice")
        seen.add(embedder_id)
        weight = entry.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            raise BadRequest(f"{what}.weight must be a finite number")
        out.append(EmbedderWeight(embedder_id, float(weight)))
    return tuple(out)


def _space_keys(value: Any) -> tuple[SpaceKey, ...]:
    if not isinstance(value, list) or not value:
        raise BadRequest("spaceKeys is required and must list at least one space")
    keys: list[SpaceKey] = []
    for i, entry in enumerate(value):
        where = f"spaceKeys[{i}]"
        if not isinstance(entry, Mapping):
            raise BadRequest(f"{where} must be an object")
        keys.append(
            SpaceKey(
                space_id=_check_id(_get(entry, "spaceId", "space_id"), f"{where}.spaceId"),
                embedder_weights=_embedder_weights(_get(entry, "embedderWeights", "embedder_weights"), where),
                filter=_filter_text(entry.get("filter"), f"{where}.filter"),
            )
        )
    return tuple(keys)


def _context(value: Any) -> tuple[tuple[str, ...], int]:
    """Text context items (embedded with the message) and the number of binary ones (reported, ignored)."""
    if value is None:
        return (), 0
    if not isinstance(value, list):
        raise BadRequest("context must be an array")
    texts: list[str] = []
    binaries = 0
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise BadRequest(f"context[{i}] must be an object")
        text, binary = item.get("text"), item.get("binary")
        if (text is None) == (binary is None):
            raise BadRequest(f"context[{i}] must hold exactly one of text or binary")
        if text is not None:
            if not isinstance(text, str):
                raise BadRequest(f"context[{i}].text must be a string")
            texts.append(text)
            continue
        if not isinstance(binary, Mapping):
            raise BadRequest(f"context[{i}].binary must be an object")
        content_type = _get(binary, "contentType", "content_type")
        if not isinstance(content_type, str) or not 1 <= len(content_type) <= 128:
            raise BadRequest(f"context[{i}].binary.contentType must be 1..128 characters")
        data = binary.get("data")
        try:
            base64.b64decode(data if isinstance(data, str) else "", validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"context[{i}].binary.data must be base64") from None
        if not isinstance(data, str):
            raise BadRequest(f"context[{i}].binary.data must be base64")
        binaries += 1
    return tuple(texts), binaries


def _hnsw(value: Any) -> HnswOptions | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRequest("hnsw must be an object")
    ef = _as_int(_get(value, "efSearch", "ef_search"), "hnsw.efSearch")
    if ef is not None and not 1 <= ef <= 1000:
        raise BadRequest("hnsw.efSearch must be between 1 and 1000")
    scan = _get(value, "iterativeScan", "iterative_scan")
    if scan is not None and scan not in ITERATIVE_SCAN_MODES:
        raise BadRequest(f"hnsw.iterativeScan must be one of {', '.join(sorted(ITERATIVE_SCAN_MODES))}")
    tuples = _as_int(_get(value, "maxScanTuples", "max_scan_tuples"), "hnsw.maxScanTuples")
    if tuples is not None and not 1 <= tuples <= 2_147_483_647:
        raise BadRequest("hnsw.maxScanTuples must be between 1 and 2147483647")
    mult = _get(value, "scanMemMultiplier", "scan_mem_multiplier")
    if mult is not None:
        if isinstance(mult, bool) or not isinstance(mult, int | float) or not 1.0 <= mult <= 1000.0:
            raise BadRequest("hnsw.scanMemMultiplier must be between 1.0 and 1000.0")
        mult = float(mult)
    return HnswOptions(ef_search=ef, iterative_scan=scan, max_scan_tuples=tuples, scan_mem_multiplier=mult)


def _post_processor(value: Any) -> ChatConfig | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRequest("postProcessor must be an object")
    name = value.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 128:
        raise BadRequest("postProcessor.name must be 1..128 characters")
    if name != CHAT_POST_PROCESSOR:
        raise BadRequest(f"Unknown post-processor: {name}")
    config = value.get("config")
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise BadRequest("postProcessor.config must be an object")
    return parse_chat_config(config)


def _output_budget(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRequest("outputBudget must be an object")
    tokens = _as_int(value.get("tokens"), "outputBudget.tokens")
    if tokens is not None and tokens <= 0:
        raise BadRequest("outputBudget.tokens must be positive")
    return tokens


def _logging(value: Any) -> None:
    """Durable request logging (Gen B): shape-checked, then accepted without effect (documented)."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise BadRequest("logging must be an object")
    attrs = _get(value, "callerAttributes", "caller_attributes")
    if attrs is not None and (not isinstance(attrs, Mapping) or len(attrs) > 32):
        raise BadRequest("logging.callerAttributes must be an object of at most 32 scalars")


def _fetch_flags(fetch_memory: bool, fetch_content: bool) -> tuple[bool, bool]:
    if fetch_content and not fetch_memory:
        raise BadRequest("fetchMemoryContent requires fetchMemory=true")
    return fetch_memory, fetch_content


def parse_post_body(body: Any) -> RetrieveRequest:
    """``RetrieveMemoryRequest``. Unknown fields are tolerated (lenient, as real clients need)."""
    if not isinstance(body, Mapping):
        raise BadRequest("The request body must be a JSON object")
    texts, binaries = _context(body.get("context"))
    fetch_memory, fetch_content = _fetch_flags(
        _as_bool(_get(body, "fetchMemory", "fetch_memory"), "fetchMemory", True),
        _as_bool(_get(body, "fetchMemoryContent", "fetch_memory_content"), "fetchMemoryContent", False),
    )
    _logging(body.get("logging"))
    return RetrieveRequest(
        message=_message(body.get("message")),
        space_keys=_space_keys(_get(body, "spaceKeys", "space_keys")),
        requested_size=_requested_size(_get(body, "requestedSize", "requested_size")),
        fetch_memory=fetch_memory,
        fetch_memory_content=fetch_content,
        context_texts=texts,
        binary_context_count=binaries,
        hnsw=_hnsw(body.get("hnsw")),
        chat=_post_processor(_get(body, "postProcessor", "post_processor")),
        output_budget_tokens=_output_budget(_get(body, "outputBudget", "output_budget")),
    )


# GET spelling → ChatPostProcessor config key. Both families are in circulation.
_PP_PARAMS: dict[str, str] = {}
for _key, _camel in (
    ("llm_id", "LlmId"),
    ("reranker_id", "RerankerId"),
    ("relevance_threshold", "RelevanceThreshold"),
    ("llm_temp", "LlmTemp"),
    ("max_results", "MaxResults"),
    ("chronological_resort", "ChronologicalResort"),
    ("sys_prompt", "SysPrompt"),
    ("prompt", "Prompt"),
    ("gen_token_budget", "GenTokenBudget"),
):
    _PP_PARAMS[f"pp_{_key}"] = _key
    _PP_PARAMS[f"postProcessor{_camel}"] = _key
_PP_FLOATS = {"relevance_threshold", "llm_temp"}
_PP_INTS = {"max_results", "gen_token_budget"}


def _one(query: MultiMapping[str], *names: str) -> str | None:
    values = [v for name in names for v in query.getall(name, [])]
    if len(values) > 1:
        raise BadRequest(f"query parameter {names[0]} must be given once")
    return values[0] if values else None


def _query_bool(text: str | None, what: str, default: bool) -> bool:
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise BadRequest(f"{what} must be true or false")
    return lowered == "true"


def _query_int(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    if not re.fullmatch(r"-?[0-9]+", text.strip()):
        raise BadRequest(f"{what} must be an integer")
    return int(text)


def _pp_value(key: str, text: str) -> Any:
    if key == "chronological_resort":
        return _query_bool(text, f"pp_{key}", False)
    if key in _PP_INTS:
        return _query_int(text, f"pp_{key}")
    if key in _PP_FLOATS:
        try:
            value = float(text)
        except ValueError:
            raise BadRequest(f"pp_{key} must be a number") from None
        if not math.isfinite(value):
            raise BadRequest(f"pp_{key} must be a finite number")
        return value
    return text


def _query_chat(query: MultiMapping[str]) -> ChatConfig | None:
    """Any ``pp_*`` / ``postProcessor*`` parameter selects the ChatPostProcessor (as in the docs' example)."""
    config: dict[str, Any] = {}
    for name, key in _PP_PARAMS.items():
        text = _one(query, name)
        if text is None:
            continue
        if key in config:
            raise BadRequest(f"post-processor parameter {key} given twice")
        config[key] = _pp_value(key, text)
    return parse_chat_config(config) if config else None


def _query_space_ids(query: MultiMapping[str]) -> list[str]:
    """``spaceIds=a,b`` (the old client's form); repeated ``spaceIds=`` and ``space_ids`` also work."""
    raw = [*query.getall("spaceIds", []), *query.getall("space_ids", [])]
    ids = [part.strip() for value in raw for part in value.split(",") if part.strip()]
    if not ids:
        raise BadRequest("spaceIds is required and must list at least one space")
    return ids


def parse_get_query(query: MultiMapping[str]) -> RetrieveRequest:
    """The GET form: one ``filter`` applies to every listed space."""
    space_filter = _filter_text(_one(query, "filter"), "filter")
    keys = tuple(
        SpaceKey(space_id=_check_id(sid, f"spaceIds[{i}]"), filter=space_filter)
        for i, sid in enumerate(_query_space_ids(query))
    )
    fetch_memory, fetch_content = _fetch_flags(
        _query_bool(_one(query, "fetchMemory", "fetch_memory"), "fetchMemory", True),
        _query_bool(_one(query, "fetchMemoryContent", "fetch_memory_content"), "fetchMemoryContent", False),
    )
    return RetrieveRequest(
        message=_message(_one(query, "message")),
        space_keys=keys,
        requested_size=_requested_size(
            _query_int(_one(query, "requestedSize", "requested_size"), "requestedSize")
        ),
        fetch_memory=fetch_memory,
        fetch_memory_content=fetch_content,
        chat=_query_chat(query),
    )


# --------------------------------------------------------------------------------------------------------
# Handlers
# --------------------------------------------------------------------------------------------------------


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _watch_disconnect(request: web.Request) -> None:
    while not _client_gone(request):
        await asyncio.sleep(DISCONNECT_POLL_S)


def _log_disconnect(request: web.Request) -> None:
    log.info("client disconnected from %s %s; retrieval stopped", request.method, request.path)


async def _until_disconnect(request: web.Request, work: Awaitable[T]) -> T | None:
    """Run ``work``; cancel it (and so every embedding and search it awaits) if the client goes away.

    Returns None when the client disconnected. If the handler itself is cancelled (aiohttp's
    ``handler_cancellation``), the ``finally`` cancels the work just the same.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_watch_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        _log_disconnect(request)
        return None
    except asyncio.CancelledError:
        # aiohttp's handler_cancellation got there first: the client is gone all the same.
        _log_disconnect(request)
        raise
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    if not raw.strip():
        raise BadRequest("The request body must be a JSON object")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"Invalid JSON body: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except UnicodeDecodeError:
        raise BadRequest("Invalid JSON body: not UTF-8") from None


Parser = Callable[[web.Request], Awaitable[RetrieveRequest]]


async def _parse_post(request: web.Request) -> RetrieveRequest:
    return parse_post_body(await _read_json(request))


async def _parse_get(request: web.Request) -> RetrieveRequest:
    return parse_get_query(request.query)


async def _stream(stream: EventStream, events: Any) -> None:
    """Write every event as produced; a failure after the first byte goes in-band, never as a clean end."""
    try:
        async for event in events:
            await stream.send(event)
    except StreamFailure as failure:
        await stream.send(failure.status)
        await stream.fail(failure.code, failure.message)
        return
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except MemproxyError as exc:
        message = f"Retrieval failed: {exc.message}"
        await stream.send(
            status_event("GOODMEM_STATUS_CODE_UNSPECIFIED", message, {"reason": grpc_code(exc)})
        )
        await stream.fail(grpc_code(exc), message)
        return
    except Exception:
        log.exception("retrieve stream failed")
        message = "Retrieval failed: internal error"
        await stream.send(status_event("GOODMEM_STATUS_CODE_UNSPECIFIED", message, {"reason": "INTERNAL"}))
        await stream.fail("INTERNAL", message)
        return
    await stream.complete()


async def _retrieve(request: web.Request, parse: Parser) -> web.StreamResponse:
    loop = asyncio.get_running_loop()
    # The budget starts now: reading and decoding the body count against it.
    started = loop.time()
    timeout_ms = parse_timeout_ms(request.headers)
    terminal = parse_stream_terminal(request.headers)
    fmt = negotiate_format(request.headers.get("Accept"))
    deadline = started + timeout_ms / 1000.0 if timeout_ms is not None else None
    svc = services(request)
    stream = EventStream(request, fmt, terminal=terminal)

    async def prepare() -> RetrievalPlan:
        budget = asyncio.timeout_at(deadline)
        try:
            async with budget:
                caller = await principal(request)
                req = await parse(request)
                return await plan_retrieval(svc, caller, req)
        except TimeoutError:
            if not budget.expired():  # some other timeout below: not the caller's budget
                raise
            raise DeadlineExceeded(
                f"Deadline exceeded: the {timeout_ms} ms budget of {TIMEOUT_HEADER} ran out before results"
            ) from None

    async def run() -> web.StreamResponse:
        plan = await prepare()
        include_content = plan.request.fetch_memory_content

        async def loader(ids: list[str]) -> Mapping[str, Mapping[str, Any]]:
            return await load_memories(svc, ids, include_content=include_content)

        await stream.open()
        await _stream(stream, retrieval_events(plan, loader, deadline=deadline))
        response = stream.response
        assert response is not None
        return response

    try:
        result = await _until_disconnect(request, run())
    except ConnectionResetError:  # the socket closed under a write, before the watcher saw it
        _log_disconnect(request)
        result = None
    if result is None:
        # Nobody is listening any more; hand aiohttp what was started, or an empty close.
        return stream.response or web.Response(status=499)
    return result


@routes.post("/v1/memories:retrieve")
async def retrieve_post(request: web.Request) -> web.StreamResponse:
    return await _retrieve(request, _parse_post)


@routes.get("/v1/memories:retrieve")
async def retrieve_get(request: web.Request) -> web.StreamResponse:
    return await _retrieve(request, _parse_get)
