"""GoodMem memories: create (single and batch), get, batch get, delete, and record lookup.

Processing is synchronous, and a write is atomic from the client's view (docs/security.md, "Stored data"):

1. every request is chunked and its memory id checked: a client-chosen ``memoryId`` that is taken anywhere
   (another record, in any space, or a long-term document or chunk of any container) is 409, so an id can
   never stand for two memories;
2. the records are created ``PROCESSING`` (``op_type=create``: the id is reserved atomically, and the intent
   is durable before any chunk exists), tagged with the write's id;
3. the chunks are embedded and stored (one refreshed ``_bulk``, all or nothing);
4. each record becomes ``COMPLETED`` only if it is still the version step 2 wrote (a clean-up that claimed
   it meanwhile wins), refreshed; then the answer is 2xx.

So no chunk ever exists without its record, and a 2xx means record and chunks are stored.

Documents (PDF, DOCX, HTML, images) and texts longer than ``sync_max_chars`` take the other path
(``proxy.core.goodmem.documents``): the record is created ``PENDING`` with its job's id, the job is enqueued,
and the answer is 201 at once; the job stores the chunks and completes the record. A write that fails
after step 2 is settled at once (``proxy.core.goodmem.rollback``): rolled back, chunks first (by their ids),
then the records that carry its write id (conditionally); or, when all of it turns out to be stored (only an
answer was lost), completed and answered 2xx. When the node cannot be reached, settling is retried in the
background until it can.
A proxy that dies mid-write leaves ``PROCESSING`` records, which any proxy rolls back once they are older
than ``proxy.core.goodmem.rollback.ABANDONED_AFTER_MS``. Records live in
``memproxy-goodmem-memories``; chunks are the space's long-term documents.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.container_record import Container
from proxy.core.goodmem.chunking import chunk_documents
from proxy.core.goodmem.content import NewMemory
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.documents import (
    enqueue_document,
    needs_job,
    new_record_fields,
    page_images_wanted,
)
from proxy.core.goodmem.ids import check_uuid, new_id, now_ms
from proxy.core.goodmem.metadata import index_metadata
from proxy.core.goodmem.records import MemoryRecord, record_from_long_term
from proxy.core.goodmem.rollback import (
    COMPLETED,
    FAILED,
    PROCESSING,
    InterruptedWrite,
    maybe_sweep,
    roll_back,
    roll_back_later,
)
from proxy.core.goodmem.spaces import get_space, space_chunking
from proxy.core.identity import Principal, authorize_space
from proxy.core.longterm import LongTermMemory, delete_long_term, write_long_term
from proxy.errors import BadRequest, Conflict, MemproxyError, NotFound, Unavailable
from proxy.store.goodmem import MEMORIES
from proxy.store.query import Term, Terms
from proxy.store.versioned import Versioned, mget_versioned, update_many

__all__ = [
    "ItemResult",
    "Rejected",
    "batch_create_memories",
    "batch_get_memories",
    "create_memory",
    "delete_memory",
    "delete_records",
    "get_memory",
    "get_memory_records",
    "load_memory",
]

log = logging.getLogger(__name__)

_DUPLICATE = "A memory with this ID already exists"
_UNSETTLED = (
    "A memory with this ID is still being written, or rolled back after a failed write; retry shortly "
    "(it then exists, 409, or is free)"
)


@dataclass
class ItemResult:
    """One item of a batch: a record on success, else an error (HTTP status and message)."""

    record: MemoryRecord | None = None
    error: MemproxyError | None = None
    memory_id: Any = None  # the id the item named, as sent (a malformed item may name a non-string)


@dataclass(frozen=True)
class Rejected:
    """An item of a batch request that failed validation: its error and the ``memoryId`` it named."""

    error: MemproxyError
    memory_id: Any = None


@dataclass
class _Prepared:
    index: int
    request: NewMemory
    container: Container
    record: MemoryRecord
    chunks: list[LongTermMemory]
    # The record document, built before anything is written: indexing its metadata can refuse a value (400).
    source: dict[str, Any]
    # Processed by a background job (a document, a long text): no chunks are made in the request.
    by_job: bool = False


async def _writable_space(gm: GoodMem, principal: Principal, space_id: str) -> Container:
    container = await get_space(gm, space_id)
    await authorize_space(gm, principal, container, "CREATE_MEMORY")
    return container


async def _prepare(
    gm: GoodMem,
    principal: Principal,
    index: int,
    req: NewMemory,
    now: int,
    spaces: dict[str, Container | MemproxyError] | None = None,
) -> _Prepared:
    """Check the space (once per space within a batch, via ``spaces``), chunk, and build chunks and record."""
    cached = spaces.get(req.space_id) if spaces is not None else None
    if isinstance(cached, MemproxyError):
        raise cached
    if cached is None:
        try:
            cached = await _writable_space(gm, principal, req.space_id)
        except MemproxyError as exc:
            if spaces is not None:
                spaces[req.space_id] = exc
            raise
        if spaces is not None:
            spaces[req.space_id] = cached
    container = cached
    if container.index_name("long-term") is None:
        raise BadRequest("The space has no embedder, so it cannot hold memories")
    chunking = req.chunking or space_chunking(container)
    memory_id = req.memory_id or new_id()
    by_job = needs_job(req.text, gm.documents.sync_max_chars)
    if by_job and req.text is None and gm.jobs is None:
        raise Unavailable("Documents are processed by background jobs, which this process does not run")
    by_job = by_job and gm.jobs is not None
    chunks = (
        []
        if by_job
        else await chunk_documents(
            req.text or "",
            chunking,
            memory_id=memory_id,
            metadata=req.metadata,
            owner_id=principal.user_id,
            now=now,
            max_chunks=gm.store.settings.max_chunks_per_memory,
            chunk_id=lambda _sequence: new_id(),
        )
    )
    record = MemoryRecord.for_content(
        memory_id=memory_id,
        space_id=container.id,
        content_type=req.content_type,
        content=req.content,
        actor_id=principal.user_id,
        now=now,
        metadata=req.metadata,
        chunking_config=chunking.to_json(),
        content_ref=req.content_ref,
        chunk_count=len(chunks),
    )
    if by_job:
        job_fields = new_record_fields(
            memory_id, page_images_wanted(req.content_type, req.content, req.extract_page_images)
        )
        record.processing_status = job_fields["processing_status"]
        record.page_image_status = job_fields["page_image_status"]
        record.job_id, record.job_number = job_fields["job_id"], job_fields["job_number"]
    source = record.to_source(index_metadata(record.metadata))
    return _Prepared(index, req, container, record, chunks, source, by_job=by_job)


# --- create ----------------------------------------------------------------------------------------------


async def create_memory(gm: GoodMem, principal: Principal, req: NewMemory) -> MemoryRecord:
    """POST /v1/memories: chunk, embed and store; the COMPLETED record (see the module docstring)."""
    prepared = await _prepare(gm, principal, 0, req, now_ms())
    results = [ItemResult(memory_id=req.memory_id)]
    await _store(gm, [prepared], results)
    if results[0].error is not None:
        raise results[0].error
    assert results[0].record is not None
    return results[0].record


def _as_error(exc: BaseException) -> MemproxyError:
    if isinstance(exc, MemproxyError):
        return exc
    log.error("memory write failed", exc_info=exc)
    return MemproxyError("Internal server error")


async def batch_create_memories(
    gm: GoodMem, principal: Principal, items: Sequence[NewMemory | Rejected]
) -> list[ItemResult]:
    """POST /v1/memories:batchCreate: per-item results in request order; one embed + bulk per space."""
    results: list[ItemResult] = [ItemResult() for _ in items]
    now = now_ms()
    prepared: list[_Prepared] = []
    spaces: dict[str, Container | MemproxyError] = {}
    for i, item in enumerate(items):
        if isinstance(item, Rejected):
            results[i] = ItemResult(error=item.error, memory_id=item.memory_id)
            continue
        try:
            prepared.append(await _prepare(gm, principal, i, item, now, spaces))
        except MemproxyError as exc:
            results[i] = ItemResult(error=exc, memory_id=item.memory_id)
    await _store(gm, prepared, results)
    return results


async def _store(gm: GoodMem, prepared: list[_Prepared], results: list[ItemResult]) -> None:
    """Refuse taken ids, then write each space's group (module docstring, steps 2-4), and hand the
    memories processed by jobs to their jobs."""
    free = await _free_ids(gm, prepared, results)
    for group in _by_space(p for p in free if not p.by_job):
        await _write_group(gm, group, results)
    await _enqueue(gm, [p for p in free if p.by_job], results)
    maybe_sweep(gm)


async def _enqueue(gm: GoodMem, prepared: list[_Prepared], results: list[ItemResult]) -> None:
    """The PENDING records (refreshed, so lists show them), then one job each. A record whose job could not
    be enqueued is removed again: nothing is left that no job will ever process."""
    if not prepared:
        return
    assert gm.jobs is not None
    try:
        created = await gm.docs.create_many(MEMORIES, [(p.record.memory_id, p.source) for p in prepared])
    except Exception as exc:
        _fail(prepared, results, exc)
        return
    for p, item in zip(prepared, created, strict=True):
        mid = p.record.memory_id
        if int(item.get("status", 500)) >= 300:
            results[p.index] = ItemResult(
                error=_item_error(item, "Failed to store the memory"), memory_id=mid
            )
            continue
        try:
            await enqueue_document(gm, p.record)
        except Exception as exc:
            await gm.docs.delete(MEMORIES, mid)
            results[p.index] = ItemResult(error=_as_error(exc), memory_id=mid)
            continue
        results[p.index] = ItemResult(record=p.record)


async def _free_ids(gm: GoodMem, prepared: list[_Prepared], results: list[ItemResult]) -> list[_Prepared]:
    """The items whose id is free: a client-chosen id named twice in the request, or already naming a
    record (any space) or a long-term document or chunk (any container), is 409. Server ids are fresh."""
    chosen = [p.record.memory_id for p in prepared if p.request.memory_id]
    records: dict[str, dict[str, Any]] = {}
    taken: set[str] = set()
    if chosen:
        records = await gm.docs.mget(MEMORIES, chosen)
        taken = set(records) | await gm.docs.taken_by_long_term(chosen)
    seen: set[str] = set()
    keep: list[_Prepared] = []
    for p in prepared:
        mid = p.record.memory_id
        if records.get(mid, {}).get("job_id"):  # a job's record, whatever its state: taken
            results[p.index] = ItemResult(error=Conflict(_DUPLICATE), memory_id=mid)
            continue
        if records.get(mid, {}).get("processing_status") in (PROCESSING, FAILED):
            results[p.index] = ItemResult(error=Unavailable(_UNSETTLED), memory_id=mid)
            continue
        if mid in taken or mid in seen:
            results[p.index] = ItemResult(error=Conflict(_DUPLICATE), memory_id=mid)
            continue
        seen.add(mid)
        keep.append(p)
    return keep


def _by_space(prepared: Iterable[_Prepared]) -> list[list[_Prepared]]:
    groups: dict[str, list[_Prepared]] = {}
    for p in prepared:
        groups.setdefault(p.container.id, []).append(p)
    return list(groups.values())


def _fail(group: Iterable[_Prepared], results: list[ItemResult], exc: BaseException) -> None:
    err = _as_error(exc)
    for p in group:
        results[p.index] = ItemResult(error=err, memory_id=p.record.memory_id)


def _item_error(item: Mapping[str, Any], fallback: str) -> MemproxyError:
    status = int(item.get("status", 500))
    if status == 409:
        return Conflict(_DUPLICATE)
    return MemproxyError(str((item.get("error") or {}).get("reason") or fallback))


def _interrupted(container: Container, group: Sequence[_Prepared], write: str) -> InterruptedWrite:
    return InterruptedWrite(
        container=container,
        write_id=write,
        memory_ids=tuple(p.record.memory_id for p in group),
        chunk_ids=tuple(str(c.id) for p in group for c in p.chunks),
    )


async def _write_group(gm: GoodMem, group: list[_Prepared], results: list[ItemResult]) -> None:
    """Steps 2-4 of the module docstring for the items of one space."""
    container = group[0].container
    write = new_id()
    for p in group:
        p.source.update(processing_status=PROCESSING, write_id=write)
    # 2. The records, PROCESSING: the ids are reserved and the intent is durable before any chunk exists.
    try:
        created = await gm.docs.create_many(
            MEMORIES, [(p.record.memory_id, p.source) for p in group], refresh=False
        )
    except BaseException as exc:
        roll_back_later(gm, _interrupted(container, group, write))  # which records landed is unknown
        if not isinstance(exc, Exception):
            raise
        _fail(group, results, exc)
        return
    live: list[tuple[_Prepared, Versioned]] = []
    for p, item in zip(group, created, strict=True):
        if int(item.get("status", 500)) < 300:
            live.append(
                (p, Versioned(p.record.memory_id, {}, item.get("_seq_no"), item.get("_primary_term")))
            )
        else:
            results[p.index] = ItemResult(
                error=_item_error(item, "Failed to store the memory"), memory_id=p.record.memory_id
            )
    if not live:
        return
    stored = [p for p, _ in live]
    # 3. The chunks (all or nothing), refreshed so the memories are retrievable once COMPLETED.
    try:
        await write_long_term(gm.svc, container, [c for p in stored for c in p.chunks], refresh=True)
        # 4. COMPLETED, each only if still the version step 2 wrote.
        done = await _complete(gm, write, [v for _, v in live])
    except Exception as exc:
        if not await roll_back(gm, _interrupted(container, stored, write)):
            _fail(stored, results, exc)
            return
        done = [{"status": 200} for _ in stored]  # all of it was stored after all: only an answer was lost
    except BaseException:  # cancelled (the client went away): settle without holding up the cancellation
        roll_back_later(gm, _interrupted(container, stored, write))
        raise
    lost: list[_Prepared] = []
    for p, item in zip(stored, done, strict=True):
        if int(item.get("status", 500)) < 300:
            results[p.index] = ItemResult(record=p.record)
        else:  # deleted or claimed by a clean-up meanwhile
            lost.append(p)
            results[p.index] = ItemResult(
                error=MemproxyError("The memory was removed while it was being stored"),
                memory_id=p.record.memory_id,
            )
    if lost:
        await roll_back(gm, _interrupted(container, lost, write))


async def _complete(gm: GoodMem, write: str, records: Sequence[Versioned]) -> list[dict[str, Any]]:
    """Step 4: each record COMPLETED if it is still the version step 2 wrote; each item's outcome.

    A version conflict is not always a clean-up's claim: while a primary fails over, the cluster may have
    carried out step 2's write twice (its own retry, on the new primary), which moves the record's version
    without anyone else touching it. So a conflicting record that is still this write's PROCESSING record,
    unclaimed, is completed at the version it has now; one that changed otherwise stays lost."""
    updates = [(v, {"processing_status": COMPLETED}) for v in records]
    done = await update_many(gm.store, MEMORIES, updates)
    again = [v.id for v, item in zip(records, done, strict=True) if int(item.get("status", 500)) == 409]
    if not again:
        return done
    current = await mget_versioned(gm.store, MEMORIES, again)
    ours = [
        v
        for v in current.values()
        if v.source.get("write_id") == write and v.source.get("processing_status") == PROCESSING
    ]
    retried = dict(
        zip(
            (v.id for v in ours),
            await update_many(gm.store, MEMORIES, [(v, {"processing_status": COMPLETED}) for v in ours]),
            strict=True,
        )
    )
    return [retried.get(v.id, item) for v, item in zip(records, done, strict=True)]


# --- read and delete ---------------------------------------------------------------------------------------


async def get_memory_records(
    gm: GoodMem, memory_ids: Sequence[str], *, spaces: Mapping[str, str] | None = None
) -> dict[str, MemoryRecord]:
    """Records by id; an id with no record that names an OpenSearch-API long-term memory yields that memory
    (one chunk). Ids found nowhere are absent from the result.

    ``spaces`` (memory id → the space a chunk of it was found in, as retrieve knows): a record or long-term
    memory of any other space is left out, so nothing stored in one space can stand in for a memory of
    another, whatever ids a writer managed to give it."""
    ids = list(dict.fromkeys(memory_ids))

    def in_place(mid: str, space_id: str) -> bool:
        return spaces is None or spaces.get(mid) == space_id

    found = {
        mid: record
        for mid, src in (await gm.docs.mget(MEMORIES, ids)).items()
        if in_place(mid, (record := MemoryRecord.from_source(src)).space_id)
    }
    missing = [i for i in ids if i not in found]
    if missing:
        root = await gm.instance.root_user_id()
        for doc_id, src in (await gm.docs.long_term_without_record(missing)).items():
            if in_place(doc_id, str(src.get("memory_container_id") or "")):
                found[doc_id] = record_from_long_term(doc_id, src, owner_id=root)
    return found


async def load_memory(
    gm: GoodMem, principal: Principal, memory_id: str, op: str
) -> tuple[MemoryRecord, Container]:
    """A memory and its space, once ``op`` (READ_MEMORY, DELETE_MEMORY) is allowed on the space: 404, 403."""
    mid = check_uuid(memory_id, "memoryId")
    record = (await get_memory_records(gm, [mid])).get(mid)
    if record is None:
        raise NotFound("Memory not found")
    try:
        container = await get_space(gm, record.space_id)
    except NotFound:
        raise NotFound("Memory not found") from None
    await authorize_space(gm, principal, container, op)
    return record, container


async def get_memory(gm: GoodMem, principal: Principal, memory_id: str) -> MemoryRecord:
    return (await load_memory(gm, principal, memory_id, "READ_MEMORY"))[0]


async def batch_get_memories(
    gm: GoodMem, principal: Principal, memory_ids: Sequence[object]
) -> list[ItemResult]:
    """Each id's memory or error, in request order (an id that is not even a string is that item's 400)."""
    results: list[ItemResult] = []
    for raw in memory_ids:
        try:
            results.append(ItemResult(record=await get_memory(gm, principal, check_uuid(raw, "memoryId"))))
        except MemproxyError as exc:
            results.append(ItemResult(error=exc, memory_id=raw if isinstance(raw, str) else None))
    return results


async def delete_memory(gm: GoodMem, principal: Principal, memory_id: str) -> int:
    """Delete a memory and its chunks; 1 (the count batch delete reports)."""
    record, container = await load_memory(gm, principal, memory_id, "DELETE_MEMORY")
    await delete_records(gm, container, [record])
    return 1


async def delete_records(gm: GoodMem, container: Container, records: Sequence[MemoryRecord]) -> int:
    """Chunks first, then the records (a failure in between leaves a record, never orphan chunks)."""
    own = [r.memory_id for r in records if not r.from_long_term]
    foreign = [r.memory_id for r in records if r.from_long_term]
    if container.index_name("long-term") is not None:
        for start in range(0, len(own), 1000):
            await delete_long_term(gm.svc, container, filter=_memory_terms(own[start : start + 1000]))
        if foreign:
            await delete_long_term(gm.svc, container, ids=foreign)
    if own:
        await gm.docs.delete_pages_of(own)
        await gm.docs.delete_by_query(MEMORIES, Terms("memory_id", tuple(own)))
    return len(records)


def _memory_terms(ids: Sequence[str]) -> Any:
    return Term("memory_id", ids[0]) if len(ids) == 1 else Terms("memory_id", tuple(ids))
