"""No caller script reaches the node, and no search outlives memproxy's answer (docs/security.md, "Stored
data: ids, atomic writes, scripts and search deadlines").

* A script anywhere in a caller's Query DSL (ml-commons ``_search``, ``_delete_by_query``, semantic/hybrid
  ``filter``, container ``_search``) is 400 ``illegal_argument_exception`` naming ``--allow-scripts``;
  memproxy's own compiled GoodMem filters, which may use painless, keep working.
* With ``--allow-scripts true --search-timeout-s 2`` (a proxy of this module's own), a search whose script
  would keep the node busy for many seconds is cancelled on the node at the deadline, and a client that
  hangs up earlier gets its node-side search cancelled at once (``_tasks`` is read on the node itself).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ProxyProcess
from tests.goodmem_helpers import root_api_key

pytestmark = pytest.mark.timeout(300)

MC = "/_plugins/_ml/memory_containers"
SCRIPT = {"script": {"source": "return true;"}}
# Painless that costs tens of milliseconds per document (string work in a loop, under the loop limit).
SLOW = (
    "String s = ''; for (int i = 0; i < params.n; i++) { s = s + 'ab'.substring(0, 1); "
    "if (s.length() > 4000) { s = ''; } } return s.length() >= 0;"
)
SEGMENTS, PER_SEGMENT = 8, 75
DEADLINE_S = 2.0


@pytest.fixture(scope="module")
def root(proxy_url: str, opensearch_url: str) -> Iterator[httpx.Client]:
    key = root_api_key(proxy_url, opensearch_url)
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": key}, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def space(root: httpx.Client) -> Iterator[str]:
    embedder = root.get("/v1/embedders").json()["embedders"][0]["embedderId"]
    res = root.post(
        "/v1/spaces",
        json={"name": f"scripts-{uuid.uuid4().hex[:8]}", "spaceEmbedders": [{"embedderId": embedder}]},
    )
    space_id = res.json()["spaceId"]
    memories = [("sum is four", {"a": 2, "b": 2}), ("sum is two", {"a": 1, "b": 1})]
    for text, metadata in memories:
        created = root.post(
            "/v1/memories", json={"spaceId": space_id, "originalContent": text, "metadata": metadata}
        )
        assert created.status_code == 201, created.text
    yield space_id
    root.delete(f"/v1/spaces/{space_id}")


def _refused(res: httpx.Response) -> None:
    assert res.status_code == 400, res.text
    error = res.json()["error"]
    assert error["type"] == "illegal_argument_exception" and res.json()["status"] == 400
    assert (
        "--allow-scripts" in error["reason"]
        and error["root_cause"][0]["type"] == "illegal_argument_exception"
    )


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("long-term/_search", {"query": {"bool": {"filter": [SCRIPT]}}}),
        ("long-term/_search", {"query": {"match_all": {}}, "script_fields": {"x": {"script": "1"}}}),
        ("long-term/_search", {"query": {"match_all": {}}, "runtime_mappings": {"x": {"type": "long"}}}),
        ("long-term/_search", {"query": {"function_score": {"functions": [{"script_score": {"script": "1"}}]}}}),  # noqa: E501
        ("long-term/_search", {"size": 0, "aggs": {"a": {"scripted_metric": {"map_script": "1"}}}}),
        ("long-term/_search", {"sort": [{"_script": {"type": "number", "script": "1"}}]}),
        ("working/_search", {"query": {"script_score": {"query": {"match_all": {}}, "script": "1"}}}),
        ("long-term/_delete_by_query", {"query": SCRIPT}),
        ("long-term/_semantic_search", {"query": "sum", "filter": SCRIPT}),
        ("long-term/_hybrid_search", {"query": "sum", "filter": {"bool": {"must_not": [SCRIPT]}}}),
    ],
)  # fmt: skip
def test_scripts_in_caller_dsl_are_refused(root: httpx.Client, space: str, route: str, body: Any) -> None:
    _refused(root.post(f"{MC}/{space}/memories/{route}", json=body))


def test_scripts_in_a_container_search_are_refused(root: httpx.Client) -> None:
    _refused(root.post(f"{MC}/_search", json={"query": SCRIPT}))
    assert root.post(f"{MC}/_search", json={"query": {"match_all": {}}}).status_code == 200


def test_refused_delete_by_query_deleted_nothing(root: httpx.Client, space: str) -> None:
    _refused(root.post(f"{MC}/{space}/memories/long-term/_delete_by_query", json={"query": SCRIPT}))
    assert len(root.get(f"/v1/spaces/{space}/memories").json()["memories"]) == 2


def test_goodmem_filters_compiled_to_painless_keep_working(root: httpx.Client, space: str) -> None:
    expr = "CAST(val('$.a') AS NUMERIC) + CAST(val('$.b') AS NUMERIC) > 3"
    listed = root.get(f"/v1/spaces/{space}/memories", params={"filter": expr})
    assert listed.status_code == 200, listed.text
    assert [m["metadata"] for m in listed.json()["memories"]] == [{"a": 2, "b": 2}]
    res = root.post(
        "/v1/memories:retrieve",
        json={"message": "sum", "spaceKeys": [{"spaceId": space, "filter": expr}], "requestedSize": 5},
    )
    assert res.status_code == 200, res.text
    events = [json.loads(line) for line in res.text.splitlines() if line.strip()]
    texts = [e["retrievedItem"]["chunk"]["chunk"]["chunkText"] for e in events if "retrievedItem" in e]
    assert texts == ["sum is four"]


# --- deadlines and disconnects, on a proxy that lets scripts through -------------------------------------


@pytest.fixture(scope="module")
def scripted(opensearch_url: str) -> Iterator[ProxyProcess]:
    proxy = ProxyProcess(opensearch_url, ["--allow-scripts", "true", "--search-timeout-s", str(DEADLINE_S)])
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def slow_container(scripted: ProxyProcess, opensearch_url: str) -> Iterator[tuple[str, str, httpx.Client]]:
    """A container with its own working index of SEGMENTS x PER_SEGMENT documents, one segment per refresh
    (the node checks for cancellation between segments: a script does not look)."""
    key = root_api_key(scripted.url, opensearch_url)
    client = httpx.Client(base_url=scripted.url, headers={"x-api-key": key}, timeout=120)
    prefix = f"scripts-{uuid.uuid4().hex[:8]}"
    cid = client.post(
        f"{MC}/_create",
        json={"name": prefix, "configuration": {"index_prefix": prefix, "use_system_index": False}},
    ).json()["memory_container_id"]
    index = f"{prefix}-memory-working"
    for segment in range(SEGMENTS):
        lines = []
        for i in range(PER_SEGMENT):
            lines.append(json.dumps({"index": {"_index": index, "_id": f"{segment}-{i}"}}))
            lines.append(json.dumps({"memory_container_id": cid, "payload_type": "data", "message_id": i}))
        res = httpx.post(
            f"{opensearch_url}/_bulk",
            params={"refresh": "true"},
            content="\n".join(lines) + "\n",
            headers={"content-type": "application/x-ndjson"},
            timeout=60,
        )
        assert not res.json()["errors"]
    yield cid, index, client
    client.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})
    client.close()


def _slow_body(n: int) -> dict[str, Any]:
    return {"query": {"bool": {"filter": [{"script": {"script": {"source": SLOW, "params": {"n": n}}}}]}}}


def _calibrate(opensearch_url: str, index: str) -> tuple[int, float]:
    """Iterations making one document cost ~40 ms on this machine now, and the whole index's cost without
    any cancellation (timed directly on the node over 10 documents)."""
    n = 100_000
    ten = {"ids": {"values": [f"0-{i}" for i in range(10)]}}
    for _ in range(3):
        body = _slow_body(n)
        body["query"]["bool"]["filter"].append(ten)
        started = time.monotonic()
        res = httpx.post(f"{opensearch_url}/{index}/_search", json=body, timeout=120)
        assert res.status_code == 200, res.text
        per_doc = (time.monotonic() - started) / 10
        n = max(1_000, min(300_000, int(n * 0.04 / max(per_doc, 1e-4))))
    return n, per_doc * SEGMENTS * PER_SEGMENT


def _searches_on(opensearch_url: str, index: str) -> list[dict[str, Any]]:
    tasks = httpx.get(
        f"{opensearch_url}/_tasks", params={"actions": "*search*", "detailed": "true"}, timeout=30
    )
    return [
        t
        for node in tasks.json()["nodes"].values()
        for t in node["tasks"].values()
        if index in t.get("description", "")
    ]


def _wait_until_gone(opensearch_url: str, index: str, within_s: float) -> float:
    started = time.monotonic()
    while _searches_on(opensearch_url, index):
        assert time.monotonic() - started < within_s, _searches_on(opensearch_url, index)
        time.sleep(0.1)
    return time.monotonic() - started


def test_a_search_is_cancelled_on_the_node_at_the_deadline(
    slow_container: tuple[str, str, httpx.Client], opensearch_url: str
) -> None:
    cid, index, client = slow_container
    n, uncancelled_s = _calibrate(opensearch_url, index)
    assert uncancelled_s > 4 * DEADLINE_S, f"the calibration made too cheap a search ({uncancelled_s:.1f} s)"
    started = time.monotonic()
    res = client.post(f"{MC}/{cid}/memories/working/_search", json=_slow_body(n))
    answered = time.monotonic() - started
    timed_out = res.status_code == 200 and res.json()["timed_out"]
    # Cancelled on the node: a 504 the client may retry, never ml-commons' wrapped 500.
    cancelled = res.status_code == 504 and int(res.headers["Retry-After"]) >= 1
    assert timed_out or cancelled, res.text
    gone = _wait_until_gone(opensearch_url, index, within_s=uncancelled_s)
    print(f"uncancelled ≈ {uncancelled_s:.1f} s; answered after {answered:.1f} s ({res.status_code}); "
          f"node idle {gone:.1f} s later")  # fmt: skip
    assert answered + gone < uncancelled_s / 2


def test_a_client_that_hangs_up_cancels_the_node_search(
    slow_container: tuple[str, str, httpx.Client], opensearch_url: str
) -> None:
    cid, index, client = slow_container
    n, _ = _calibrate(opensearch_url, index)
    with pytest.raises(httpx.ReadTimeout):
        client.post(f"{MC}/{cid}/memories/working/_search", json=_slow_body(n), timeout=0.5)
    hung_up = time.monotonic()
    # Before the deadline could have done it, the node has flagged the search cancelled (or ended it).
    while time.monotonic() - hung_up < DEADLINE_S * 0.6:
        tasks = _searches_on(opensearch_url, index)
        if all(t.get("cancelled") for t in tasks):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the node search was not cancelled after the client hung up: {tasks}")
    flagged = time.monotonic() - hung_up
    gone = _wait_until_gone(opensearch_url, index, within_s=30)
    print(f"cancelled on the node {flagged:.2f} s after the hang-up; gone {gone:.1f} s later")
