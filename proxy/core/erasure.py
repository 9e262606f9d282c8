"""Provable erasure: every document of one data subject deleted, per index, with a receipt and a verification
search that finds nothing (docs/opensearch-api.md, "Erasure"; GoodMem's user erasure builds on this module in
``proxy.core.goodmem.erasure``).

A *scope* says what is the subject's: :class:`Target` selections (each carrying its containers' scope filter,
never a bare subject filter across a shared index), deleted with ``_delete_by_query`` and counted again
afterwards, and linked documents a scope finds itself (the jobs whose payload names the subject, the history
records of the subject's long-term memories). :func:`run_erasure` runs rounds of "delete everything in scope,
then count everything in scope" until a count finds nothing, at most :data:`MAX_ROUNDS` times: a concurrent
write (an extraction job that was still running, a client adding memories) is deleted by the next round, and
one that keeps coming is reported, never hidden.

Every step deletes by what it finds now, so running an erasure again (after a crash, a timeout or a refused
verification) deletes what is left and reports the rest as zero: there is no state to resume but the data.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.core.clock import now_ms
from proxy.core.container_record import MEMORY_TYPES, Container
from proxy.core.containers import get_container
from proxy.core.infer.jobs import INFER_JOB
from proxy.core.jobs import Job, JobContext, JobQueue, JobRunner
from proxy.core.longterm_mirror import mirror_deleted
from proxy.core.services import Services
from proxy.errors import NotFound
from proxy.store import memories as docs
from proxy.store.jobs import JobDocs
from proxy.store.query import Filter, Term, Terms, all_of

__all__ = [
    "ERASED_IDS_SHOWN",
    "ERASE_JOB",
    "ID_BATCH",
    "MAX_ROUNDS",
    "JobMatch",
    "NamespaceUserScope",
    "Receipt",
    "Tally",
    "Target",
    "Verification",
    "by_index",
    "chunks",
    "container_scope",
    "count_matching_jobs",
    "count_target",
    "delete_matching_jobs",
    "delete_target",
    "enqueue_namespace_erasure",
    "erase_namespace_user",
    "job_tally",
    "matching_jobs",
    "register_erasure",
    "run_erasure",
]

MAX_ROUNDS = 3
# Ids per index a receipt lists (the counts are always complete).
ERASED_IDS_SHOWN = 100
# Documents found and deleted per step where a step must know the ids (linked history, job scans).
ID_BATCH = 1000
_JOB_SCAN = 1000
# An erasure run as a durable job (``wait_for_completion=false``): the payload names the user and the
# containers the caller was allowed at the request.
ERASE_JOB = "erase"


def container_scope(container_ids: Sequence[str]) -> Filter:
    """The scope filter of documents of these containers (every memory index carries the container id)."""
    ids = tuple(dict.fromkeys(container_ids))
    return Term("memory_container_id", ids[0]) if len(ids) == 1 else Terms("memory_container_id", ids)


@dataclass(frozen=True)
class Target:
    """What of ``index`` is the subject's: ``selection`` includes the scope filter; ``routing``, the
    containers it stays within where the index is routed by container (None: not routed, e.g. GoodMem's
    records)."""

    index: str
    selection: Filter
    routing: tuple[str, ...] | None = None


@dataclass
class Tally:
    """What an erasure deleted, per index: the count, and the first :data:`ERASED_IDS_SHOWN` ids where
    known. ``saver`` (an erasure job's) keeps it after every step, so that a retried job's receipt still
    counts what an interrupted attempt deleted."""

    deleted: dict[str, int] = field(default_factory=dict)
    ids: dict[str, list[str]] = field(default_factory=dict)
    saver: Callable[[Tally], Awaitable[None]] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"deleted": dict(self.deleted), "ids": {k: list(v) for k, v in self.ids.items()}}

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> Tally:
        value = value or {}
        deleted = value.get("deleted") if isinstance(value.get("deleted"), Mapping) else {}
        ids = value.get("ids") if isinstance(value.get("ids"), Mapping) else {}
        return cls(
            {str(k): int(v) for k, v in (deleted or {}).items()},
            {str(k): [str(i) for i in v] for k, v in (ids or {}).items() if isinstance(v, list)},
        )

    async def checkpoint(self) -> None:
        if self.saver is not None:
            await self.saver(self)

    def add(self, index: str, count: int, ids: Iterable[str] = ()) -> None:
        self.deleted[index] = self.deleted.get(index, 0) + count
        shown = self.ids.setdefault(index, [])
        for doc_id in ids:
            if len(shown) >= ERASED_IDS_SHOWN:
                break
            if doc_id not in shown:
                shown.append(doc_id)

    def touch(self, index: str) -> None:
        """An index in scope that had nothing to delete still appears in the receipt (with 0)."""
        self.deleted.setdefault(index, 0)
        self.ids.setdefault(index, [])


@dataclass(frozen=True)
class Verification:
    """The searches after the last round: ``found`` per index (all 0 when ``verified``)."""

    verified: bool
    rounds: int
    found: dict[str, int]


@dataclass(frozen=True)
class Receipt:
    erased_at: int
    tally: Tally
    verification: Verification

    @property
    def total(self) -> int:
        return sum(self.tally.deleted.values())

    def indices(self) -> list[tuple[str, int, list[str]]]:
        """(index, deleted, ids shown) in index-name order."""
        return [(i, n, self.tally.ids.get(i, [])) for i, n in sorted(self.tally.deleted.items())]

    def to_json(self) -> dict[str, Any]:
        """The receipt as a job keeps it (its ``result``)."""
        check = self.verification
        return {
            "erased_at": self.erased_at,
            **self.tally.to_json(),
            "verified": check.verified,
            "rounds": check.rounds,
            "found": dict(check.found),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Receipt:
        found = value.get("found") if isinstance(value.get("found"), Mapping) else {}
        check = Verification(
            bool(value.get("verified")),
            int(value.get("rounds") or 0),
            {str(k): int(v) for k, v in (found or {}).items()},
        )
        return cls(int(value.get("erased_at") or 0), Tally.from_json(value), check)


class ErasureScope(Protocol):
    async def erase_round(self, svc: Services, tally: Tally) -> None: ...

    async def remaining(self, svc: Services) -> dict[str, int]:
        """What is still in scope, per index (every index in scope, with 0 when nothing is left)."""
        ...


async def run_erasure(svc: Services, scope: ErasureScope, tally: Tally | None = None) -> Receipt:
    """Rounds of delete-then-verify until the verification finds nothing (at most :data:`MAX_ROUNDS`);
    ``tally``: what an earlier, interrupted run of the same erasure deleted (a job's saved progress)."""
    tally = tally if tally is not None else Tally()
    found: dict[str, int] = {}
    for rounds in range(1, MAX_ROUNDS + 1):
        await scope.erase_round(svc, tally)
        found = await scope.remaining(svc)
        if not any(found.values()):
            return Receipt(now_ms(), tally, Verification(True, rounds, found))
    return Receipt(now_ms(), tally, Verification(False, MAX_ROUNDS, found))


# --- the steps scopes are made of ------------------------------------------------------------------------


def chunks(ids: Sequence[str], size: int = ID_BATCH) -> Iterable[tuple[str, ...]]:
    for start in range(0, len(ids), size):
        yield tuple(ids[start : start + size])


async def delete_target(svc: Services, target: Target, tally: Tally) -> None:
    result = await docs.delete_by_query(
        svc.store, target.index, target.selection, routing=target.routing, ignore_missing=True
    )
    tally.add(target.index, int(result.get("deleted") or 0))
    await tally.checkpoint()


async def count_target(svc: Services, target: Target) -> int:
    """How many documents of the target are left (the index was refreshed by the delete)."""
    return await docs.count(
        svc.store, target.index, target.selection, routing=target.routing, ignore_missing=True
    )


@dataclass(frozen=True)
class JobMatch:
    """Jobs of ``kind`` that belong to the subject: ``payload`` (stored, not indexed) is read back for
    ``fields`` and judged by ``matches``."""

    kind: str
    fields: tuple[str, ...]
    container_ids: frozenset[str] = frozenset()
    user_id: str | None = None  # an infer job's ``payload.namespace.user_id``
    space_ids: frozenset[str] = frozenset()  # a document job's ``payload.space_id``

    def matches(self, source: Mapping[str, Any]) -> bool:
        payload = source.get("payload") or {}
        if not isinstance(payload, Mapping):
            return False
        if self.space_ids and payload.get("space_id") in self.space_ids:
            return True
        if payload.get("container_id") not in self.container_ids:
            return False
        if self.user_id is None:
            return True
        namespace = payload.get("namespace") or {}
        return isinstance(namespace, Mapping) and namespace.get("user_id") == self.user_id


async def matching_jobs(jobs: JobDocs, match: JobMatch) -> list[str]:
    """The ids of every job ``match`` takes, any state (a scan of that kind's jobs)."""
    found: list[str] = []
    after: int | None = None
    while True:
        page = await jobs.of_kind(match.kind, match.fields, _JOB_SCAN, after)
        found.extend(v.id for v in page if match.matches(v.source))
        if len(page) < _JOB_SCAN or page[-1].seq_no is None:
            return found
        after = page[-1].seq_no


async def delete_matching_jobs(jobs: JobDocs | None, matches: Sequence[JobMatch], tally: Tally) -> None:
    """Delete the jobs ``matches`` take; a job that is running loses its lease with its document (its
    heartbeat's conditional write fails) and what it writes meanwhile is the next round's."""
    if jobs is None:
        return
    tally.touch(jobs.index)
    for match in matches:
        ids = await matching_jobs(jobs, match)
        for batch in chunks(ids):
            tally.add(jobs.index, await jobs.delete_ids(batch), batch)
            await tally.checkpoint()


async def count_matching_jobs(jobs: JobDocs | None, matches: Sequence[JobMatch]) -> dict[str, int]:
    if jobs is None:
        return {}
    return {jobs.index: sum([len(await matching_jobs(jobs, m)) for m in matches])}


# --- ml-commons: one namespace user_id in a set of containers --------------------------------------------


def by_index(containers: Sequence[Container], memory_type: str) -> dict[str, list[str]]:
    """Index name → the ids of the containers (of ``containers``) whose ``memory_type`` lives there."""
    out: dict[str, list[str]] = {}
    for container in containers:
        index = container.index_name(memory_type)
        if index is not None:
            out.setdefault(index, []).append(container.id)
    return out


@dataclass
class NamespaceUserScope:
    """Every document whose ``namespace.user_id`` is ``user_id`` in ``containers``: sessions, working memory,
    long-term memory and history, the history records of those long-term memories (whatever their own
    namespace), and the ``infer`` jobs of that user in those containers (their payload holds the messages)."""

    containers: Sequence[Container]
    user_id: str
    jobs: JobDocs | None
    # Long-term ids this erasure deleted, by container: their history records are looked for by memory id.
    erased_long_term: dict[str, list[str]] = field(default_factory=dict)

    def _subject(self) -> Filter:
        return Term("namespace.user_id", self.user_id)

    def targets(self, memory_type: str) -> list[Target]:
        return [
            Target(index, all_of([self._subject(), container_scope(batch)]), batch)
            for index, ids in sorted(by_index(self.containers, memory_type).items())
            for batch in chunks(ids)
        ]

    def _containers_by_id(self) -> dict[str, Container]:
        return {c.id: c for c in self.containers}

    def _job_matches(self) -> list[JobMatch]:
        ids = frozenset(c.id for c in self.containers)
        return [JobMatch(INFER_JOB, ("payload.container_id", "payload.namespace"), ids, self.user_id)]

    def _history_of(self) -> dict[str, str]:
        """Container id → its history index (containers with history only)."""
        return {c.id: index for c in self.containers if (index := c.index_name("history")) is not None}

    async def erase_round(self, svc: Services, tally: Tally) -> None:
        # Jobs first (a job still pending would write the user's memories again), then history and
        # long-term memory together (a history record is found by its memory's id only while the memory
        # is there), then working memory and sessions.
        await delete_matching_jobs(self.jobs, self._job_matches(), tally)
        for target in [*self.targets("history"), *self._erased_history()]:
            await delete_target(svc, target, tally)
        history = self._history_of()
        for target in self.targets("long-term"):
            tally.touch(target.index)
            while found := await docs.matching_ids(
                svc.store,
                target.index,
                target.selection,
                size=ID_BATCH,
                routing=target.routing,
                fields=("memory_container_id",),
            ):
                by_container: dict[str, list[str]] = {}
                for doc_id, source in found:
                    by_container.setdefault(str(source.get("memory_container_id")), []).append(doc_id)
                for container_id, ids in by_container.items():
                    if container_id in history:
                        await delete_target(
                            svc, self._linked_history(history[container_id], container_id, ids), tally
                        )
                    self.erased_long_term.setdefault(container_id, []).extend(ids)
                ids = [doc_id for doc_id, _ in found]
                result = await docs.delete_by_query(
                    svc.store,
                    target.index,
                    all_of([Terms("_id", tuple(ids)), target.selection]),
                    routing=target.routing,
                    ignore_missing=True,
                )
                tally.add(target.index, int(result.get("deleted") or 0), ids)
                # An embedding switch under way holds a second copy of each: erase it too (while copying,
                # a tombstone stops the copy from writing it again).
                for container_id, erased in by_container.items():
                    if (container := self._containers_by_id().get(container_id)) is not None:
                        await mirror_deleted(svc, container, erased)
                await tally.checkpoint()
        for memory_type in ("working", "sessions"):
            for target in self.targets(memory_type):
                await delete_target(svc, target, tally)

    def _linked_history(self, index: str, container_id: str, memory_ids: Sequence[str]) -> Target:
        selection = all_of([Terms("memory_id", tuple(memory_ids)), container_scope([container_id])])
        return Target(index, selection, (container_id,))

    def _erased_history(self) -> list[Target]:
        """History records of the long-term memories this erasure deleted (one a concurrent extraction
        wrote after its memory went is deleted by the next round, and counted by the verification)."""
        history = self._history_of()
        return [
            self._linked_history(history[container_id], container_id, batch)
            for container_id, ids in self.erased_long_term.items()
            if container_id in history
            for batch in chunks(ids)
        ]

    async def remaining(self, svc: Services) -> dict[str, int]:
        found: dict[str, int] = {}
        targets = [t for memory_type in MEMORY_TYPES for t in self.targets(memory_type)]
        for target in [*targets, *self._erased_history()]:
            found[target.index] = found.get(target.index, 0) + await count_target(svc, target)
        found.update(await count_matching_jobs(self.jobs, self._job_matches()))
        return found


async def erase_namespace_user(
    svc: Services, containers: Sequence[Container], user_id: str, jobs: JobDocs | None
) -> Receipt:
    """Erase ``namespace.user_id == user_id`` from ``containers`` (the caller checked they may)."""
    return await run_erasure(svc, NamespaceUserScope(list(containers), user_id, jobs))


# --- as a durable job --------------------------------------------------------------------------------


def job_tally(ctx: JobContext) -> Tally:
    """The tally an earlier attempt of this job saved (empty on a first attempt), saved again after every
    step of this one."""

    async def save(tally: Tally) -> None:
        await ctx.set_progress(tally.to_json())

    tally = Tally.from_json(ctx.progress)
    tally.saver = save
    return tally


async def enqueue_namespace_erasure(
    queue: JobQueue, containers: Sequence[Container], user_id: str, owner_id: str | None
) -> Job:
    payload = {"user_id": user_id, "container_ids": [c.id for c in containers]}
    return await queue.enqueue(ERASE_JOB, payload, owner_id=owner_id)


def register_erasure(runner: JobRunner, svc: Services) -> None:
    async def run(payload: Mapping[str, Any], ctx: JobContext) -> Mapping[str, Any]:
        containers: list[Container] = []
        for container_id in payload.get("container_ids") or ():
            try:
                containers.append(await get_container(svc, str(container_id)))
            except NotFound:  # deleted since the request: nothing of it is searched any more
                continue
        await ctx.set_stage("erase")
        scope = NamespaceUserScope(containers, str(payload["user_id"]), runner.queue.docs)
        receipt = await run_erasure(svc, scope, job_tally(ctx))
        return {**receipt.to_json(), "memory_container_ids": [c.id for c in containers]}

    runner.register(ERASE_JOB, run)
