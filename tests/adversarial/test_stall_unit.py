"""No request can stall the others, without a node (docs/security.md, "Input that cannot poison or freeze"):
the connection deadlines and per-address cap over a real socket, the retrieve bounds, filters parsed off the
event loop, and the per-caller slots. The job fairness and PDF bounds have their own tests
(tests/test_jobs.py, tests/test_documents.py); the whole under hostile load: tests/adversarial/test_stall.py.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp.web_server
import pytest
from aiohttp import web
from multidict import MultiDict

from proxy.api.connections import ConnectionLimits
from proxy.api.goodmem.retrieve_body import parse_post_body
from proxy.api.goodmem.retrieve_wire import parse_get_query
from proxy.api.guards import QuietRequestHandler, install_quiet_request_handler
from proxy.core.container_record import Container
from proxy.core.goodmem.retrieve import plan as plan_module
from proxy.core.goodmem.retrieve.request import (
    MAX_SPACE_KEYS,
    RetrieveRequest,
    SpaceKey,
)
from proxy.core.identity import Principal
from proxy.core.slots import CallerSlots
from proxy.errors import BadRequest, NotFound, Overloaded
from proxy.filters import MAX_FILTER_CHARS, MAX_FILTER_CHARS_PER_REQUEST, FilterError, parse_filter

SID = "01a0ace1-f672-7105-9642-bf658ff8f51a"


def _sid(i: int) -> str:
    return f"01a0ace1-f672-7105-9642-{i:012x}"


# --- connections: read deadlines and a cap per address --------------------------------------------------

MAX_PER_ADDRESS = 4


@pytest.fixture()
def _guarded() -> Iterator[ConnectionLimits]:
    original = aiohttp.web_server.RequestHandler
    limits = ConnectionLimits(header_timeout_s=0.6, body_timeout_s=0.6, max_per_address=MAX_PER_ADDRESS)
    install_quiet_request_handler(limits)
    yield limits
    QuietRequestHandler.limits = None
    aiohttp.web_server.RequestHandler = original  # type: ignore[misc]


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    if request.path == "/slow":
        await asyncio.sleep(1.5)  # longer than both deadlines: a busy handler is not a stalled client
    return web.Response(text=f"read {len(body)}")


@pytest.fixture()
async def port(_guarded: ConnectionLimits) -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    await runner.cleanup()


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> float:
    """Seconds until the server closed the connection (EOF), failing after ``seconds``."""
    started = time.monotonic()
    data = await asyncio.wait_for(reader.read(), seconds)
    assert data == b"", data
    return time.monotonic() - started


async def test_a_connection_that_sends_no_complete_head_is_closed(port: int) -> None:
    silent = await asyncio.open_connection("127.0.0.1", port)
    half = await asyncio.open_connection("127.0.0.1", port)
    half[1].write(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    for reader, _ in (silent, half):
        assert await _closed_within(reader, 3.0) < 2.0


async def test_a_head_sent_byte_by_byte_must_still_finish_in_time(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    with pytest.raises(ConnectionError):
        for byte in b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.05)
            if reader.at_eof() or time.monotonic() - started > 5:
                raise ConnectionError
    assert time.monotonic() - started < 2.0


async def test_a_stalled_body_is_closed_and_a_slow_one_is_served(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
    assert await _closed_within(reader, 3.0) < 2.0
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
    for _ in range(10):  # 2 s in all, each pause well under the deadline
        await asyncio.sleep(0.2)
        writer.write(b"x")
    answer = await asyncio.wait_for(reader.read(4096), 3.0)
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"read 10")
    writer.close()


async def test_a_busy_handler_and_an_idle_keep_alive_are_not_cut(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for path in (b"/slow", b"/"):
        writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await asyncio.wait_for(reader.readuntil(b"read 0"), 5.0)
        assert answer.startswith(b"HTTP/1.1 200")
        await asyncio.sleep(1.0)  # idle between requests longer than the head deadline
    writer.close()


async def test_a_busy_handler_after_a_body_sent_in_pieces_is_not_cut(port: int) -> None:
    # The body's last bytes are not the start of the next request's head: the handler (busy longer than
    # both deadlines) still answers. CI found this as a 10 MB create cut off under load.
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n")
    for _ in range(3):
        await asyncio.sleep(0.1)
        writer.write(b"xx")
    answer = await asyncio.wait_for(reader.readuntil(b"read 6"), 5.0)
    assert answer.startswith(b"HTTP/1.1 200")
    writer.close()


async def test_one_address_holds_at_most_its_connections(port: int, _guarded: ConnectionLimits) -> None:
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(MAX_PER_ADDRESS)]
    await asyncio.sleep(0.1)
    assert _guarded.open == {"127.0.0.1": MAX_PER_ADDRESS}
    extra_reader, _ = await asyncio.open_connection("127.0.0.1", port)
    assert await _closed_within(extra_reader, 1.0) < 0.5  # refused before the head deadline
    held[0][1].close()
    await asyncio.sleep(0.1)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await asyncio.wait_for(reader.readuntil(b"read 0"), 3.0)).startswith(b"HTTP/1.1 200")
    for _, w in (*held[1:], (reader, writer)):
        w.close()
    await asyncio.sleep(1.5)
    assert _guarded.open == {}  # every connection gave its place back


# --- retrieve: bounds on what one request fans out into -------------------------------------------------


def _body(keys: list[Any]) -> dict[str, object]:
    return {"message": "hi", "spaceKeys": keys}


def test_space_keys_are_bounded_in_number() -> None:
    parse_post_body(_body([{"spaceId": _sid(i)} for i in range(MAX_SPACE_KEYS)]))
    with pytest.raises(BadRequest, match=r"spaceKeys lists 3000 spaces, more than the 50 .*max_space_keys"):
        parse_post_body(_body([{"spaceId": SID}] * 3000))
    with pytest.raises(BadRequest, match=r"spaceIds lists 51 spaces"):
        parse_get_query(MultiDict(message="hi", spaceIds=",".join(_sid(i) for i in range(51))))


def test_a_space_named_twice_is_refused() -> None:
    with pytest.raises(BadRequest, match=r"names space .* twice \(spaceKeys\[0\] and spaceKeys\[2\]\)"):
        parse_post_body(_body([{"spaceId": SID}, {"spaceId": _sid(1)}, {"spaceId": SID}]))
    with pytest.raises(BadRequest, match="twice"):
        RetrieveRequest(message="hi", space_keys=(SpaceKey(SID), SpaceKey(SID, filter="exists('$.a')")))


def test_filter_text_is_bounded_per_expression_and_per_request() -> None:
    clauses = " OR ".join(f"exists('$.k{i}')" for i in range(3000))
    long = clauses[: clauses.rindex(" OR ", 0, MAX_FILTER_CHARS)]
    assert MAX_FILTER_CHARS - 20 < len(long) <= MAX_FILTER_CHARS
    parse_filter(long)
    with pytest.raises(
        FilterError,
        match=r"longer than 32768 characters \(\d+\), the most a filter may have \(max_filter_chars\)",
    ):
        parse_filter(clauses * 4)
    # Under the per-request sum: one text repeated counts once (it is parsed once).
    parse_post_body(_body([{"spaceId": _sid(i), "filter": long} for i in range(8)]))
    distinct = [{"spaceId": _sid(i), "filter": long.replace("$.k", f"$.s{i}_")} for i in range(3)]
    with pytest.raises(BadRequest, match=rf"more than the {MAX_FILTER_CHARS_PER_REQUEST} .*per_request"):
        parse_post_body(_body(distinct))


class _NoSpaces(plan_module.Retriever):
    async def get_space(self, space_id: str) -> Container:
        raise NotFound(f"no space {space_id}")


async def test_filters_are_parsed_off_the_event_loop() -> None:
    """While a retrieve's 32 KiB of filters are parsed (then its spaces looked up), a ticker on the loop keeps
    ticking."""
    keys = []
    for i in range(3):
        clauses = [f"CAST(val('$.k{i}_{j}') AS TEXT) = 'v'" for j in range(560)]
        text = " AND ".join(clauses)
        while len(text) > MAX_FILTER_CHARS_PER_REQUEST // 3:
            text = text.rsplit(" AND ", 1)[0]
        keys.append(SpaceKey(_sid(i), filter=text))
    req = RetrieveRequest(message="hi", space_keys=tuple(keys))
    assert sum(len(k.filter or "") for k in keys) > 30_000
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    # As the server does at start-up (proxy.serve.worker): a full collection over the modules' objects would
    # otherwise pause every thread for a few hundred ms whenever the parse's garbage triggers one.
    gc.collect()
    gc.freeze()
    task = asyncio.create_task(ticker())
    started = time.perf_counter()
    try:
        with pytest.raises(NotFound):
            await _NoSpaces(None).plan(Principal("u"), req)  # type: ignore[arg-type]
    finally:
        gc.unfreeze()
    took = time.perf_counter() - started
    stop.set()
    await task
    assert took > 0.1, took  # real work was done...
    assert max(gaps) < 0.15, (max(gaps), took)  # ...and the loop was never held for long


# --- per-caller slots -----------------------------------------------------------------------------------


async def test_a_caller_over_its_slots_waits_then_gets_429_while_others_run() -> None:
    slots = CallerSlots("retrieves", 2, wait_s=0.2)
    release = asyncio.Event()

    async def hold(caller: str) -> None:
        async with slots.hold(caller):
            await release.wait()

    held = [asyncio.create_task(hold("a")) for _ in range(2)]
    await asyncio.sleep(0.01)
    assert slots.in_flight("a") == 2
    with pytest.raises(Overloaded, match=r"Too many retrieves of this caller at once: at most 2"):
        async with slots.hold("a"):
            pass
    async with slots.hold("b"):  # another caller is not made to wait
        assert slots.in_flight("b") == 1
    waiter = asyncio.create_task(hold("a"))  # waits for a's own slot, and gets it when one ends
    await asyncio.sleep(0.05)
    release.set()
    await asyncio.gather(*held, waiter)
    assert slots.in_flight("a") == 0 and not slots._slots
