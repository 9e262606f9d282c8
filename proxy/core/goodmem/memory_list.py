"""Listing a space's memories (and deleting by selector): one search over the memory records and the space's
long-term documents that have no record (memories written through the OpenSearch API).

Both kinds share ``created_time`` / ``last_updated_time`` and ``metadata_index``, so one query sorts, filters
and pages them together. Pages use an opaque offset token (so at most 10 000 memories are reachable by
paging).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.memories import ItemResult, delete_memory, delete_records
from proxy.core.goodmem.metadata import compile_metadata_filter
from proxy.core.goodmem.paging import Page, Window
from proxy.core.goodmem.records import MemoryRecord, record_from_long_term
from proxy.core.goodmem.spaces import read_space
from proxy.core.identity import Principal, can_access_space
from proxy.errors import BadRequest, MemproxyError
from proxy.store.goodmem import MEMORIES, SpaceOrder
from proxy.store.query import Filter, RawDsl

__all__ = [
    "SORT_FIELDS",
    "STATUSES",
    "DeleteItem",
    "MemoryQuery",
    "MemorySelector",
    "batch_delete_memories",
    "list_memories",
]

STATUSES = ("PENDING", "PROCESSING", "COMPLETED", "FAILED")
# GoodMem's sort keys → the field both kinds of memory share.
SORT_FIELDS = {
    "created_at": "created_time",
    "updated_at": "last_updated_time",
    "content_type": "content_type",
    "processing_status": "processing_status",
}
_MAX_WINDOW = 10_000


@dataclass(frozen=True)
class MemoryQuery:
    """``GET /v1/spaces/{id}/memories``, validated: ``status`` one of :data:`STATUSES`, ``sort_field`` a value
    of :data:`SORT_FIELDS`, ``filter`` a parsed filter expression."""

    include_content: bool = False
    status: str | None = None
    filter: Any = None
    sort_field: str = "created_time"
    descending: bool = True
    max_results: int | None = None
    next_token: str | None = None


@dataclass(frozen=True)
class MemorySelector:
    """``filterSelector`` of a batch delete, validated: every memory of a space matching both filters."""

    space_id: str
    status: str | None = None
    filter: Any = None


@dataclass(frozen=True)
class DeleteItem:
    """One batch-delete request: a memory id or a selector, or the error that made it unusable."""

    memory_id: Any = None  # as sent
    selector: MemorySelector | None = None
    error: MemproxyError | None = None


def _clause(expr: Any) -> Filter | None:
    """The metadata filter, compiled here so that a filter that cannot be compiled fails before any
    permission check answers."""
    clause = compile_metadata_filter(expr) if expr is not None else None
    return RawDsl(clause) if clause else None


async def _records(gm: GoodMem, hits: list[dict[str, Any]]) -> list[MemoryRecord]:
    root = await gm.instance.root_user_id()
    out = []
    for h in hits:
        src = h["_source"]
        if h["_index"] == MEMORIES:
            out.append(MemoryRecord.from_source(src))
        else:
            out.append(record_from_long_term(h["_id"], src, owner_id=root))
    return out


async def list_memories(
    gm: GoodMem, principal: Principal, space_id: str, query: MemoryQuery
) -> Page[MemoryRecord]:
    """Memories of a space the caller may list (LIST_MEMORY) and read (READ_MEMORY, else an empty page)."""
    container = await read_space(gm, principal, space_id, "LIST_MEMORY")
    clause = _clause(query.filter)
    window = Window.of(query.max_results, query.next_token, default=50, high=500)
    if not await can_access_space(gm, principal, container, "READ_MEMORY"):
        return Page()
    if window.end > _MAX_WINDOW:
        raise BadRequest(
            f"Paging is limited to the first {_MAX_WINDOW} memories; narrow the list with a filter"
        )
    start, size = window.probe()
    hits = await gm.docs.space_memories(
        container.id,
        container.index_name("long-term"),
        status=query.status,
        metadata=clause,
        start=start,
        size=size,
        order=SpaceOrder(query.sort_field, query.descending),
        include_content=query.include_content,
    )
    return window.page(await _records(gm, hits))


async def _delete_selected(gm: GoodMem, principal: Principal, selector: MemorySelector) -> int:
    container = await read_space(gm, principal, selector.space_id, "DELETE_MEMORY")
    hits = await gm.docs.space_memories(
        container.id,
        container.index_name("long-term"),
        status=selector.status,
        metadata=_clause(selector.filter),
        size=_MAX_WINDOW,
        ids_only=True,
    )
    return await delete_records(gm, container, await _records(gm, hits))


async def batch_delete_memories(
    gm: GoodMem, principal: Principal, items: Sequence[DeleteItem]
) -> list[tuple[ItemResult, int]]:
    """POST /v1/memories:batchDelete: per item, (result, deleted count), in request order."""
    out: list[tuple[ItemResult, int]] = []
    for item in items:
        try:
            if item.error is not None:
                raise item.error
            if item.selector is not None:
                deleted = await _delete_selected(gm, principal, item.selector)
            else:
                deleted = await delete_memory(gm, principal, item.memory_id)
            out.append((ItemResult(memory_id=item.memory_id), deleted))
        except MemproxyError as exc:
            memory_id = item.memory_id if isinstance(item.memory_id, str) else None
            out.append((ItemResult(error=exc, memory_id=memory_id), 0))
    return out
