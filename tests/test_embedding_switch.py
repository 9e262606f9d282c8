"""Switching a container's embedding model without downtime (issue 27, item 3; docs/data-model.md,
"Switching the embedding model"): ``…/_memproxy_switch_embedding`` on real memproxy processes and the node.

The second model is a remote TEI embedder (``tests/support/tei_embedder.py``, the network edge only): its
vectors are seeded by the text, so a search for a memory's own text finds it with cosine 1 whichever
model embedded it, and its dimensions (64, 32) differ from the bundled model's 384: which model a
document was embedded by is visible in its vector's length.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from opensearchpy import OpenSearch

from tests.adversarial.tenants import make_tenant
from tests.conftest import ProxyProcess
from tests.opensearch_memory_helpers import EMBEDDER
from tests.support.tei_embedder import TeiEmbedder

pytestmark = pytest.mark.timeout(600)

MC = "/_plugins/_ml/memory_containers"
SWITCH = "_memproxy_switch_embedding"
USERS = 10


@pytest.fixture(scope="module")
def tei() -> Iterator[TeiEmbedder]:
    with TeiEmbedder() as server:
        yield server


def _flags(tei: TeiEmbedder) -> list[str]:
    return [
        "--auth",
        "none",
        "--embedder",
        f"hash64={tei.url_for(64)}#provider=tei,dimension=64",
        "--embedder",
        f"hash32={tei.url_for(32)}#provider=tei,dimension=32",
        "--jobs-lease-s",
        "3",
        "--jobs-poll-s",
        "0.2",
        "--cache-ttl-s",
        "0.5",
    ]


@pytest.fixture(scope="module")
def switch_proxy(opensearch_url: str, tei: TeiEmbedder) -> Iterator[ProxyProcess]:
    proxy = ProxyProcess(opensearch_url, extra_args=_flags(tei))
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def node(opensearch_url: str) -> OpenSearch:
    return OpenSearch(hosts=[opensearch_url], timeout=60)


@dataclass
class Searches:
    n: int = 0
    errors: list[str] = field(default_factory=list)
    missing: list[Any] = field(default_factory=list)


def _http(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=120)


def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def _container(http: httpx.Client, model: str, dimension: int, prefix: str | None = None) -> str:
    configuration = {
        "embedding_model_type": "TEXT_EMBEDDING",
        "embedding_model_id": model,
        "embedding_dimension": dimension,
        "index_prefix": prefix or f"mp-switch-{uuid.uuid4().hex[:8]}",
        "use_system_index": False,
    }
    body = {"name": "switch", "configuration": configuration}
    return str(_ok(http.post(f"{MC}/_create", json=body))["memory_container_id"])


def _texts(n: int, tag: str) -> list[str]:
    return [f"{tag} memory {i:05d}: the user's fact number {i}" for i in range(n)]


def _bulk(http: httpx.Client, cid: str, texts: list[str], start: int = 0) -> list[str]:
    ids: list[str] = []
    for at in range(0, len(texts), 2500):
        part = texts[at : at + 2500]
        memories = [
            {"memory": t, "namespace": {"user_id": f"u{(start + at + i) % USERS}"}}
            for i, t in enumerate(part)
        ]
        body = {"memories": memories}
        ids += _ok(http.post(f"{MC}/{cid}/memories/long-term/_memproxy_bulk", json=body))[
            "long_term_memory_ids"
        ]
    return ids


def _search(http: httpx.Client, cid: str, text: str, user: str, k: int = 3) -> list[dict[str, Any]]:
    body = {"query": text, "k": k, "namespace": {"user_id": user}}
    found = _ok(http.post(f"{MC}/{cid}/memories/long-term/_semantic_search", json=body))
    return list(found["hits"]["hits"])


def _progress(http: httpx.Client, cid: str) -> dict[str, Any]:
    return dict(_ok(http.get(f"{MC}/{cid}/{SWITCH}")))


def _wait(http: httpx.Client, cid: str, done: Any, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        progress = _progress(http, cid)
        if done(progress):
            return progress
        assert progress["state"] != "FAILED", progress
        assert time.monotonic() < deadline, progress
        time.sleep(0.2)


def _index_of(node: OpenSearch, cid: str) -> str:
    source = node.get(index=".plugins-ml-am-memory-container", id=cid)["_source"]
    return str(source.get("memproxy_long_term_index"))


def _docs(node: OpenSearch, index: str, cid: str) -> list[dict[str, Any]]:
    node.indices.refresh(index=index)
    query = {"term": {"memory_container_id": cid}}
    found = node.search(
        index=index, body={"query": query, "size": 10_000, "_source": ["memory_embedding", "memory"]}
    )
    return list(found["hits"]["hits"])


def _count(node: OpenSearch, index: str, cid: str) -> int:
    node.indices.refresh(index=index)
    return int(node.count(index=index, body={"query": {"term": {"memory_container_id": cid}}})["count"])


@pytest.fixture(scope="module")
def other_proxy(opensearch_url: str, tei: TeiEmbedder) -> Iterator[ProxyProcess]:
    """A second process on the same cluster with the default container cache (2 s): its searches may use a
    container record from before the switch."""
    flags = _flags(tei)
    proxy = ProxyProcess(opensearch_url, extra_args=flags[: flags.index("--cache-ttl-s")])
    yield proxy
    proxy.stop()


def test_a_switch_under_continuous_search_loses_nothing_and_keeps_writes(
    switch_proxy: ProxyProcess, other_proxy: ProxyProcess, node: OpenSearch
) -> None:
    http = _http(switch_proxy.url)
    cid = _container(http, EMBEDDER, 384)
    old_index = f"{_ok(http.get(f'{MC}/{cid}'))['configuration']['index_prefix']}-memory-long-term"
    began = time.monotonic()
    texts = _texts(5000, "bulk")
    ids = _bulk(http, cid, texts)
    written_s = time.monotonic() - began
    known = {i: (text, f"u{n % USERS}") for n, (i, text) in enumerate(zip(ids, texts, strict=True))}

    stop = threading.Event()
    searches = Searches()

    def searcher(url: str, seed: int) -> None:
        rng = random.Random(seed)
        with _http(url) as own:
            while not stop.is_set():
                memory_id = rng.choice(ids[2:4000])  # none of these is deleted or updated below
                text, user = known[memory_id]
                try:
                    hits = _search(own, cid, text, user)
                except Exception as exc:  # an error is what this test counts
                    searches.errors.append(repr(exc))
                    continue
                searches.n += 1
                if memory_id not in [h["_id"] for h in hits]:
                    searches.missing.append((memory_id, [(h["_id"], h["_score"]) for h in hits]))

    urls = (switch_proxy.url, other_proxy.url)
    threads = [threading.Thread(target=searcher, args=(url, n)) for n, url in enumerate(urls)]
    for thread in threads:
        thread.start()
    try:
        started = time.monotonic()
        body = {
            "embedding_model_id": "hash64",
            "embedding_dimension": 64,
            "grace_period_s": 2,
            "batch_size": 250,
        }
        created = _ok(http.post(f"{MC}/{cid}/{SWITCH}", json=body))
        assert set(created) == {"task_id", "status"} and created["status"] == "CREATED"
        midway = _wait(http, cid, lambda p: p["copied"] >= 1000 or p["switch_state"] != "copying")
        assert midway["switch_state"] == "copying", "the copy ended before the writes below: make it longer"
        assert midway["total"] == 5000 and midway["target"]["embedding_model_id"] == "hash64"
        # Searches still use the old model while it copies.
        assert _ok(http.get(f"{MC}/{cid}"))["configuration"]["embedding_model_id"] == EMBEDDER
        # Writes during the copy: added, updated (one already copied, one not yet), deleted (both kinds).
        added = _bulk(http, cid, _texts(20, "during"), start=5000)
        http.put(f"{MC}/{cid}/memories/long-term/{ids[0]}", json={"memory": "updated early memory"})
        http.put(f"{MC}/{cid}/memories/long-term/{ids[4999]}", json={"memory": "updated late memory"})
        for gone in (ids[1], ids[4998]):
            _ok(http.delete(f"{MC}/{cid}/memories/long-term/{gone}"))
        done = _wait(http, cid, lambda p: p["state"] == "COMPLETED")
        switched_s = time.monotonic() - started
        assert done["copied"] >= 5000 and done["attempts"] == 1 and done["errors"] == []
        # Searches go on after the switch (the other process's cached container, then the new index), and
        # that process's writes during the grace period reach both indices.
        late = _bulk(_http(other_proxy.url), cid, ["written by the other process in the grace period"])
        time.sleep(2.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()

    assert searches.errors == [] and searches.missing == []
    assert searches.n > 20
    configuration = _ok(http.get(f"{MC}/{cid}"))["configuration"]
    assert configuration["embedding_model_id"] == "hash64" and configuration["embedding_dimension"] == 64
    new_index = _index_of(node, cid)
    assert new_index.startswith(old_index + "-")
    docs = _docs(node, new_index, cid)
    by_id = {d["_id"]: d["_source"] for d in docs}
    expected = (set(ids) | set(added) | set(late)) - {ids[1], ids[4998]}
    assert len(docs) == len(by_id) == len(expected) and set(by_id) == expected  # each exactly once
    assert {len(s["memory_embedding"]) for s in by_id.values()} == {64}
    assert by_id[ids[0]]["memory"] == "updated early memory"
    assert by_id[ids[4999]]["memory"] == "updated late memory"
    # The new model answers: its own vectors, the memories written during the copy and the updates found.
    for memory_id, text, user in (
        (added[3], _texts(20, "during")[3], f"u{5003 % USERS}"),
        (ids[0], "updated early memory", "u0"),
        (ids[4999], "updated late memory", f"u{4999 % USERS}"),
    ):
        assert _search(http, cid, text, user)[0]["_id"] == memory_id
    assert ids[1] not in [h["_id"] for h in _search(http, cid, texts[1], "u1", k=10)]
    # After the grace period the old index loses the container's memories and the dual writes end.
    _wait(http, cid, lambda p: p["switch_state"] == "done")
    deadline = time.monotonic() + 30
    while _count(node, old_index, cid) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert _count(node, old_index, cid) == 0
    extra = _bulk(http, cid, ["after the grace"], start=0)
    assert (
        _count(node, old_index, cid) == 0
        and _search(http, cid, "after the grace", "u0")[0]["_id"] == extra[0]
    )
    print(
        f"\nembedding switch: {len(ids)} memories (written in {written_s:.1f} s), "
        f"switched in {switched_s:.1f} s; {searches.n} searches during it, "
        f"{len(searches.errors)} errors, {len(searches.missing)} missing"
    )
    http.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})


def test_a_migration_killed_mid_copy_resumes_from_its_checkpoint(
    opensearch_url: str, tei: TeiEmbedder, node: OpenSearch
) -> None:
    first = ProxyProcess(opensearch_url, extra_args=_flags(tei))
    second: ProxyProcess | None = None
    try:
        http = _http(first.url)
        cid = _container(http, "hash64", 64)
        ids = _bulk(http, cid, _texts(1200, "kill"))
        tei.delay_s[32] = 0.1  # 24 batches of 50: a copy of a few seconds to interrupt
        body = {"embedding_model_id": "hash32", "grace_period_s": 1, "batch_size": 50}
        task = _ok(http.post(f"{MC}/{cid}/{SWITCH}", json=body))["task_id"]
        at_kill = _wait(http, cid, lambda p: p["copied"] >= 400)
        first.proc.kill()  # SIGKILL: no hand-back, the lease must expire
        first.proc.wait(10)
        assert 400 <= at_kill["copied"] < 1200
        second = ProxyProcess(opensearch_url, extra_args=_flags(tei))
        http = _http(second.url)
        done = _wait(http, cid, lambda p: p["state"] == "COMPLETED", timeout=120)
        job = node.get(index="memproxy-jobs", id=task)["_source"]
        # At least the killed attempt and the one that finished; with a 3 s lease a busy machine may cost
        # another lost lease (at-least-once), which must also resume, and nothing else may fail.
        assert job["attempts"] >= 2 and done["errors"], done
        assert all("lost its lease" in error for error in done["errors"]), done["errors"]
        # It resumed from its checkpoint (at least what was copied when it was killed), not from zero.
        assert job["result"]["resumed_from"] >= at_kill["copied"] and job["result"]["copied"] == 1200
        docs = _docs(node, _index_of(node, cid), cid)
        assert len(docs) == 1200 and {d["_id"] for d in docs} == set(ids)
        assert {len(d["_source"]["memory_embedding"]) for d in docs} == {32}
        print(
            f"\nkilled at {at_kill['copied']} of 1200 copied; resumed from {job['result']['resumed_from']}, "
            f"attempts {job['attempts']}"
        )
        http.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})
    finally:
        tei.delay_s.pop(32, None)
        first.stop()
        if second is not None:
            second.stop()


def test_cancel_keeps_the_old_model_and_empties_the_new_index(
    switch_proxy: ProxyProcess, tei: TeiEmbedder, node: OpenSearch
) -> None:
    http = _http(switch_proxy.url)
    cid = _container(http, "hash64", 64)
    ids = _bulk(http, cid, _texts(600, "cancel"))
    tei.delay_s[32] = 0.2
    try:
        body = {"embedding_model_id": "hash32", "batch_size": 20}
        task = _ok(http.post(f"{MC}/{cid}/{SWITCH}", json=body))["task_id"]
        again = http.post(f"{MC}/{cid}/{SWITCH}", json=body)
        assert again.status_code == 409 and task in again.text
        _wait(http, cid, lambda p: p["copied"] >= 60)
        deleted = http.delete(f"{MC}/{cid}/memories/long-term/{ids[599]}")  # a tombstone in the new index
        assert deleted.status_code == 200
        assert _ok(http.delete(f"{MC}/{cid}/{SWITCH}")) == {"task_id": task, "status": "CANCELLED"}
        assert http.delete(f"{MC}/{cid}/{SWITCH}").status_code == 404
        ended = _wait(http, cid, lambda p: p["state"] in ("CANCELLED", "COMPLETED"), timeout=60)
        assert ended["state"] == "CANCELLED" and ended["switch_state"] == "done"
    finally:
        tei.delay_s.pop(32, None)
    configuration = _ok(http.get(f"{MC}/{cid}"))["configuration"]
    assert configuration["embedding_model_id"] == "hash64"
    prefix = configuration["index_prefix"]
    new_indices = list(node.indices.get(index=f"{prefix}-memory-long-term-*"))
    assert len(new_indices) == 1
    node.indices.refresh(index=new_indices[0])
    assert node.count(index=new_indices[0])["count"] == 0  # no copies, no tombstones
    assert _search(http, cid, _texts(600, "cancel")[5], "u5")[0]["_id"] == ids[5]
    assert _count(node, f"{prefix}-memory-long-term", cid) == 599
    http.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})


def test_bad_switch_requests_are_400_and_missing_ones_404(switch_proxy: ProxyProcess) -> None:
    http = _http(switch_proxy.url)
    cid = _container(http, "hash64", 64)
    cases = [
        ({"embedding_model_id": "no-such-model"}, "Embedding model with ID no-such-model not found"),
        ({"embedding_model_id": "hash64"}, "already uses the embedding model hash64"),
        ({"embedding_model_id": "hash32", "embedding_dimension": 64}, "does not match the dimension"),
        ({"embedding_dimension": 32}, "embedding_model_id is required"),
        ({"embedding_model_id": "hash32", "model": "x"}, "unknown field(s) model"),
        ({"embedding_model_id": "hash32", "grace_period_s": -1}, "grace_period_s must be between"),
    ]
    for body, reason in cases:
        answer = http.post(f"{MC}/{cid}/{SWITCH}", json=body)
        assert answer.status_code == 400 and reason in answer.json()["error"]["reason"], (body, answer.text)
    assert http.post(f"{MC}/{cid}/{SWITCH}").status_code == 400  # no body
    assert http.get(f"{MC}/{cid}/{SWITCH}").status_code == 404
    assert http.delete(f"{MC}/{cid}/{SWITCH}").status_code == 404
    bare = _ok(http.post(f"{MC}/_create", json={"name": "no embedding"}))["memory_container_id"]
    answer = http.post(f"{MC}/{bare}/{SWITCH}", json={"embedding_model_id": "hash32"})
    assert answer.status_code == 400 and "no embedding model" in answer.text
    assert (
        http.post(f"{MC}/{uuid.uuid4()}/{SWITCH}", json={"embedding_model_id": "hash32"}).status_code == 404
    )
    assert _ok(http.get(f"{MC}/{cid}"))["configuration"]["embedding_model_id"] == "hash64"
    for c in (cid, bare):
        http.delete(f"{MC}/{c}", params={"delete_all_memories": "true"})


def test_a_caller_without_access_is_refused(proxy_url: str, admin_headers: dict[str, str]) -> None:
    with httpx.Client(base_url=proxy_url, headers=admin_headers, timeout=60) as admin:
        cid = _container(admin, EMBEDDER, 384)
        other = make_tenant(admin, "switch-outsider")
        try:
            with httpx.Client(base_url=proxy_url, headers=other.headers, timeout=60) as outsider:
                body = {"embedding_model_id": EMBEDDER}
                for method in ("POST", "GET", "DELETE"):
                    answer = outsider.request(
                        method, f"{MC}/{cid}/{SWITCH}", json=body if method == "POST" else None
                    )
                    assert answer.status_code in (403, 404), (method, answer.text)
            # The container is untouched, and its owner's request reaches the handler (400: same model).
            assert admin.post(f"{MC}/{cid}/{SWITCH}", json=body).status_code == 400
            assert admin.get(f"{MC}/{cid}/{SWITCH}").status_code == 404
        finally:
            admin.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})


def test_a_container_edited_then_deleted_mid_switch_leaves_nothing_in_the_new_index(
    switch_proxy: ProxyProcess, tei: TeiEmbedder, node: OpenSearch
) -> None:
    http = _http(switch_proxy.url)
    cid = _container(http, "hash64", 64)
    _bulk(http, cid, _texts(300, "deleted"))
    prefix = _ok(http.get(f"{MC}/{cid}"))["configuration"]["index_prefix"]
    tei.delay_s[32] = 0.2
    try:
        body = {"embedding_model_id": "hash32", "batch_size": 20}
        task = _ok(http.post(f"{MC}/{cid}/{SWITCH}", json=body))["task_id"]
        _wait(http, cid, lambda p: p["copied"] >= 40)
        change = {
            "configuration": {
                "embedding_model_type": "TEXT_EMBEDDING",
                "embedding_model_id": "hash32",
                "embedding_dimension": 32,
            }
        }
        refused = http.put(f"{MC}/{cid}", json=change)  # only the switch changes a container's embedding
        assert refused.status_code == 400 and "Cannot change embedding configuration" in refused.text
        assert _ok(http.put(f"{MC}/{cid}", json={"description": "still editable"}))["result"] == "updated"
        _ok(http.delete(f"{MC}/{cid}"))
    finally:
        tei.delay_s.pop(32, None)
    job = _wait_job(node, task)
    assert job["state"] == "COMPLETED" and job["result"]["cancelled"] is True
    [new_index] = list(node.indices.get(index=f"{prefix}-memory-long-term-*"))
    node.indices.refresh(index=new_index)
    assert node.count(index=new_index)["count"] == 0


def test_the_count_check_repairs_what_the_dual_writes_missed(
    switch_proxy: ProxyProcess, tei: TeiEmbedder, node: OpenSearch
) -> None:
    http = _http(switch_proxy.url)
    cid = _container(http, "hash64", 64)
    ids = _bulk(http, cid, _texts(200, "repair"))
    prefix = _ok(http.get(f"{MC}/{cid}"))["configuration"]["index_prefix"]
    old_index = f"{prefix}-memory-long-term"
    # Slow enough (10 batches of 0.5 s) that the writes below land while the copy still runs, however busy
    # the machine: a copy that has already switched would have nothing left to repair.
    tei.delay_s[32] = 0.5
    try:
        body = {"embedding_model_id": "hash32", "grace_period_s": 1, "batch_size": 20}
        task = _ok(http.post(f"{MC}/{cid}/{SWITCH}", json=body))["task_id"]
        progress = _wait(http, cid, lambda p: p["copied"] >= 20)
        new_index = progress["target"]["index"]
        # Behind memproxy's back: a memory only the old index has (after the copy's snapshot) and a stray one
        # only the new index has: the copy cannot see either.
        stored = node.get(index=old_index, id=ids[0], routing=cid)["_source"]
        node.index(index=old_index, id="only-in-old", body={**stored, "memory": "only in old"}, routing=cid)
        stray = {"memory": "stray", "memory_container_id": cid}
        node.index(index=new_index, id="only-in-new", body=stray, routing=cid)
        _wait(http, cid, lambda p: p["state"] == "COMPLETED")
    finally:
        tei.delay_s.pop(32, None)
    result = node.get(index="memproxy-jobs", id=task)["_source"]["result"]
    assert result["repaired"] == {"missing": 1, "extra": 1}
    docs = _docs(node, new_index, cid)
    assert {d["_id"] for d in docs} == {*ids, "only-in-old"}
    assert {len(d["_source"]["memory_embedding"]) for d in docs} == {32}
    http.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})


def _wait_job(node: OpenSearch, job_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = node.get(index="memproxy-jobs", id=job_id)["_source"]
        if job["state"] in ("COMPLETED", "FAILED") or time.monotonic() > deadline:
            return job
        time.sleep(0.2)


def test_a_goodmem_space_switches_its_embedder(
    proxy_url: str, admin_headers: dict[str, str], tei: TeiEmbedder, node: OpenSearch
) -> None:
    """The same switch through GoodMem's routes, to an embedder registered through GoodMem (a remote TEI)."""
    with httpx.Client(base_url=proxy_url, headers=admin_headers, timeout=120) as http:
        registered = http.post(
            "/v1/embedders",
            json={
                "displayName": f"switch-{uuid.uuid4().hex[:6]}",
                "providerType": "TEI",
                "endpointUrl": tei.url_for(64),
                "modelIdentifier": "hash64",
                "dimensionality": 64,
            },
        )
        assert registered.status_code == 201, registered.text
        new_embedder = registered.json()["embedderId"]
        default = http.get("/v1/embedders").json()["embedders"][0]["embedderId"]
        space = http.post(
            "/v1/spaces",
            json={"name": f"switch-{uuid.uuid4().hex[:6]}", "spaceEmbedders": [{"embedderId": default}]},
        ).json()["spaceId"]
        try:
            texts = _texts(40, "space")
            for text in texts:
                made = http.post("/v1/memories", json={"spaceId": space, "originalContent": text})
                assert made.status_code in (200, 201), made.text
            assert http.get(f"/v1/spaces/{space}/embedderSwitch").status_code == 404
            bad = http.post(f"/v1/spaces/{space}:switchEmbedder", json={"embedderId": default})
            assert bad.status_code == 400 and "already uses" in bad.json()["error"]
            started = http.post(
                f"/v1/spaces/{space}:switchEmbedder",
                json={"embedderId": new_embedder, "gracePeriodSeconds": 0},
            )
            assert started.status_code == 200 and started.json()["status"] == "CREATED", started.text
            deadline = time.monotonic() + 120
            while (progress := http.get(f"/v1/spaces/{space}/embedderSwitch").json())["state"] != "COMPLETED":
                assert progress["state"] != "FAILED" and time.monotonic() < deadline, progress
                time.sleep(0.3)
            assert progress["jobId"] == started.json()["jobId"] and progress["copied"] == progress["total"]
            shown = http.get(f"/v1/spaces/{space}").json()
            assert [e["embedderId"] for e in shown["spaceEmbedders"]] == [new_embedder]
            chunks = _docs(node, _index_of(node, space), space)
            assert len(chunks) >= 40 and {len(c["_source"]["memory_embedding"]) for c in chunks} == {64}
            assert {c["_source"]["memory"] for c in chunks} >= set(texts)
            cancel = http.post(f"/v1/spaces/{space}:cancelEmbedderSwitch")
            assert cancel.status_code in (404, 409), cancel.text  # done, or still in its grace period
        finally:
            http.delete(f"/v1/spaces/{space}")
            http.delete(f"/v1/embedders/{new_embedder}")


