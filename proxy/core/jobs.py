"""Durable jobs: work that outlives the request that asked for it and the process that started it.

The queue is the ``memproxy-jobs`` index (:mod:`proxy.store.jobs`), so every memproxy process serving the
cluster sees every job and any of them can run it (docs/jobs.md):

* :class:`JobQueue` writes and reads jobs: :meth:`~JobQueue.enqueue` (idempotent for a given id),
  :meth:`~JobQueue.get`, :meth:`~JobQueue.find_by_subject`, :meth:`~JobQueue.wait`, :meth:`~JobQueue.counts`.
* :class:`JobRunner` is one process's workers: it polls for due jobs of the kinds it has handlers for,
  claims one with a conditional write (two processes never both own a job), renews the claim's lease while
  the handler runs, and records the outcome: COMPLETED, PENDING again after a backoff, or FAILED.

Delivery is **at least once**: a process that dies mid-job leaves a lease that expires, and another process
runs the job again from the start. Handlers must therefore be idempotent (fixed document ids, conditional
writes): a job's effect applied twice must be the same as applied once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.job_turns import OwnerTurns
from proxy.errors import MemproxyError, NotFound
from proxy.store.client import NodeConflict, NodeNotFound
from proxy.store.jobs import JobDocs
from proxy.store.versioned import Versioned

__all__ = [
    "COMPLETED",
    "FAILED",
    "HANDOFF_S",
    "PENDING",
    "RUNNING",
    "STATES",
    "FailedHook",
    "Job",
    "JobContext",
    "JobHandler",
    "JobQueue",
    "JobRunner",
    "LeaseLost",
    "PermanentJobError",
    "Purged",
    "UnknownJob",
    "backoff_s",
]

log = logging.getLogger(__name__)

PENDING = "PENDING"
RUNNING = "RUNNING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
STATES = (PENDING, RUNNING, COMPLETED, FAILED)

# A job is its enqueuing process's for this long before other processes see it due (JobQueue.enqueue).
HANDOFF_S = 2.0
# last_error is for people reading health and job views: a traceback's worth, not a log file.
_MAX_ERROR_CHARS = 2000
# Ended attempts a job keeps (GoodMem's processingHistory.attempts); a job with more keeps its latest ones.
HISTORY_LIMIT = 20
# Ended jobs are found and deleted this many at a time (a purge of any size holds one batch in memory).
PURGE_BATCH = 1000


class UnknownJob(NotFound):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"Job {job_id} not found")


class PermanentJobError(Exception):
    """Raised by a handler for a failure that no retry can mend (a corrupt document, a refused input): the
    job goes FAILED at once. ``stage`` names the step that failed (``failure_stage``)."""

    def __init__(self, message: str, *, stage: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage


class LeaseLost(Exception):
    """This process no longer owns the job (its lease expired and another process claimed it, or the job
    was removed): nothing it does for the job may be recorded any more."""


@dataclass(frozen=True)
class Purged:
    """What a purge removed (or, in a dry run, would remove): jobs, the attempts they made, and how many of
    them named a subject (the memory or task they worked for; the link is part of the job)."""

    jobs: int = 0
    attempts: int = 0
    references: int = 0


@dataclass(frozen=True)
class Job:
    """One job document, as stored."""

    job_id: str
    kind: str
    state: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    not_before: int
    created_at: int
    updated_at: int
    subject: str | None = None
    owner_id: str | None = None
    lease_owner: str | None = None
    lease_expires_at: int | None = None
    stage: str | None = None
    last_error: str | None = None
    failure_stage: str | None = None
    started_at: int | None = None
    finished_at: int | None = None
    result: dict[str, Any] | None = None
    # The stages the latest attempt went through, in order: [{"stage", "at"}] (``JobContext.set_stage``).
    stages: tuple[dict[str, Any], ...] = ()
    # The attempts that ended, oldest first (:func:`attempt_record`): at most HISTORY_LIMIT.
    history: tuple[dict[str, Any], ...] = ()
    # The handler's checkpoint (``JobContext.set_progress``): kept across attempts, so a handler resumes
    # where the last attempt got to instead of from the start.
    progress: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.state in (COMPLETED, FAILED)

    @classmethod
    def from_doc(cls, job_id: str, source: Mapping[str, Any]) -> Job:
        return cls(
            job_id=job_id,
            kind=str(source.get("kind", "")),
            state=str(source.get("state", PENDING)),
            payload=dict(source.get("payload") or {}),
            attempts=int(source.get("attempts") or 0),
            max_attempts=int(source.get("max_attempts") or 1),
            not_before=int(source.get("not_before") or 0),
            created_at=int(source.get("created_at") or 0),
            updated_at=int(source.get("updated_at") or 0),
            subject=source.get("subject"),
            owner_id=source.get("owner_id"),
            lease_owner=source.get("lease_owner"),
            lease_expires_at=source.get("lease_expires_at"),
            stage=source.get("stage"),
            last_error=source.get("last_error"),
            failure_stage=source.get("failure_stage"),
            started_at=source.get("started_at"),
            finished_at=source.get("finished_at"),
            result=source.get("result"),
            stages=tuple(s for s in source.get("stages") or () if isinstance(s, dict)),
            history=tuple(h for h in source.get("history") or () if isinstance(h, dict)),
            progress=source.get("progress") if isinstance(source.get("progress"), dict) else None,
        )

    def view(self) -> dict[str, Any]:
        """The job for people and APIs: every field but the payload (which may be large or private)."""
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "state": self.state,
            "subject": self.subject,
            "owner_id": self.owner_id,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "lease_owner": self.lease_owner,
            "lease_expires_at": self.lease_expires_at,
            "not_before": self.not_before,
            "stage": self.stage,
            "last_error": self.last_error,
            "failure_stage": self.failure_stage,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "result": self.result,
            "stages": list(self.stages),
            "history": list(self.history),
            "progress": self.progress,
        }

    def with_attempt(
        self,
        *,
        ok: bool,
        finished_at: int,
        stages: Sequence[Mapping[str, Any]] | None = None,
        error: str | None = None,
        failure_stage: str | None = None,
    ) -> list[dict[str, Any]]:
        """``history`` with the current attempt appended as ended: ``ok``, or failed with ``error`` at
        ``failure_stage``. ``stages``: the attempt's own (the handler's), else the stored ones."""
        record = {
            "attempt": self.attempts,
            "worker": self.lease_owner,
            "started_at": self.started_at,
            "finished_at": finished_at,
            "ok": ok,
            "error": error,
            "failure_stage": failure_stage,
            "stages": [dict(s) for s in (self.stages if stages is None else stages)],
        }
        return [*self.history, record][-HISTORY_LIMIT:]


def backoff_s(attempt: int, base_s: float, max_s: float, rand: random.Random | None = None) -> float:
    """The delay before the retry that follows failed attempt ``attempt`` (1-based): exponential, capped,
    with "equal jitter" (half fixed, half random) so that jobs failing together do not retry together."""
    ceiling = min(max_s, base_s * 2 ** max(0, attempt - 1))
    return ceiling / 2 + (rand or random).uniform(0, ceiling / 2)


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, PermanentJobError):
        return text[:_MAX_ERROR_CHARS]  # written by the handler for the people who read it
    if isinstance(exc, MemproxyError):
        text = exc.message
    return f"{type(exc).__name__}: {text}"[:_MAX_ERROR_CHARS]


class _Lease:
    """This process's claim on one job: the version its next conditional write names. Writes are
    serialized (the heartbeat and a handler's ``set_stage`` may race), and the first refused write marks
    the lease lost for good."""

    def __init__(self, docs: JobDocs, job: Job, seq_no: int, primary_term: int, lease_s: float) -> None:
        self.docs = docs
        self.job = job
        self.seq_no = seq_no
        self.primary_term = primary_term
        self.lease_ms = int(lease_s * 1000)
        self.expires_at = job.lease_expires_at or 0
        self.lost = False
        self._lock = asyncio.Lock()

    async def write(self, fields: Mapping[str, Any], *, refresh: bool = True, renew: bool = True) -> None:
        async with self._lock:
            if self.lost:
                raise LeaseLost(f"job {self.job.job_id}: lease lost")
            now = now_ms()
            sent = {"updated_at": now, **fields}
            if renew:
                sent["lease_expires_at"] = now + self.lease_ms
            written = False
            for _ in range(2):
                try:
                    self.seq_no, self.primary_term = await self.docs.update(
                        self.job.job_id,
                        sent,
                        seq_no=self.seq_no,
                        primary_term=self.primary_term,
                        refresh=refresh,
                    )
                    written = True
                    break
                except (NodeConflict, NodeNotFound):
                    if not await self._adopt_own_write():
                        break
            if not written:
                self.lost = True
                raise LeaseLost(f"job {self.job.job_id}: another process owns it now")
            if renew:
                self.expires_at = sent["lease_expires_at"]

    async def _adopt_own_write(self) -> bool:
        """After a conflict: whether the write that moved the version was this lease's own (one cancelled
        after the node applied it, say), in which case the new version is taken and the write retried.
        Only the owner writes to a job while it is RUNNING under its lease, and a new claim would carry
        another owner or attempt number."""
        current = await self.docs.get(self.job.job_id)
        if current is None or current.seq_no is None or current.primary_term is None:
            return False
        src = current.source
        if (
            src.get("state") != RUNNING
            or src.get("lease_owner") != self.job.lease_owner
            or src.get("attempts") != self.job.attempts
        ):
            return False
        self.seq_no, self.primary_term = current.seq_no, current.primary_term
        return True


class JobContext:
    """What a handler knows of the job it runs. ``attempt`` counts from 1; ``worker`` is this process's
    lease owner id."""

    def __init__(self, lease: _Lease, worker: str) -> None:
        self._lease = lease
        job = lease.job
        self.job_id = job.job_id
        self.kind = job.kind
        self.attempt = job.attempts
        self.max_attempts = job.max_attempts
        self.subject = job.subject
        self.owner_id = job.owner_id
        self.worker = worker
        self.stage: str | None = None
        self._stages: list[dict[str, Any]] = []
        # The checkpoint the last attempt stored (empty on a first attempt).
        self.progress: dict[str, Any] = dict(job.progress or {})

    @property
    def stages(self) -> list[dict[str, Any]]:
        """The stages this attempt went through so far, in order."""
        return list(self._stages)

    @property
    def last_attempt(self) -> bool:
        """No retry follows a failure of this attempt (a handler may record the failure itself)."""
        return self.attempt >= self.max_attempts

    async def set_stage(self, stage: str) -> None:
        """Record the step the handler is at (shown by the job; a failure names it as ``failure_stage``).
        Raises :class:`LeaseLost` when the job is no longer this process's."""
        self.stage = stage
        self._stages.append({"stage": stage, "at": now_ms()})
        await self._lease.write({"stage": stage, "stages": self._stages})

    async def set_progress(self, progress: Mapping[str, Any]) -> None:
        """Store the handler's checkpoint (``progress`` on the job, and ``ctx.progress`` of the next
        attempt): a resumed job starts from it. It also renews the lease. Raises :class:`LeaseLost` when
        the job is no longer this process's, so work past a lost lease stops at its next checkpoint."""
        self.progress = dict(progress)
        await self._lease.write({"progress": self.progress}, refresh=False)


