"""GoodMem memories: create (single and batch), get, batch get, delete, and record lookup.

Processing is synchronous: create chunks the text, embeds every chunk and stores them (one ``_bulk``,
refreshed) before the record is written, so a memory is ``COMPLETED`` and retrievable when create returns.
Nothing is half-stored: if embedding or the chunk write fails no record is written; if the record write fails
the chunks are deleted again. Records live in ``memproxy-goodmem-memories``; chunks are the space's long-term
documents.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.container_record import Container
from proxy.core.goodmem.chunking import chunk_text
from proxy.core.goodmem.content import NewMemory
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.ids import check_uuid, new_id, now_ms
from proxy.core.goodmem.metadata import index_metadata
from proxy.core.goodmem.records import MemoryRecord, record_from_long_term
from proxy.core.goodmem.spaces import get_space, space_chunking
from proxy.core.identity import Principal, authorize_space
from proxy.core.longterm import LongTermMemory, delete_long_term, write_long_term
from proxy.errors import BadRequest, Conflict, MemproxyError, NotFound
from proxy.store.goodmem import MEMORIES
from proxy.store.query import Term, Terms

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
]

log = logging.getLogger(__name__)

_DUPLICATE = "A memory with this ID already exists"


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
    chunks = [
        LongTermMemory(
            memory=c.text,
            memory_id=memory_id,
            chunk_sequence=c.sequence,
            start_offset=c.start,
            end_offset=c.end,
            metadata=req.metadata,
            id=new_id(),
            owner_id=principal.user_id,
            created_time=now,
            last_updated_time=now,
        )
        for c in chunk_text(req.text, chunking)
    ]
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
    return _Prepared(index, req, container, record, chunks, record.to_source(index_metadata(record.metadata)))


async def _existing_ids(gm: GoodMem, ids: Sequence[str]) -> set[str]:
    return set(await gm.docs.mget(MEMORIES, list(ids))) if ids else set()


async def _undo_chunks(gm: GoodMem, container: Container, chunk_ids: Sequence[str]) -> None:
    if not chunk_ids:
        return
    try:
        await delete_long_term(gm.svc, container, ids=list(chunk_ids))
    except Exception:  # the caller reports the original failure
        log.exception("could not delete %d chunks of a failed memory create", len(chunk_ids))


async def create_memory(gm: GoodMem, principal: Principal, req: NewMemory) -> MemoryRecord:
    """POST /v1/memories: chunk, embed and store; the COMPLETED record."""
    prepared = await _prepare(gm, principal, 0, req, now_ms())
    if req.memory_id and await _existing_ids(gm, [req.memory_id]):
        raise Conflict(_DUPLICATE)
    await write_long_term(gm.svc, prepared.container, prepared.chunks, refresh=True)
    try:
        await gm.docs.put(
            MEMORIES, prepared.record.memory_id, prepared.source, create=True, conflict_message=_DUPLICATE
        )
    except BaseException:
        await _undo_chunks(gm, prepared.container, [str(c.id) for c in prepared.chunks])
        raise
    return prepared.record


def _as_error(exc: BaseException) -> MemproxyError:
    if isinstance(exc, MemproxyError):
        return exc
    log.exception("batch item failed", exc_info=exc)
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
    existing = await _existing_ids(gm, [p.record.memory_id for p in prepared if p.request.memory_id])
    for group in _by_space(_drop_duplicate_ids(prepared, results, existing)):
        await _write_group(gm, group, results)
    return results


def _drop_duplicate_ids(
    prepared: list[_Prepared], results: list[ItemResult], existing: set[str]
) -> list[_Prepared]:
    seen: set[str] = set()
    keep: list[_Prepared] = []
    for p in prepared:
        mid = p.record.memory_id
        if mid in existing or mid in seen:
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


async def _write_group(gm: GoodMem, group: list[_Prepared], results: list[ItemResult]) -> None:
    """Chunks of one space in one write; then the records in one bulk; failed records lose their chunks."""
    container = group[0].container
    chunks = [c for p in group for c in p.chunks]
    try:
        await write_long_term(gm.svc, container, chunks, refresh=True)
    except BaseException as exc:
        err = _as_error(exc)
        for p in group:
            results[p.index] = ItemResult(error=err, memory_id=p.record.memory_id)
        if not isinstance(exc, Exception):
            raise
        return
    try:
        items = await gm.docs.create_many(MEMORIES, [(p.record.memory_id, p.source) for p in group])
    except Exception as exc:
        items = [{"status": getattr(exc, "status", 500), "error": {"reason": str(exc)}} for _ in group]
    for p, item in zip(group, items, strict=True):
        status = int(item.get("status", 500))
        if status < 300:
            results[p.index] = ItemResult(record=p.record)
            continue
        await _undo_chunks(gm, container, [str(c.id) for c in p.chunks])
        failure: MemproxyError = (
            Conflict(_DUPLICATE)
            if status == 409
            else MemproxyError(str((item.get("error") or {}).get("reason") or "Failed to store the memory"))
        )
        results[p.index] = ItemResult(error=failure, memory_id=p.record.memory_id)


async def get_memory_records(gm: GoodMem, memory_ids: Sequence[str]) -> dict[str, MemoryRecord]:
    """Records by id; an id with no record that names an OpenSearch-API long-term memory yields that memory
    (one chunk). Ids found nowhere are absent from the result."""
    ids = list(dict.fromkeys(memory_ids))
    found = {mid: MemoryRecord.from_source(src) for mid, src in (await gm.docs.mget(MEMORIES, ids)).items()}
    missing = [i for i in ids if i not in found]
    if missing:
        root = await gm.instance.root_user_id()
        for doc_id, src in (await gm.docs.long_term_without_record(missing)).items():
            found[doc_id] = record_from_long_term(doc_id, src, owner_id=root)
    return found


async def _load(gm: GoodMem, principal: Principal, memory_id: str, op: str) -> tuple[MemoryRecord, Container]:
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
    return (await _load(gm, principal, memory_id, "READ_MEMORY"))[0]


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
    record, container = await _load(gm, principal, memory_id, "DELETE_MEMORY")
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
        await gm.docs.delete_by_query(MEMORIES, Terms("memory_id", tuple(own)))
    return len(records)


def _memory_terms(ids: Sequence[str]) -> Any:
    return Term("memory_id", ids[0]) if len(ids) == 1 else Terms("memory_id", tuple(ids))