def test_a_family_index_a_switch_still_writes_to_is_not_dropped_with_another_container(
    switch_proxy: ProxyProcess, node: OpenSearch
) -> None:
    http = _http(switch_proxy.url)
    cid = _container(http, "hash64", 64)
    prefix = _ok(http.get(f"{MC}/{cid}"))["configuration"]["index_prefix"]
    old_index = f"{prefix}-memory-long-term"
    _bulk(http, cid, _texts(50, "family"))
    body = {"embedding_model_id": "hash32", "grace_period_s": 60}
    _ok(http.post(f"{MC}/{cid}/{SWITCH}", json=body))
    _wait(http, cid, lambda p: p["state"] == "COMPLETED" and p["switch_state"] == "switched")
    # Another container of the family, on the old model, deleted with its indices: the old index is the
    # switched container's mirror for the grace period, so it only loses the other container's documents.
    other = _container(http, "hash64", 64, prefix=prefix)
    _bulk(http, other, ["the other container's memory"])
    _ok(http.delete(f"{MC}/{other}", params={"delete_all_memories": "true"}))
    assert node.indices.exists(index=old_index)
    late = _bulk(http, cid, ["written in the grace period"])
    assert node.get(index=old_index, id=late[0], routing=cid)["found"]
    assert (
        len(node.get(index=_index_of(node, cid), id=late[0], routing=cid)["_source"]["memory_embedding"])
        == 32
    )
    http.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})


