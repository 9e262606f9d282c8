"""Several nodes, no node needed: the URL list, what may be sent again, the error mapping of a failover.

The store's failover runs against real local HTTP servers standing in for nodes (one that answers, one port
that refuses, one that drops the connection after reading the request), so the client library, the
connection pool and the resend decision are the real ones; ``tests/cluster/test_failover.py`` does the
same on a real 3-node cluster with a node killed.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from proxy.api.errors import render_error
from proxy.api.opensearch_memory.common import search_failures
from proxy.config import Settings, parse_settings, split_opensearch_urls
from proxy.errors import MemproxyError, Unavailable
from proxy.store.client import (
    IndexBlocked,
    NodeOverloaded,
    NodeUnavailable,
    OpenSearchError,
    SearchCancelled,
    Store,
    node_error,
    translate_error,
)
from proxy.store.failover import HostRing, may_resend
from tests.conftest import free_port

# --- the URL list -----------------------------------------------------------------------------------------


def test_several_urls_are_split_and_cleaned() -> None:
    hosts, user, password = split_opensearch_urls(" http://127.0.0.1:9400/ ,http://localhost:9401")
    assert hosts == ("http://127.0.0.1:9400", "http://localhost:9401")
    assert (user, password) == (None, None)
    settings = Settings(opensearch_url="http://a:b%40c@127.0.0.1:9400,http://127.0.0.1:9401")
    assert settings.opensearch_hosts == ("http://127.0.0.1:9400", "http://127.0.0.1:9401")
    assert settings.opensearch_url == "http://127.0.0.1:9400,http://127.0.0.1:9401"  # no credentials shown
    assert (settings.opensearch_username, settings.opensearch_password) == ("a", "b@c")


def test_one_url_behaves_as_before() -> None:
    settings = parse_settings(["--opensearch-url", "https://u:p@[::1]:9200/"], {})
    assert settings.opensearch_hosts == ("https://[::1]:9200",)
    assert settings.opensearch_username == "u"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("http://127.0.0.1:9400,https://127.0.0.1:9401", "same scheme"),
        ("http://a:b@127.0.0.1:9400,http://c:d@127.0.0.1:9401", "different credentials"),
        ("http://127.0.0.1:9400,,http://127.0.0.1:9401", "http(s)://host"),
        ("127.0.0.1:9400", "http(s)://host"),
    ],
)
def test_a_bad_url_list_stops_start_up_with_a_message(value: str, says: str) -> None:
    with pytest.raises(SystemExit, match="--opensearch-url") as caught:
        parse_settings(["--opensearch-url", value], {})
    assert says in str(caught.value)


# --- what may be sent again -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "endpoint", "path", "params", "body", "expected"),
    [
        ("GET", "_doc", "/i/_doc/1", None, None, True),
        ("POST", "_search", "/i/_search", None, {"query": {}}, True),
        ("POST", "_mget", "/i/_mget", None, {"ids": ["a"]}, True),
        ("PUT", "_doc", "/i/_doc/1", {"refresh": "true"}, {"a": 1}, True),
        ("PUT", "_doc", "/i/_doc/1", {"op_type": "create"}, {"a": 1}, False),
        ("PUT", "_doc", "/i/_doc/1", {"if_seq_no": 3, "if_primary_term": 1}, {"a": 1}, False),
        ("POST", "_doc", "/i/_doc", None, {"a": 1}, False),  # a new id each time
        ("POST", "_update", "/i/_update/1", None, {"doc": {"a": 1}}, True),
        ("POST", "_update", "/i/_update/1", None, {"script": {"source": "ctx._source.n++"}}, False),
        ("DELETE", "_doc", "/i/_doc/1", None, None, False),  # the second answers not_found
        ("POST", "_delete_by_query", "/i/_delete_by_query", None, {"query": {}}, False),
        ("PUT", "index", "/i", None, {}, False),
        ("POST", "_search", "/i/_search/point_in_time", None, None, False),
        ("POST", "_bulk", "/_bulk", None, '{"index":{"_index":"i","_id":"1"}}\n{"a":1}\n', True),
        ("POST", "_bulk", "/_bulk", None, '{"create":{"_index":"i","_id":"1"}}\n{"a":1}\n', False),
        ("POST", "_bulk", "/_bulk", None, '{"index":{"_index":"i"}}\n{"a":1}\n', False),
        ("POST", "_bulk", "/_bulk", None, '{"delete":{"_index":"i","_id":"1"}}\n', False),
        (
            "POST",
            "_bulk",
            "/_bulk",
            None,
            '{"index":{"_index":"i","_id":"1","if_seq_no":1,"if_primary_term":1}}\n{"a":1}\n',
            False,
        ),
    ],
)
def test_only_calls_that_are_the_same_twice_are_sent_again(
    method: str, endpoint: str, path: str, params: dict[str, Any] | None, body: Any, expected: bool
) -> None:
    assert may_resend(method, endpoint, path, params, body) is expected


def test_the_host_ring_takes_turns_and_skips_a_failed_host_until_its_time_out_ends() -> None:
    now = [0.0]
    ring = HostRing(["a", "b", "c"], clock=lambda: now[0])
    assert [ring.order()[0] for _ in range(3)] == ["a", "b", "c"]
    ring.failed("b")
    assert ring.order() == ["a", "c", "b"]  # the failed one last, not dropped: it may be the only one back
    assert ring.order() == ["c", "a", "b"]
    now[0] = 2.5
    ring.order()
    assert ring.order() == ["a", "b", "c"]  # its 2 s are over: back in its turn
    ring.failed("b")
    ring.failed("b")  # three in a row: 8 s
    now[0] = 9.0
    assert ring.order()[-1] == "b"
    ring.answered("b")
    assert ["a", "b", "c"] in [ring.order() for _ in range(3)]  # answered: in its turn again at once


# --- the error mapping ----------------------------------------------------------------------------------


def _cause(kind: str, reason: str = "r") -> dict[str, Any]:
    return {"root_cause": [{"type": kind, "reason": reason}], "type": kind, "reason": reason}


@pytest.mark.parametrize(
    ("status", "body", "cls", "expected"),
    [
        (503, _cause("unavailable_shards_exception"), NodeUnavailable, 503),
        (503, _cause("no_shard_available_action_exception"), NodeUnavailable, 503),
        (
            503,
            _cause("cluster_block_exception", "blocked by: [SERVICE_UNAVAILABLE/2/no cluster-manager]"),
            NodeUnavailable,
            503,
        ),
        (503, _cause("cluster_manager_not_discovered_exception"), NodeUnavailable, 503),
        (503, _cause("process_cluster_event_timeout_exception"), NodeUnavailable, 503),
        (429, _cause("rejected_execution_exception"), NodeOverloaded, 429),
        (429, _cause("circuit_breaking_exception"), NodeOverloaded, 429),
        (500, _cause("node_disconnected_exception"), NodeUnavailable, 503),
        (
            500,
            {**_cause("search_phase_execution_exception"), "caused_by": _cause("node_closed_exception")},
            NodeUnavailable,
            503,
        ),
        (403, _cause("cluster_block_exception", "index [i] blocked"), IndexBlocked, 503),
    ],
)
def test_failover_answers_are_retryable_with_retry_after(
    status: int, body: dict[str, Any], cls: type[OpenSearchError], expected: int
) -> None:
    err = node_error(status, body)
    assert type(err) is cls and err.status == expected
    assert int(err.headers["Retry-After"]) >= 1
    assert err.body == body  # relayed as the node wrote it


def test_an_ordinary_500_stays_a_500() -> None:
    err = node_error(500, _cause("illegal_state_exception"))
    assert err.status == 500 and "Retry-After" not in err.headers


# What the node answers when it cancels a search at ``cancel_after_time_interval`` (3.6.0, measured).
_CANCELLED = {
    "root_cause": [
        {
            "type": "task_cancelled_exception",
            "reason": "cancelled task with reason: Cancellation timeout of 30000ms is expired",
        }
    ],
    "type": "search_phase_execution_exception",
    "reason": "all shards failed",
    "phase": "query",
    "failed_shards": [
        {
            "shard": 0,
            "index": "i",
            "reason": {
                "type": "task_cancelled_exception",
                "reason": "cancelled task with reason: Cancellation timeout of 30000ms is expired",
            },
        }
    ],
}


def test_a_search_cancelled_at_the_deadline_is_504_with_retry_after() -> None:
    err = node_error(500, _CANCELLED)
    assert isinstance(err, SearchCancelled) and err.status == 504 and int(err.headers["Retry-After"]) >= 1
    assert "--search-timeout-s" in err.message and err.body == _CANCELLED


def test_a_search_cancelled_by_a_person_stays_a_500() -> None:
    body = _cause("task_cancelled_exception", "cancelled task with reason: by user request")
    assert type(node_error(500, body)) is OpenSearchError


@pytest.mark.parametrize(
    ("err", "status"),
    [
        (node_error(500, _CANCELLED), 504),
        (node_error(503, _cause("no_shard_available_action_exception")), 503),
        (node_error(429, _cause("rejected_execution_exception")), 429),
        (node_error(500, _cause("illegal_state_exception")), 500),
    ],
)
def test_semantic_search_keeps_retryable_statuses_and_wraps_the_rest(
    err: OpenSearchError, status: int
) -> None:
    with pytest.raises(MemproxyError) as raised, search_failures("Semantic search execution failed"):
        raise err
    assert raised.value.status == status
    if status == 500:  # ml-commons' wrapped execution failure
        assert raised.value.message.startswith("Semantic search execution failed: ")
    else:
        assert raised.value is err and raised.value.headers["Retry-After"]


def test_an_unreachable_node_is_503_with_retry_after() -> None:
    from opensearchpy import exceptions as os_exc

    err = translate_error(os_exc.ConnectionError("N/A", "refused", OSError("refused")))
    assert isinstance(err, Unavailable) and err.status == 503 and err.headers["Retry-After"]


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/_plugins/_ml/memory_containers/x/memories/long-term/_semantic_search", "opensearch"),
        ("/some-index/_search", "opensearch"),
        ("/v1/memories", "goodmem"),
    ],
)
def test_each_api_renders_a_failover_error_in_its_own_shape(path: str, shape: str) -> None:
    err = node_error(503, _cause("no_shard_available_action_exception", "no shard"))
    resp = render_error(make_mocked_request("POST", path), err)
    assert resp.status == 503 and resp.headers["Retry-After"] == err.headers["Retry-After"]
    assert isinstance(resp.body, bytes)
    body = json.loads(resp.body)
    if shape == "opensearch":
        assert body == {"error": err.body, "status": 503}
    else:
        assert body == {"error": "no shard", "status": 503}


# --- the store's failover, over real local servers --------------------------------------------------------


def _refusing_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Node:
    """A local HTTP server: ``answer`` replies JSON, ``drop`` closes the connection after reading."""

    def __init__(self, mode: str):
        self.mode = mode
        self.port = free_port()
        self.seen: list[str] = []
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(f"{request.method} {request.path}")
        await request.read()
        if self.mode == "drop":
            assert request.transport is not None
            request.transport.close()
            await asyncio.sleep(1)
        return web.json_response({"ok": True, "port": self.port})

    async def __aenter__(self) -> _Node:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


async def _store(*ports: int) -> AsyncIterator[Store]:
    store = Store(Settings(opensearch_url=",".join(f"http://127.0.0.1:{p}" for p in ports)))
    try:
        yield store
    finally:
        await store.close()


async def test_a_refused_node_is_skipped_for_any_call() -> None:
    async with _Node("answer") as live:
        async for store in _store(_refusing_port(), live.port):
            for _ in range(4):  # whichever node the pool picks first
                got = await store.request("POST", "/i/_doc", body={"a": 1})
                assert got["port"] == live.port
    assert len(live.seen) == 4


async def test_a_dropped_call_goes_again_only_when_it_is_the_same_twice() -> None:
    async with _Node("drop") as dropper, _Node("answer") as live:
        async for store in _store(dropper.port, live.port):
            outcomes = []
            for _ in range(4):
                before = len(live.seen)
                try:
                    await store.request("POST", "/i/_doc", body={"a": 1})  # a new id: not idempotent
                    outcomes.append("answered-by-live" if len(live.seen) > before else "?")
                except Unavailable as exc:
                    assert exc.headers["Retry-After"]
                    outcomes.append("503")
            # The dropping node saw some; none of those was sent again to the live node.
            assert outcomes.count("503") == len([s for s in dropper.seen if s == "POST /i/_doc"])
            assert "?" not in outcomes
    async with _Node("drop") as dropper, _Node("answer") as live:
        async for store in _store(dropper.port, live.port):
            for _ in range(4):
                got = await store.request("PUT", "/i/_doc/1", body={"a": 1})  # named id: idempotent
                assert got["port"] == live.port
