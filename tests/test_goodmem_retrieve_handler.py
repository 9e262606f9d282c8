"""GoodMem retrieve handler in-process: framing on the wire, deadlines, terminal records, disconnects.

The real handler, authentication and error middleware run in an aiohttp test server. The application's
``Retriever`` (planning and memory loading) is a fake whose timing the tests control, and its store a fake
node that knows one API key. That makes the time-dependent behaviours (504 before the first byte, in-band
deadline after it, cancellation on disconnect) deterministic; the end-to-end tests cover the same handler
against the real node.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.api.errors import error_middleware
from proxy.api.goodmem import retrieve as handler
from proxy.api.goodmem.state import GOODMEM, RETRIEVER
from proxy.api.goodmem.streaming import QUEUE_FLUSH_BYTES
from proxy.api.identity import identity_middleware
from proxy.app_keys import IDENTITY, SETTINGS
from proxy.config import Settings
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.records import MemoryRecord
from proxy.core.goodmem.retrieve import RankedChunk, RetrievalPlan, Retriever, RetrieveRequest
from proxy.core.identity import Principal, hash_key
from proxy.core.services import Services
from tests.goodmem_helpers import memory_record

S1 = "0192f6a0-0000-7000-8000-000000000001"
BODY = {"message": "q", "spaceKeys": [{"spaceId": S1}]}
API_KEY = "gm_handler-test"
AUTH = {"x-api-key": API_KEY}


class KeyNode:
    """The node as authentication sees it: one active key of one user."""

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method == "GET" and path == f"/memproxy-goodmem-apikeys/_doc/{hash_key(API_KEY)}":
            doc = {"user_id": "u", "api_key_id": "k", "status": "ACTIVE", "last_used_at": 1 << 62}
            return {"found": True, "_source": doc}
        if method == "GET" and path == "/memproxy-goodmem-users/_doc/u":
            return {"found": True, "_source": {"user_id": "u", "roles": ["USER"]}}
        raise AssertionError(f"unexpected node call {method} {path}")


def record(mid: str) -> MemoryRecord:
    return memory_record(mid, S1, actor="u")


def items(n: int) -> list[RankedChunk]:
    return [
        RankedChunk(
            f"c{i}", f"m{i}", S1, 1 - i / 100, {"memory": f"t{i}", "memory_id": f"m{i}", "owner_id": "u"}
        )
        for i in range(n)
    ]


class Fakes(Retriever):
    """Planning and loading whose timing the test sets; both record their cancellation."""

    def __init__(self, gm: GoodMem) -> None:
        super().__init__(gm)
        self.plan_delay = 0.0
        self.load_delay = 0.0
        self.n_items = 3
        self.cancelled = asyncio.Event()
        self.plan_started = asyncio.Event()
        self.load_started = asyncio.Event()
        self.load_finished = False

    async def plan(self, principal: Principal, req: RetrieveRequest) -> RetrievalPlan:
        assert principal.user_id == "u"
        self.plan_started.set()
        try:
            await asyncio.sleep(self.plan_delay)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return RetrievalPlan(request=req, items=items(self.n_items), result_set_id="R1")

    async def load(
        self, memory_ids: list[str], spaces: Mapping[str, str] | None = None
    ) -> dict[str, MemoryRecord]:
        self.load_started.set()
        try:
            await asyncio.sleep(self.load_delay)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        self.load_finished = True
        return {i: record(i) for i in memory_ids}


@pytest.fixture()
async def fakes() -> Fakes:
    return Fakes(GoodMem.create(Services(store=cast(Any, KeyNode()), embedders=cast(Any, None))))


class Server(TestServer):
    """``TestServer`` forces aiohttp's ``handler_cancellation=True``; ``python -m proxy`` runs with the
    default (False), where only the handler's own disconnect watcher can stop the work. Test both."""

    def __init__(self, app: web.Application, *, handler_cancellation: bool) -> None:
        super().__init__(app)
        self._cancel_handlers = handler_cancellation

    async def _make_runner(self, **kwargs: Any) -> web.BaseRunner:
        kwargs["handler_cancellation"] = self._cancel_handlers
        return await super()._make_runner(**kwargs)