def test_a_switch_that_fails_for_good_is_undone(
    opensearch_url: str, tei: TeiEmbedder, node: OpenSearch
) -> None:
    proxy = ProxyProcess(opensearch_url, extra_args=[*_flags(tei), "--jobs-max-attempts", "1"])
    tei.failing.add(32)  # the new model's provider is down for the whole switch
    try:
        http = _http(proxy.url)
        cid = _container(http, "hash64", 64)
        ids = _bulk(http, cid, _texts(30, "failing"))
        _ok(http.post(f"{MC}/{cid}/{SWITCH}", json={"embedding_model_id": "hash32", "batch_size": 10}))
        deadline = time.monotonic() + 120
        while (progress := _progress(http, cid))["state"] != "FAILED":
            assert progress["state"] != "COMPLETED" and time.monotonic() < deadline, progress
            time.sleep(0.3)
        assert progress["stage"] == "copy" and progress["error"]
        # The failure hook undid it: the old model, no switch, nothing of it in the new index.
        assert _progress(http, cid)["switch_state"] == "done"
        configuration = _ok(http.get(f"{MC}/{cid}"))["configuration"]
        assert configuration["embedding_model_id"] == "hash64"
        [new_index] = list(node.indices.get(index=f"{configuration['index_prefix']}-memory-long-term-*"))
        assert _count(node, new_index, cid) == 0
        # Writes no longer need the new model: they succeed, in the old index only.
        late = _bulk(http, cid, ["after the failed switch"])
        assert _count(node, f"{configuration['index_prefix']}-memory-long-term", cid) == len(ids) + 1
        assert _search(http, cid, "after the failed switch", "u0")[0]["_id"] == late[0]
        http.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})
    finally:
        tei.failing.discard(32)
        proxy.stop()


