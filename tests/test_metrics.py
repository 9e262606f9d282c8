"""/metrics, request ids and JSON logs (docs/observability.md), end to end and in their pure parts.

The node tests start their own memproxy (``--log-format json``) whose cluster URL is a recording relay
(:class:`RecordingRelay`): a TCP relay that forwards every byte unchanged both ways and, on the side, parses
the proxy→node stream with h11 to keep each request's target and headers. That is how the tests see what
reached the node (``X-Opaque-Id``) without replacing anything between memproxy and OpenSearch. The relay can
also be cut for a moment (connections closed as data arrives), which makes the proxy answer 503 and log a
warning: the request-bound log line the JSON-log test reads.

The counters are asserted as exact differences between two scrapes of the test's own proxy, which nobody
else calls: the requests the test made, and nothing else.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import socket
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import h11
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.config import parse_settings
from proxy.core.cache import TtlCache
from proxy.core.metrics import Metrics
from proxy.observability import (
    JsonFormatter,
    RequestIdFilter,
    TextFormatter,
    accept_request_id,
    configure_logging,
    current_request_id,
    is_valid_request_id,
)
from proxy.store.client import endpoint_of
from tests.conftest import ProxyProcess
from tests.goodmem_helpers import root_api_key

MEMORY_TEXT = "the lighthouse keeper feeds seven grey cats every evening"

# --- the recording relay ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One request that crossed the relay towards the node."""

    method: str
    target: str
    headers: dict[str, str]  # names lower-cased


class RecordingRelay:
    """A TCP relay to the node that forwards bytes unchanged and records the requests' heads."""

    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.seen: list[Seen] = []
        self.cut = threading.Event()  # set: close every connection that sends anything
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def requests_with_opaque_id(self, opaque_id: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.headers.get("x-opaque-id") == opaque_id]

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                _close(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._upstream)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, towards_node: bool) -> None:
        parser: h11.Connection | None = h11.Connection(h11.SERVER) if towards_node else None
        try:
            while True:
                data = source.recv(65536)
                if not data or self.cut.is_set():
                    break
                sink.sendall(data)
                if parser is not None:
                    try:
                        parser = self._parse(parser, data)
                    except h11.RemoteProtocolError:
                        parser = None  # not HTTP h11 can follow: still relayed, no longer recorded
        except OSError:
            pass  # the other pump closed the pair: the connection is over either way
        finally:
            _close(source)
            _close(sink)

    def _parse(self, parser: h11.Connection, data: bytes) -> h11.Connection:
        parser.receive_data(data)
        while True:
            event = parser.next_event()
            if event is h11.NEED_DATA:
                return parser
            if isinstance(event, h11.Request):
                headers = {k.decode().lower(): v.decode() for k, v in event.headers}
                with self._lock:
                    self.seen.append(Seen(event.method.decode(), event.target.decode(), headers))
            elif isinstance(event, h11.EndOfMessage):
                # h11 plays the server and never answers, so each request gets a fresh parser that starts
                # from whatever followed this one (keep-alive).
                rest, _ = parser.trailing_data
                parser = h11.Connection(h11.SERVER)
                if rest:
                    parser.receive_data(rest)
            elif event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                return parser


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # never connected, or already shut: closing is all that is left
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


# --- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def relay(opensearch_url: str) -> Iterator[RecordingRelay]:
    r = RecordingRelay(opensearch_url)
    yield r
    r.close()


@pytest.fixture(scope="module")
def observed(relay: RecordingRelay) -> Iterator[ProxyProcess]:
    """memproxy with JSON logs, reaching the node through the relay; only this module calls it."""
    p = ProxyProcess(relay.url, extra_args=["--log-format", "json"])
    yield p
    p.stop()


@pytest.fixture(scope="module")
def key(observed: ProxyProcess, opensearch_url: str) -> str:
    return root_api_key(observed.url, opensearch_url)


