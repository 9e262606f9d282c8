"""A node killed under load on the 3-node cluster: nothing acknowledged is lost, callers see only retryable
errors, searches keep being answered, and the cluster is green again by itself.

memproxy is given all three nodes (``--opensearch-url`` with three URLs) and lays its memory indices out on
3 primaries with 1 replica (``--memory-shards 3 --memory-replicas 1``), so every node holds primaries and
every shard has a copy elsewhere. Threads load it for a bounded time through both APIs: ml-commons
add-memories (working memory), ml-commons ``infer: true`` adds (each a durable job: the deterministic LLM
double at the network edge extracts one fact, which the job embeds and writes as a long-term memory) and
GoodMem memory creates, ``_semantic_search`` and ``_hybrid_search``, streamed GoodMem retrieves. Scenario A
kills (SIGKILL) a node that is not the cluster manager, B the elected cluster manager; the load goes on for
``DOWN_S`` seconds, the node is started again, the load stops. Then:

* the cluster turns green by itself within ``GREEN_WITHIN_S`` of the node's restart (the test only asks for
  its health);
* every write answered 2xx is there: by GET through memproxy, and by an exact search on the node (``ids``
  on the working index, ``term`` on ``memory_id`` in the long-term chunks);
* every error answered was 503 or 429 with ``Retry-After``, in the API's own shape; none was a 500, and none
  took longer than the search timeout and a margin (the clients' timeout: a hang fails the test);
* at least 99 % of the searches (semantic, hybrid, retrieve) started during the failover were answered;
* every infer job acknowledged completes once the cluster is back (retried by the job machinery where an
  attempt met the failover), and its fact is a long-term memory, once.

Printed per scenario: requests, error rate and p99 latency within the failover window (kill to green), and
the seconds from the kill to green, and the infer jobs' attempts.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.cluster.conftest import Cluster
from tests.conftest import ProxyProcess
from tests.goodmem_helpers import root_api_key
from tests.support.fake_llm import FakeLLM

pytestmark = [pytest.mark.timeout(600), pytest.mark.node]

MC = "/_plugins/_ml/memory_containers"
SEARCH_TIMEOUT_S = 10.0  # memproxy's --search-timeout-s here
CLIENT_TIMEOUT_S = SEARCH_TIMEOUT_S + 20  # beyond this a call is a hang
DOWN_S = 20.0
GREEN_WITHIN_S = 120.0
WRITE_PAUSE_S = 0.05  # two cores shared with the cluster: the load is steady, not a flood
INFER_PAUSE_S = 0.5  # each infer add is a job: an LLM call, an embedding and its writes
JOBS_DONE_WITHIN_S = 180.0
LLM_ID = "failover-llm"


@dataclass
class Call:
    kind: str  # ml-write, gm-write, semantic, hybrid, retrieve
    began: float
    seconds: float
    status: int  # 0: no answer (a timeout: a hang)
    ok_shape: bool = True  # an error in its API's shape, with Retry-After
    answered: bool = False  # a search that returned results (or an empty answer) in full
    detail: str = ""  # an error's answer, for the failure message


@dataclass
class Load:
    calls: list[Call] = field(default_factory=list)
    ml_ids: dict[str, str] = field(default_factory=dict)  # working memory id → its text
    infer_ids: dict[str, str] = field(default_factory=dict)  # infer add's working memory id → its fact
    gm_ids: dict[str, str] = field(default_factory=dict)  # GoodMem memory id → its text
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def record(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)


def _error_shape_ok(path: str, res: httpx.Response) -> bool:
    """503/429 with Retry-After, in the API's own error shape (GoodMem's on /v1, OpenSearch's elsewhere)."""
    if res.status_code not in (503, 429) or not res.headers.get("Retry-After"):
        return False
    try:
        body = res.json()
    except ValueError:
        return False
    if path.startswith("/v1/"):
        return isinstance(body.get("error"), str) and body.get("status") == res.status_code
    return isinstance(body.get("error"), dict) and body.get("status") == res.status_code


def _timed(load: Load, kind: str, path: str, send: Callable[[], httpx.Response]) -> httpx.Response | None:
    began = time.monotonic()
    try:
        res = send()
    except httpx.TimeoutException:
        load.record(Call(kind, began, time.monotonic() - began, 0, ok_shape=False))
        return None
    call = Call(kind, began, time.monotonic() - began, res.status_code)
    if res.status_code >= 300:
        call.ok_shape = _error_shape_ok(path, res)
        call.detail = res.text[:500]
    elif kind in ("semantic", "hybrid"):
        call.answered = "hits" in res.json()
    elif kind == "retrieve":
        events = [json.loads(line) for line in res.text.splitlines() if line.strip()]
        failed = [e for e in events if "status" in e and e["status"].get("code") not in (None, "OK")]
        call.answered = not failed
        call.ok_shape = not failed or all(e["status"].get("message") for e in failed)
    load.record(call)
    return res if res.status_code < 300 else None


