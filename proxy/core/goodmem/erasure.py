"""``POST /v1/users/{id}:erase`` (a memproxy extension): every piece of one GoodMem user's data, with a
receipt and a verification search (docs/goodmem-api.md, "Erasing a user's data").

What is the user's: the spaces they own, whole (memories of every type in every index the space uses, memory
records, chunks, page images, grants on them, their document and extraction jobs, and finally the space
itself), and the memories they created in other users' spaces (records, chunks, page images, jobs). With
``deleteUser`` (an administrator only) the account goes too: its API keys, the grants made to it, and the
user document, tombstoned as ``DELETE /v1/users/{id}`` does and stripped of email, username, display name and
labels. Without it the account stays, so the user can go on using memproxy with nothing stored.

The erasure runs in :func:`proxy.core.erasure.run_erasure` rounds; the space documents are deleted only
once a round verified that nothing of the spaces is left, so an erasure that stopped half-way (a crash, a
refused verification) finds the same spaces by their owner when it runs again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core.container_record import MEMORY_TYPES, Container
from proxy.core.containers import delete_container, every_container, get_container
from proxy.core.erasure import (
    ID_BATCH,
    JobMatch,
    Receipt,
    Tally,
    Target,
    Verification,
    by_index,
    chunks,
    container_scope,
    count_matching_jobs,
    count_target,
    delete_matching_jobs,
    delete_target,
    job_tally,
    run_erasure,
)
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.documents import DOCUMENT_JOB
from proxy.core.goodmem.ids import check_uuid, now_ms
from proxy.core.identity import Principal, require_admin, space_owner_id
from proxy.core.infer.jobs import INFER_JOB
from proxy.core.jobs import Job, JobContext, JobRunner
from proxy.core.longterm_mirror import mirror_of
from proxy.core.services import Services
from proxy.errors import BadRequest, Forbidden, NotFound, Unavailable
from proxy.store import memories as docs
from proxy.store.containers import CONTAINER_INDEX
from proxy.store.goodmem import APIKEYS, GRANTS, MEMORIES, PAGES, USERS
from proxy.store.query import Filter, Not, Term, Terms, all_of

__all__ = [
    "USER_ERASE_JOB",
    "UserErasure",
    "UserErasureResult",
    "check_may_erase",
    "enqueue_user_erasure",
    "erase_user",
    "find_user_erasure",
    "register_user_erasure",
    "result_from_json",
    "result_json",
]


@dataclass(frozen=True)
class UserErasure:
    user_id: str
    delete_user: bool = False


@dataclass(frozen=True)
class UserErasureResult:
    receipt: Receipt
    space_ids: list[str]
    user_deleted: bool


@dataclass
class _UserScope:
    gm: GoodMem
    user_id: str
    spaces: Sequence[Container]
    # Memory id → space id of the records this erasure deleted in others' spaces (their chunks and pages
    # are verified by these ids).
    erased_records: dict[str, str] = field(default_factory=dict)

    @property
    def space_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.spaces)

    def targets(self) -> list[Target]:
        out = [
            Target(index, container_scope(batch), batch)
            for memory_type in MEMORY_TYPES
            for index, ids in sorted(by_index(self.spaces, memory_type).items())
            for batch in chunks(ids)
        ]
        for batch in chunks(self.space_ids):
            out += [
                Target(PAGES, Terms("space_id", batch)),
                Target(MEMORIES, Terms("space_id", batch)),
                Target(GRANTS, Terms("resource_id", batch)),
            ]
        return out

    def _job_matches(self) -> list[JobMatch]:
        ids = frozenset(self.space_ids)
        if not ids:
            return []
        return [
            JobMatch(DOCUMENT_JOB, ("payload.space_id",), space_ids=ids),
            JobMatch(INFER_JOB, ("payload.container_id",), container_ids=ids),
        ]

    def _records_elsewhere(self) -> Filter:
        """The user's memory records in spaces they do not own."""
        owned = Not(Terms("space_id", self.space_ids)) if self.space_ids else None
        return all_of([Term("created_by_id", self.user_id), owned])

    def _chunks_of(self, container: Container, memory_ids: Sequence[str]) -> list[Target]:
        """The memories' chunks in the space's long-term index, and in the second index of an embedding
        switch under way (``proxy.core.longterm_mirror``), which holds a copy of each."""
        index = container.index_name("long-term")
        if index is None:
            return []
        selection = all_of([Terms("memory_id", tuple(memory_ids)), container_scope([container.id])])
        mirror = mirror_of(container)
        indices = [index] if mirror is None or mirror.index == index else [index, mirror.index]
        return [Target(i, selection, (container.id,)) for i in indices]

    async def _container(self, svc: Services, space_id: str) -> Container | None:
        try:
            return await get_container(svc, space_id)
        except NotFound:  # the space went, and its chunks with it
            return None

    async def _erased_targets(self, svc: Services) -> list[Target]:
        """Chunks and page images of the records this erasure deleted in others' spaces (a document job
        that was still running may write them after its record went: the next round deletes them)."""
        by_space: dict[str, list[str]] = {}
        for memory_id, space_id in self.erased_records.items():
            by_space.setdefault(space_id, []).append(memory_id)
        out: list[Target] = []
        for space_id, ids in by_space.items():
            container = await self._container(svc, space_id)
            for batch in chunks(ids):
                out.append(Target(PAGES, Terms("memory_id", batch)))
                if container is not None:
                    out.extend(self._chunks_of(container, batch))
        return out

    async def erase_round(self, svc: Services, tally: Tally) -> None:
        jobs = self.gm.jobs.docs if self.gm.jobs is not None else None
        await delete_matching_jobs(jobs, self._job_matches(), tally)
        for target in [*self.targets(), *await self._erased_targets(svc)]:
            await delete_target(svc, target, tally)
        tally.touch(MEMORIES)
        # Records last within each batch: a record is how its chunks, pages and job are found again.
        while found := await docs.matching_ids(
            svc.store, MEMORIES, self._records_elsewhere(), size=ID_BATCH, fields=("space_id", "job_id")
        ):
            by_space: dict[str, list[str]] = {}
            for memory_id, source in found:
                by_space.setdefault(str(source.get("space_id")), []).append(memory_id)
            for space_id, ids in by_space.items():
                container = await self._container(svc, space_id)
                for chunk_target in self._chunks_of(container, ids) if container is not None else []:
                    await delete_target(svc, chunk_target, tally)
                self.erased_records.update((memory_id, space_id) for memory_id in ids)
            memory_ids = tuple(memory_id for memory_id, _ in found)
            await delete_target(svc, Target(PAGES, Terms("memory_id", memory_ids)), tally)
            job_ids = [str(s["job_id"]) for _, s in found if s.get("job_id")]
            if jobs is not None and job_ids:
                tally.add(jobs.index, await jobs.delete_ids(job_ids), job_ids)
            result = await docs.delete_by_query(
                svc.store, MEMORIES, Terms("memory_id", memory_ids), ignore_missing=True
            )
            tally.add(MEMORIES, int(result.get("deleted") or 0), memory_ids)
            await tally.checkpoint()

    async def remaining(self, svc: Services) -> dict[str, int]:
        found: dict[str, int] = {}

        def add(index: str, n: int) -> None:
            found[index] = found.get(index, 0) + n

        for target in [*self.targets(), *await self._erased_targets(svc)]:
            add(target.index, await count_target(svc, target))
        add(MEMORIES, await count_target(svc, Target(MEMORIES, self._records_elsewhere())))
        jobs = self.gm.jobs.docs if self.gm.jobs is not None else None
        for index, n in (await count_matching_jobs(jobs, self._job_matches())).items():
            add(index, n)
        return found


