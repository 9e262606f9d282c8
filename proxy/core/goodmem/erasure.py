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

from collections.abc import Sequence
from dataclasses import dataclass, field

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
    run_erasure,
)
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.documents import DOCUMENT_JOB
from proxy.core.goodmem.ids import check_uuid, now_ms
from proxy.core.identity import Principal, require_admin, space_owner_id
from proxy.core.infer.jobs import INFER_JOB
from proxy.core.services import Services
from proxy.errors import BadRequest, Forbidden, NotFound
from proxy.store import memories as docs
from proxy.store.containers import CONTAINER_INDEX
from proxy.store.goodmem import APIKEYS, GRANTS, MEMORIES, PAGES, USERS
from proxy.store.query import Filter, Not, Term, Terms, all_of

__all__ = ["UserErasure", "UserErasureResult", "check_may_erase", "erase_user"]


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

    def _chunks_of(self, container: Container, memory_ids: Sequence[str]) -> Target | None:
        index = container.index_name("long-term")
        if index is None:
            return None
        selection = all_of([Terms("memory_id", tuple(memory_ids)), container_scope([container.id])])
        return Target(index, selection, (container.id,))

    async def _container(self, svc: Services, space_id: str) -> Container | None:
        try:
            return await get_container(svc, space_id)
        except NotFound:  # the space went, and its chunks with it
            return None

    async def erase_round(self, svc: Services, tally: Tally) -> None:
        jobs = self.gm.jobs.docs if self.gm.jobs is not None else None
        await delete_matching_jobs(jobs, self._job_matches(), tally)
        for target in self.targets():
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
                chunk_target = self._chunks_of(container, ids) if container is not None else None
                if chunk_target is not None:
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

    async def remaining(self, svc: Services) -> dict[str, int]:
        found: dict[str, int] = {}

        def add(index: str, n: int) -> None:
            found[index] = found.get(index, 0) + n

        for target in self.targets():
            add(target.index, await count_target(svc, target))
        add(MEMORIES, await count_target(svc, Target(MEMORIES, self._records_elsewhere())))
        by_space: dict[str, list[str]] = {}
        for memory_id, space_id in self.erased_records.items():
            by_space.setdefault(space_id, []).append(memory_id)
        for space_id, ids in by_space.items():
            container = await self._container(svc, space_id)
            for batch in chunks(ids):
                add(PAGES, await count_target(svc, Target(PAGES, Terms("memory_id", batch))))
                chunk_target = self._chunks_of(container, batch) if container is not None else None
                if chunk_target is not None:
                    add(chunk_target.index, await count_target(svc, chunk_target))
        jobs = self.gm.jobs.docs if self.gm.jobs is not None else None
        for index, n in (await count_matching_jobs(jobs, self._job_matches())).items():
            add(index, n)
        return found


async def _owned_spaces(gm: GoodMem, user_id: str) -> list[Container]:
    return [c async for c in every_container(gm.svc) if await space_owner_id(gm.identity, c) == user_id]


async def _delete_account(gm: GoodMem, principal: Principal, user_id: str, tally: Tally) -> None:
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
            updated_by_id=principal.user_id,
        )
        doc.setdefault("deleted_at", now)
        doc.setdefault("deleted_by_id", principal.user_id)
        await gm.docs.put(USERS, user_id, doc)
    gm.caches.access_changed()


def check_may_erase(principal: Principal, user_id: str) -> None:
    """403 unless ``principal`` is the user or an administrator (checked before the request body is read)."""
    if principal.user_id != user_id and not principal.is_admin:
        raise Forbidden("Permission denied: only the user or an administrator may erase a user's data")


async def erase_user(gm: GoodMem, principal: Principal, req: UserErasure) -> UserErasureResult:
    """The user themself or an administrator erases the user's data; only an administrator deletes the
    account. Refused before anything is deleted: another user's data (403), the root user (400: root owns
    every container created without an owner), an unknown user (404)."""
    user_id = check_uuid(req.user_id, "id")
    check_may_erase(principal, user_id)
    if req.delete_user:
        require_admin(principal, "deleting users")
    doc = await gm.docs.get(USERS, user_id)
    if doc is None:
        raise NotFound("User not found")
    if "ROOT" in (doc.get("roles") or ()) or user_id == await gm.instance.root_user_id():
        raise BadRequest("The root user's data cannot be erased")
    spaces = await _owned_spaces(gm, user_id)
    receipt = await run_erasure(gm.svc, _UserScope(gm, user_id, spaces))
    if not receipt.verification.verified:
        return UserErasureResult(receipt, [c.id for c in spaces], False)
    tally = receipt.tally
    tally.touch(CONTAINER_INDEX)
    for space in spaces:
        try:
            await delete_container(gm.svc, space.id, purge_memories=True)
        except NotFound:  # deleted meanwhile
            continue
        tally.add(CONTAINER_INDEX, 1, [space.id])
    found = dict(receipt.verification.found)
    if spaces:
        found[CONTAINER_INDEX] = await count_target(
            gm.svc, Target(CONTAINER_INDEX, Terms("_id", tuple(c.id for c in spaces)))
        )
    if req.delete_user:
        await _delete_account(gm, principal, user_id, tally)
        for index, key in ((APIKEYS, "user_id"), (GRANTS, "principal_id")):
            found[index] = found.get(index, 0) + await count_target(gm.svc, Target(index, Term(key, user_id)))
    verified = not any(found.values())
    verification = Verification(verified, receipt.verification.rounds, found)
    return UserErasureResult(
        Receipt(receipt.erased_at, tally, verification), [c.id for c in spaces], req.delete_user and verified
    )