def _ml_writer(client: httpx.Client, cid: str, load: Load, n: int) -> None:
    i = 0
    while not load.stop.is_set():
        i += 1
        text = f"ml writer {n} note {i} {uuid.uuid4().hex[:8]} about herbal tea"
        body = {
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
            "namespace": {"user_id": f"u{n}"},
            "infer": False,
        }
        path = f"{MC}/{cid}/memories"
        res = _timed(load, "ml-write", path, lambda: client.post(path, json=body))  # noqa: B023
        if res is not None:
            with load.lock:
                load.ml_ids[res.json()["working_memory_id"]] = text
        time.sleep(WRITE_PAUSE_S)


def _infer_writer(client: httpx.Client, cid: str, load: Load, n: int) -> None:
    i = 0
    while not load.stop.is_set():
        i += 1
        # One fact, as the LLM double extracts it (no sentence break, no question, no trailing period), whose
        # first three words are its own: the double UPDATEs a memory that shares them instead of adding.
        fact = f"Label {uuid.uuid4().hex[:10]} {i} marks tea tin {i} of user {n}"
        body = {
            "messages": [{"role": "user", "content": [{"type": "text", "text": fact}]}],
            "namespace": {"user_id": f"infer-u{n}"},
            "infer": True,
        }
        path = f"{MC}/{cid}/memories"
        res = _timed(load, "infer-write", path, lambda: client.post(path, json=body))  # noqa: B023
        if res is not None:
            with load.lock:
                load.infer_ids[res.json()["working_memory_id"]] = fact
        time.sleep(INFER_PAUSE_S)


def _gm_writer(client: httpx.Client, space: str, load: Load, n: int) -> None:
    i = 0
    while not load.stop.is_set():
        i += 1
        text = f"goodmem writer {n} memory {i} {uuid.uuid4().hex[:8]}: green tea in Lisbon"
        body = {"spaceId": space, "originalContent": text, "contentType": "text/plain"}
        res = _timed(load, "gm-write", "/v1/memories", lambda: client.post("/v1/memories", json=body))  # noqa: B023
        if res is not None:
            with load.lock:
                load.gm_ids[res.json()["memoryId"]] = text
        time.sleep(WRITE_PAUSE_S)


def _searcher(client: httpx.Client, cid: str, space: str, load: Load, n: int) -> None:
    i = 0
    while not load.stop.is_set():
        i += 1
        kind = ("semantic", "hybrid", "retrieve")[(i + n) % 3]
        if kind == "retrieve":
            path = "/v1/memories:retrieve"
            body: dict[str, Any] = {"message": "tea", "spaceKeys": [{"spaceId": space}], "requestedSize": 5}
        else:
            path = f"{MC}/{space if i % 2 else cid}/memories/long-term/_{kind}_search"
            body = {"query": "green tea", "k": 5}
        _timed(load, kind, path, lambda: client.post(path, json=body))  # noqa: B023


@dataclass
class World:
    cluster: Cluster
    proxy: ProxyProcess
    key: str
    cid: str
    space: str
    infer_cid: str


