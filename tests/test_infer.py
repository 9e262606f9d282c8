"""``infer: true`` end to end: the real proxy, the real node, the deterministic LLM
(tests/support/fake_llm.py) as a start-up ``--llm``; extraction runs as a durable job (docs/infer.md).

``wait_for_inference`` (memproxy's extension) makes the add answer once the job has ended, so these tests
read the outcome without sleeping; the kill test instead watches the job document on the node.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ProxyProcess, llm_flags
from tests.support.fake_llm import FakeLLM
from tests.support.gated_llm import GatedLLM

pytestmark = pytest.mark.node

MC = "/_plugins/_ml/memory_containers"
LLM = "memproxy-llm"  # a start-up --llm of the session's proxies (tests/conftest.py)


def _call(url: str, method: str, path: str, body: Any = None, **params: str) -> tuple[int, Any]:
    query = ("?" + urllib.parse.urlencode(params)) if params else ""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url + path + query, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=180) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    return status, (json.loads(raw) if raw else None)


def _container(url: str, strategies: list[dict[str, Any]], llm_id: str = LLM, **extra: Any) -> str:
    prefix = f"infer-{uuid.uuid4().hex[:8]}"
    body = {
        "name": prefix,
        "configuration": {
            "embedding_model_type": "TEXT_EMBEDDING",
            "embedding_model_id": "all-MiniLM-L6-v2",
            "embedding_dimension": 384,
            "llm_id": llm_id,
            "index_prefix": prefix,
            "use_system_index": False,
            "strategies": strategies,
            **extra,
        },
    }
    status, created = _call(url, "POST", f"{MC}/_create", body)
    assert status == 200, created
    return str(created["memory_container_id"])


def _say(text: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [{"type": "text", "text": text}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
    ]


def _add(url: str, cid: str, text: str, namespace: dict[str, str], *, wait: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": _say(text), "namespace": namespace, "infer": True}
    params = {"wait_for_inference": "true"} if wait else {}
    status, added = _call(url, "POST", f"{MC}/{cid}/memories", body, **params)
    assert status == 200, added
    return dict(added)


def _all(url: str, cid: str, memory_type: str) -> list[dict[str, Any]]:
    body = {"query": {"match_all": {}}, "size": 100, "sort": [{"created_time": "asc"}]}
    status, found = _call(url, "POST", f"{MC}/{cid}/memories/{memory_type}/_search", body)
    assert status == 200, found
    return [h["_source"] | {"_id": h["_id"]} for h in found["hits"]["hits"]]


SEMANTIC = {"type": "SEMANTIC", "namespace": ["user_id"]}


def test_two_conversations_add_then_update_delete_and_keep(open_proxy: ProxyProcess) -> None:
    url = open_proxy.url
    cid = _container(url, [SEMANTIC])
    first = _add(
        url,
        cid,
        "I only drink green tea. I live in Lisbon. I work as a nurse in the city.",
        {"user_id": "u1"},
    )
    assert first["inference"]["state"] == "COMPLETED", first
    # The job stays visible by its working memory (memproxy's inference route).
    inference = f"{MC}/{cid}/memories/working/{first['working_memory_id']}/_memproxy_inference"
    status, job = _call(url, "GET", inference)
    assert status == 200 and job["state"] == "COMPLETED" and job["attempts"] == 1, job
    assert job["result"]["strategies"][0]["events"] == ["ADD", "ADD", "ADD"]
    status, missing = _call(url, "GET", f"{MC}/{cid}/memories/working/nope/_memproxy_inference")
    assert status == 404 and missing["error"]["reason"] == "No inference for working memory nope"
    assert sorted(m["memory"] for m in _all(url, cid, "long-term")) == [
        "I live in Lisbon",
        "I only drink green tea",
        "I work as a nurse in the city",
    ]
    second = _add(
        url,
        cid,
        "I only drink green tea. I no longer live in Lisbon. I work as a teacher now.",
        {"user_id": "u1"},
    )
    assert second["inference"]["state"] == "COMPLETED", second
    memories = {m["memory"]: m for m in _all(url, cid, "long-term")}
    assert sorted(memories) == ["I only drink green tea", "I work as a teacher now"]
    kept = memories["I work as a teacher now"]
    assert kept["namespace"] == {"user_id": "u1"} and kept["namespace_size"] == 1
    assert kept["strategy_type"] == "SEMANTIC"
    history = _all(url, cid, "history")
    assert [h["action"] for h in history] == ["ADD", "ADD", "ADD", "DELETE", "UPDATE"] or sorted(
        h["action"] for h in history
    ) == ["ADD", "ADD", "ADD", "DELETE", "UPDATE"]
    update = next(h for h in history if h["action"] == "UPDATE")
    assert update["before"] == {"memory": "I work as a nurse in the city"}
    assert update["after"] == {"memory": "I work as a teacher now"}
    # History names the document it describes (3.6's ids drift after an UPDATE/DELETE in a batch).
    assert update["memory_id"] == kept["_id"]
    delete = next(h for h in history if h["action"] == "DELETE")
    assert delete["before"] == {"memory": "I live in Lisbon"}
    # The updated memory was re-embedded (3.6 keeps the old text's vector): its own text finds it at ~1.0.
    status, hits = _call(
        url,
        "POST",
        f"{MC}/{cid}/memories/long-term/_semantic_search",
        {"query": "I work as a teacher now", "k": 1},
    )
    assert status == 200, hits
    top = hits["hits"]["hits"][0]
    assert top["_id"] == kept["_id"] and top["_score"] > 0.999


def test_strategies_without_their_namespace_keys_are_skipped(
    open_proxy: ProxyProcess, fake_llm: FakeLLM
) -> None:
    url = open_proxy.url
    cid = _container(url, [{"type": "SEMANTIC", "namespace": ["user_id", "agent_id"]}])
    before = len(fake_llm.prompts_of("extraction"))
    added = _add(url, cid, "I live in Lisbon.", {"user_id": "u1"})
    assert added["inference"]["state"] == "COMPLETED"
    assert _all(url, cid, "long-term") == [] and _all(url, cid, "history") == []
    assert len(fake_llm.prompts_of("extraction")) == before  # the LLM was not asked


def test_a_garbage_answer_is_recorded_in_history_not_stored(
    open_proxy: ProxyProcess, fake_llm: FakeLLM
) -> None:
    url = open_proxy.url
    cid = _container(url, [SEMANTIC])
    fake_llm.script("extraction", "Sure! Here are the facts you asked for, in prose.")
    added = _add(url, cid, "I live in Lisbon.", {"user_id": "u1"})
    assert added["inference"]["state"] == "COMPLETED"
    assert _all(url, cid, "long-term") == []
    (error,) = _all(url, cid, "history")
    assert "no JSON object with 'facts'" in error["error"]
    assert error["namespace"] == {"user_id": "u1"}


def test_an_unreachable_llm_fails_the_job_after_its_retries(opensearch_url: str) -> None:
    # Every memproxy process of the cluster may run the job, so the dead LLM is a registered ml-commons
    # model (the same for all of them), not a start-up flag of this one.
    proxy = ProxyProcess(
        opensearch_url, ["--auth", "none", "--model-max-retries", "0", "--jobs-max-attempts", "2"]
    )
    try:
        connector = {
            "name": "dead llm",
            "version": 1,
            "protocol": "http",
            "parameters": {"model": "m"},
            "credential": {"key": "unused"},
            "actions": [
                {
                    "action_type": "predict",
                    "method": "POST",
                    "url": "http://127.0.0.1:9/v1/chat/completions",
                    "request_body": '{"model": "${parameters.model}", "messages": []}',
                }
            ],
        }
        status, made = _call(proxy.url, "POST", "/_plugins/_ml/connectors/_create", connector)
        assert status == 200, made
        register = {"name": "dead", "function_name": "remote", "connector_id": made["connector_id"]}
        status, model = _call(proxy.url, "POST", "/_plugins/_ml/models/_register", register)
        assert status == 200, model
        cid = _container(proxy.url, [SEMANTIC], llm_id=model["model_id"])
        added = _add(proxy.url, cid, "I live in Lisbon.", {"user_id": "u1"})
        inference = added["inference"]
        assert inference["state"] == "FAILED" and inference["attempts"] == 2, inference
        assert "unreachable" in inference["last_error"]
        (error,) = _all(proxy.url, cid, "history")
        assert "unreachable" in error["error"]
        assert _all(proxy.url, cid, "long-term") == []
    finally:
        proxy.stop()


# --- a process killed mid-job ----------------------------------------------------------------------------


@pytest.fixture
def gated_llm(fake_llm: FakeLLM) -> Iterator[GatedLLM]:
    gate = GatedLLM(fake_llm.url)
    yield gate
    gate.close()


def _job(opensearch_url: str, working_memory_id: str) -> dict[str, Any]:
    body = {"query": {"term": {"subject": working_memory_id}}, "size": 1}
    req = urllib.request.Request(
        f"{opensearch_url}/memproxy-jobs/_search",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req) as resp:
        hits = json.loads(resp.read())["hits"]["hits"]
    return dict(hits[0]["_source"]) if hits else {}


def test_a_job_killed_mid_extraction_is_finished_by_another_process(
    opensearch_url: str, gated_llm: GatedLLM
) -> None:
    flags = [
        "--auth",
        "none",
        *llm_flags(gated_llm.url, (LLM,)),
        "--jobs-lease-s",
        "3",
        "--jobs-poll-s",
        "0.2",
    ]
    first = ProxyProcess(opensearch_url, flags)
    second: ProxyProcess | None = None
    try:
        # No session: its summary would be the gated first LLM call, made before the add answers.
        cid = _container(first.url, [SEMANTIC], disable_session=True)
        added = _add(
            first.url, cid, "I only drink green tea. I live in Lisbon.", {"user_id": "u9"}, wait=False
        )
        assert gated_llm.first_request.wait(60), "the first proxy never asked the LLM"
        assert _job(opensearch_url, added["working_memory_id"])["state"] == "RUNNING"
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        killed_at = time.monotonic()
        second = ProxyProcess(opensearch_url, flags)
        deadline = time.monotonic() + 90
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = _job(opensearch_url, added["working_memory_id"])
            if job.get("state") in ("COMPLETED", "FAILED"):
                break
            time.sleep(0.2)
        assert job.get("state") == "COMPLETED", job
        assert job["attempts"] == 2
        recovered_s = time.monotonic() - killed_at
        memories = [m["memory"] for m in _all(second.url, cid, "long-term")]
        assert sorted(memories) == [
            "I live in Lisbon",
            "I only drink green tea",
        ]  # nothing lost, nothing twice
        assert [h["action"] for h in _all(second.url, cid, "history")] == ["ADD", "ADD"]
        print(f"killed mid-job; another process finished it {recovered_s:.1f} s later")
    finally:
        first.stop()
        if second is not None:
            second.stop()