@pytest.fixture(scope="module")
def api(observed: ProxyProcess, key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=observed.url, headers={"x-api-key": key}, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def space_id(api: httpx.Client) -> Iterator[str]:
    embedder = api.get("/v1/embedders").json()["embedders"][0]["embedderId"]
    created = api.post(
        "/v1/spaces",
        json={"name": f"metrics-{uuid.uuid4().hex[:8]}", "spaceEmbedders": [{"embedderId": embedder}]},
    )
    assert created.status_code == 201, created.text
    yield created.json()["spaceId"]
    api.delete(f"/v1/spaces/{created.json()['spaceId']}")


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str, headers: dict[str, str] | None = None) -> tuple[str, Samples]:
    resp = httpx.get(url + "/metrics", headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return resp.text, samples


def series(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def delta(before: Samples, after: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """What each series of ``name`` gained between two scrapes (series that did not move left out)."""
    old = series(before, name)
    return {k: v - old.get(k, 0.0) for k, v in series(after, name).items() if v != old.get(k, 0.0)}


def labels(**kw: str) -> frozenset[tuple[str, str]]:
    return frozenset(kw.items())


def total(samples: Samples, name: str) -> float:
    return sum(series(samples, name).values())


# --- /metrics ---------------------------------------------------------------------------------------------

ML_SEARCH = "/_plugins/_ml/memory_containers/{memory_container_id}/memories/long-term/_semantic_search"


def test_metrics_count_exactly_the_requests_made(
    observed: ProxyProcess, api: httpx.Client, key: str, space_id: str
) -> None:
    admin = {"x-api-key": key}
    _, before = scrape(observed.url, admin)

    memory = api.post("/v1/memories", json={"spaceId": space_id, "originalContent": MEMORY_TEXT})
    assert memory.status_code == 201, memory.text
    memory_id = memory.json()["memoryId"]
    retrieve = api.post(
        "/v1/memories:retrieve", json={"message": "who feeds the cats", "spaceKeys": [{"spaceId": space_id}]}
    )
    assert retrieve.status_code == 200 and MEMORY_TEXT in retrieve.text
    search = api.post(
        f"/_plugins/_ml/memory_containers/{space_id}/memories/long-term/_semantic_search",
        json={"query": "cats", "k": 3},
    )
    assert search.status_code == 200 and MEMORY_TEXT in search.text
    missing = api.get(f"/v1/spaces/{uuid.uuid4()}")
    assert missing.status_code == 404
    cat = api.get("/_cat/indices", params={"h": "index"})
    assert cat.status_code == 200

    text, after = scrape(observed.url, admin)
    assert delta(before, after, "memproxy_http_requests_total") == {
        labels(route="/metrics", method="GET", status="200"): 1,  # the first scrape
        labels(route="/v1/memories", method="POST", status="201"): 1,
        labels(route="/v1/memories:retrieve", method="POST", status="200"): 1,
        labels(route=ML_SEARCH, method="POST", status="200"): 1,
        labels(route="/v1/spaces/{id}", method="GET", status="404"): 1,
        labels(route="passthrough", method="GET", status="200"): 1,
    }
    # One observation per request in the latency histogram, under its API and operation.
    assert delta(before, after, "memproxy_http_request_duration_seconds_count") == {
        labels(api="memproxy", operation="GET /metrics"): 1,
        labels(api="goodmem", operation="POST /v1/memories"): 1,
        labels(api="goodmem", operation="POST /v1/memories:retrieve"): 1,
        labels(api="ml-commons", operation=f"POST {ML_SEARCH}"): 1,
        labels(api="goodmem", operation="GET /v1/spaces/{id}"): 1,
        labels(api="passthrough", operation="GET passthrough"): 1,
    }
    durations = delta(before, after, "memproxy_http_request_duration_seconds_sum")
    assert durations[labels(api="goodmem", operation="POST /v1/memories:retrieve")] > 0
    inf = delta(before, after, "memproxy_http_request_duration_seconds_bucket")
    assert inf[labels(api="goodmem", operation="POST /v1/memories", le="+Inf")] == 1

    # Embedding: the memory's text and two queries were embedded (and the warm-up before them).
    for name in ("memproxy_embed_texts_total", "memproxy_embed_tokens_total", "memproxy_embed_batches_total"):
        assert total(after, name) > 0
    assert total(after, "memproxy_embed_texts_total") - total(before, "memproxy_embed_texts_total") >= 3
    assert total(after, "memproxy_embed_tokens_total") - total(before, "memproxy_embed_tokens_total") >= 3 * 3
    assert total(after, "memproxy_embed_batch_size_count") > total(before, "memproxy_embed_batch_size_count")
    assert series(after, "memproxy_embed_queue_texts")  # present (and 0 when idle)
    # OpenSearch calls: searches and document writes, timed; the 404 space look-up is a node 404.
    calls = delta(before, after, "memproxy_opensearch_request_duration_seconds_count")
    endpoints = {dict(k)["endpoint"] for k in calls}
    assert {"_search", "_bulk"} <= endpoints or {"_search", "_doc"} <= endpoints, endpoints
    assert total(after, "memproxy_opensearch_request_duration_seconds_sum") > 0
    # Caches: every keyed request looked its key up.
    cache_moves = sum(delta(before, after, "memproxy_cache_hits_total").values()) + sum(
        delta(before, after, "memproxy_cache_misses_total").values()
    )
    assert cache_moves >= 5
    # Jobs: counted by state from the cluster at scrape time.
    assert after[("memproxy_jobs_counts_ok", frozenset())] == 1
    assert {dict(k)["state"] for k in series(after, "memproxy_jobs")} == {
        "PENDING",
        "RUNNING",
        "COMPLETED",
        "FAILED",
    }
    # Nothing secret or unbounded: no key, no text, no id from a path or a body.
    for secret in (key, MEMORY_TEXT, "lighthouse", space_id, memory_id, "h=index"):
        assert secret not in text


def test_metrics_need_an_administrator(observed: ProxyProcess, api: httpx.Client) -> None:
    anonymous = httpx.get(observed.url + "/metrics")
    assert anonymous.status_code == 401
    assert "memproxy_" not in anonymous.text
    user = api.post(
        "/v1/users", json={"email": f"m-{uuid.uuid4().hex[:8]}@example.com", "displayName": "Metrics reader"}
    )
    assert user.status_code in (200, 201), user.text
    issued = api.post("/v1/apikeys", json={"subjectPrincipalId": user.json()["userId"]})
    assert issued.status_code in (200, 201), issued.text
    forbidden = httpx.get(observed.url + "/metrics", headers={"x-api-key": issued.json()["rawApiKey"]})
    assert forbidden.status_code == 403
    assert "memproxy_" not in forbidden.text


def test_metrics_public_flag_opens_the_scrape(opensearch_url: str) -> None:
    public = ProxyProcess(opensearch_url, extra_args=["--metrics-public"])
    try:
        httpx.get(public.url + "/_memproxy/health", timeout=30)
        _, samples = scrape(public.url)  # no credential at all
        assert (
            series(samples, "memproxy_http_requests_total")[
                labels(route="/_memproxy/health", method="GET", status="200")
            ]
            >= 1
        )
        # Opening /metrics opens nothing else.
        assert httpx.get(public.url + "/v1/spaces", timeout=30).status_code == 401
    finally:
        public.stop()


# --- request ids ------------------------------------------------------------------------------------------


def test_request_ids_are_echoed_made_or_replaced(
    observed: ProxyProcess, api: httpx.Client, space_id: str
) -> None:
    given = f"trace-{uuid.uuid4().hex}"
    assert api.get("/v1/spaces", headers={"X-Request-Id": given}).headers["x-request-id"] == given
    made = api.get("/v1/spaces").headers["x-request-id"]
    assert len(made) == 32 and int(made, 16) >= 0
    assert api.get("/v1/spaces").headers["x-request-id"] != made
    # An error rendered by the error middleware, a streamed answer and a forwarded one carry it too.
    error = api.get(f"/v1/spaces/{uuid.uuid4()}", headers={"X-Request-Id": given})
    assert error.status_code == 404 and error.headers["x-request-id"] == given
    stream = api.post(
        "/v1/memories:retrieve",
        json={"message": "cats", "spaceKeys": [{"spaceId": space_id}]},
        headers={"X-Request-Id": given},
    )
    assert stream.headers.get("transfer-encoding") == "chunked" and stream.headers["x-request-id"] == given
    forwarded = api.get("/_cat/health", headers={"X-Request-Id": given})
    assert forwarded.status_code == 200 and forwarded.headers["x-request-id"] == given
    unauthenticated = httpx.get(observed.url + "/v1/spaces", headers={"X-Request-Id": given})
    assert unauthenticated.status_code == 401 and unauthenticated.headers["x-request-id"] == given
    # Unusable ids are replaced by fresh ones (never refused for it).
    for bad in ("has space", "x" * 129, "tab\there"):
        resp = api.get("/v1/spaces", headers={"X-Request-Id": bad})
        assert resp.status_code == 200
        assert resp.headers["x-request-id"] != bad and len(resp.headers["x-request-id"]) == 32
    # Bytes that are not UTF-8: the input guard's 400 still carries a fresh id.
    raw = api.get("/v1/spaces", headers={b"X-Request-Id": b"caf\xe9"})
    assert raw.status_code == 400 and len(raw.headers["x-request-id"]) == 32


def test_request_id_reaches_the_node_as_x_opaque_id(
    api: httpx.Client, relay: RecordingRelay, space_id: str
) -> None:
    goodmem = f"gm-{uuid.uuid4().hex}"
    assert api.get(f"/v1/spaces/{space_id}", headers={"X-Request-Id": goodmem}).status_code == 200
    ml = f"ml-{uuid.uuid4().hex}"
    search = api.post(
        f"/_plugins/_ml/memory_containers/{space_id}/memories/long-term/_semantic_search",
        json={"query": "cats"},
        headers={"X-Request-Id": ml},
    )
    assert search.status_code == 200
    forwarded = f"pt-{uuid.uuid4().hex}"
    assert api.get("/_cat/indices", headers={"X-Request-Id": forwarded}).status_code == 200
    own_request, own_opaque = f"pt-{uuid.uuid4().hex}", f"caller-{uuid.uuid4().hex}"
    headers = {"X-Request-Id": own_request, "X-Opaque-Id": own_opaque}
    assert api.get("/_cat/indices", headers=headers).status_code == 200

    assert relay.requests_with_opaque_id(goodmem), "the GoodMem request's node calls carry its id"
    assert any("_search" in s.target for s in relay.requests_with_opaque_id(ml))
    # A metadata view is forwarded onto the public indices, after memproxy resolved them: both carry the id.
    view = "/_cat/indices/" + ",".join(
        ("*", "-memproxy-goodmem-*", "-memproxy-jobs*", "-memproxy-models*", "-memproxy-settings*")
    )
    view += ",-.plugins-ml-am-memory-container"
    targets = [s.target for s in relay.requests_with_opaque_id(forwarded)]
    assert targets[-1] == view and all(t.startswith("/_resolve/index/") for t in targets[:-1]), targets
    # The caller's own X-Opaque-Id is forwarded as it was sent; the request id does not replace it.
    assert [s.target for s in relay.requests_with_opaque_id(own_opaque)][-1:] == [view]
    # memproxy's own check of the view carries the request id; the forwarded request never does
    assert all(s.target.startswith("/_resolve/index/") for s in relay.requests_with_opaque_id(own_request))
    # Work done for no request (the job poller) carries none.
    with relay._lock:
        assert any("x-opaque-id" not in s.headers for s in relay.seen)


# --- JSON logs --------------------------------------------------------------------------------------------


def test_json_log_lines_carry_the_request_id(
    observed: ProxyProcess, api: httpx.Client, relay: RecordingRelay
) -> None:
    request_id = f"log-{uuid.uuid4().hex}"
    time.sleep(2.5)  # past the key cache's TTL, so the request needs the node from its first step
    relay.cut.set()
    try:
        resp = api.get("/v1/spaces", headers={"X-Request-Id": request_id})
    finally:
        relay.cut.clear()
    assert resp.status_code == 503 and resp.headers["x-request-id"] == request_id
    deadline = time.monotonic() + 10
    mine: list[dict[str, Any]] = []
    while not mine and time.monotonic() < deadline:
        records = [json.loads(line) for line in observed.log().splitlines() if line.startswith("{")]
        mine = [r for r in records if r.get("request_id") == request_id]
        time.sleep(0.2)
    assert mine, observed.log()[-3000:]
    assert mine[0]["level"] == "WARNING" and "503" in mine[0]["message"]
    for record in records:
        assert {"time", "level", "logger", "message"} <= record.keys()
    # Records logged outside a request (start-up) have no request_id at all.
    assert any("request_id" not in r for r in records)
    assert api.get("/v1/spaces").status_code == 200  # the relay carries traffic again


# --- the pure parts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("a", True),
        ("0af3-x_y.z:1/2", True),
        ("~" * 128, True),
        ("", False),
        ("x" * 129, False),
        ("has space", False),
        ("tab\t", False),
        ("new\nline", False),
        ("caf\u00e9", False),
        ("nul\x00", False),
        ("del\x7f", False),
    ],
)
def test_request_id_validation(value: str, valid: bool) -> None:
    assert is_valid_request_id(value) is valid
    accepted = accept_request_id(value)
    if valid:
        assert accepted == value
    else:
        assert accepted != value and len(accepted) == 32 and int(accepted, 16) >= 0


def test_a_missing_request_id_is_made() -> None:
    first, second = accept_request_id(None), accept_request_id(None)
    assert first != second and is_valid_request_id(first)


def _record(message: str, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom\nsecond line")
        except ValueError:
            exc_info = sys.exc_info()
    record = logging.LogRecord("proxy.test", logging.WARNING, __file__, 1, message, ("x",), exc_info)
    RequestIdFilter().filter(record)
    return record


def test_json_formatter_writes_one_object_per_line() -> None:
    token = current_request_id.set("rid-1")
    try:
        line = JsonFormatter().format(_record("hello %s\nworld", exc=True))
    finally:
        current_request_id.reset(token)
    assert "\n" not in line
    out = json.loads(line)
    assert out["level"] == "WARNING" and out["logger"] == "proxy.test"
    assert out["message"] == "hello x\nworld" and out["request_id"] == "rid-1"
    assert out["exception"].startswith("Traceback") and "ValueError: boom" in out["exception"]
    assert out["time"].endswith("+00:00")
    plain = json.loads(JsonFormatter().format(_record("outside %s")))
    assert "request_id" not in plain and "exception" not in plain


def test_text_formatter_tags_the_request() -> None:
    token = current_request_id.set("rid-2")
    try:
        inside = TextFormatter().format(_record("in %s"))
    finally:
        current_request_id.reset(token)
    assert inside.endswith("WARNING proxy.test request_id=rid-2: in x")
    assert TextFormatter().format(_record("out %s")).endswith("WARNING proxy.test: out x")


def test_configure_logging_installs_the_format() -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    stream = io.StringIO()
    try:
        configure_logging("info", "json", stream)
        logging.getLogger("proxy.test").info("configured")
        assert json.loads(stream.getvalue().splitlines()[-1])["message"] == "configured"
        warnings.warn("a library's notice", UserWarning, stacklevel=1)
        warned = json.loads(stream.getvalue().splitlines()[-1])
        assert warned["logger"] == "py.warnings" and "a library's notice" in warned["message"]
        with pytest.raises(ValueError):
            configure_logging("info", "xml", stream)
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        logging.captureWarnings(False)


def test_flags() -> None:
    assert parse_settings([]).log_format == "text" and parse_settings([]).metrics_public is False
    assert parse_settings(["--log-format", "json"]).log_format == "json"
    assert parse_settings(["--metrics-public"]).metrics_public is True
    assert parse_settings(["--metrics-public", "false"]).metrics_public is False
    assert parse_settings([], {"MEMPROXY_METRICS_PUBLIC": "yes"}).metrics_public is True
    with pytest.raises(SystemExit):
        parse_settings(["--log-format", "xml"])


def test_opensearch_endpoint_labels_are_bounded() -> None:
    assert endpoint_of("/my-index/_doc/_looks_like_an_api") == "_doc"
    assert endpoint_of("/_cluster/health") == "_cluster"
    assert endpoint_of("/memproxy-goodmem-spaces") == "index"
    assert endpoint_of("/idx/_search?q=_secret") == "_search"
    assert endpoint_of("/idx/_Weird%20Thing") == "other"


async def test_cache_counts_hits_and_misses() -> None:
    cache: TtlCache[str, int] = TtlCache(60)

    async def load() -> int:
        return 7

    assert await cache.get("k", load) == 7 and await cache.get("k", load) == 7
    await cache.get("other", load)
    assert (cache.hits, cache.misses) == (1, 2)
    off: TtlCache[str, int] = TtlCache(0)
    await off.get("k", load)
    await off.get("k", load)
    assert (off.hits, off.misses) == (0, 2)


def test_store_calls_are_observed_without_labels_from_paths() -> None:
    metrics = Metrics()
    metrics.observe_store_call("GET", "_doc", 0.02, None)
    metrics.observe_store_call("GET", "_doc", 0.5, "4xx")
    metrics.observe_store_call("POST", "_search", 1.5, "ConnectionError")
    samples: Samples = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    count = series(samples, "memproxy_opensearch_request_duration_seconds_count")
    assert count == {labels(method="GET", endpoint="_doc"): 2, labels(method="POST", endpoint="_search"): 1}
    assert series(samples, "memproxy_opensearch_errors_total") == {
        labels(method="GET", endpoint="_doc", error="4xx"): 1,
        labels(method="POST", endpoint="_search", error="ConnectionError"): 1,
    }
    # Two applications in one process count separately (per-application registries).
    assert b"memproxy_opensearch_errors_total{" not in Metrics().render()