@pytest.fixture(scope="module")
def world(cluster: Cluster) -> Iterator[World]:
    llm = FakeLLM()
    llm.__enter__()
    proxy = ProxyProcess(
        ",".join(cluster.urls),
        [
            "--memory-shards", "3", "--memory-replicas", "1",
            "--search-timeout-s", str(SEARCH_TIMEOUT_S), "--opensearch-timeout-s", "20",
            "--cache-ttl-s", "0",
            "--llm", f"{LLM_ID}={llm.url}#provider=openai,model=fake-llm",
        ],
    )  # fmt: skip
    try:
        key = root_api_key(proxy.url, cluster.urls[0])
        with httpx.Client(base_url=proxy.url, headers={"x-api-key": key}, timeout=120) as api:
            embedder = api.get("/v1/embedders").json()["embedders"][0]["embedderId"]
            space = api.post(
                "/v1/spaces", json={"name": "failover", "spaceEmbedders": [{"embedderId": embedder}]}
            ).json()["spaceId"]
            created = api.post(
                f"{MC}/_create",
                json={
                    "name": "failover-ml",
                    "configuration": {
                        "embedding_model_type": "TEXT_EMBEDDING",
                        "embedding_model_id": "all-minilm-l6-v2",
                        "embedding_dimension": 384,
                    },
                },
            )
            assert created.status_code == 200, created.text
            cid = created.json()["memory_container_id"]
            seeded = api.post(
                f"{MC}/{cid}/memories/long-term/_memproxy_bulk",
                json={"memories": [{"memory": f"seed {i}: green tea notes"} for i in range(20)]},
            )
            assert seeded.status_code == 200, seeded.text
            infer = api.post(
                f"{MC}/_create",
                json={
                    "name": "failover-infer",
                    "configuration": {
                        "embedding_model_type": "TEXT_EMBEDDING",
                        "embedding_model_id": "all-minilm-l6-v2",
                        "embedding_dimension": 384,
                        "llm_id": LLM_ID,
                        "strategies": [{"type": "SEMANTIC", "namespace": ["user_id"]}],
                    },
                },
            )
            assert infer.status_code == 200, infer.text
        yield World(cluster, proxy, key, cid, space, infer.json()["memory_container_id"])
    finally:
        proxy.stop()
        llm.__exit__(None, None, None)


