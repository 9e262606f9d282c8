"""Several memproxy processes on one port, and processes that stop: ``--workers`` and graceful shutdown
(proxy/serve/, docs/operations.md), end to end on the real node with the real model.

* a rolling restart (SIGHUP to the supervisor of ``--workers 2``) under a steady mixed load of keep-alive
  clients of both APIs (writes, searches, streamed retrieves): no request fails, every acknowledged write is
  there afterwards;
* kill -9 of a worker while it streams a retrieve and runs an infer job: the stream ends in an error the
  client sees (never a hang), the job is finished by another process once its lease expires, and the port
  keeps answering (the other worker, then the supervisor's replacement);
* SIGTERM to a single process while it streams and runs a job: health turns 503 "draining" with
  ``Connection: close``, the stream completes, the job is handed back (another process runs it, its
  attempt not counted), and the process exits 0.

The LLM of the post-processor and of the infer jobs is the deterministic fake behind a gate
(tests/support/gated_llm.py) that holds calls until the test lets them go, so "mid-stream" and "mid-job"
are states the test waits for, not timings it hopes for. Cache coherence across processes within
``--cache-ttl-s`` is tested in tests/test_cache.py (two processes, one node).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from tests.conftest import ProxyProcess, llm_flags
from tests.goodmem_helpers import root_api_key
from tests.support.fake_llm import FakeLLM
from tests.support.gated_llm import GatedLLM

MC = "/_plugins/_ml/memory_containers"
INFER_LLM = "memproxy-llm"
# GoodMem's post-processor names its LLM by a UUID (a start-up --llm may have any id).
PP_LLM = "0192f6a0-0000-7000-8000-00000000e001"
CHAT = "com.goodmem.retrieval.postprocess.ChatPostProcessorFactory"
EMBEDDER = "all-MiniLM-L6-v2"


@dataclass
class Cluster:
    gate: GatedLLM
    workers: ProxyProcess  # --workers 2
    single: ProxyProcess
    key: str
    space: str
    container: str
    opensearch_url: str

    @property
    def headers(self) -> dict[str, str]:
        return {"x-api-key": self.key}


@pytest.fixture(scope="module")
def cluster(opensearch_url: str, fake_llm: FakeLLM) -> Iterator[Cluster]:
    gate = GatedLLM(fake_llm.url, hold=0)
    flags = [
        *llm_flags(gate.url, (INFER_LLM,)),
        *llm_flags(gate.url, (PP_LLM,)),
        "--jobs-lease-s",
        "3",
        "--jobs-poll-s",
        "0.2",
        "--shutdown-timeout-s",
        "20",
    ]
    # Started together: each process loads its model, and that is most of the time this module takes.
    workers = ProxyProcess(opensearch_url, flags, workers=2, wait=False)
    single = ProxyProcess(opensearch_url, flags, wait=False)
    try:
        # Bounded generously: three model loads at once on two shared cores.
        workers.wait_ready(timeout=400)
        single.wait_ready(timeout=400)
        key = root_api_key(workers.url, opensearch_url)
        headers = {"x-api-key": key}
        space = requests.post(
            workers.url + "/v1/spaces",
            json={"name": f"workers-{uuid.uuid4().hex[:8]}", "spaceEmbedders": [{"embedderId": EMBEDDER}]},
            headers=headers,
            timeout=60,
        )
        assert space.status_code in (200, 201), space.text
        prefix = f"workers-{uuid.uuid4().hex[:8]}"
        container = requests.post(
            f"{workers.url}{MC}/_create",
            json={
                "name": prefix,
                "configuration": {
                    "embedding_model_type": "TEXT_EMBEDDING",
                    "embedding_model_id": EMBEDDER,
                    "embedding_dimension": 384,
                    "llm_id": INFER_LLM,
                    "index_prefix": prefix,
                    "use_system_index": False,
                    "disable_session": True,
                    "strategies": [{"type": "SEMANTIC", "namespace": ["user_id"]}],
                },
            },
            headers=headers,
            timeout=60,
        )
        assert container.status_code == 200, container.text
        world = Cluster(
            gate,
            workers,
            single,
            key,
            space.json()["spaceId"],
            container.json()["memory_container_id"],
            opensearch_url,
        )
        for text in ("The budget was approved in March.", "Cats sleep on warm windowsills."):
            made = requests.post(
                workers.url + "/v1/memories",
                json={"spaceId": world.space, "originalContent": text},
                headers=headers,
                timeout=60,
            )
            assert made.status_code in (200, 201), made.text
        yield world
        requests.delete(f"{workers.url}/v1/spaces/{world.space}", headers=headers, timeout=60)
        requests.delete(
            f"{workers.url}{MC}/{world.container}",
            params={"delete_all_memories": "true"},
            headers=headers,
            timeout=60,
        )
    finally:
        gate.close()
        workers.stop()
        single.stop()


def _retrieve_body(space: str, query: str, *, llm: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"message": query, "spaceKeys": [{"spaceId": space}], "requestedSize": 2}
    if llm:
        body["postProcessor"] = {"name": CHAT, "config": {"llm_id": PP_LLM}}
    return body


def _job(opensearch_url: str, subject: str) -> dict[str, Any]:
    body = {"query": {"term": {"subject": subject}}, "size": 1}
    req = urllib.request.Request(
        f"{opensearch_url}/memproxy-jobs/_search?seq_no_primary_term=false",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        hits = json.loads(resp.read())["hits"]["hits"]
    return dict(hits[0]["_source"]) if hits else {}


def _wait_job(opensearch_url: str, subject: str, states: tuple[str, ...], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = _job(opensearch_url, subject)
        if job.get("state") in states:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job of {subject} not in {states} after {timeout}s: {job}")


def _infer(world: Cluster, url: str, text: str) -> str:
    """An add with ``infer: true`` (its extraction runs as a job); the working memory id (the job's
    subject)."""
    added = requests.post(
        f"{url}{MC}/{world.container}/memories",
        json={
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
            "namespace": {"user_id": f"u-{uuid.uuid4().hex[:6]}"},
            "infer": True,
        },
        headers=world.headers,
        timeout=60,
    )
    assert added.status_code == 200, added.text
    return str(added.json()["working_memory_id"])


class Stream:
    """A streamed retrieve read in a thread: its first line as soon as it comes, then how it ended."""

    def __init__(self, url: str, world: Cluster, query: str) -> None:
        self.first_line = threading.Event()
        self.lines: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.ended = threading.Event()
        body = _retrieve_body(world.space, query, llm=True)
        self._thread = threading.Thread(target=self._read, args=(url, body, world.headers), daemon=True)
        self._thread.start()

    def _read(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        try:
            with requests.post(
                url + "/v1/memories:retrieve", json=body, headers=headers, stream=True, timeout=60
            ) as resp:
                assert resp.status_code == 200, resp.text
                for line in resp.iter_lines():
                    if line.strip():
                        self.lines.append(json.loads(line))
                        self.first_line.set()
        except BaseException as exc:  # what the client sees is the test's subject
            self.error = exc
        finally:
            self.ended.set()

    @property
    def complete(self) -> bool:
        return self.error is None and any("abstractReply" in e for e in self.lines)


# --- rolling restart under load ---------------------------------------------------------------------------


@dataclass
class Load:
    """Client threads, each with its own keep-alive session, looping over one kind of request."""

    world: Cluster
    url: str
    stop: threading.Event = field(default_factory=threading.Event)
    failures: list[str] = field(default_factory=list)
    done: dict[str, int] = field(default_factory=dict)
    ml_ids: list[str] = field(default_factory=list)
    gm_ids: list[str] = field(default_factory=list)

    def run(self, name: str, step: Any) -> threading.Thread:
        def loop() -> None:
            session = requests.Session()
            session.headers.update(self.world.headers)
            n = 0
            while not self.stop.is_set():
                try:
                    step(session, n)
                except Exception as exc:  # every failure is counted and reported, none stops the load
                    self.failures.append(f"{name} #{n}: {type(exc).__name__}: {exc}")
                n += 1
                self.done[name] = n

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        return thread

    def ml_add(self, session: requests.Session, n: int) -> None:
        resp = session.post(
            f"{self.url}{MC}/{self.world.container}/memories",
            json={
                "messages": [{"role": "user", "content": [{"type": "text", "text": f"load note {n}"}]}],
                "namespace": {"user_id": "load"},
                "infer": False,
            },
            timeout=60,
        )
        assert resp.status_code == 200, resp.text
        self.ml_ids.append(resp.json()["working_memory_id"])

    def ml_search(self, session: requests.Session, n: int) -> None:
        path = "memories/working/_search" if n % 2 else "memories/long-term/_semantic_search"
        body: dict[str, Any] = {"query": {"match_all": {}}, "size": 3} if n % 2 else {"query": "note", "k": 3}
        resp = session.post(f"{self.url}{MC}/{self.world.container}/{path}", json=body, timeout=60)
        assert resp.status_code == 200, resp.text

    def gm_create(self, session: requests.Session, n: int) -> None:
        resp = session.post(
            self.url + "/v1/memories",
            json={"spaceId": self.world.space, "originalContent": f"load memory {n}"},
            timeout=60,
        )
        assert resp.status_code in (200, 201), resp.text
        self.gm_ids.append(resp.json()["memoryId"])

    def gm_retrieve(self, session: requests.Session, n: int) -> None:
        body = _retrieve_body(self.world.space, f"budget {n}", llm=False)
        with session.post(self.url + "/v1/memories:retrieve", json=body, stream=True, timeout=60) as resp:
            assert resp.status_code == 200, resp.text
            events = [json.loads(line) for line in resp.iter_lines() if line.strip()]
        assert any("retrievedItem" in e for e in events), events


@pytest.mark.timeout(900)
def test_a_rolling_restart_under_load_fails_no_request(cluster: Cluster) -> None:
    sup = cluster.workers
    before = sup.worker_pids()
    assert len(before) == 2
    load = Load(cluster, sup.url)
    threads = [
        load.run("ml-add", load.ml_add),
        load.run("ml-search", load.ml_search),
        load.run("gm-create", load.gm_create),
        load.run("gm-retrieve", load.gm_retrieve),
    ]
    try:
        time.sleep(1)
        os.kill(sup.proc.pid, signal.SIGHUP)
        sup.wait_log("rolling restart done", timeout=400)
        time.sleep(1)  # the new workers serve the load too
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(90)
    after = sup.worker_pids()
    print(f"rolling restart: {load.done} requests, workers {before} -> {after}")
    assert load.failures == []
    assert len(after) == 2 and not set(after) & set(before)
    assert all(load.done.get(name, 0) >= 3 for name in ("ml-add", "ml-search", "gm-create", "gm-retrieve"))
    # Every acknowledged write is there, read through the new workers.
    with requests.Session() as s:
        s.headers.update(cluster.headers)
        for wid in load.ml_ids:
            got = s.get(f"{sup.url}{MC}/{cluster.container}/memories/working/{wid}", timeout=60)
            assert got.status_code == 200, got.text
        for mid in load.gm_ids:
            got = s.get(f"{sup.url}/v1/memories/{mid}", timeout=60)
            assert got.status_code == 200, got.text


# --- kill -9 of a worker mid-stream and mid-job ----------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_worker_killed_mid_stream_and_mid_job(cluster: Cluster) -> None:
    sup, gate = cluster.workers, cluster.gate
    victim, other = sup.worker_pids()
    gate.hold, gate.calls = 2, 0
    # The other worker cannot accept while stopped: the stream and the job's request both reach the victim
    # (and the job is the victim's: a process runs the jobs it enqueues first).
    os.kill(other, signal.SIGSTOP)
    try:
        subject = _infer(cluster, sup.url, "I only drink green tea.")
        stream = Stream(sup.url, cluster, "who approved the budget")
        gate.wait_held(2)
        assert stream.first_line.wait(30), "the retrieve sent nothing before its LLM call"
        job = _job(cluster.opensearch_url, subject)
        assert job["state"] == "RUNNING" and f":{victim}:" in job["lease_owner"], job
    finally:
        os.kill(other, signal.SIGCONT)
    started = sup.log().count(") started")
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    assert stream.ended.wait(30), "the stream hung after its worker died"
    assert stream.error is not None and not stream.complete  # an error the client sees, not a clean end
    gate.hold = 0
    gate.release()
    done = _wait_job(cluster.opensearch_url, subject, ("COMPLETED", "FAILED"), timeout=60)
    assert done["state"] == "COMPLETED", done
    assert done["attempts"] == 2 and f":{victim}:" not in str(done["history"][-1]["worker"]), done
    took = time.monotonic() - killed_at
    print(f"killed mid-job: finished by {done['history'][-1]['worker']} {took:.1f} s later")
    # The port keeps answering: the other worker now, the supervisor's replacement soon.
    for _ in range(5):
        assert requests.get(sup.url + "/_memproxy/health", timeout=30).status_code == 200
    sup.wait_log(f"(pid {victim}) died (killed by SIGKILL)")
    sup.wait_log(") started", count=started + 1)  # the supervisor's replacement, loading its model


# --- graceful SIGTERM of a single process -----------------------------------------------------------------


@pytest.mark.timeout(300)
def test_sigterm_finishes_the_stream_hands_the_job_back_and_exits_0(cluster: Cluster) -> None:
    single, gate = cluster.single, cluster.gate
    gate.hold, gate.calls = 2, 0
    subject = _infer(cluster, single.url, "I live in Lisbon.")
    query = f"who approved the budget {uuid.uuid4().hex[:6]}"
    stream = Stream(single.url, cluster, query)
    gate.wait_held(2)
    assert stream.first_line.wait(30)
    job = _job(cluster.opensearch_url, subject)
    assert job["state"] == "RUNNING" and f":{single.proc.pid}:" in job["lease_owner"], job
    session = requests.Session()  # a keep-alive connection opened before the signal
    assert session.get(single.url + "/_memproxy/health", timeout=30).status_code == 200
    single.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 2
    health = session.get(single.url + "/_memproxy/health", timeout=30)
    while health.status_code == 200 and time.monotonic() < deadline:
        health = session.get(single.url + "/_memproxy/health", timeout=30)
    # The next request on that connection: draining, and the connection closes.
    assert health.status_code == 503 and health.json()["status"] == "draining", health.text
    assert health.headers.get("Connection", "").lower() == "close"
    # The stream in flight completes once its LLM answers; the job's LLM call is still held.
    assert gate.release(query) == 1
    assert stream.ended.wait(30)
    assert stream.complete, (stream.error, stream.lines[-2:])
    assert single.proc.wait(40) == 0
    # Handed back, not left to expire: another process (a worker of the supervisor) runs it at once, and the
    # interrupted attempt is not counted.
    gate.hold = 0
    gate.release()
    done = _wait_job(cluster.opensearch_url, subject, ("COMPLETED", "FAILED"), timeout=30)
    assert done["state"] == "COMPLETED" and done["attempts"] == 1, done
    assert f":{single.proc.pid}:" not in str(done["history"][-1]["worker"])
    log = single.log()
    assert "stopping" in log and "Traceback" not in log


def test_the_workers_and_shutdown_flags_are_validated() -> None:
    from proxy.config import parse_settings

    settings = parse_settings(["--workers", "3", "--shutdown-timeout-s", "5"], environ={})
    assert (settings.workers, settings.shutdown_timeout_s) == (3, 5.0)
    assert parse_settings([], environ={"MEMPROXY_WORKERS": "2"}).workers == 2
    assert parse_settings([], environ={}).workers == 1  # one process, no supervisor, unless asked
    for argv in (["--workers", "0"], ["--shutdown-timeout-s", "0"]):
        with pytest.raises(SystemExit):
            parse_settings(argv, environ={})
