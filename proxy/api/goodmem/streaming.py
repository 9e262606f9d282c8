"""NDJSON and SSE framing for GoodMem's streamed answers (retrieve, docs/goodmem-retrieve.md; ping), and the
watch that stops a stream's work when its client goes away.

The writers know nothing about retrieval: they take event objects (plain JSON dicts produced by
``proxy.core.goodmem.retrieve``), frame them, and write each one to the socket as soon as it is given, so
a client sees every event when it is produced. The response is prepared once, on the first event; before
that the handler may still answer with an ordinary HTTP error.

Terminal outcome (the GoodMem-Stream-Terminal design of docs/goodmem-retrieve.md):

* NDJSON, ``GoodMem-Stream-Terminal: true``: one last line ``{"type":"completed"}`` on success, or
  ``{"type":"error","code":...,"message":...}`` on failure. Its keys are none of the five event keys, so
  both Python clients pass over it. Without the opt-in nothing is appended (EOF is the end).
* SSE, always: ``event: close`` / ``{"type":"completed"}`` on success, ``event: error`` with the error
  record on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any, Literal, TypeVar

from aiohttp import web
from multidict import MultiMapping

from proxy.api import body as body_reader
from proxy.errors import BadRequest

__all__ = [
    "NDJSON",
    "SSE",
    "STREAM_TERMINAL_HEADER",
    "EventStream",
    "StreamFormat",
    "completed_record",
    "error_record",
    "log_disconnect",
    "ndjson_line",
    "negotiate_format",
    "parse_stream_terminal",
    "serve_stream",
    "sse_frame",
    "until_disconnect",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

StreamFormat = Literal["ndjson", "sse"]
NDJSON: StreamFormat = "ndjson"
SSE: StreamFormat = "sse"

NDJSON_TYPE = "application/x-ndjson"
SSE_TYPE = "text/event-stream"
STREAM_TERMINAL_HEADER = "GoodMem-Stream-Terminal"

# How often the disconnect watcher looks at the connection (aiohttp offers no callback for it).
DISCONNECT_POLL_S = 0.05

# Every data frame is named "item", as in GoodMem's SSE example; the old client only looks at the name to
# skip "close", so the name carries no meaning beyond that.
SSE_ITEM_EVENT = "item"
# Queued events are written once they reach this many bytes, whatever the producer does: a large answer
# (thousands of chunks with their content) streams under backpressure instead of piling up in memory.
QUEUE_FLUSH_BYTES = 64 * 1024


def _media_ranges(accept: str) -> list[tuple[str, float]]:
    """``Accept`` as (media type, q) pairs; a malformed q counts as 1 (be lenient with clients)."""
    ranges: list[tuple[str, float]] = []
    for part in accept.split(","):
        pieces = [p.strip() for p in part.split(";")]
        media = pieces[0].lower()
        if not media:
            continue
        q = 1.0
        for param in pieces[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 1.0
        ranges.append((media, q))
    return ranges


def negotiate_format(accept: str | None) -> StreamFormat:
    """SSE only when ``text/event-stream`` is asked for and preferred over NDJSON; NDJSON otherwise.

    No ``Accept``, ``*/*``, ``application/json`` or anything unknown gets NDJSON, the documented default.
    """
    if not accept:
        return NDJSON
    q_sse = q_ndjson = 0.0
    for media, q in _media_ranges(accept):
        if media == SSE_TYPE:
            q_sse = max(q_sse, q)
        elif media == NDJSON_TYPE:
            q_ndjson = max(q_ndjson, q)
    return SSE if q_sse > 0 and q_sse >= q_ndjson else NDJSON


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


def _compact(obj: Any) -> str:
    # One line, no spaces: a JSON string never contains a raw newline, so a line is always one event. A lone
    # surrogate in a stored memory becomes U+FFFD (body_reader.dumps): one bad record never ends a stream.
    return body_reader.dumps(obj, separators=(",", ":"), allow_nan=False)


def ndjson_line(obj: dict[str, Any]) -> bytes:
    return (_compact(obj) + "\n").encode("utf-8")


def sse_frame(event: str, obj: dict[str, Any]) -> bytes:
    """One ``event:`` line, one ``data:`` line with the whole JSON, one blank line (old client's parser)."""
    return f"event: {event}\ndata: {_compact(obj)}\n\n".encode()


def completed_record() -> dict[str, Any]:
    return {"type": "completed"}


def error_record(code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message}


class EventStream:
    """One streamed retrieve response; ``started`` tells whether the first byte has been sent."""

    def __init__(self, request: web.Request, fmt: StreamFormat, *, terminal: bool) -> None:
        self._request = request
        self.format = fmt
        self.terminal = terminal
        self._response: web.StreamResponse | None = None
        self._finished = False
        # Framed events not yet written: the events a producer has ready together leave in one write.
        self._pending = bytearray()

    @property
    def started(self) -> bool:
        return self._response is not None

    @property
    def response(self) -> web.StreamResponse | None:
        return self._response

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": SSE_TYPE if self.format == SSE else NDJSON_TYPE,
            # Keep caches and buffering proxies (nginx) from holding events back.
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
        if self.terminal:
            headers[STREAM_TERMINAL_HEADER] = "true"
        return headers

    async def open(self) -> web.StreamResponse:
        """Send the status line and headers (200); idempotent."""
        if self._response is None:
            response = web.StreamResponse(status=200, headers=self._headers())
            response.enable_chunked_encoding()
            await response.prepare(self._request)
            self._response = response
        return self._response

    def queue(self, event: dict[str, Any]) -> None:
        """Add an event to the next write (:meth:`flush`, or the end of the stream)."""
        if self.format == SSE:
            self._pending += sse_frame(SSE_ITEM_EVENT, event)
        else:
            self._pending += ndjson_line(event)

    async def put(self, event: dict[str, Any]) -> None:
        """Queue an event; write the queue once it holds :data:`QUEUE_FLUSH_BYTES`."""
        self.queue(event)
        if len(self._pending) >= QUEUE_FLUSH_BYTES:
            await self.flush()

    async def flush(self) -> None:
        """Write the queued events now; a producer calls it before it waits (a model call, a load), so that
        nothing it has ready is held back meanwhile."""
        response = await self.open()
        if self._pending:
            data = bytes(self._pending)
            self._pending.clear()
            # StreamResponse.write hands the bytes to the transport at once and waits only when the socket's
            # send buffer is full.
            await response.write(data)

    async def send(self, event: dict[str, Any]) -> None:
        """Write one event now (with any queued before it)."""
        self.queue(event)
        await self.flush()

    async def complete(self) -> None:
        """Successful end: the queued events, the terminal record where one is due, and the end of the body,
        in one write."""
        if self._finished:
            return
        self._finished = True
        if self.format == SSE:
            self._pending += sse_frame("close", completed_record())
        elif self.terminal:
            self._pending += ndjson_line(completed_record())
        await self._end()

    async def fail(self, code: str, message: str) -> None:
        """Failed end after streaming began: the queued events, the error record where one is due, then the
        end of the body."""
        if self._finished:
            return
        self._finished = True
        if self.format == SSE:
            self._pending += sse_frame("error", error_record(code, message))
        elif self.terminal:
            self._pending += ndjson_line(error_record(code, message))
        await self._end()

    async def _end(self) -> None:
        response = await self.open()
        data = bytes(self._pending)
        self._pending.clear()
        await response.write_eof(data)  # the last chunk and the chunked body's end, together


# --------------------------------------------------------------------------------------------------------
# Disconnects
# --------------------------------------------------------------------------------------------------------


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _watch_disconnect(request: web.Request) -> None:
    while not _client_gone(request):
        await asyncio.sleep(DISCONNECT_POLL_S)


def log_disconnect(request: web.Request, what: str) -> None:
    log.info("client disconnected from %s %s; %s stopped", request.method, request.path, what)


async def until_disconnect(request: web.Request, work: Awaitable[T], what: str) -> T | None:
    """Run ``work``; cancel it (and so every model call and search it awaits) if the client goes away.

    Returns None when the client disconnected (logged as "``what`` stopped"). If the handler itself is
    cancelled (aiohttp's ``handler_cancellation``), the ``finally`` cancels the work just the same.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_watch_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        log_disconnect(request, what)
        return None
    except asyncio.CancelledError:
        # aiohttp's handler_cancellation got there first: the client is gone all the same.
        log_disconnect(request, what)
        raise
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
        # Collect the work's outcome even when it ended on its own as the client left (a write to the
        # closed socket): nobody is there to tell, and an unawaited failure is logged by asyncio.
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def serve_stream(
    request: web.Request, stream: EventStream, work: Awaitable[web.StreamResponse], what: str
) -> web.StreamResponse:
    """A streamed answer's handler end: ``work`` (which opens ``stream`` and writes it) run until the
    client goes away; then whatever was started, or an empty close, is handed back to aiohttp."""
    try:
        result = await until_disconnect(request, work, what)
    except ConnectionResetError:  # the socket closed under a write, before the watcher saw it
        log_disconnect(request, what)
        result = None
    if result is None:
        return stream.response or web.Response(status=499)
    return result
