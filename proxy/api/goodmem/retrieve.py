"""``POST`` and ``GET /v1/memories:retrieve``: parse, plan, then stream NDJSON or SSE.

Everything that can fail with an HTTP status happens before the first byte: headers, the request
(:mod:`.retrieve_body`, :mod:`.retrieve_wire`), permissions on every space, filters, query embedding and
the searches (``Retriever.plan``). The events are :mod:`.retrieve_events`'; after the first byte the stream
carries failures in-band: a ``status`` event, then the terminal record (SSE ``event: error`` always; NDJSON
``{"type":"error",...}`` with ``GoodMem-Stream-Terminal: true``).

Deadlines: ``GoodMem-Timeout-Ms`` starts when the handler starts (reading the body counts); if it passes
before the first byte the answer is 504, afterwards the pending load is abandoned and reported in-band.
Disconnects: the work runs as a task that is cancelled when the client's connection closes (whether or
not aiohttp cancels the handler itself), so no embedding or search keeps running for nobody.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from multidict import MultiMapping

from proxy.api import body as body_reader
from proxy.api.goodmem.retrieve_body import parse_post_body
from proxy.api.goodmem.retrieve_events import StreamFailure, grpc_code, retrieval_events, status_event
from proxy.api.goodmem.retrieve_wire import parse_get_query
from proxy.api.goodmem.state import principal, retriever
from proxy.api.goodmem.streaming import (
    EventStream,
    negotiate_format,
    parse_stream_terminal,
    serve_stream,
)
from proxy.app_keys import SETTINGS
from proxy.core.goodmem.records import MemoryRecord
from proxy.core.goodmem.retrieve import RetrievalPlan, RetrieveRequest
from proxy.errors import BadRequest, DeadlineExceeded, MemproxyError

__all__ = [
    "MAX_TIMEOUT_MS",
    "TIMEOUT_HEADER",
    "parse_stream_terminal",
    "parse_timeout_ms",
    "retrieve_get",
    "retrieve_post",
    "routes",
]

log = logging.getLogger(__name__)

TIMEOUT_HEADER = "GoodMem-Timeout-Ms"
MAX_TIMEOUT_MS = 86_400_000

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


# --------------------------------------------------------------------------------------------------------
# Handlers
# --------------------------------------------------------------------------------------------------------


async def _read_json(request: web.Request) -> Any:
    try:
        body = await body_reader.read_json(request)
    except body_reader.MalformedJson as exc:
        raise BadRequest(f"Invalid JSON body: {exc.detail}") from None
    if body is None:
        raise BadRequest("The request body must be a JSON object")
    return body


Parser = Callable[[web.Request], Awaitable[RetrieveRequest]]


async def _parse_post(request: web.Request) -> RetrieveRequest:
    return parse_post_body(await _read_json(request))


async def _parse_get(request: web.Request) -> RetrieveRequest:
    return parse_get_query(request.query)


async def _stream(stream: EventStream, events: AsyncIterator[dict[str, Any]]) -> None:
    """Write the events: those produced together in one write (the producer flushes before it waits, and
    the end writes the rest); a failure after the first byte goes in-band, never as a clean end."""
    try:
        async for event in events:
            await stream.put(event)
    except StreamFailure as failure:
        stream.queue(failure.status)
        await stream.fail(failure.code, failure.message)
        return
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except MemproxyError as exc:
        message = f"Retrieval failed: {exc.message}"
        stream.queue(status_event("GOODMEM_STATUS_CODE_UNSPECIFIED", message, {"reason": grpc_code(exc)}))
        await stream.fail(grpc_code(exc), message)
        return
    except Exception:
        log.exception("retrieve stream failed")
        message = "Retrieval failed: internal error"
        stream.queue(status_event("GOODMEM_STATUS_CODE_UNSPECIFIED", message, {"reason": "INTERNAL"}))
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
    retrieval = retriever(request)
    stream = EventStream(request, fmt, terminal=terminal)

    async def prepare() -> RetrievalPlan:
        budget = asyncio.timeout_at(deadline)
        try:
            async with budget:
                caller = await principal(request)
                req = await parse(request)
                return await retrieval.plan(caller, req)
        except TimeoutError:
            if not budget.expired():  # some other timeout below: not the caller's budget
                raise
            raise DeadlineExceeded(
                f"Deadline exceeded: the {timeout_ms} ms budget of {TIMEOUT_HEADER} ran out before results"
            ) from None

    async def run() -> web.StreamResponse:
        # One caller's retrieves beyond its share wait briefly, then get a 429 (proxy.core.slots).
        async with retrieval.slots.hold((await principal(request)).user_id):
            return await run_held()

    async def run_held() -> web.StreamResponse:
        plan = await prepare()
        spaces = {item.memory_id: item.space_id for item in plan.items}

        async def loader(ids: list[str]) -> Mapping[str, MemoryRecord]:
            return await retrieval.load(ids, spaces)

        await stream.open()
        events = retrieval_events(
            plan,
            loader,
            deadline=deadline,
            models=retrieval,
            convention=request.app[SETTINGS].goodmem_vector_score,  # type: ignore[arg-type]
            flush=stream.flush,
        )
        await _stream(stream, events)
        response = stream.response
        assert response is not None
        return response

    return await serve_stream(request, stream, run(), "retrieval")


@routes.post("/v1/memories:retrieve")
async def retrieve_post(request: web.Request) -> web.StreamResponse:
    return await _retrieve(request, _parse_post)


@routes.get("/v1/memories:retrieve")
async def retrieve_get(request: web.Request) -> web.StreamResponse:
    return await _retrieve(request, _parse_get)