JobHandler = Callable[[dict[str, Any], JobContext], Awaitable[Mapping[str, Any] | None]]
# Called once a job has gone FAILED in this process (its handler's last failure, or its last attempt's
# process died), after the state is stored and before local waiters return; best effort.
FailedHook = Callable[[Job], Awaitable[None]]


class JobQueue:
    """The jobs of the cluster. ``max_attempts``: attempts a job gets unless its enqueue says otherwise."""

    def __init__(self, docs: JobDocs, *, max_attempts: int = 5) -> None:
        self.docs = docs
        self.max_attempts = max_attempts
        # Runners of this process, woken at once by a local enqueue instead of at their next poll.
        self._wakeups: list[asyncio.Event] = []
        # Jobs this process enqueued that its own runner takes first (see ``HANDOFF_S``), and whether this
        # process runs jobs at all (a runner with workers says so).
        self._fresh: dict[str, str | None] = {}  # job id → its owner
        self.runs_jobs = False
        # Local callers of wait(), woken when this process finishes their job.
        self._waiters: dict[str, set[asyncio.Event]] = {}

    async def enqueue(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        subject: str | None = None,
        owner_id: str | None = None,
        job_id: str | None = None,
        max_attempts: int | None = None,
        delay_s: float = 0.0,
    ) -> Job:
        """Store a new PENDING job and wake this process's runners. With ``job_id`` given, enqueueing again
        is a no-op that returns the job as it stands (whatever payload the second call brings).

        A process that runs jobs takes the ones it enqueues itself: other processes see the job due only
        ``HANDOFF_S`` later (if this process has no free worker by then, or died, any process takes it). So
        the process that accepted the request does the work, with its caches and configuration, and a
        busy poller elsewhere cannot snatch it half a second in."""
        job_id = job_id or str(uuid.uuid4())
        now = now_ms()
        if self.runs_jobs:
            delay_s = max(delay_s, HANDOFF_S)
        doc: dict[str, Any] = {
            "kind": kind,
            "state": PENDING,
            "payload": dict(payload),
            "subject": subject,
            "owner_id": owner_id,
            "attempts": 0,
            "max_attempts": max_attempts or self.max_attempts,
            "lease_owner": None,
            "lease_expires_at": None,
            "not_before": now + int(delay_s * 1000),
            "stage": None,
            "last_error": None,
            "failure_stage": None,
            "created_at": now,
            "updated_at": now,
            "started_at": None,
            "finished_at": None,
            "result": None,
        }
        if not await self.docs.create(job_id, doc):
            return await self.get(job_id)
        if self.runs_jobs and delay_s == HANDOFF_S:
            self._fresh[job_id] = owner_id
        for event in self._wakeups:
            event.set()
        return Job.from_doc(job_id, doc)

    async def find(self, job_id: str) -> Job | None:
        found = await self.docs.get(job_id)
        return Job.from_doc(found.id, found.source) if found else None

    async def get(self, job_id: str) -> Job:
        job = await self.find(job_id)
        if job is None:
            raise UnknownJob(job_id)
        return job

    async def find_by_subject(self, subject: str, limit: int = 100) -> list[Job]:
        """The jobs working for ``subject`` (a memory id, a working-memory id), newest first."""
        return [Job.from_doc(v.id, v.source) for v in await self.docs.by_subject(subject, limit)]

    async def counts(self) -> dict[str, int]:
        """Jobs by state, every state named."""
        found = await self.docs.count_by_state()
        return {state: found.get(state, 0) for state in STATES}

    async def purge_finished(self, older_than_s: float) -> int:
        """Delete the jobs that ended (COMPLETED or FAILED) more than ``older_than_s`` ago; how many."""
        return (await self.purge(now_ms() - int(older_than_s * 1000))).jobs

    async def purge(
        self,
        before_ms: int,
        *,
        states: Sequence[str] = (COMPLETED, FAILED),
        limit: int = 0,
        dry_run: bool = False,
    ) -> Purged:
        """Delete the jobs in ``states`` (ended ones only) that finished before ``before_ms``, oldest first,
        at most ``limit`` of them (0: all); ``dry_run`` counts them and deletes nothing."""
        states = [s for s in states if s in (COMPLETED, FAILED)]  # running and pending jobs are never purged
        jobs = attempts = references = 0
        after: list[Any] | None = None
        while states and (limit == 0 or jobs < limit):
            size = PURGE_BATCH if limit == 0 else min(PURGE_BATCH, limit - jobs)
            batch = await self.docs.finished(states, before_ms, size, after)
            if not batch:
                break
            # Another process's retention may delete some of the batch first: count what this one removed.
            jobs += len(batch) if dry_run else await self.docs.delete_ids([v.id for v in batch])
            attempts += sum(int(v.source.get("attempts") or 0) for v in batch)
            references += sum(1 for v in batch if v.source.get("subject"))
            if len(batch) < size:
                break
            after = [batch[-1].source.get("finished_at"), batch[-1].seq_no]
        return Purged(jobs=jobs, attempts=attempts, references=references)

    async def recent_failures(self, limit: int = 5) -> list[Job]:
        return [Job.from_doc(v.id, v.source) for v in await self.docs.latest(FAILED, limit)]

    async def wait(self, job_id: str, timeout_s: float, *, poll_s: float = 0.25) -> Job:
        """The job once it is COMPLETED or FAILED, or as it stands when ``timeout_s`` has passed (check
        ``.done``). A job this process finishes returns at once; one another process runs is polled."""
        deadline = time.monotonic() + timeout_s
        event = asyncio.Event()
        self._waiters.setdefault(job_id, set()).add(event)
        try:
            while True:
                job = await self.get(job_id)
                left = deadline - time.monotonic()
                if job.done or left <= 0:
                    return job
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(poll_s, left))
                event.clear()
        finally:
            waiters = self._waiters.get(job_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[job_id]

    # --- for runners ----------------------------------------------------------------------------------

    def _finished(self, job_id: str) -> None:
        for event in self._waiters.get(job_id, ()):
            event.set()

    async def due(self, kinds: list[str], size: int, *, one_per_owner: bool = False) -> list[Versioned]:
        return await self.docs.due(kinds, now_ms(), size, one_per_owner=one_per_owner)

    def fresh_jobs(self) -> list[tuple[str, str | None]]:
        """The jobs this process enqueued and its runner has not yet tried to claim, with their owners,
        oldest first (the runner takes them before anyone else may: ``HANDOFF_S``)."""
        return list(self._fresh.items())

    def forget_fresh(self, job_id: str) -> None:
        """The runner is claiming ``job_id`` now (it is no longer waiting for this process's slot)."""
        self._fresh.pop(job_id, None)

    async def claim(
        self, candidate: Versioned, owner: str, lease_s: float, *, own: bool = False
    ) -> _Lease | Job | None:
        """Take ``candidate`` (a due job as a search returned it) for ``owner``: RUNNING, leased for
        ``lease_s``, one more attempt. None when someone else changed it first: the write names the version
        the search saw, so of any number of concurrent claims exactly one succeeds. A job whose last
        attempt's lease expired is not run again: it is marked FAILED and returned as a :class:`Job`."""
        job = Job.from_doc(candidate.id, candidate.source)
        if candidate.seq_no is None or candidate.primary_term is None:
            return None
        now = now_ms()
        expired = job.state == RUNNING and (job.lease_expires_at or 0) < now
        # ``own``: this process enqueued it and takes it before the hand-off delay is over.
        if not (expired or (job.state == PENDING and (own or job.not_before <= now))):
            return None
        fields: dict[str, Any] = {
            "state": RUNNING,
            "lease_owner": owner,
            "lease_expires_at": now + int(lease_s * 1000),
            "attempts": job.attempts + 1,
            "started_at": now,
            "updated_at": now,
            "stage": None,
            "stages": [],
        }
        if expired:
            # The process of that attempt died or lost the node; say so, as a failure would.
            fields["last_error"] = f"attempt {job.attempts} lost its lease (worker {job.lease_owner})"
            fields["failure_stage"] = job.stage
            fields["history"] = job.with_attempt(
                ok=False, finished_at=now, error=fields["last_error"], failure_stage=job.stage
            )
            if job.attempts >= job.max_attempts:
                fields = {
                    "state": FAILED,
                    "lease_owner": None,
                    "lease_expires_at": None,
                    "finished_at": now,
                    "updated_at": now,
                    "last_error": fields["last_error"] + "; no attempts left",
                    "failure_stage": job.stage,
                    "history": fields["history"],
                }
        try:
            seq_no, primary_term = await self.docs.update(
                job.job_id, fields, seq_no=candidate.seq_no, primary_term=candidate.primary_term
            )
        except (NodeConflict, NodeNotFound):
            return None
        claimed = Job.from_doc(job.job_id, {**candidate.source, **fields})
        if claimed.state == FAILED:
            return claimed
        return _Lease(self.docs, claimed, seq_no, primary_term, lease_s)


@dataclass
class _Kind:
    handler: JobHandler
    on_failed: FailedHook | None = None


def default_worker_id() -> str:
    """host:pid:random, unique per process (a restarted process is another worker)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class JobRunner:
    """One process's workers: at most ``workers`` jobs at once (0: this process runs none, it may still
    enqueue), leases of ``lease_s`` renewed every third of it, a poll every ``poll_s`` and at once when this
    process enqueues; a failed attempt is retried after :func:`backoff_s` (``backoff_base_s``,
    ``backoff_max_s``) until the job's ``max_attempts``. A runner with workers also deletes the jobs that
    ended more than ``retention_s`` ago (None: never), when it starts and every ``purge_every_s``."""

    def __init__(
        self,
        queue: JobQueue,
        *,
        workers: int = 2,
        lease_s: float = 60.0,
        poll_s: float = 1.0,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 300.0,
        worker_id: str | None = None,
        retention_s: float | None = None,
        purge_every_s: float = 3600.0,
        max_per_owner: int | None = None,
    ) -> None:
        self.queue = queue
        # Whose job takes a free slot (proxy.core.job_turns); None: an owner may hold every slot.
        self.turns = OwnerTurns(workers if max_per_owner is None else max_per_owner)
        self.retention_s = retention_s
        self.purge_every_s = purge_every_s
        self._next_purge = 0.0  # time.monotonic() of the next one: the first poll purges
        self.workers = workers
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.worker_id = worker_id or default_worker_id()
        self._kinds: dict[str, _Kind] = {}
        # Scheduled enqueues (name → [call, every_s, next time.monotonic()]): see :meth:`every`.
        self._periodic: dict[str, list[Any]] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None
        self._stopping = False
        self._draining = False
        queue._wakeups.append(self._wake)
        queue.runs_jobs = queue.runs_jobs or workers > 0

    def register(self, kind: str, handler: JobHandler, *, on_failed: FailedHook | None = None) -> None:
        """Run jobs of ``kind`` with ``handler`` (at any time: a runner only claims kinds it can run, so a
        process without the handler, an older version say, leaves them to others)."""
        self._kinds[kind] = _Kind(handler, on_failed)
        self._wake.set()

    def every(self, name: str, every_s: float, call: Callable[[], Awaitable[None]]) -> None:
        """Call ``call`` from this runner's poll loop at most once per ``every_s`` (the first poll calls it).
        For schedulers that enqueue periodic jobs: the call should only enqueue (under a fixed job id, so that
        every process scheduling the same slot makes one job), the work runs as a job."""
        self._periodic[name] = [call, every_s, 0.0]
        self._wake.set()

    @property
    def running(self) -> list[str]:
        """Ids of the jobs this process runs now."""
        return list(self._running)

    def start(self) -> None:
        if self.workers > 0 and self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll(), name="jobs poller")

    def drain(self) -> None:
        """This process is stopping (proxy.serve): it claims no more jobs, and a job it enqueues from now on
        is due to every process at once (no hand-off to this one). Jobs already running go on until
        :meth:`close` hands back those still running."""
        self._draining = True
        self.queue.runs_jobs = False

    async def close(self) -> None:
        """Stop polling and cancel the running handlers; each job is handed back (PENDING, the attempt not
        counted) so another process takes it without waiting for the lease to expire."""
        # The poller stops between claims, not inside one: a claim the node applied but this process never
        # heard of would keep its job leased (and idle) until the lease expired.
        self._stopping = True
        self._wake.set()
        if self._poller is not None:
            done, _ = await asyncio.wait({self._poller}, timeout=5)
            if not done:
                self._poller.cancel()
                await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._wake in self.queue._wakeups:
            self.queue._wakeups.remove(self._wake)

    async def health(self) -> dict[str, Any]:
        """Counts by state, the last failures, and this process's workers (for ``/_memproxy/health``)."""
        return {
            "counts": await self.queue.counts(),
            "recent_failures": [
                {k: j.view()[k] for k in ("job_id", "kind", "subject", "attempts", "failure_stage")}
                | {"last_error": j.last_error, "finished_at": j.finished_at}
                for j in await self.queue.recent_failures()
            ],
            "worker": {
                "id": self.worker_id,
                "workers": self.workers,
                "kinds": sorted(self._kinds),
                "running": self.running,
                "draining": self._draining,
            },
        }

    # --- polling and claiming -------------------------------------------------------------------------

    async def _poll(self) -> None:
        while not self._stopping:
            self._wake.clear()
            await self._purge()
            await self._scheduled()
            free = self.workers - len(self._running)
            if free > 0 and self._kinds and not self._draining:
                try:
                    await self._claim(free)
                except MemproxyError as exc:  # the node is away: try again at the next poll
                    log.warning("jobs: polling failed: %s", exc.message)
                except Exception:  # never let one bad document stop this process's polling
                    log.exception("jobs: polling failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_s)

    async def _purge(self) -> None:
        """Delete the jobs past their retention, once per ``purge_every_s`` (every process with workers
        does it; concurrent deletes of the same jobs are harmless)."""
        if self.retention_s is None or time.monotonic() < self._next_purge:
            return
        self._next_purge = time.monotonic() + self.purge_every_s
        try:
            deleted = await self.queue.purge_finished(self.retention_s)
        except MemproxyError as exc:  # the node is away: the next purge catches up
            log.warning("jobs: deleting ended jobs failed: %s", exc.message)
            return
        if deleted:
            log.info("jobs: deleted %d jobs that ended over %.0f s ago", deleted, self.retention_s)

    async def _scheduled(self) -> None:
        if self._draining:
            return
        for name, entry in self._periodic.items():
            call, every_s, due = entry
            if time.monotonic() < due:
                continue
            entry[2] = time.monotonic() + every_s
            try:
                await call()
            except MemproxyError as exc:  # the node is away: the next turn catches up
                log.warning("jobs: scheduling %s failed: %s", name, exc.message)
            except Exception:
                log.exception("jobs: scheduling %s failed", name)

    async def _claim(self, free: int) -> None:
        """Fill ``free`` slots in two rounds. First a slot for each owner with a job waiting, whose turn it
        is first (proxy.core.job_turns): the oldest of this process's own fresh jobs of each owner (nobody
        else may take them yet) and the oldest due job of each owner in the index (a collapse). Then what is
        left, oldest first, to owners under their cap."""
        kinds = list(self._kinds)
        fresh = self.queue.fresh_jobs()
        round_one: list[tuple[str | None, str | Versioned]] = [(owner, job_id) for job_id, owner in fresh]
        round_one += [
            (c.source.get("owner_id"), c) for c in await self.queue.due(kinds, size=64, one_per_owner=True)
        ]
        for _, what in self.turns.order(round_one, lambda item: item[0]):
            if free <= 0 or self._stopping:
                return
            free -= await self._try(what)
        if free <= 0:
            return
        for job_id, owner in self.queue.fresh_jobs():
            if free <= 0 or self._stopping:
                return
            if self.turns.admits(owner):
                free -= await self._try(job_id)
        # A few more candidates than free slots: another process may win some of them.
        for candidate in await self.queue.due(kinds, size=free * 3 + 2):
            if free <= 0 or self._stopping:
                return
            free -= await self._try(candidate)

    async def _try(self, what: str | Versioned) -> bool:
        """Claim and start one job: a fresh job of this process (its id) or a due one as the search returned
        it. False when it is not this process's to run now (taken, its owner at its cap, not a kind here)."""
        own = isinstance(what, str)
        if isinstance(what, str):
            self.queue.forget_fresh(what)
            candidate = await self.queue.docs.get(what)
            if candidate is None or candidate.source.get("kind") not in self._kinds:
                return False
        else:
            candidate = what
        if candidate.id in self._running or not self.turns.admits(candidate.source.get("owner_id")):
            return False
        claimed = await self.queue.claim(candidate, self.worker_id, self.lease_s, own=own)
        if claimed is None:
            return False
        if isinstance(claimed, Job):  # its last attempt's worker died: nothing left to run
            log.warning("jobs: %s %s failed: %s", claimed.kind, claimed.job_id, claimed.last_error)
            await self._failed_hook(claimed)
            self.queue._finished(claimed.job_id)
            return False
        self._start(claimed)
        return True

    def _start(self, lease: _Lease) -> None:
        job_id = lease.job.job_id
        task = asyncio.get_running_loop().create_task(self._run(lease), name=f"job {job_id}")
        self._running[job_id] = task
        self.turns.started(job_id, lease.job.owner_id)

        def done(_: asyncio.Task[None]) -> None:
            self._running.pop(job_id, None)
            self.turns.ended(job_id)
            self._wake.set()  # a slot is free

        task.add_done_callback(done)

    # --- running one job ------------------------------------------------------------------------------

    async def _run(self, lease: _Lease) -> None:
        job = lease.job
        kind = self._kinds[job.kind]
        ctx = JobContext(lease, self.worker_id)
        work = asyncio.get_running_loop().create_task(self._call(kind.handler, job, ctx))
        beat = asyncio.get_running_loop().create_task(self._heartbeat(lease, work))
        try:
            try:
                result = await work
            finally:  # no renewal may follow the outcome's write
                beat.cancel()
                await asyncio.gather(beat, return_exceptions=True)
        except asyncio.CancelledError:
            if lease.lost:  # the heartbeat stopped it: the job is someone else's now
                log.warning("jobs: %s %s: lease lost, handler stopped", job.kind, job.job_id)
                return
            await self._release(lease)  # this process is stopping
            raise
        except LeaseLost:
            log.warning("jobs: %s %s: lease lost, outcome dropped", job.kind, job.job_id)
            return
        except PermanentJobError as exc:
            await self._fail(lease, exc, exc.stage or ctx.stage, ctx.stages, permanent=True)
            return
        except Exception as exc:
            await self._fail(lease, exc, ctx.stage, ctx.stages, permanent=False)
            return
        now = now_ms()
        done = {
            "state": COMPLETED,
            "result": dict(result) if isinstance(result, Mapping) else None,
            "lease_owner": None,
            "lease_expires_at": None,
            "finished_at": now,
            "history": job.with_attempt(ok=True, finished_at=now, stages=ctx.stages),
        }
        if await self._record(lease, done):
            log.info("jobs: %s %s completed (attempt %d)", job.kind, job.job_id, job.attempts)
            self.queue._finished(job.job_id)

    @staticmethod
    async def _call(handler: JobHandler, job: Job, ctx: JobContext) -> Mapping[str, Any] | None:
        return await handler(job.payload, ctx)

    async def _heartbeat(self, lease: _Lease, work: asyncio.Task[Any]) -> None:
        """Renew the lease every third of its length; stop the handler once the lease is lost, or once it
        has run out while the node could not be reached (another process may have the job by then)."""
        interval = self.lease_s / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await lease.write({}, refresh=False)
            except LeaseLost:
                work.cancel()
                return
            except Exception as exc:  # the node is away (or answered oddly): the lease still runs out
                log.warning("jobs: renewing the lease of %s failed: %s", lease.job.job_id, exc)
                if now_ms() >= lease.expires_at:
                    lease.lost = True
                    work.cancel()
                    return

    async def _fail(
        self,
        lease: _Lease,
        exc: BaseException,
        stage: str | None,
        stages: Sequence[Mapping[str, Any]],
        *,
        permanent: bool,
    ) -> None:
        job = lease.job
        error = _error_text(exc)
        now = now_ms()
        fields: dict[str, Any] = {
            "last_error": error,
            "failure_stage": stage,
            "lease_owner": None,
            "lease_expires_at": None,
            "history": job.with_attempt(
                ok=False, finished_at=now, stages=stages, error=error, failure_stage=stage
            ),
        }
        if permanent or job.attempts >= job.max_attempts:
            fields |= {"state": FAILED, "finished_at": now}
        else:
            delay = backoff_s(job.attempts, self.backoff_base_s, self.backoff_max_s)
            fields |= {"state": PENDING, "not_before": now + int(delay * 1000)}
        if not await self._record(lease, fields):
            return
        if fields["state"] == FAILED:
            log.warning("jobs: %s %s failed (attempt %d): %s", job.kind, job.job_id, job.attempts, error)
            await self._failed_hook(replace(job, **{**fields, "history": tuple(fields["history"])}))
            self.queue._finished(job.job_id)
        else:
            log.info("jobs: %s %s attempt %d failed, retrying: %s", job.kind, job.job_id, job.attempts, error)

    async def _release(self, lease: _Lease) -> None:
        """Hand a job back at shutdown: PENDING, due now, this attempt not counted (it did not fail)."""
        fields = {
            "state": PENDING,
            "lease_owner": None,
            "lease_expires_at": None,
            "not_before": now_ms(),
            "attempts": lease.job.attempts - 1,
        }
        try:
            async with asyncio.timeout(5):
                await lease.write(fields, renew=False)
        except (LeaseLost, MemproxyError, TimeoutError) as exc:  # its lease will expire instead
            log.info("jobs: could not hand back %s: %s", lease.job.job_id, exc)

    async def _record(self, lease: _Lease, fields: Mapping[str, Any]) -> bool:
        """Write a job's outcome; False when the job is no longer ours. A node that does not answer gets a
        few tries: the outcome is lost otherwise, and the job runs again after its lease expires."""
        for attempt in range(3):
            try:
                await lease.write(fields, renew=False)
                return True
            except LeaseLost:
                log.warning("jobs: %s finished after its lease was lost: outcome dropped", lease.job.job_id)
                return False
            except MemproxyError as exc:
                log.warning("jobs: recording %s failed: %s", lease.job.job_id, exc.message)
                await asyncio.sleep(0.5 * (attempt + 1))
        return False

    async def _failed_hook(self, job: Job) -> None:
        kind = self._kinds.get(job.kind)
        if kind is None or kind.on_failed is None:
            return
        try:
            await kind.on_failed(job)
        except Exception:
            log.exception("jobs: the failure hook of %s %s failed", job.kind, job.job_id)