def test_an_erasure_during_a_switch_erases_the_copy_too(
    switch_proxy: ProxyProcess, tei: TeiEmbedder, node: OpenSearch
) -> None:
    """Erasure (proxy.core.erasure) deletes on the container's index in force; a switch under way holds a
    second copy: in the new index while it copies, in the old one for the grace period after the switch.
    Neither may keep what was erased."""
    http = _http(switch_proxy.url)
    cid = _container(http, "hash64", 64)
    prefix = _ok(http.get(f"{MC}/{cid}"))["configuration"]["index_prefix"]
    texts = _texts(600, "erase")
    ids = _bulk(http, cid, texts)
    of_user = {u: {i for n, i in enumerate(ids) if n % USERS == u} for u in (1, 2)}
    tei.delay_s[32] = 0.1
    try:
        body = {"embedding_model_id": "hash32", "batch_size": 20, "grace_period_s": 600}
        _ok(http.post(f"{MC}/{cid}/{SWITCH}", json=body))
        _wait(http, cid, lambda p: p["copied"] >= 300)  # half copied: u1's first memories are in both
        receipt = _ok(http.post(f"{MC}/{cid}/_memproxy_erase", json={"user_id": "u1"}))
        assert receipt["total_deleted"] == len(of_user[1]) and receipt["verification"]["verified"] is True
    finally:
        tei.delay_s.pop(32, None)
    _wait(http, cid, lambda p: p["switch_state"] == "switched")  # the old index is kept for 600 s
    receipt = _ok(http.post(f"{MC}/{cid}/_memproxy_erase", json={"user_id": "u2"}))
    assert receipt["total_deleted"] == len(of_user[2])
    erased = of_user[1] | of_user[2]
    for index in (_index_of(node, cid), f"{prefix}-memory-long-term"):
        kept = {h["_id"] for h in _docs(node, index, cid) if h["_source"].get("memory")}
        assert not kept & erased, (index, sorted(kept & erased)[:5])
        assert kept == set(ids) - erased, index
    assert _search(http, cid, texts[1], "u1") == [] and _search(http, cid, texts[2], "u2") == []
    assert _search(http, cid, texts[3], "u3")[0]["_id"] == ids[3]
    http.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})
