"""Listing a space's memories (and deleting by selector): one search over the memory records and the space's
long-term documents that have no record (memories written through the OpenSearch API).

Both kinds share ``created_time`` / ``last_updated_time`` and ``metadata_index``, so one query sorts, filters
and pages them together. A page's token holds the sort values of the memory it ended with, and the next page
starts just after them (``search_after``): every memory is reachable however deep the list, and a memory
added or deleted meanwhile shifts no other memory into or out of a later page, as an offset would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.container_indices import primary_shards
from proxy.core.container_record import Container
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.memories import ItemResult, delete_memory, delete_records
from proxy.core.goodmem.metadata import compile_metadata_filter
from proxy.core.goodmem.paging import Page, Window, decode_token, encode_token
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
# A selector's memories are found and deleted this many at a time.
_DELETE_PAGE = 1_000


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


def _single_shard(gm: GoodMem, container: Container) -> bool:
    """Whether ``_index`` + ``_seq_no`` tell a space's memories apart: the records index and the long-term
    index each have one primary (sequence numbers are per shard)."""
    shards = gm.svc.store.memory_layout.shards
    if shards != 1:
        return False
    return container.index_name("long-term") is None or primary_shards(container, "long-term", shards) == 1


def _after(token: str | None, order: SpaceOrder) -> list[Any] | None:
    """The sort values a page starts after, from a token issued for the same order (another order's values
    would place the page nowhere meaningful)."""
    state = decode_token(token)
    if not state:
        return None
    after = state.get("a")
    if state.get("s") != [order.field, order.descending] or not order.accepts(after):
        raise BadRequest("Invalid nextToken: it belongs to another list or sort order")
    return after


async def list_memories(
    gm: GoodMem, principal: Principal, space_id: str, query: MemoryQuery
) -> Page[MemoryRecord]:
    """Memories of a space the caller may list (LIST_MEMORY) and read (READ_MEMORY, else an empty page)."""
    container = await read_space(gm, principal, space_id, "LIST_MEMORY")
    clause = _clause(query.filter)
    order = SpaceOrder(query.sort_field, query.descending, _single_shard(gm, container))
    after = _after(query.next_token, order)
    size = Window.of(query.max_results, None, default=50, high=500).size
    if not await can_access_space(gm, principal, container, "READ_MEMORY"):
        return Page()
    hits = await gm.docs.space_memories(
        container.id,
        container.index_name("long-term"),
        status=query.status,
        metadata=clause,
        size=size + 1,  # one more than the page tells whether another page exists
        order=order,
        after=after,
        include_content=query.include_content,
    )
    token = None
    if len(hits) > size:
        hits = hits[:size]
        token = encode_token({"s": [order.field, order.descending], "a": hits[-1]["sort"]})
    return Page(items=await _records(gm, hits), next_token=token)


async def _delete_selected(gm: GoodMem, principal: Principal, selector: MemorySelector) -> int:
    """Every memory the selector matches, a page at a time; a page is deleted before the next is read."""
    container = await read_space(gm, principal, selector.space_id, "DELETE_MEMORY")
    clause = _clause(selector.filter)
    order = SpaceOrder("created_time", single_shard=_single_shard(gm, container))
    deleted = 0
    after: list[Any] | None = None
    while True:
        hits = await gm.docs.space_memories(
            container.id,
            container.index_name("long-term"),
            status=selector.status,
            metadata=clause,
            size=_DELETE_PAGE,
            order=order,
            after=after,
            ids_only=True,
        )
        if not hits:
            return deleted
        deleted += await delete_records(gm, container, await _records(gm, hits))
        if len(hits) < _DELETE_PAGE:
            return deleted
        after = hits[-1]["sort"]


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
