"""Kill the node mid-write: every acknowledged write survives whole, and no chunk is left without its record.

A node of this test's own (``scripts/opensearch-local`` on a free port, its own home and data folder under
``.cache/opensearch/node-kill``) and a proxy of its own. Writers run concurrently: GoodMem batch creates
(client-chosen ids, memories of one and of several chunks, two spaces) and ml-commons ``_memproxy_bulk``.
While they write, the node is killed with SIGKILL, then started again. Then, with the node's own eyes:

* every write answered 2xx is there whole: the record COMPLETED with all its chunks (counted in the node),
  retrievable; every ``_memproxy_bulk`` memory answered 2xx is there;
* no chunk anywhere lacks its record (counted in the node: 0), no record stays unfinished, and retrieve,
  list and ``_semantic_search`` show no ``MEMORY_LOAD_FAILED`` and nothing unfinished.

Writes in flight at the kill are settled by the proxy itself once the node is back (rolled back, or
completed when everything of them was stored); the counts are printed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, ProxyProcess, free_port
from tests.goodmem_helpers import root_api_key

pytestmark = [pytest.mark.timeout(420), pytest.mark.node]

MC = "/_plugins/_ml/memory_containers"
MEMORIES = "memproxy-goodmem-memories"
LONG_TERM = ".plugins-ml-am-*-memory-long-term,*-memory-long-term"
HOME = REPO / ".cache" / "opensearch" / "node-kill"
VERSION_DIR = "opensearch-3.6.0"
WILDCARDS = {"expand_wildcards": "all", "ignore_unavailable": "true", "allow_no_indices": "true"}
LONG_TEXT = (
    "Kettles boil water for tea. Teapots keep it warm. Cups hold it while it cools. "
    "Saucers catch the drops. Spoons stir in the sugar."
)
SMALL_CHUNKS = {"recursive": {"chunkSize": 30, "chunkOverlap": 0, "keepStrategy": "KEEP_END"}}


@dataclass
class Node:
    """The killable node: ``scripts/opensearch-local`` with this test's port and home."""

    port: int = field(default_factory=free_port)
    transport: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "OPENSEARCH_LOCAL_PORT": str(self.port),
            "OPENSEARCH_LOCAL_TRANSPORT_PORT": str(self.transport),
            "OPENSEARCH_LOCAL_HOME": str(HOME),
            "OPENSEARCH_LOCAL_HEAP": "512m",
        }

    def _script(self, command: str) -> None:
        done = subprocess.run(
            [str(REPO / "scripts" / "opensearch-local"), command],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"opensearch-local {command}: {done.returncode}\n{done.stderr[-3000:]}"

    def start(self) -> None:
        self._script("start")

    def stop(self) -> None:
        self._script("stop")

    def kill(self) -> None:
        pid = int((HOME / VERSION_DIR / "opensearch.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        raise AssertionError(f"node {pid} survived SIGKILL")


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    n = Node()
    shutil.rmtree(HOME / VERSION_DIR / "data", ignore_errors=True)  # a fresh cluster every run
    n.start()
    yield n
    n.stop()


@dataclass
class Ledger:
    """What the writers were told: acknowledged GoodMem memories, acknowledged ml-commons memories, and
    how many requests and items failed."""

    goodmem: dict[str, str] = field(default_factory=dict)  # memory id → space
    ml: set[str] = field(default_factory=set)
    failed_requests: int = 0
    failed_items: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _goodmem_writer(
    url: str, key: str, spaces: list[str], ledger: Ledger, stop: threading.Event, n: int
) -> None:
    with httpx.Client(base_url=url, headers={"x-api-key": key}, timeout=60) as client:
        round_ = 0
        while not stop.is_set():
            round_ += 1
            space = spaces[(n + round_) % len(spaces)]
            items = []
            for i in range(4):
                long = i % 2 == 0
                items.append(
                    {
                        "spaceId": space,
                        "memoryId": str(uuid.uuid4()),
                        "originalContent": LONG_TEXT if long else f"writer {n} round {round_} item {i}: tea",
                        "metadata": {"writer": n, "round": round_},
                        **({"chunkingConfig": SMALL_CHUNKS} if long else {}),
                    }
                )
            try:
                res = client.post("/v1/memories:batchCreate", json={"requests": items})
            except httpx.HTTPError:
                with ledger.lock:
                    ledger.failed_requests += 1
                time.sleep(0.2)
                continue
            if res.status_code not in (200, 207):
                with ledger.lock:
                    ledger.failed_requests += 1
                time.sleep(0.2)
                continue
            for result in res.json()["results"]:
                with ledger.lock:
                    if result["success"]:
                        ledger.goodmem[result["memoryId"]] = space
                    else:
                        ledger.failed_items += 1


def _ml_writer(url: str, key: str, cid: str, ledger: Ledger, stop: threading.Event, n: int) -> None:
    with httpx.Client(base_url=url, headers={"x-api-key": key}, timeout=60) as client:
        round_ = 0
        while not stop.is_set():
            round_ += 1
            body = {
                "memories": [
                    {"memory": f"ml writer {n} round {round_} memory {i} about coffee"} for i in range(5)
                ]
            }
            try:
                res = client.post(f"{MC}/{cid}/memories/long-term/_memproxy_bulk", json=body)
            except httpx.HTTPError:
                res = None
            with ledger.lock:
                if res is not None and res.status_code == 200:
                    ledger.ml.update(res.json()["long_term_memory_ids"])
                else:
                    ledger.failed_requests += 1
            if res is None or res.status_code != 200:
                time.sleep(0.2)


def _search_all(node_url: str, index: str, query: dict[str, Any], source: list[str]) -> list[dict[str, Any]]:
    res = httpx.post(
        f"{node_url}/{index}/_search",
        params=WILDCARDS,
        json={"size": 10_000, "query": query, "_source": source},
        timeout=60,
    )
    assert res.status_code == 200, res.text
    return list(res.json()["hits"]["hits"])


def _unfinished(node_url: str) -> list[dict[str, Any]]:
    return _search_all(
        node_url,
        MEMORIES,
        {"bool": {"must_not": [{"term": {"processing_status": "COMPLETED"}}]}},
        ["processing_status"],
    )


def _orphans(node_url: str) -> tuple[int, int]:
    """(chunks, chunks whose memory record does not exist), counted in the node."""
    chunks = _search_all(node_url, LONG_TERM, {"exists": {"field": "memory_id"}}, ["memory_id"])
    owners = sorted({c["_source"]["memory_id"] for c in chunks})
    found: set[str] = set()
    for start in range(0, len(owners), 1000):
        res = httpx.post(
            f"{node_url}/{MEMORIES}/_mget", json={"ids": owners[start : start + 1000]}, timeout=60
        )
        found |= {d["_id"] for d in res.json()["docs"] if d.get("found")}
    return len(chunks), sum(1 for c in chunks if c["_source"]["memory_id"] not in found)


def _await_chunk_bulk(node_url: str, within_s: float) -> bool:
    """Wait (polling the node's tasks) until a GoodMem chunk ``_bulk`` is running on a long-term index, so
    that the kill lands in the middle of one; False if none was seen in time (the kill happens anyway)."""
    until = time.monotonic() + within_s
    while time.monotonic() < until:
        try:
            tasks = httpx.get(
                f"{node_url}/_tasks",
                params={"actions": "indices:data/write/bulk*", "detailed": "true"},
                timeout=2,
            ).json()
        except httpx.HTTPError:
            return False
        for t in (t for n in tasks.get("nodes", {}).values() for t in n["tasks"].values()):
            description = t.get("description", "")
            # requests[N], indices[...]: a batch's chunks are more than the 5 memories of a _memproxy_bulk
            if (
                "long-term" in description
                and int(description.split("requests[", 1)[-1].split("]")[0] or 0) > 5
            ):
                return True
        time.sleep(0.01)
    return False


def _events(res: httpx.Response) -> list[dict[str, Any]]:
    assert res.status_code == 200, res.text
    return [json.loads(line) for line in res.text.splitlines() if line.strip()]


def test_acknowledged_writes_survive_a_node_kill_and_nothing_is_orphaned(node: Node) -> None:
    proxy = ProxyProcess(
        node.url, ["--opensearch-timeout-s", "10", "--cache-ttl-s", "0", "--log-level", "INFO"]
    )
    try:
        _run(node, proxy)
    finally:
        proxy.stop()


def _settled_writes(proxy: ProxyProcess) -> dict[str, int]:
    """How the proxy settled the writes the kill interrupted (its log: ``memory write <id>: <outcome>``)."""
    outcomes: dict[str, int] = {}
    for line in proxy.log().splitlines():
        for outcome in ("rolled back", "completed"):
            if "memory write" in line and line.rstrip().endswith(f": {outcome}"):
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


def _run(node: Node, proxy: ProxyProcess) -> None:
    t0 = time.monotonic()
    key = root_api_key(proxy.url, node.url)
    api = httpx.Client(base_url=proxy.url, headers={"x-api-key": key}, timeout=120)
    embedder = api.get("/v1/embedders").json()["embedders"][0]["embedderId"]
    spaces = [
        api.post(
            "/v1/spaces", json={"name": f"kill-{i}", "spaceEmbedders": [{"embedderId": embedder}]}
        ).json()["spaceId"]
        for i in range(2)
    ]
    cid = api.post(
        f"{MC}/_create",
        json={
            "name": "kill-ml",
            "configuration": {
                "embedding_model_type": "TEXT_EMBEDDING",
                "embedding_model_id": "all-minilm-l6-v2",
                "embedding_dimension": 384,
            },
        },
    ).json()["memory_container_id"]

    ledger, stop = Ledger(), threading.Event()
    writers = [
        threading.Thread(target=_goodmem_writer, args=(proxy.url, key, spaces, ledger, stop, n))
        for n in range(3)
    ] + [threading.Thread(target=_ml_writer, args=(proxy.url, key, cid, ledger, stop, 9))]
    for t in writers:
        t.start()
    deadline = time.monotonic() + 60
    while len(ledger.goodmem) < 24 and time.monotonic() < deadline:  # some acknowledged, more in flight
        time.sleep(0.1)
    mid_bulk = _await_chunk_bulk(node.url, within_s=20)
    node.kill()
    t_kill = time.monotonic()
    killed_with = len(ledger.goodmem)
    time.sleep(1.0)  # the writers keep trying against a dead node
    stop.set()
    for t in writers:
        t.join(timeout=90)
    node.start()
    t_up = time.monotonic()

    # Right after the restart: what the interrupted writes left (the proxy settles them in the background).
    unfinished_at_restart = len(_unfinished(node.url))
    chunks_at_restart, orphans_at_restart = _orphans(node.url)
    settle_by = time.monotonic() + 60
    while _unfinished(node.url) and time.monotonic() < settle_by:
        time.sleep(0.5)
    chunks, orphans = _orphans(node.url)
    unfinished = len(_unfinished(node.url))

    # Every acknowledged GoodMem memory: COMPLETED, with all its chunks in the node.
    records: dict[str, dict[str, Any]] = {}
    ids = sorted(ledger.goodmem)
    for start in range(0, len(ids), 1000):
        res = httpx.post(f"{node.url}/{MEMORIES}/_mget", json={"ids": ids[start : start + 1000]}, timeout=60)
        records |= {d["_id"]: d["_source"] for d in res.json()["docs"] if d.get("found")}
    per_memory: dict[str, int] = {}
    for c in _search_all(node.url, LONG_TERM, {"terms": {"memory_id": ids}}, ["memory_id"]) if ids else []:
        per_memory[c["_source"]["memory_id"]] = per_memory.get(c["_source"]["memory_id"], 0) + 1
    lost = [
        mid
        for mid in ids
        if mid not in records
        or records[mid]["processing_status"] != "COMPLETED"
        or per_memory.get(mid, 0) != records[mid]["chunk_count"]
        or records[mid]["space_id"] != ledger.goodmem[mid]
    ]
    ml_ids = sorted(ledger.ml)
    ml_found = set()
    if ml_ids:
        ml_found = {
            h["_id"]
            for h in _search_all(node.url, LONG_TERM, {"ids": {"values": ml_ids}}, ["memory_container_id"])
            if h["_source"]["memory_container_id"] == cid
        }
    ml_lost = sorted(set(ml_ids) - ml_found)

    print(
        f"\nnode kill (during a chunk _bulk: {mid_bulk}): acknowledged GoodMem memories {len(ids)} "
        f"(at the kill: {killed_with}), "
        f"acknowledged _memproxy_bulk memories {len(ml_ids)}; failed requests {ledger.failed_requests}, "
        f"failed items {ledger.failed_items}\n"
        f"  right after the restart: unfinished records {unfinished_at_restart}, chunks {chunks_at_restart}, "
        f"orphan chunks {orphans_at_restart}\n"
        f"  settled: lost {len(lost)} + {len(ml_lost)}, orphan chunks {orphans} of {chunks}, "
        f"unfinished records {unfinished}; interrupted writes the proxy settled: {_settled_writes(proxy)}\n"
        f"  writing {t_kill - t0:.1f} s, node down {t_up - t_kill:.1f} s, "
        f"checks {time.monotonic() - t_up:.1f} s"
    )
    assert ids and ml_ids, "the writers got nothing acknowledged before the kill"
    assert orphans_at_restart == 0 and orphans == 0
    assert not lost and not ml_lost
    assert unfinished == 0

    # Through the proxy: retrievable, listed, searchable; no load failures, nothing unfinished.
    for mid in ids[:: max(1, len(ids) // 10)]:
        got = api.get(f"/v1/memories/{mid}")
        assert got.status_code == 200 and got.json()["processingStatus"] == "COMPLETED"
    for space in spaces:
        events = _events(
            api.post(
                "/v1/memories:retrieve",
                json={"message": "tea kettles", "spaceKeys": [{"spaceId": space}], "requestedSize": 200},
            )
        )
        assert not [e for e in events if "status" in e and e["status"]["code"] == "MEMORY_LOAD_FAILED"]
        defs = [e["memoryDefinition"] for e in events if "memoryDefinition" in e]
        assert defs and all(d["processingStatus"] == "COMPLETED" and d["spaceId"] == space for d in defs)
        listed = api.get(f"/v1/spaces/{space}/memories", params={"maxResults": 500}).json()["memories"]
        assert {m["memoryId"] for m in listed} >= {m for m, s in ledger.goodmem.items() if s == space}
        assert all(m["processingStatus"] == "COMPLETED" for m in listed)
        hits = api.post(
            f"{MC}/{space}/memories/long-term/_semantic_search", json={"query": "tea", "k": 100}
        ).json()
        owners = {h["_source"].get("memory_id") for h in hits["hits"]["hits"]}
        assert owners <= set(records) | {m["memoryId"] for m in listed}
    retrieved = _events(
        api.post(
            "/v1/memories:retrieve",
            json={"message": LONG_TEXT, "spaceKeys": [{"spaceId": s} for s in spaces], "requestedSize": 5},
        )
    )
    assert any("retrievedItem" in e for e in retrieved)
    api.close()