def _run_scenario(w: World, victim: int, label: str) -> None:
    load = Load()
    clients = [
        httpx.Client(base_url=w.proxy.url, headers={"x-api-key": w.key}, timeout=CLIENT_TIMEOUT_S)
        for _ in range(6)
    ]
    threads = [
        threading.Thread(target=_ml_writer, args=(clients[0], w.cid, load, 1)),
        threading.Thread(target=_infer_writer, args=(clients[5], w.infer_cid, load, 3)),
        threading.Thread(target=_gm_writer, args=(clients[1], w.space, load, 2)),
        threading.Thread(target=_searcher, args=(clients[2], w.cid, w.space, load, 0)),
        threading.Thread(target=_searcher, args=(clients[3], w.cid, w.space, load, 1)),
        threading.Thread(target=_searcher, args=(clients[4], w.cid, w.space, load, 2)),
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(4.0)  # the load runs on a healthy cluster first
        w.cluster.script("kill", str(victim))
        t_kill = time.monotonic()
        time.sleep(DOWN_S)
        w.cluster.script("restart", str(victim))
        to_green = w.cluster.wait_green(GREEN_WITHIN_S)
        t_green = time.monotonic()
        time.sleep(2.0)  # and a little after
    finally:
        load.stop.set()
        for t in threads:
            t.join(timeout=CLIENT_TIMEOUT_S + 10)
        for client in clients:
            client.close()
    down_to_green = t_green - t_kill

    window = [c for c in load.calls if t_kill <= c.began <= t_green]
    errors = [c for c in window if c.status >= 300 or c.status == 0]
    searches = [c for c in window if c.kind in ("semantic", "hybrid", "retrieve")]
    answered = [c for c in searches if c.answered]
    latencies = sorted(c.seconds for c in window)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else 0.0
    statuses: dict[int, int] = {}
    for c in load.calls:
        statuses[c.status] = statuses.get(c.status, 0) + 1
    lost_ml, lost_gm = _lost(w, load)
    jobs, lost_facts = _infer_outcome(w, load)
    retried = sum(1 for job in jobs.values() if job.get("attempts", 1) > 1)
    print(
        f"\n{label}: node {victim} killed; green again {down_to_green:.1f} s after the kill "
        f"({to_green:.1f} s after the restart began waiting)\n"
        f"  all calls {len(load.calls)} by status {dict(sorted(statuses.items()))}; acknowledged writes: "
        f"ml-commons {len(load.ml_ids)}, GoodMem {len(load.gm_ids)}; lost {len(lost_ml)} + {len(lost_gm)}\n"
        f"  failover window: {len(window)} calls, error rate {len(errors) / max(1, len(window)):.2%}, "
        f"p99 {p99 * 1000:.0f} ms, max {max(latencies, default=0) * 1000:.0f} ms; searches answered "
        f"{len(answered)}/{len(searches)} ({len(answered) / max(1, len(searches)):.2%})\n"
        f"  infer jobs: {len(load.infer_ids)} acknowledged, "
        f"{sum(1 for j in jobs.values() if j.get('state') == 'COMPLETED')} completed, {retried} needed more "
        f"than one attempt; facts missing or doubled in long-term memory: {len(lost_facts)}"
    )
    assert load.ml_ids and load.gm_ids and load.infer_ids, "nothing was acknowledged"
    not_done = {mid: job for mid, job in jobs.items() if job.get("state") != "COMPLETED"}
    assert not not_done, list(not_done.items())[:3]
    assert not lost_facts, lost_facts[:5]
    assert not lost_ml and not lost_gm, (lost_ml[:5], lost_gm[:5])
    bad = [c for c in load.calls if c.status not in (200, 201, 503, 429) or not c.ok_shape]
    assert not bad, bad[:10]  # never a 500, never a hang, every error retryable in its API's shape
    assert searches and len(answered) >= 0.99 * len(searches)
    # Green by itself once the node is back: the wait after the restart returned is the cluster's own
    # recovery. The restart (a JVM start) is not: it follows the machine's load (180 s with a load average
    # of 13 on two cores), so it is printed above, not bounded.
    assert to_green <= GREEN_WITHIN_S


def _lost(w: World, load: Load) -> tuple[list[str], list[str]]:
    """Acknowledged ids that a GET through memproxy or an exact search on the node does not find."""
    node = w.cluster.urls[0]
    wild = {"expand_wildcards": "all", "ignore_unavailable": "true", "allow_no_indices": "true"}
    lost_ml, lost_gm = [], []
    with httpx.Client(base_url=w.proxy.url, headers={"x-api-key": w.key}, timeout=60) as api:
        for mid in load.ml_ids:
            if api.get(f"{MC}/{w.cid}/memories/working/{mid}").status_code != 200:
                lost_ml.append(mid)
        for mid in load.gm_ids:
            if api.get(f"/v1/memories/{mid}").status_code != 200:
                lost_gm.append(mid)
    httpx.post(f"{node}/_refresh", params=wild, timeout=60)
    ids = list(load.ml_ids)
    found = httpx.post(
        f"{node}/.plugins-ml-am-*-memory-working,*-memory-working/_search",
        params=wild,
        json={"size": len(ids), "query": {"ids": {"values": ids}}, "_source": ["messages"]},
        timeout=60,
    ).json()
    by_search = {h["_id"]: json.dumps(h["_source"]) for h in found["hits"]["hits"]}
    lost_ml += [m for m in ids if m not in by_search or load.ml_ids[m] not in by_search[m]]
    gm = list(load.gm_ids)
    chunks = httpx.post(
        f"{node}/.plugins-ml-am-*-memory-long-term,*-memory-long-term/_search",
        params=wild,
        json={"size": 10_000, "query": {"terms": {"memory_id": gm}}, "_source": ["memory_id"]},
        timeout=60,
    ).json()
    with_chunks = {h["_source"]["memory_id"] for h in chunks["hits"]["hits"]}
    lost_gm += [m for m in gm if m not in with_chunks]
    return sorted(set(lost_ml)), sorted(set(lost_gm))


def _infer_outcome(w: World, load: Load) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each acknowledged infer add's job once it has settled (or the bound has passed), and the facts that
    are not exactly one long-term memory of the container."""
    jobs: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + JOBS_DONE_WITHIN_S
    with httpx.Client(base_url=w.proxy.url, headers={"x-api-key": w.key}, timeout=60) as api:
        pending = list(load.infer_ids)
        while pending and time.monotonic() < deadline:
            for mid in list(pending):
                res = api.get(f"{MC}/{w.infer_cid}/memories/working/{mid}/_memproxy_inference")
                if res.status_code == 200:
                    jobs[mid] = res.json()
                    if jobs[mid].get("state") in ("COMPLETED", "FAILED"):
                        pending.remove(mid)
            if pending:
                time.sleep(1.0)
        found = api.post(
            f"{MC}/{w.infer_cid}/memories/long-term/_search",
            json={"query": {"match_all": {}}, "size": 10_000, "_source": ["memory"]},
        )
        assert found.status_code == 200, found.text
    stored = [h["_source"]["memory"] for h in found.json()["hits"]["hits"]]
    lost = [fact for fact in load.infer_ids.values() if stored.count(fact) != 1]
    return jobs, lost


def test_a_data_node_killed_under_load_loses_nothing(world: World) -> None:
    manager = world.cluster.manager()
    _run_scenario(world, next(i for i in (1, 2, 3) if i != manager), "A: a data node")


def test_the_cluster_manager_killed_under_load_loses_nothing(world: World) -> None:
    world.cluster.wait_green(GREEN_WITHIN_S)
    _run_scenario(world, world.cluster.manager(), "B: the elected cluster manager")