async def _owned_spaces(gm: GoodMem, user_id: str) -> list[Container]:
    return [c async for c in every_container(gm.svc) if await space_owner_id(gm.identity, c) == user_id]


async def _delete_account(gm: GoodMem, actor_id: str, user_id: str, tally: Tally) -> None:
    """Keys, grants to the user, and the user document tombstoned without its personal fields."""
    for index, key in ((APIKEYS, "user_id"), (GRANTS, "principal_id")):
        await delete_target(gm.svc, Target(index, Term(key, user_id)), tally)
    doc = await gm.docs.get(USERS, user_id)
    if doc is not None:
        now = now_ms()
        doc.update(
            email="",
            email_lower="",
            username=None,
            display_name="",
            labels={},
            updated_at=now,
            updated_by_id=actor_id,
        )
        doc.setdefault("deleted_at", now)
        doc.setdefault("deleted_by_id", actor_id)
        await gm.docs.put(USERS, user_id, doc)
    gm.caches.access_changed()


def check_may_erase(principal: Principal, user_id: str) -> None:
    """403 unless ``principal`` is the user or an administrator (checked before the request body is read)."""
    if principal.user_id != user_id and not principal.is_admin:
        raise Forbidden("Permission denied: only the user or an administrator may erase a user's data")


async def _authorize(gm: GoodMem, principal: Principal, req: UserErasure) -> str:
    """The user id, once every refusal that comes before deleting anything is past: another user's data
    (403), ``deleteUser`` by a non-administrator (403), an unknown user (404), the root user (400: root owns
    every container created without an owner)."""
    user_id = check_uuid(req.user_id, "id")
    check_may_erase(principal, user_id)
    if req.delete_user:
        require_admin(principal, "deleting users")
    doc = await gm.docs.get(USERS, user_id)
    if doc is None:
        raise NotFound("User not found")
    if "ROOT" in (doc.get("roles") or ()) or user_id == await gm.instance.root_user_id():
        raise BadRequest("The root user's data cannot be erased")
    return user_id


