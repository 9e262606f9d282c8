"""The durable job queue (proxy/core/jobs.py, docs/jobs.md) on a real node: claims, leases, retries, failures,
shutdown, and a worker process killed mid-job whose job another process finishes.

Each test uses its own jobs index (``memproxy-jobs-test-*``, deleted afterwards) and its own job kind, so
no memproxy process of another test ever claims these jobs. Time is only waited on through what the node
shows (a job's state, its lease) or through events the handlers set; never through a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from proxy.config import Settings, parse_settings
from proxy.core import jobs as jobs_module
from proxy.core.job_turns import OwnerTurns
from proxy.core.jobs import (
    COMPLETED,
    FAILED,
    HANDOFF_S,
    PENDING,
    RUNNING,
    Job,
    JobContext,
    JobHandler,
    JobQueue,
    JobRunner,
    PermanentJobError,
    Purged,
    UnknownJob,
    backoff_s,
)
from proxy.store.client import Store, url
from proxy.store.jobs import JobDocs
from tests.support.job_worker import write_output

REPO = Path(__file__).resolve().parent.parent


# --- without a node -----------------------------------------------------------------------------------


def test_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    rand = random.Random(7)
    for attempt in range(1, 8):
        ceiling = min(10.0, 0.5 * 2 ** (attempt - 1))
        delays = [backoff_s(attempt, 0.5, 10.0, rand) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert max(delays) - min(delays) > ceiling / 4  # jittered, not one value
    assert backoff_s(50, 0.5, 10.0) <= 10.0


def test_job_flags_parse_and_refuse_nonsense() -> None:
    settings = parse_settings(["--jobs-workers", "0", "--jobs-lease-s", "5"], environ={})
    assert (settings.jobs_workers, settings.jobs_lease_s, settings.jobs_max_attempts) == (0, 5.0, 5)
    assert parse_settings([], environ={"MEMPROXY_JOBS_MAX_ATTEMPTS": "2"}).jobs_max_attempts == 2
    assert parse_settings([], environ={}).jobs_retention_days == 30
    assert parse_settings(["--jobs-retention-days", "0"], environ={}).jobs_retention_days == 0
    for argv in (
        ["--jobs-workers", "-1"],
        ["--jobs-lease-s", "0"],
        ["--jobs-max-attempts", "0"],
        ["--jobs-retention-days", "-1"],
    ):
        with pytest.raises(SystemExit):
            parse_settings(argv, environ={})


# --- on a node ----------------------------------------------------------------------------------------


@pytest.fixture
async def store(opensearch_url: str) -> AsyncIterator[Store]:
    s = Store(Settings(opensearch_url=opensearch_url))
    yield s
    await s.close()


@pytest.fixture
async def queue(store: Store) -> AsyncIterator[JobQueue]:
    index = f"memproxy-jobs-test-{uuid.uuid4().hex[:12]}"
    yield JobQueue(JobDocs(store, index), max_attempts=5)
    await store.request("DELETE", url(index), params={"ignore_unavailable": "true"})


@pytest.fixture
def kind() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def runner(
    queue: JobQueue, handlers: Mapping[str, JobHandler], **options: Any
) -> AsyncIterator[JobRunner]:
    """A started runner with fast test timings (a short poll and backoff), closed at the end."""
    r = JobRunner(queue, **{"poll_s": 0.1, "backoff_base_s": 0.05, "lease_s": 5.0, **options})
    for kind, handler in handlers.items():
        r.register(kind, handler)
    r.start()
    try:
        yield r
    finally:
        await r.close()


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 15.0) -> Any:
    """Poll the node until ``check`` returns something truthy; its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_an_enqueued_job_runs_to_completed_at_once(queue: JobQueue, kind: str) -> None:
    seen: list[tuple[dict[str, Any], int, str | None]] = []

    async def handler(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        seen.append((payload, ctx.attempt, ctx.subject))
        return {"echo": payload["n"] * 2}

    # A poll interval far beyond the wait: the local enqueue itself must wake the runner.
    async with runner(queue, {kind: handler}, poll_s=60.0):
        job = await queue.enqueue(kind, {"n": 21}, subject="wm-1", owner_id="alice")
        assert job.state == PENDING and job.attempts == 0
        done = await queue.wait(job.job_id, timeout_s=10)
    assert done.state == COMPLETED, done
    assert done.result == {"echo": 42}
    assert seen == [({"n": 21}, 1, "wm-1")]
    assert (done.attempts, done.lease_owner, done.lease_expires_at, done.owner_id) == (1, None, None, "alice")
    assert done.created_at <= (done.started_at or 0) <= (done.finished_at or 0)
    assert [j.job_id for j in await queue.find_by_subject("wm-1")] == [job.job_id]
    assert (await queue.counts())[COMPLETED] == 1
    with pytest.raises(UnknownJob):
        await queue.get(str(uuid.uuid4()))


async def test_enqueue_is_idempotent_for_a_job_id(queue: JobQueue, kind: str) -> None:
    runs: Counter[str] = Counter()

    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        runs[ctx.job_id] += 1

    job_id = str(uuid.uuid4())
    first = await queue.enqueue(kind, {"v": 1}, job_id=job_id, subject="m-1")
    again = await queue.enqueue(kind, {"v": 2}, job_id=job_id, subject="m-1")
    assert again.job_id == first.job_id and again.payload == {"v": 1}
    async with runner(queue, {kind: handler}):
        assert (await queue.wait(job_id, timeout_s=10)).state == COMPLETED
        after = await queue.enqueue(kind, {"v": 3}, job_id=job_id)  # a completed job is not run again
        assert after.state == COMPLETED
    assert runs == {job_id: 1}
    assert len(await queue.find_by_subject("m-1")) == 1


async def test_concurrent_claims_of_one_job_have_one_winner(queue: JobQueue, kind: str) -> None:
    job = await queue.enqueue(kind, {})
    (candidate,) = await queue.due([kind], size=10)
    claims = await asyncio.gather(*(queue.claim(candidate, f"worker-{i}", 5.0) for i in range(4)))
    winners = [c for c in claims if c is not None]
    assert len(winners) == 1 and not isinstance(winners[0], Job)
    stored = await queue.get(job.job_id)
    assert stored.state == RUNNING and stored.attempts == 1
    assert stored.lease_owner == winners[0].job.lease_owner
    assert await queue.due([kind], size=10) == []  # leased: nobody else's to take


async def test_two_runners_never_run_one_job_twice(queue: JobQueue, kind: str) -> None:
    workers, jobs = 4, 24
    active: set[str] = set()
    runs: Counter[str] = Counter()
    by_worker: Counter[str] = Counter()
    overlaps: list[str] = []
    peak = 0
    # The first jobs wait until both runners are full, so both must take part (4 slots each).
    full = asyncio.Event()

    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        nonlocal peak
        if ctx.job_id in active:
            overlaps.append(ctx.job_id)
        active.add(ctx.job_id)
        runs[ctx.job_id] += 1
        by_worker[ctx.worker] += 1
        peak = max(peak, len(active))
        if len(active) == 2 * workers:
            full.set()
        try:
            await asyncio.wait_for(full.wait(), 20)
            await asyncio.sleep(random.uniform(0, 0.02))
        finally:
            active.discard(ctx.job_id)

    ids = [(await queue.enqueue(kind, {"i": i})).job_id for i in range(jobs)]
    async with (
        runner(queue, {kind: handler}, workers=workers, worker_id="A"),
        runner(queue, {kind: handler}, workers=workers, worker_id="B"),
    ):
        finished = [await queue.wait(job_id, timeout_s=30) for job_id in ids]
    assert [j.state for j in finished] == [COMPLETED] * jobs
    assert overlaps == []
    assert runs == dict.fromkeys(ids, 1)
    assert [j.attempts for j in finished] == [1] * jobs
    assert peak == 2 * workers
    assert by_worker["A"] >= workers and by_worker["B"] >= workers


async def test_jobs_past_their_retention_are_deleted_and_no_other(queue: JobQueue, kind: str) -> None:
    """Ended jobs older than the retention go; a recent ended job, a FAILED one inside the retention and a
    PENDING one (however old) stay. The runner purges when it starts."""

    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        if payload.get("fail"):
            raise PermanentJobError("no", stage="s")

    async with runner(queue, {kind: handler}):
        old_done = await queue.enqueue(kind, {})
        old_failed = await queue.enqueue(kind, {"fail": True})
        recent = await queue.enqueue(kind, {})
        for job in (old_done, old_failed, recent):
            assert (await queue.wait(job.job_id, timeout_s=10)).done
    pending = await queue.enqueue(kind, {})  # no runner: it stays PENDING
    two_days_ago = int(time.time() * 1000) - 2 * 86_400_000
    for job in (old_done, old_failed, pending):
        await queue.docs.store.request(
            "POST",
            url(queue.docs.index, "_update", job.job_id),
            body={"doc": {"finished_at": two_days_ago, "created_at": two_days_ago}},
            params={"refresh": "true"},
        )

    r = JobRunner(queue, workers=1, poll_s=0.1, retention_s=86_400)  # one day
    r.start()
    try:
        await until(lambda: _missing(queue, old_done.job_id, old_failed.job_id))
    finally:
        await r.close()
    assert (await queue.get(recent.job_id)).state == COMPLETED
    assert (await queue.get(pending.job_id)).state == PENDING
    # A retention longer than every job's age deletes nothing.
    assert await queue.purge_finished(10 * 365 * 86_400) == 0


async def test_a_purge_takes_the_oldest_ended_jobs_it_selects_and_counts_them(
    queue: JobQueue, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admin purge: by state, oldest first up to a limit, across batches; a dry run deletes nothing;
    running and pending jobs never go."""
    monkeypatch.setattr(jobs_module, "PURGE_BATCH", 2)  # several batches from a handful of jobs

    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        if payload.get("fail"):
            raise PermanentJobError("no", stage="s")

    async with runner(queue, {kind: handler}):
        done = [await queue.enqueue(kind, {}, subject=f"memory-{i}") for i in range(4)]
        failed = [await queue.enqueue(kind, {"fail": True}) for _ in range(2)]
        for job in done + failed:
            assert (await queue.wait(job.job_id, timeout_s=10)).done
    pending = await queue.enqueue(kind, {})
    # Finished one minute apart, oldest first in this order: done[0..3], failed[0..1].
    base = int(time.time() * 1000) - 3_600_000
    for i, job in enumerate(done + failed):
        await queue.docs.store.request(
            "POST",
            url(queue.docs.index, "_update", job.job_id),
            body={"doc": {"finished_at": base + i * 60_000}},
            params={"refresh": "true"},
        )
    now = int(time.time() * 1000)

    dry = await queue.purge(now, dry_run=True)
    assert dry == Purged(jobs=6, attempts=6, references=4)
    assert await queue.purge(base, dry_run=True) == Purged()  # nothing ended before the oldest
    assert all([await queue.docs.get(j.job_id) is not None for j in done + failed])

    assert await queue.purge(now, states=(FAILED,)) == Purged(jobs=2, attempts=2, references=0)
    assert await _missing(queue, *(j.job_id for j in failed))
    oldest = await queue.purge(now, limit=3)
    assert oldest == Purged(jobs=3, attempts=3, references=3)
    assert await _missing(queue, *(j.job_id for j in done[:3]))
    assert (await queue.get(done[3].job_id)).state == COMPLETED
    # PENDING or RUNNING are never purged, even when asked for by name.
    assert await queue.purge(now + 86_400_000, states=(PENDING, RUNNING)) == Purged()
    assert await queue.purge(now + 86_400_000) == Purged(jobs=1, attempts=1, references=1)
    assert (await queue.get(pending.job_id)).state == PENDING


async def _missing(queue: JobQueue, *job_ids: str) -> bool:
    return all([await queue.docs.get(job_id) is None for job_id in job_ids])


async def test_a_failing_job_is_retried_after_a_backoff_then_completes(queue: JobQueue, kind: str) -> None:
    base = 0.2
    starts: list[float] = []
    errors_seen: list[str | None] = []

    async def handler(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        starts.append(time.monotonic())
        errors_seen.append((await queue.get(ctx.job_id)).last_error)
        if ctx.attempt < 3:
            raise RuntimeError(f"flaky {ctx.attempt}")
        return {"ok": True}

    async with runner(queue, {kind: handler}, backoff_base_s=base):
        job = await queue.enqueue(kind, {})
        done = await queue.wait(job.job_id, timeout_s=15)
    assert done.state == COMPLETED and done.attempts == 3
    assert errors_seen == [None, "RuntimeError: flaky 1", "RuntimeError: flaky 2"]
    # Every attempt is kept, in order, with its outcome and its own times.
    assert [(h["attempt"], h["ok"], h["error"]) for h in done.history] == [
        (1, False, "RuntimeError: flaky 1"),
        (2, False, "RuntimeError: flaky 2"),
        (3, True, None),
    ]
    assert all(h["started_at"] <= h["finished_at"] for h in done.history)
    assert done.history[0]["finished_at"] <= done.history[1]["started_at"]
    # Equal jitter: at least half of base * 2^(attempt-1) between attempts.
    assert starts[1] - starts[0] >= base / 2 * 0.95
    assert starts[2] - starts[1] >= base * 0.95


async def test_a_job_fails_after_its_attempts_with_the_last_error(queue: JobQueue, kind: str) -> None:
    attempts: list[int] = []
    failed: list[Job] = []
    hooked = asyncio.Event()

    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        await ctx.set_stage("extract")
        raise ValueError(f"the model answered garbage (attempt {ctx.attempt})")

    async def on_failed(job: Job) -> None:
        failed.append(job)
        hooked.set()

    r = JobRunner(queue, poll_s=0.1, backoff_base_s=0.02)
    r.register(kind, handler, on_failed=on_failed)
    r.start()
    try:
        job = await queue.enqueue(kind, {}, subject="wm-9", max_attempts=3)
        done = await queue.wait(job.job_id, timeout_s=15)
        await asyncio.wait_for(hooked.wait(), 5)  # the hook runs after FAILED is stored
        health = await r.health()
    finally:
        await r.close()
    assert attempts == [1, 2, 3]
    assert done.state == FAILED and done.attempts == 3
    assert done.last_error == "ValueError: the model answered garbage (attempt 3)"
    assert done.failure_stage == "extract" and done.finished_at
    assert [(h["attempt"], h["ok"], h["failure_stage"]) for h in done.history] == [
        (1, False, "extract"),
        (2, False, "extract"),
        (3, False, "extract"),
    ]
    assert [[st["stage"] for st in h["stages"]] for h in done.history] == [["extract"]] * 3
    assert [j.job_id for j in failed] == [job.job_id] and failed[0].state == FAILED
    assert health["counts"][FAILED] == 1
    assert health["recent_failures"][0]["job_id"] == job.job_id
    assert health["recent_failures"][0]["last_error"] == done.last_error


async def test_a_permanent_error_fails_the_job_at_once(queue: JobQueue, kind: str) -> None:
    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        raise PermanentJobError("encrypted PDF", stage="parse")

    async with runner(queue, {kind: handler}):
        job = await queue.enqueue(kind, {})
        done = await queue.wait(job.job_id, timeout_s=10)
    assert (done.state, done.attempts, done.failure_stage) == (FAILED, 1, "parse")
    assert done.last_error == "encrypted PDF"


async def test_lease_renewal_keeps_a_long_job_owned(queue: JobQueue, kind: str) -> None:
    lease_s = 0.6
    runs: Counter[str] = Counter()
    release = asyncio.Event()

    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        runs[ctx.worker] += 1
        await release.wait()

    job = await queue.enqueue(kind, {})
    async with runner(queue, {kind: handler}, lease_s=lease_s, worker_id="A"):
        running = await until(lambda: _in_state(queue, job.job_id, RUNNING))
        async with runner(queue, {kind: handler}, lease_s=lease_s, worker_id="B"):
            # Outlive two leases: only renewals keep it A's, while B polls every 0.1 s.
            limit = (running.started_at or 0) + 3 * lease_s * 1000
            await until(lambda: _lease_beyond(queue, job.job_id, limit))
            release.set()
            done = await queue.wait(job.job_id, timeout_s=10)
    assert runs == {"A": 1}
    assert done.state == COMPLETED and done.attempts == 1


async def test_a_lost_lease_stops_the_handler_and_drops_its_outcome(
    queue: JobQueue, store: Store, kind: str
) -> None:
    stopped = asyncio.Event()

    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.set()
            raise

    job = await queue.enqueue(kind, {})
    async with runner(queue, {kind: handler}, lease_s=0.6):
        await until(lambda: _in_state(queue, job.job_id, RUNNING))
        # Another process's claim, as it would happen after this lease had expired.
        current = await queue.docs.get(job.job_id)
        assert current is not None
        await queue.docs.update(
            job.job_id,
            {"lease_owner": "thief", "attempts": 2},
            seq_no=current.seq_no,
            primary_term=current.primary_term,
        )
        await asyncio.wait_for(stopped.wait(), 5)
    stored = await queue.get(job.job_id)
    assert (stored.state, stored.lease_owner, stored.attempts) == (RUNNING, "thief", 2)


async def test_shutdown_cancels_the_handler_and_hands_the_job_back(queue: JobQueue, kind: str) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def hang(payload: dict[str, Any], ctx: JobContext) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def quick(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        return {"by": ctx.worker}

    job = await queue.enqueue(kind, {})
    r = JobRunner(queue, poll_s=0.1, lease_s=30.0, worker_id="stopping")
    r.register(kind, hang)
    r.start()
    await asyncio.wait_for(started.wait(), 10)
    assert r.running == [job.job_id]
    await asyncio.wait_for(r.close(), 10)
    assert cancelled.is_set() and r.running == []
    back = await queue.get(job.job_id)
    assert (back.state, back.attempts, back.lease_owner) == (PENDING, 0, None)
    # Handed back, not left leased: another runner takes it at once, not 30 s later.
    async with runner(queue, {kind: quick}, worker_id="next"):
        done = await queue.wait(job.job_id, timeout_s=5)
    assert done.state == COMPLETED and done.result == {"by": "next"} and done.attempts == 1


async def test_a_last_attempt_whose_worker_died_fails_without_running_again(
    queue: JobQueue, kind: str
) -> None:
    ran: list[str] = []
    failed: list[Job] = []
    hooked = asyncio.Event()

    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    async def on_failed(job: Job) -> None:
        failed.append(job)
        hooked.set()

    job = await queue.enqueue(kind, {}, max_attempts=1)
    (candidate,) = await queue.due([kind], size=1)
    assert await queue.claim(candidate, "dead-worker", 0.2) is not None  # and then it died
    r = JobRunner(queue, poll_s=0.1)
    r.register(kind, handler, on_failed=on_failed)
    r.start()
    try:
        done = await queue.wait(job.job_id, timeout_s=10)
        await asyncio.wait_for(hooked.wait(), 5)
    finally:
        await r.close()
    assert ran == []
    assert done.state == FAILED and done.attempts == 1
    assert "dead-worker" in (done.last_error or "") and "no attempts left" in (done.last_error or "")
    assert [j.job_id for j in failed] == [job.job_id]


async def test_a_killed_worker_process_loses_nothing(
    queue: JobQueue, store: Store, kind: str, opensearch_url: str
) -> None:
    """A real second process takes the job, writes its effect, and is killed with SIGKILL before it can
    record the job COMPLETED; once its lease expires, this process runs the job again and completes it.
    The effect exists exactly once (the handler is idempotent), written by the second attempt."""
    lease_s = 2.0
    out_index = f"memproxy-jobs-test-out-{uuid.uuid4().hex[:8]}"
    await store.request("PUT", url(out_index), body={"settings": {"number_of_replicas": 0}})
    job = await queue.enqueue(kind, {"doc": "x"})
    worker_id = f"doomed-{uuid.uuid4().hex[:6]}"
    argv = [opensearch_url, queue.docs.index, kind, out_index, worker_id, str(lease_s)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.job_worker", *argv],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:

        async def leased_and_written() -> bool:
            stored = await queue.get(job.job_id)
            if stored.state != RUNNING or stored.lease_owner != worker_id:
                assert proc.poll() is None, "the worker process exited"
                return False
            return await _count(store, out_index) == 1

        await until(leased_and_written, timeout=40)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        killed_at = time.monotonic()

        async def rewrite(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
            await write_output(store, out_index, ctx)
            return {"attempt": ctx.attempt}

        async with runner(queue, {kind: rewrite}, lease_s=lease_s, worker_id="survivor"):
            done = await queue.wait(job.job_id, timeout_s=20)
        recovered_s = time.monotonic() - killed_at
        assert done.state == COMPLETED, done
        assert done.attempts == 2
        assert done.result == {"attempt": 2}
        assert f"worker {worker_id}" in (done.last_error or "")
        # The killed attempt is in the history as lost, the survivor's as the one that succeeded.
        assert [(h["attempt"], h["worker"], h["ok"]) for h in done.history] == [
            (1, worker_id, False),
            (2, "survivor", True),
        ]
        assert "lost its lease" in done.history[0]["error"]
        assert await _count(store, out_index) == 1
        res = await store.request("GET", url(out_index, "_doc", job.job_id))
        assert res["_source"]["attempt"] == 2 and res["_source"]["worker"] == "survivor"
        # The lease had at most lease_s left when the worker died; then one poll and the job itself.
        assert recovered_s < lease_s + 3.0, recovered_s
        print(f"recovered {recovered_s:.2f} s after the kill (lease {lease_s} s)")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        await store.request("DELETE", url(out_index), params={"ignore_unavailable": "true"})


def test_health_shows_jobs_beside_its_other_keys(proxy_url: str) -> None:
    with urllib.request.urlopen(proxy_url + "/_memproxy/health", timeout=30) as resp:
        body = json.load(resp)
    assert {"status", "proxy", "cluster", "settings", "jobs"} <= set(body)
    jobs = body["jobs"]
    assert set(jobs["counts"]) == {PENDING, RUNNING, COMPLETED, FAILED}
    # anonymously, counts only: the failures' memory ids and errors are an administrator's to see
    assert isinstance(jobs["recent_failures_count"], int) and "recent_failures" not in jobs
    assert jobs["worker"]["workers"] == 2 and jobs["worker"]["running"] == []
    assert body["settings"]["jobs_lease_s"] == 60.0


async def _in_state(queue: JobQueue, job_id: str, state: str) -> Job | None:
    job = await queue.get(job_id)
    return job if job.state == state else None


async def _lease_beyond(queue: JobQueue, job_id: str, limit_ms: float) -> bool:
    job = await queue.get(job_id)
    assert job.state == RUNNING
    return (job.lease_expires_at or 0) > limit_ms


async def _count(store: Store, index: str) -> int:
    res = await store.request("POST", url(index, "_count"), body={"query": {"match_all": {}}})
    return int(res["count"])


async def test_the_enqueuing_process_takes_its_own_job_first(store: Store, kind: str) -> None:
    """A job is its enqueuing process's for HANDOFF_S: another process polling fast never snatches it, and
    it still runs at once; a process that runs no jobs leaves its jobs to the others at once."""
    index = f"memproxy-jobs-test-{uuid.uuid4().hex[:12]}"
    here, elsewhere = JobQueue(JobDocs(store, index)), JobQueue(JobDocs(store, index))
    workers: list[str] = []

    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        workers.append(ctx.worker)

    try:
        async with (
            runner(here, {kind: handler}, poll_s=60.0) as mine,
            runner(elsewhere, {kind: handler}, poll_s=0.01) as theirs,
        ):
            for _ in range(5):
                job = await here.enqueue(kind, {})
                assert (await here.wait(job.job_id, timeout_s=10)).state == COMPLETED
            assert workers == [mine.worker_id] * 5
            # A process without workers (an API-only process) hands its jobs over at once.
            bare = JobQueue(JobDocs(store, index))
            started = time.monotonic()
            job = await bare.enqueue(kind, {})
            assert (await bare.wait(job.job_id, timeout_s=10)).state == COMPLETED
            assert workers[-1] == theirs.worker_id and time.monotonic() - started < HANDOFF_S
    finally:
        await store.request("DELETE", url(index), params={"ignore_unavailable": "true"})


# --- fairness across owners (proxy.core.job_turns) -------------------------------------------------------


def test_turns_go_to_the_owner_with_the_fewest_running_then_the_longest_waiting() -> None:
    turns = OwnerTurns(max_per_owner=2)
    jobs = [("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", None)]
    assert turns.order(jobs, lambda j: j[1]) == [("a1", "a"), ("b1", "b"), ("c1", None)]
    turns.started("a1", "a")
    turns.started("c1", None)
    assert turns.order(jobs, lambda j: j[1]) == [("b1", "b"), ("a1", "a"), ("c1", None)]
    turns.started("b1", "b")
    turns.started("a2", "a")  # a at its cap: not offered
    assert turns.order(jobs, lambda j: j[1]) == [("c1", None), ("b1", "b")]
    turns.ended("a1")
    assert turns.admits("a") and turns.running("a") == 1


@pytest.mark.parametrize("enqueued_here", [True, False], ids=["own-fresh-jobs", "due-in-the-index"])
async def test_one_owners_backlog_does_not_starve_another_owner(
    queue: JobQueue, store: Store, kind: str, enqueued_here: bool
) -> None:
    """Tenant A queues 30 documents, then tenant B one ``infer``: B's job runs next, not after A's backlog,
    and A never holds more than its share of the workers. Both ways a job reaches a runner: this process's
    own enqueue (its fresh jobs) and another process's (due in the index)."""
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    order: list[str] = []

    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        owner = str(ctx.owner_id)
        running[owner] += 1
        most[owner] = max(most[owner], running[owner])
        order.append(owner)
        await asyncio.sleep(0.3)
        running[owner] -= 1

    elsewhere = JobQueue(JobDocs(store, queue.docs.index))  # a process that runs no jobs: due at once
    source = queue if enqueued_here else elsewhere
    async with runner(queue, {kind: handler}, workers=2, max_per_owner=1):
        for i in range(30):
            await source.enqueue(kind, {"n": i}, owner_id="tenant-a")
        await asyncio.sleep(0.5)
        started_before = len(order)
        b = await source.enqueue(kind, {}, owner_id="tenant-b")
        done = await queue.wait(b.job_id, timeout_s=20)
        left = (await queue.counts()).get(PENDING, 0)
    assert done.state == COMPLETED
    # B waited for at most a couple of A's jobs (the index's refresh), not for A's backlog (30 x 0.3 s).
    assert order.index("tenant-b") <= started_before + 3 and left >= 10, (order, started_before, left)
    assert most["tenant-a"] == 1
