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

from proxy.core.containers import Container
from proxy.core.goodmem.auth import Principal, can_access_space
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.memories import ItemResult, delete_memory, delete_records
from proxy.core.goodmem.metadata import compile_metadata_filter
from proxy.core.goodmem.paging import Page, Window
from proxy.core.goodmem.records import MemoryRecord, record_from_long_term
from proxy.core.goodmem.spaces import read_space
from proxy.errors import BadRequest, MemproxyError
from proxy.store.goodmem import MEMORIES

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


def _query(
    container: Container, status: str | None, metadata_clause: dict[str, Any] | None
) -> dict[str, Any]:
    records: list[dict[str, Any]] = [
        {"term": {"_index": MEMORIES}},
        {"term": {"space_id": container.id}},
    ]
    if status:
        records.append({"term": {"processing_status": status}})
    if metadata_clause:
        records.append(metadata_clause)
    branches: list[dict[str, Any]] = [{"bool": {"filter": records}}]
    lt_index = container.index_name("long-term")
    # OpenSearch-API memories are always COMPLETED (they are embedded when written).
    if lt_index is not None and status in (None, "COMPLETED"):
        lt: list[dict[str, Any]] = [
            {"term": {"_index": lt_index}},
            {"term": {"memory_container_id": container.id}},
        ]
        if metadata_clause:
            lt.append(metadata_clause)
        branches.append({"bool": {"filter": lt, "must_not": [{"exists": {"field": "memory_id"}}]}})
    return {"bool": {"should": branches, "minimum_should_match": 1}}


def _clause(expr: Any) -> dict[str, Any] | None:
    return compile_metadata_filter(expr) if expr is not None else None


def _records(hits: list[dict[str, Any]], root: str | None) -> list[MemoryRecord]:
    out = []
    for h in hits:
        src = h["_source"]
        if h["_index"] == MEMORIES:
            out.append(MemoryRecord.from_source(src))
        else:
            out.append(record_from_long_term(h["_id"], src, owner_id=root))
    return out


async def _search(gm: GoodMem, container: Container, body: dict[str, Any]) -> list[MemoryRecord]:
    hits = await gm.docs.search_with_long_term(container.index_name("long-term"), body)
    return _records(hits, await gm.instance.root_user_id())


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
    direction = "desc" if query.descending else "asc"
    field = query.sort_field
    sort = [
        {field: {"order": direction, "unmapped_type": "keyword" if "time" not in field else "date"}},
        {"created_time": {"order": direction, "unmapped_type": "date"}},
        {"memory_id": {"order": "asc", "unmapped_type": "keyword"}},
    ]
    excludes = ["memory_embedding*", "metadata_index"]
    if not query.include_content:
        excludes.append("original_content_b64")
    body = {
        **window.probe(),
        "query": _query(container, query.status, clause),
        "sort": sort,
        "_source": {"excludes": excludes},
    }
    return window.page(await _search(gm, container, body))


async def _delete_selected(gm: GoodMem, principal: Principal, selector: MemorySelector) -> int:
    container = await read_space(gm, principal, selector.space_id, "DELETE_MEMORY")
    body = {
        "size": _MAX_WINDOW,
        "query": _query(container, selector.status, _clause(selector.filter)),
        "_source": ["memory_id", "space_id", "memory_container_id", "created_time"],
    }
    return await delete_records(gm, container, await _search(gm, container, body))


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
