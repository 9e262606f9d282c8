"""GoodMem ping (``POST /v1/ping:once``, ``POST /v1/ping:stream``) for real: the real proxy and node, the real
``goodmem`` 0.1.43 SDK and raw HTTP, probing the real local embedder, a registered TEI reranker
(``tests.support.tei_reranker``) and LLMs on ``tests.support.fake_llm.FakeLLM``.

Every probe is a real call: the doubles record what reached them, so a ping that did not call the model, or
kept calling it after its client left, fails here.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from goodmem import Goodmem
from goodmem import errors as gerr
from goodmem.models.ping_event import PingEvent
from goodmem.models.ping_result import PingResult
from goodmem.models.ping_target_type import PingTargetType

from proxy.core.goodmem import ping as core
from tests.conftest import ProxyProcess, free_port
from tests.goodmem_helpers import root_api_key
from tests.support.fake_llm import FakeLLM
from tests.support.tei_reranker import TeiReranker

pytestmark = pytest.mark.timeout(300)


# --- fixtures ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root_key(proxy_url: str, opensearch_url: str) -> str:
    return root_api_key(proxy_url, opensearch_url)


@pytest.fixture(scope="module")
def gm(proxy_url: str, root_key: str) -> Iterator[Goodmem]:
    # The SDK refuses a timeoutMs whose budget (+30 s) exceeds the client's timeout: give it room.
    with Goodmem(base_url=proxy_url, api_key=root_key, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def http(proxy_url: str, root_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": root_key}, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def embedder_id(gm: Goodmem) -> str:
    """The start-up embedder: the first of ``GET /v1/embedders`` (memproxy's local model)."""
    return str(gm.embedders.list()[0].embedder_id)


@pytest.fixture(scope="module")
def tei() -> Iterator[TeiReranker]:
    with TeiReranker() as server:
        yield server


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture(scope="module")
def reranker_id(gm: Goodmem, tei: TeiReranker) -> Iterator[str]:
    made = gm.rerankers.create(
        display_name="ping-tei", provider_type="TEI", endpoint_url=tei.url, model_identifier="tei-ping"
    )
    yield str(made.reranker_id)
    gm.rerankers.delete(id=made.reranker_id)


@pytest.fixture(scope="module")
def llm_id(gm: Goodmem, llm: FakeLLM) -> Iterator[str]:
    made = gm.llms.create(
        display_name="ping-llm",
        provider_type="OPENAI",
        endpoint_url=llm.base_url,
        model_identifier="ping-model",
    )
    yield str(made.llm.llm_id)
    gm.llms.delete(id=made.llm.llm_id)


def _error(resp: httpx.Response, status: int) -> str:
    """GoodMem's error shape, ``{"error", "status"}``, with ``status``; the message."""
    assert resp.status_code == status, (resp.status_code, resp.text)
    body = resp.json()
    assert set(body) >= {"error", "status"} and body["status"] == status, body
    return str(body["error"])


def _ndjson(resp: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in resp.text.splitlines() if line.strip()]


def _sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    frames: list[tuple[str, dict[str, Any]]] = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            frames.append((lines.get("event", "message"), json.loads(lines["data"])))
    return frames


# --- ping:once ---------------------------------------------------------------------------------------------


def test_once_on_the_startup_embedder_with_the_sdk(gm: Goodmem, embedder_id: str) -> None:
    emb = gm.embedders.get(id=embedder_id)
    result = gm.ping.once(target_id=embedder_id, payload="the quick brown fox")
    assert isinstance(result, PingResult)
    assert result.ok is True and result.error_message is None and result.http_status == 200
    assert result.seq == 1 and result.rtt_ms > 0
    assert result.bytes_sent == len(b"the quick brown fox")
    # The answer is the vector: 384 numbers as JSON are far more than a few bytes.
    assert result.bytes_received > 384 and result.metadata == {"dimensions": "384", "local": "true"}
    endpoint = result.endpoint
    assert endpoint.target_type == PingTargetType.EMBEDDER and endpoint.target_id == embedder_id
    assert endpoint.provider == emb.provider_type and endpoint.model_identifier == emb.model_identifier
    assert endpoint.resolved_endpoint == f"{emb.endpoint_url}/embed"
    timing = result.timing
    now = time.time_ns()
    assert (
        now - 120 * 10**9 < timing.client_send_time_unix_nanos <= timing.client_receive_time_unix_nanos <= now
    )
    measured = (timing.client_receive_time_unix_nanos - timing.client_send_time_unix_nanos) / 1e6
    assert abs(measured - result.rtt_ms) < 1.0


def test_once_payload_size_type_and_timeout(gm: Goodmem, http: httpx.Client, embedder_id: str) -> None:
    sized = gm.ping.once(target_id=embedder_id, payload_size_bytes=1000, timeout_ms=20_000)
    assert sized.ok and sized.bytes_sent == 1000
    default = gm.ping.once(target_id=embedder_id, target_type_hint=PingTargetType.EMBEDDER)
    assert default.ok and default.bytes_sent == len(core.DEFAULT_PAYLOAD.encode())
    as_json = http.post(
        "/v1/ping:once", json={"targetId": embedder_id, "payloadType": "JSON", "payload": "[1]"}
    )
    assert as_json.status_code == 200 and as_json.json()["ok"] is True
    synthetic = http.post(
        "/v1/ping:once", json={"targetId": embedder_id, "payloadType": "JSON", "payloadSizeBytes": 40}
    )
    assert synthetic.status_code == 200 and synthetic.json()["bytesSent"] == 40


def test_once_reranker_and_llms_make_real_calls(
    gm: Goodmem, tei: TeiReranker, llm: FakeLLM, reranker_id: str, llm_id: str
) -> None:
    calls = len(tei.calls)
    rer = gm.ping.once(target_id=reranker_id, payload="vpn runbook", target_type_hint=PingTargetType.RERANKER)
    assert rer.ok and rer.http_status == 200 and rer.endpoint.target_type == PingTargetType.RERANKER
    assert rer.endpoint.provider == "TEI" and rer.endpoint.model_identifier == "tei-ping"
    assert rer.endpoint.resolved_endpoint == f"{tei.url}/rerank"
    # The payload scored against itself: TEI saw it as query and text, and every word matches.
    assert len(tei.calls) == calls + 1
    assert tei.calls[-1][1]["query"] == "vpn runbook" and tei.calls[-1][1]["texts"] == ["vpn runbook"]
    assert rer.metadata == {"score": "1"} and rer.bytes_sent == 2 * len(b"vpn runbook")

    prompts = len(llm.prompts)
    chat = gm.ping.once(target_id=llm_id, payload="hello from ping")  # no hint: found among the LLMs
    assert chat.ok and chat.endpoint.target_type == PingTargetType.LLM and chat.endpoint.target_id == llm_id
    assert len(llm.prompts) == prompts + 1
    body = llm.prompts[-1].body
    assert body["model"] == "ping-model" and body["messages"] == [
        {"role": "user", "content": "hello from ping"}
    ]
    assert chat.bytes_received == len(b"OK")
    # A start-up LLM (``--llm llm1=...`` of the session proxy) is named by its own id, not a UUID.
    assert gm.ping.once(target_id="llm1").ok


def test_a_down_llm_is_a_failed_probe_not_an_http_error(gm: Goodmem, http: httpx.Client) -> None:
    down = gm.llms.create(
        display_name="ping-down",
        provider_type="OPENAI",
        endpoint_url=f"http://127.0.0.1:{free_port()}/v1",  # nothing listens there
        model_identifier="gone",
    )
    try:
        resp = http.post("/v1/ping:once", json={"targetId": down.llm.llm_id})
        assert resp.status_code == 200, resp.text
        result = PingResult.model_validate(resp.json())
        assert result.ok is False and result.http_status in (503, 504)
        assert result.error_message and (
            "unreachable" in result.error_message or "timeout" in result.error_message
        )
        assert result.bytes_received == 0
        events = gm.ping.stream(target_id=down.llm.llm_id, count=2, interval_ms=10, stream=False)
        summary = events[-1].summary
        assert summary is not None and [e.result.ok for e in events[:-1] if e.result] == [False, False]
        assert summary.ok == 0 and summary.errors + summary.timeouts == 2 and summary.responses == 2
        assert summary.rtt_max_ms == 0.0  # no successful probe, no round trip to report
    finally:
        gm.llms.delete(id=down.llm.llm_id)


def test_a_probe_past_its_timeout_is_a_timed_out_probe(gm: Goodmem, http: httpx.Client) -> None:
    """An endpoint that takes the connection and never answers: the probe ends at its own timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # never accepted: connections complete in the backlog, no answer ever comes
        made = gm.llms.create(
            display_name="ping-silent",
            provider_type="OPENAI",
            endpoint_url=f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
            model_identifier="silent",
        )
        try:
            resp = http.post("/v1/ping:once", json={"targetId": made.llm.llm_id, "timeoutMs": 400})
            assert resp.status_code == 200, resp.text
            result = PingResult.model_validate(resp.json())
            assert result.ok is False and result.http_status == 504
            assert result.error_message == "no answer within the probe timeout of 400 ms"
            # uvloop's timers run on the loop's cached millisecond clock (uv_now), so a 400 ms deadline can
            # end up to about a millisecond early by a precise clock: the bound allows that, no more.
            assert 398 <= result.rtt_ms < 3000
            stream = http.post(
                "/v1/ping:stream",
                json={"targetId": made.llm.llm_id, "timeoutMs": 300, "count": 2, "intervalMs": 10},
            )
            summary = _ndjson(stream)[-1]["summary"]
            assert (summary["timeouts"], summary["errors"], summary["ok"]) == (2, 0, 0)
        finally:
            gm.llms.delete(id=made.llm.llm_id)


# --- ping:stream -------------------------------------------------------------------------------------------


def test_stream_ndjson_with_the_sdk(gm: Goodmem, embedder_id: str) -> None:
    started = time.monotonic()
    events = gm.ping.stream(target_id=embedder_id, count=3, interval_ms=300, stream=False)
    elapsed = time.monotonic() - started
    assert all(isinstance(e, PingEvent) for e in events) and len(events) == 4
    results = [e.result for e in events[:3]]
    assert all(r is not None and r.ok and r.rtt_ms > 0 for r in results)
    assert sorted(r.seq for r in results if r) == [1, 2, 3]
    summary = events[3].summary
    assert summary is not None and events[3].result is None
    assert (summary.requests, summary.responses, summary.ok, summary.timeouts, summary.errors) == (
        3,
        3,
        3,
        0,
        0,
    )
    rtts = sorted(r.rtt_ms for r in results if r)
    assert summary.rtt_min_ms == rtts[0] and summary.rtt_max_ms == rtts[-1]
    assert summary.rtt_p50_ms == rtts[1] and summary.rtt_p99_ms == rtts[-1]
    assert summary.rtt_min_ms <= summary.rtt_avg_ms <= summary.rtt_max_ms
    assert summary.requests_per_second > 0 and summary.bytes_per_second > 0
    assert summary.applied_limits is not None and summary.applied_limits["count"] == "3"
    assert summary.applied_limits["intervalMs"] == "300" and summary.applied_limits["timeoutMs"] == "5000"
    # The cadence is kept: the third probe starts 600 ms after the first.
    assert elapsed >= 0.6


def test_stream_events_arrive_as_probes_finish(gm: Goodmem, embedder_id: str) -> None:
    """With a 700 ms interval, the first result is read long before the session ends: the third probe
    starts 1.4 s after the first, so a stream written as probes finish spreads its events over more than
    a second (measured between reads, so a slow start of either side does not count), where a buffered
    answer would hand them over at once."""
    with gm.ping.stream(target_id=embedder_id, count=3, interval_ms=700) as stream:
        seen: list[tuple[float, PingEvent]] = [(time.monotonic(), e) for e in stream]
    assert [bool(e.result) for _, e in seen] == [True, True, True, False]
    assert seen[-1][0] - seen[0][0] >= 0.7


def test_stream_sse(http: httpx.Client, reranker_id: str, tei: TeiReranker) -> None:
    calls = len(tei.calls)
    resp = http.post(
        "/v1/ping:stream",
        json={"targetId": reranker_id, "count": 3, "intervalMs": 10, "payload": "sse ping", "maxInFlight": 2},
        headers={"Accept": "text/event-stream"},
    )
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    frames = _sse(resp.text)
    assert [name for name, _ in frames] == ["item", "item", "item", "item", "close"]
    events = [PingEvent.model_validate(data) for _, data in frames[:4]]
    assert all(e.result and e.result.ok for e in events[:3]) and events[3].summary is not None
    assert events[3].summary.ok == 3 and events[3].summary.applied_limits == {
        "count": "3",
        "intervalMs": "10",
        "timeoutMs": "5000",
        "maxInFlight": "2",
        "payloadBytes": "8",
        "jitter": "false",
    }
    assert frames[4][1] == {"type": "completed"}
    assert len(tei.calls) == calls + 3


def test_stream_ndjson_terminal_record_and_labels(http: httpx.Client, llm_id: str) -> None:
    resp = http.post(
        "/v1/ping:stream",
        json={"targetId": llm_id, "count": 2, "intervalMs": 5, "jitter": True, "labels": {"run": "ci"}},
        headers={"GoodMem-Stream-Terminal": "true"},
    )
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/x-ndjson")
    lines = _ndjson(resp)
    assert [next(iter(line)) for line in lines] == ["result", "result", "summary", "type"]
    assert lines[-1] == {"type": "completed"}
    assert lines[2]["summary"]["ok"] == 2 and lines[2]["summary"]["appliedLimits"]["jitter"] == "true"


def test_the_probes_stop_when_the_client_disconnects(
    proxy: ProxyProcess, root_key: str, llm_id: str, llm: FakeLLM
) -> None:
    proxy_url = proxy.url
    before, stopped = len(llm.prompts), proxy.log().count("ping stopped")
    with (
        httpx.Client(base_url=proxy_url, headers={"x-api-key": root_key}, timeout=60) as client,
        client.stream(
            "POST", "/v1/ping:stream", json={"targetId": llm_id, "count": 10, "intervalMs": 500}
        ) as resp,
    ):
        first = next(resp.iter_lines())
        assert json.loads(first)["result"]["ok"] is True
    # Left after the first probe: ten probes would take 4.5 s; two seconds later at most two more ran.
    time.sleep(2.5)
    ran = len(llm.prompts) - before
    time.sleep(1.5)
    assert ran <= 3 and len(llm.prompts) - before == ran, (ran, len(llm.prompts) - before)
    assert proxy.log().count("ping stopped") == stopped + 1  # the proxy noticed, and said so


# --- refusals ----------------------------------------------------------------------------------------------


def test_unknown_targets_are_404(gm: Goodmem, http: httpx.Client, embedder_id: str, reranker_id: str) -> None:
    unknown = str(uuid.uuid4())
    for path in ("/v1/ping:once", "/v1/ping:stream"):
        assert "not found" in _error(http.post(path, json={"targetId": unknown}), 404).lower()
        # The hint narrows the lookup: the embedder is no reranker, the reranker no LLM.
        _error(http.post(path, json={"targetId": embedder_id, "targetTypeHint": "RERANKER"}), 404)
        _error(http.post(path, json={"targetId": reranker_id, "targetTypeHint": "LLM"}), 404)
        assert "decision" in _error(
            http.post(path, json={"targetId": embedder_id, "targetTypeHint": "DECISION_MODEL"}), 404
        )
    with pytest.raises(gerr.NotFoundError):
        gm.ping.once(target_id=unknown)
    with pytest.raises(gerr.NotFoundError), gm.ping.stream(target_id=unknown) as stream:
        list(stream)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, "targetId is required"),
        ({"targetId": 5}, "targetId"),
        ({"targetId": "not an id!"}, "targetId"),
        ({"payload": "x", "payloadSizeBytes": 10}, "mutually exclusive"),
        ({"payloadSizeBytes": -1}, "between 0 and 65536"),
        ({"payloadSizeBytes": 65537}, "between 0 and 65536"),
        ({"timeoutMs": -5}, "between 0 and 60000"),
        ({"timeoutMs": 60001}, "between 0 and 60000"),
        ({"timeoutMs": 1.5}, "timeoutMs"),
        ({"targetTypeHint": "TABLE"}, "targetTypeHint must be one of"),
        ({"payloadType": "BINARY"}, "BINARY"),
        ({"payloadType": "JSON", "payload": "not json"}, "JSON"),
        ({"payload": "x" * 65537}, "at most 65536 bytes"),
    ],
)
def test_bad_once_bodies_are_400(
    http: httpx.Client, embedder_id: str, body: dict[str, Any], words: str
) -> None:
    full = {"targetId": embedder_id, **body} if body and "targetId" not in body else body
    assert words in _error(http.post("/v1/ping:once", json=full), 400)
    assert words in _error(http.post("/v1/ping:stream", json=full), 400)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"count": -1}, "count must be an integer between 0 and 100"),
        ({"count": 101}, "count must be an integer between 0 and 100"),
        ({"intervalMs": 60001}, "intervalMs must be an integer between 0 and 60000"),
        ({"intervalMs": -1}, "intervalMs must be an integer between 0 and 60000"),
        ({"maxInFlight": 9}, "maxInFlight must be an integer between 0 and 8"),
        ({"jitter": "yes"}, "jitter must be a boolean"),
        ({"labels": {"k": 1}}, "labels"),
    ],
)
def test_bad_stream_bodies_are_400(
    http: httpx.Client, embedder_id: str, body: dict[str, Any], words: str
) -> None:
    assert words in _error(http.post("/v1/ping:stream", json={"targetId": embedder_id, **body}), 400)


def test_malformed_json_and_no_key(proxy_url: str, http: httpx.Client, embedder_id: str) -> None:
    for path in ("/v1/ping:once", "/v1/ping:stream"):
        _error(http.post(path, content=b"{nope", headers={"content-type": "application/json"}), 400)
        _error(http.post(path, json=[embedder_id]), 400)
        _error(httpx.post(proxy_url + path, json={"targetId": embedder_id}, timeout=30), 401)


def test_another_user_cannot_ping_a_model_they_may_not_read(
    gm: Goodmem, proxy_url: str, tei: TeiReranker, embedder_id: str
) -> None:
    users = []
    for name in ("alice", "bob"):
        user = gm.users.create(email=f"ping-{name}-{uuid.uuid4().hex[:8]}@example.com", display_name=name)
        key = gm.apikeys.create(subject_principal_id=user.user_id)
        users.append(Goodmem(base_url=proxy_url, api_key=str(key.raw_api_key), timeout=120))
    alice, bob = users
    try:
        mine = alice.rerankers.create(
            display_name="alice's", provider_type="TEI", endpoint_url=tei.url, model_identifier="alice-ping"
        )
        calls = len(tei.calls)
        with pytest.raises(gerr.PermissionDeniedError):
            bob.rerankers.get(id=mine.reranker_id)  # the rule ping follows: who may read it
        with pytest.raises(gerr.PermissionDeniedError):
            bob.ping.once(target_id=mine.reranker_id)
        with pytest.raises(gerr.PermissionDeniedError), bob.ping.stream(target_id=mine.reranker_id) as stream:
            list(stream)
        assert len(tei.calls) == calls  # refused before any call
        assert alice.ping.once(target_id=mine.reranker_id).ok  # its owner may
        assert gm.ping.once(target_id=mine.reranker_id).ok  # and an administrator
        assert bob.ping.once(target_id=embedder_id).ok  # built-in models are everyone's
        alice.rerankers.delete(id=mine.reranker_id)
    finally:
        alice.close()
        bob.close()


# --- units (no node) ---------------------------------------------------------------------------------------


def test_payloads_have_the_asked_size_and_type() -> None:
    assert core.build_payload(None, None, None) == core.DEFAULT_PAYLOAD
    assert core.build_payload(None, 0, "TEXT") == core.DEFAULT_PAYLOAD
    for size in (1, 2, 13, 14, 100, core.MAX_PAYLOAD_BYTES):
        text = core.build_payload(None, size, "TEXT")
        assert len(text.encode()) == size
        as_json = core.build_payload(None, size, "JSON")
        assert len(as_json.encode()) == size and json.loads(as_json) is not None
    assert core.build_payload("é", None, "TEXT") == "é"


def test_summary_percentiles_are_nearest_rank_over_successes() -> None:
    def result(seq: int, rtt: float, ok: bool = True, timed_out: bool = False) -> core.ProbeResult:
        return core.ProbeResult(seq, ok, 200 if ok else 504, 10, 20, rtt, 0, 0, timed_out=timed_out)

    req = core.PingRequest("m", count=12)
    results = [result(i, float(i)) for i in range(1, 11)]
    results += [result(11, 99.0, ok=False, timed_out=True), result(12, 5.0, ok=False)]
    summary = core.summarize(req, results, 2.0)
    assert (summary.ok, summary.timeouts, summary.errors, summary.responses) == (10, 1, 1, 12)
    assert (summary.rtt_min_ms, summary.rtt_max_ms, summary.rtt_avg_ms) == (1.0, 10.0, 5.5)
    assert (summary.rtt_p50_ms, summary.rtt_p90_ms, summary.rtt_p99_ms) == (5.0, 9.0, 10.0)
    assert summary.requests_per_second == 6.0 and summary.bytes_per_second == 12 * 30 / 2.0