@pytest.fixture(params=[False, True], ids=["watcher", "aiohttp-cancels"])
async def base_url(fakes: Fakes, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    app = web.Application(middlewares=[error_middleware, identity_middleware])
    app[SETTINGS] = Settings()
    app[IDENTITY] = fakes.gm.identity
    app[GOODMEM] = fakes.gm
    app[RETRIEVER] = fakes
    app.add_routes(handler.routes)
    server = Server(app, handler_cancellation=request.param)
    await server.start_server()
    yield str(server.make_url("/v1/memories:retrieve"))
    await server.close()


async def post(
    url: str, *, headers: dict[str, str] | None = None, body: Any = BODY
) -> tuple[int, Any, bytes]:
    headers = {**AUTH, **(headers or {})}
    async with aiohttp.ClientSession() as session, session.post(url, json=body, headers=headers) as resp:
        return resp.status, resp.headers, await resp.read()


def lines(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


def sse_frames(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in raw.decode().split("\n\n"):
        if not frame.strip():
            continue
        event_line, data_line = frame.split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: ")
        out.append((event_line[7:], json.loads(data_line[6:])))
    return out


async def test_ndjson_default_framing(base_url: str) -> None:
    status, headers, raw = await post(base_url)
    assert status == 200
    assert headers["Content-Type"].startswith("application/x-ndjson")
    assert headers.get("Transfer-Encoding") == "chunked"
    assert "GoodMem-Stream-Terminal" not in headers
    assert raw.endswith(b"\n")
    events = lines(raw)
    assert [next(iter(e)) for e in events][:3] == ["resultSetBoundary", "memoryDefinition", "retrievedItem"]
    assert events[-1] == {"resultSetBoundary": {"resultSetId": "R1", "kind": "END", "stageName": ""}}


async def test_ndjson_terminal_record_opt_in(base_url: str) -> None:
    status, headers, raw = await post(base_url, headers={"GoodMem-Stream-Terminal": "true"})
    assert status == 200 and headers["GoodMem-Stream-Terminal"] == "true"
    assert lines(raw)[-1] == {"type": "completed"}


async def test_sse_framing_and_close(base_url: str) -> None:
    status, headers, raw = await post(base_url, headers={"Accept": "text/event-stream"})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    frames = sse_frames(raw)
    assert all(name == "item" for name, _ in frames[:-1])
    assert frames[-1] == ("close", {"type": "completed"})
    assert len(frames) == 1 + 2 * 3 + 1 + 1


@pytest.mark.parametrize("value", ["0", "abc", "1.5", "86400001", "-1"])
async def test_bad_timeout_header_is_400(base_url: str, value: str) -> None:
    status, headers, raw = await post(base_url, headers={"GoodMem-Timeout-Ms": value})
    assert status == 400 and headers["Content-Type"].startswith("application/json")
    body = json.loads(raw)
    assert body["status"] == 400 and "GoodMem-Timeout-Ms" in body["error"]


async def test_deadline_before_first_byte_is_504(base_url: str, fakes: Fakes) -> None:
    fakes.plan_delay = 5
    status, _, raw = await post(base_url, headers={"GoodMem-Timeout-Ms": "100"})
    assert status == 504
    assert json.loads(raw)["status"] == 504 and "Deadline exceeded" in json.loads(raw)["error"]
    await asyncio.wait_for(fakes.cancelled.wait(), 1)


@pytest.mark.parametrize("terminal", [False, True])
async def test_deadline_after_first_byte_is_in_band_ndjson(
    base_url: str, fakes: Fakes, terminal: bool
) -> None:
    fakes.load_delay = 5
    headers = {"GoodMem-Timeout-Ms": "200"}
    if terminal:
        headers["GoodMem-Stream-Terminal"] = "true"
    status, _, raw = await post(base_url, headers=headers)
    assert status == 200
    events = lines(raw)
    assert events[0]["resultSetBoundary"]["kind"] == "BEGIN"
    assert events[1]["status"]["code"] == "MEMORY_LOAD_FAILED"
    assert events[1]["status"]["details"] == {"reason": "DEADLINE_EXCEEDED"}
    # No END: the result set is visibly incomplete.
    assert not any(e.get("resultSetBoundary", {}).get("kind") == "END" for e in events)
    if terminal:
        assert events[-1]["type"] == "error" and events[-1]["code"] == "DEADLINE_EXCEEDED"
    else:
        assert len(events) == 2
    assert fakes.cancelled.is_set()


async def test_deadline_after_first_byte_sse_error_frame(base_url: str, fakes: Fakes) -> None:
    fakes.load_delay = 5
    status, _, raw = await post(
        base_url, headers={"GoodMem-Timeout-Ms": "200", "Accept": "text/event-stream"}
    )
    assert status == 200
    frames = sse_frames(raw)
    assert frames[-1][0] == "error" and frames[-1][1]["code"] == "DEADLINE_EXCEEDED"
    assert ("close", {"type": "completed"}) not in frames


async def test_events_are_flushed_as_produced(base_url: str, fakes: Fakes) -> None:
    # The BEGIN boundary must reach the client while the memory load is still pending.
    fakes.load_delay = 300
    async with aiohttp.ClientSession(headers=AUTH) as session, session.post(base_url, json=BODY) as resp:
        first = await asyncio.wait_for(resp.content.readline(), 30)
        assert json.loads(first)["resultSetBoundary"]["kind"] == "BEGIN"
        assert not fakes.load_finished


async def test_events_produced_together_leave_in_one_write(
    base_url: str, fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is ready together is one write: without memory loads the whole body goes with the end of the
    stream; with them, what came before the load is one write and the rest goes with the end."""
    writes: list[int] = []
    real_write = web.StreamResponse.write

    async def counting(self: web.StreamResponse, data: bytes | bytearray | memoryview) -> None:
        writes.append(len(data))
        await real_write(self, data)

    monkeypatch.setattr(web.StreamResponse, "write", counting)
    fakes.n_items = 5
    status, _, raw = await post(base_url, body={**BODY, "fetchMemory": False})
    assert status == 200 and len(lines(raw)) == 7  # BEGIN, five items, END
    assert writes == []
    status, _, raw = await post(base_url, body=BODY)
    assert status == 200 and len(lines(raw)) == 12  # and a definition per memory
    assert len(writes) == 1  # BEGIN, flushed before the load
    # A large answer is not held whole: the queue is written each time it reaches QUEUE_FLUSH_BYTES.
    writes.clear()
    fakes.n_items = 600
    status, _, raw = await post(base_url, body={**BODY, "fetchMemory": False})
    assert status == 200 and len(lines(raw)) == 602
    assert len(raw) > 2 * QUEUE_FLUSH_BYTES and len(writes) >= 2
    assert all(QUEUE_FLUSH_BYTES <= n < QUEUE_FLUSH_BYTES + 1024 for n in writes)


async def test_disconnect_before_first_byte_cancels_work(base_url: str, fakes: Fakes) -> None:
    fakes.plan_delay = 300

    async def call() -> None:
        await post(base_url)

    task = asyncio.create_task(call())
    await asyncio.wait_for(fakes.plan_started.wait(), 30)  # the request reached the handler
    task.cancel()
    await asyncio.wait_for(fakes.cancelled.wait(), 30)


async def test_disconnect_mid_stream_cancels_work(base_url: str, fakes: Fakes) -> None:
    fakes.load_delay = 300
    async with aiohttp.ClientSession(headers=AUTH) as session:
        resp = await session.post(base_url, json=BODY)
        await asyncio.wait_for(resp.content.readline(), 30)
        await asyncio.wait_for(fakes.load_started.wait(), 30)
        resp.close()
    await asyncio.wait_for(fakes.cancelled.wait(), 30)
    assert not fakes.load_finished


async def test_validation_error_has_goodmem_body(base_url: str) -> None:
    status, _, raw = await post(base_url, body={"message": "q", "spaceKeys": [], "requestedSize": 1})
    assert status == 400 and json.loads(raw) == {
        "error": "spaceKeys is required and must list at least one space",
        "status": 400,
    }
    status, _, raw = await post(base_url, body=None)
    assert status == 400


async def test_get_form_over_http(base_url: str) -> None:
    url = f"{base_url}?message=hi+there&spaceIds={S1}&requestedSize=2&pp_max_results=3"
    async with (
        aiohttp.ClientSession(headers=AUTH) as session,
        session.get(url, headers={"Accept": "text/event-stream"}) as r,
    ):
        raw = await r.read()
    frames = sse_frames(raw)
    statuses = [data["status"]["code"] for _, data in frames if "status" in data]
    assert statuses == ["FEATURE_DISABLED", "FEATURE_DISABLED"]
    assert frames[-1][0] == "close"


@pytest.mark.parametrize("raw", [b"", b"{not json", b"\xff\xfe{}", b"[1]"])
async def test_malformed_bodies_are_400(base_url: str, raw: bytes) -> None:
    headers = {**AUTH, "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session, session.post(base_url, data=raw, headers=headers) as resp:
        assert resp.status == 400
        assert (await resp.json())["status"] == 400
