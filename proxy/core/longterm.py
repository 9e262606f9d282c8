"""Long-term memories (= GoodMem chunks): the write model, one embedded ``_bulk`` write, deletes.

A write embeds its texts through each of the container's embedders and sends them in ``_bulk`` requests.
A small write is one ``embed()`` call and one ``_bulk``; a large one (more than :data:`PIPELINE_SLICE`
memories) is cut into slices that are pipelined, the next slice embedded while the node indexes the last
(embedding is the proxy's CPU, indexing the node's: overlapped, a write costs the slower of the two instead
of their sum). Only the last ``_bulk`` carries ``refresh``, so the memories are searchable when the call
returns. A write is all or nothing: if any bulk item fails, the items that were written are deleted again
and the first failure is raised.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.container_record import Container
from proxy.core.longterm_mirror import ids_matching, mirror_deleted, sync_mirror
from proxy.core.services import Services
from proxy.errors import BadRequest
from proxy.filters import index_metadata
from proxy.store import memories as docs
from proxy.store.client import IndexMissing, node_error
from proxy.store.query import Filter, Terms, all_of

__all__ = [
    "LONG_TERM_DISABLED",
    "LongTermMemory",
    "delete_long_term",
    "embed_texts",
    "long_term_index",
    "write_long_term",
]

log = logging.getLogger(__name__)

# Memories per slice of a pipelined write: a few of the embedder's batches (32 texts on CPU), and a
# ``_bulk`` of a few megabytes at most.
PIPELINE_SLICE = 64

LONG_TERM_DISABLED = (
    "Long-term memory is disabled for this container: configure an embedding model (embedding_model_type, "
    "embedding_model_id, embedding_dimension) to store long-term memories"
)


@dataclass
class LongTermMemory:
    """One long-term memory document to write; ``id`` (a UUID) is generated when not given."""

    memory: str
    namespace: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    strategy_type: str | None = None
    strategy_id: str | None = None
    memory_id: str | None = None
    chunk_sequence: int | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    metadata: dict[str, Any] | None = None
    id: str | None = None
    created_time: int | None = None
    last_updated_time: int | None = None
    owner_id: str | None = None
    pinned: bool | None = None


def long_term_index(container: Container) -> str:
    index = container.index_name("long-term")
    if index is None:
        raise BadRequest(LONG_TERM_DISABLED, os_type="status_exception")
    return index


async def embed_texts(
    svc: Services, container: Container, texts: Sequence[str]
) -> dict[str, list[list[float]]]:
    """Vectors per knn field of the container: one ``embed()`` call per embedder, run concurrently."""
    fields = container.vector_fields()
    if not fields:
        raise BadRequest(LONG_TERM_DISABLED, os_type="status_exception")
    embedders = [await svc.models.embedding_model(embedder_id) for _, embedder_id in fields]
    results = await asyncio.gather(*(e.embed(list(texts)) for e in embedders))
    return {
        name: [list(map(float, v)) for v in vectors]
        for (name, _), vectors in zip(fields, results, strict=True)
    }


def _document(container: Container, m: LongTermMemory, now: int) -> dict[str, Any]:
    """ml-commons' long-term document (its key order), then memproxy's GoodMem fields; vectors come later."""
    doc: dict[str, Any] = {"memory": m.memory}
    if m.strategy_type is not None:
        doc["strategy_type"] = m.strategy_type
    if m.strategy_id is not None:
        doc["strategy_id"] = m.strategy_id
    doc["namespace"] = dict(m.namespace)
    doc["namespace_size"] = len(m.namespace)
    if m.tags:
        doc["tags"] = dict(m.tags)
    if m.owner_id is not None:
        doc["owner_id"] = m.owner_id
    doc["memory_container_id"] = container.id
    doc["created_time"] = m.created_time if m.created_time is not None else now
    doc["last_updated_time"] = m.last_updated_time if m.last_updated_time is not None else doc["created_time"]
    if m.pinned is not None:
        doc["pinned"] = m.pinned
    for key in ("memory_id", "chunk_sequence", "start_offset", "end_offset"):
        if getattr(m, key) is not None:
            doc[key] = getattr(m, key)
    if m.metadata is not None:
        doc["metadata"] = m.metadata
        indexed = index_metadata(m.metadata)
        if indexed is not None:
            doc["metadata_index"] = indexed
    return doc


async def write_long_term(
    svc: Services,
    container: Container,
    memories: Sequence[LongTermMemory],
    *,
    refresh: bool | str = True,
    overwrite: bool = False,
) -> list[str]:
    """Embed and store ``memories`` (pipelined slices for a large write, see the module docstring); their
    ids, in order. All or nothing.

    ``overwrite`` replaces documents whose given ids exist (``index`` instead of ``create``); a failed
    overwrite cannot restore the replaced version, so callers that need that should delete first.
    """
    index = long_term_index(container)
    if not memories:
        return []
    for m in memories:
        if not isinstance(m.memory, str) or not m.memory.strip():
            raise BadRequest("memory cannot be null or blank")
    now = now_ms()
    # Documents first: metadata that cannot be indexed is refused before any embedding work.
    documents = [_document(container, m, now) for m in memories]
    ids = [m.id or str(uuid.uuid4()) for m in memories]
    action = "index" if overwrite else "create"
    slices = [
        range(i, min(i + PIPELINE_SLICE, len(memories))) for i in range(0, len(memories), PIPELINE_SLICE)
    ]

    def embed(part: range) -> asyncio.Task[dict[str, list[list[float]]]]:
        return asyncio.ensure_future(embed_texts(svc, container, [memories[i].memory for i in part]))

    written: list[str] = []
    upcoming = embed(slices[0])
    try:
        for n, part in enumerate(slices):
            vectors = await upcoming
            if n + 1 < len(slices):
                upcoming = embed(slices[n + 1])  # embedded while the node indexes this slice
            ops: list[docs.BulkOp] = []
            for j, i in enumerate(part):
                documents[i].update({name: vecs[j] for name, vecs in vectors.items()})
                ops.append((action, index, ids[i], documents[i]))
            last = n + 1 == len(slices)
            result = await docs.bulk(svc.store, ops, refresh=refresh if last else False)
            items = [next(iter(item.values())) for item in result.get("items", [])]
            written += [str(item["_id"]) for item in items if item.get("status", 500) < 300]
            if result.get("errors"):
                failed = next(item for item in items if item.get("status", 500) >= 300)
                raise node_error(int(failed.get("status", 500)), failed.get("error") or {"type": "exception"})
        # An embedding switch under way: the same memories, embedded by the other model, in its index.
        await sync_mirror(svc, container, ids, refresh=refresh)
    except BaseException:
        upcoming.cancel()
        if upcoming.done() and not upcoming.cancelled():
            upcoming.exception()  # the next slice's own failure, if any: the first one is raised
        if written:
            await _undo(svc, index, container.id, written, refresh)
            await _undo_mirror(svc, container, written)
        raise
    return ids


async def _undo_mirror(svc: Services, container: Container, written: Sequence[str]) -> None:
    try:
        await asyncio.shield(sync_mirror(svc, container, written))
    except Exception:
        log.exception("could not undo %d mirrored long-term memories after a failure", len(written))


async def _undo(
    svc: Services, index: str, container_id: str, written: Sequence[str], refresh: bool | str
) -> None:
    deletes: list[docs.BulkOp] = [("delete", index, doc_id, None) for doc_id in written]
    try:
        await asyncio.shield(docs.bulk(svc.store, deletes, refresh=refresh, routing=container_id))
    except Exception:  # the original failure is what the caller must see
        log.exception("could not undo %d long-term memories written before a bulk failure", len(written))


async def delete_long_term(
    svc: Services,
    container: Container,
    *,
    ids: Sequence[str] | None = None,
    filter: Filter | None = None,
    refresh: bool = True,
) -> int:
    """Delete this container's long-term memories by id and/or filter; how many were deleted."""
    index = long_term_index(container)
    if ids is not None and not ids:
        return 0
    selection = all_of([Terms("_id", tuple(ids)) if ids is not None else None, filter])
    try:
        mirrored = await ids_matching(svc, container, selection)
        result = await docs.delete_by_query(
            svc.store, index, selection, container_id=container.id, refresh=refresh
        )
    except IndexMissing:
        return 0
    await mirror_deleted(svc, container, mirrored, refresh=refresh)
    return int(result.get("deleted", 0))