async def _perform(
    gm: GoodMem, actor_id: str, user_id: str, delete_user: bool, tally: Tally | None = None
) -> UserErasureResult:
    spaces = await _owned_spaces(gm, user_id)
    receipt = await run_erasure(gm.svc, _UserScope(gm, user_id, spaces), tally)
    tally = receipt.tally
    # Spaces an interrupted earlier attempt of this erasure deleted are no longer found by their owner.
    space_ids = sorted({c.id for c in spaces} | set(tally.ids.get(CONTAINER_INDEX, ())))
    if not receipt.verification.verified:
        return UserErasureResult(receipt, space_ids, False)
    tally.touch(CONTAINER_INDEX)
    for space in spaces:
        try:
            await delete_container(gm.svc, space.id, purge_memories=True)
        except NotFound:  # deleted meanwhile
            continue
        tally.add(CONTAINER_INDEX, 1, [space.id])
        await tally.checkpoint()
    found = dict(receipt.verification.found)
    if spaces:
        found[CONTAINER_INDEX] = await count_target(
            gm.svc, Target(CONTAINER_INDEX, Terms("_id", tuple(c.id for c in spaces)))
        )
    if delete_user:
        await _delete_account(gm, actor_id, user_id, tally)
        for index, key in ((APIKEYS, "user_id"), (GRANTS, "principal_id")):
            found[index] = found.get(index, 0) + await count_target(gm.svc, Target(index, Term(key, user_id)))
    verified = not any(found.values())
    verification = Verification(verified, receipt.verification.rounds, found)
    return UserErasureResult(
        Receipt(receipt.erased_at, tally, verification), space_ids, delete_user and verified
    )


async def erase_user(gm: GoodMem, principal: Principal, req: UserErasure) -> UserErasureResult:
    """The user themself or an administrator erases the user's data; only an administrator deletes the
    account. Refused before anything is deleted (:func:`_authorize`)."""
    user_id = await _authorize(gm, principal, req)
    return await _perform(gm, principal.user_id, user_id, req.delete_user)


# --- as a durable job --------------------------------------------------------------------------------

USER_ERASE_JOB = "goodmem_user_erase"


async def enqueue_user_erasure(gm: GoodMem, principal: Principal, req: UserErasure) -> Job:
    """The erasure as a durable job, refused as :func:`erase_user` refuses, before it is enqueued."""
    if gm.jobs is None:
        raise Unavailable("Erasure jobs are run by background jobs, which this process does not run")
    user_id = await _authorize(gm, principal, req)
    payload = {"user_id": user_id, "delete_user": req.delete_user, "actor_id": principal.user_id}
    return await gm.jobs.enqueue(USER_ERASE_JOB, payload, owner_id=principal.user_id)


def result_json(result: UserErasureResult) -> dict[str, Any]:
    """The job's ``result``: the receipt, the spaces and whether the account went."""
    return {**result.receipt.to_json(), "space_ids": result.space_ids, "user_deleted": result.user_deleted}


def result_from_json(value: Mapping[str, Any]) -> UserErasureResult:
    spaces = [str(s) for s in value.get("space_ids") or ()]
    return UserErasureResult(Receipt.from_json(value), spaces, bool(value.get("user_deleted")))


async def find_user_erasure(gm: GoodMem, principal: Principal, user_id: str, job_id: str) -> Job:
    """An erasure job of ``user_id`` the caller may see (the user or an administrator), else 404."""
    check_may_erase(principal, check_uuid(user_id, "id"))
    job = await gm.jobs.find(job_id) if gm.jobs is not None else None
    if job is None or job.kind != USER_ERASE_JOB or job.payload.get("user_id") != user_id:
        raise NotFound("Erasure job not found")
    return job


def register_user_erasure(runner: JobRunner, gm: GoodMem) -> None:
    async def run(payload: Mapping[str, Any], ctx: JobContext) -> Mapping[str, Any]:
        await ctx.set_stage("erase")
        result = await _perform(
            gm,
            str(payload["actor_id"]),
            str(payload["user_id"]),
            bool(payload.get("delete_user")),
            job_tally(ctx),
        )
        return result_json(result)

    runner.register(USER_ERASE_JOB, run)
