"""Listing a space's memories (and deleting by selector): one search over the memory records and the space's
long-term documents that have no record (memories written through the OpenSearch API).

Both kinds share ``created_time`` / ``last_updated_time`` and ``metadata_index``, so one query sorts, filters
and pages them together. Pages use an opaque offset token (so at most 10 000 memories are reachable by
paging).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.core.containers import Container
from proxy.core.goodmem import instance
from proxy.core.goodmem._svc import Svc
from proxy.core.goodmem.auth import Principal, can_access_space
from proxy.core.goodmem.memories import ItemResult, delete_memory, delete_records
from proxy.core.goodmem.metadata import compile_metadata_filter, parse_metadata_filter
from proxy.core.goodmem.paging import Page, clamp, decode_offset, encode_offset
from proxy.core.goodmem.records import MemoryRecord, record_from_long_term
from proxy.core.goodmem.spaces import read_space
from proxy.errors import BadRequest, MemproxyError
from proxy.store import goodmem as gstore

__all__ = ["STATUSES", "batch_delete_memories", "list_memories", "select_memories"]

STATUSES = ("PENDING", "PROCESSING", "COMPLETED", "FAILED")
_SORT_FIELDS = {
    "created_at": "created_time",
    "updated_at": "last_updated_time",
    "content_type": "content_type",
    "processing_status": "processing_status",
}
_MAX_WINDOW = 10_000


def _query(
    container: Container, status: str | None, metadata_clause: dict[str, Any] | None
) -> dict[str, Any]:
    records: list[dict[str, Any]] = [
        {"term": {"_index": gstore.MEMORIES}},
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


def _indices(container: Container) -> str:
    lt_index = container.index_name("long-term")
    return gstore.MEMORIES + (f",{lt_index}" if lt_index else "")


def _check_status(status: str | None) -> str | None:
    if status is None or status == "":
        return None
    if status not in STATUSES:
        raise BadRequest(f"statusFilter must be one of {', '.join(STATUSES)}")
    return status


def _records(hits: list[dict[str, Any]], root: str | None) -> list[MemoryRecord]:
    out = []
    for h in hits:
        src = h["_source"]
        if h["_index"] == gstore.MEMORIES:
            out.append(MemoryRecord.from_source(src))
        else:
            out.append(record_from_long_term(h["_id"], src, owner_id=root))
    return out


async def _search(svc: Svc, container: Container, body: dict[str, Any]) -> list[dict[str, Any]]:
    await gstore.ensure_index(svc.store, gstore.MEMORIES)
    res = await svc.store.request(
        "POST",
        f"/{_indices(container)}/_search",
        body=body,
        params={"ignore_unavailable": "true", "expand_wildcards": "all"},
    )
    hits: list[dict[str, Any]] = res.get("hits", {}).get("hits", [])
    return hits


async def list_memories(
    svc: Svc,
    principal: Principal,
    space_id: str,
    *,
    include_content: bool = False,
    status_filter: str | None = None,
    filter_text: str | None = None,
    max_results: int | None = None,
    next_token: str | None = None,
    sort_by: str | None = None,
    sort_order: str | None = None,
) -> Page:
    """Memories of a space the caller may list (LIST_MEMORY) and read (READ_MEMORY, else an empty page)."""
    container = await read_space(svc, principal, space_id, "LIST_MEMORY")
    status = _check_status(status_filter)
    field = _SORT_FIELDS.get(sort_by or "created_at")
    if field is None:
        raise BadRequest(f"sortBy must be one of {', '.join(_SORT_FIELDS)}")
    order = (sort_order or "DESCENDING").upper()
    if order not in ("ASCENDING", "DESCENDING", "SORT_ORDER_UNSPECIFIED"):
        raise BadRequest("sortOrder must be ASCENDING or DESCENDING")
    expr = parse_metadata_filter(filter_text)
    clause = compile_metadata_filter(expr) if expr is not None else None
    size = clamp(max_results, 50, 500)
    start = decode_offset(next_token)
    if not await can_access_space(svc, principal, container, "READ_MEMORY"):
        return Page()
    if start + size > _MAX_WINDOW:
        raise BadRequest(
            f"Paging is limited to the first {_MAX_WINDOW} memories; narrow the list with a filter"
        )
    direction = "asc" if order == "ASCENDING" else "desc"
    sort = [
        {field: {"order": direction, "unmapped_type": "keyword" if "time" not in field else "date"}},
        {"created_time": {"order": direction, "unmapped_type": "date"}},
        {"memory_id": {"order": "asc", "unmapped_type": "keyword"}},
    ]
    excludes = ["memory_embedding*", "metadata_index"]
    if not include_content:
        excludes.append("original_content_b64")
    body = {
        "from": start,
        "size": size + 1,
        "query": _query(container, status, clause),
        "sort": sort,
        "_source": {"excludes": excludes},
    }
    hits = await _search(svc, container, body)
    records = _records(hits[:size], await instance.root_user_id(svc))
    more = len(hits) > size
    return Page(items=records, next_token=encode_offset(start + size) if more else None)


async def select_memories(
    svc: Svc, container: Container, status: str | None, filter_text: str | None
) -> list[MemoryRecord]:
    """Every memory of the space matching the status and metadata filter (for delete by selector)."""
    expr = parse_metadata_filter(filter_text)
    clause = compile_metadata_filter(expr) if expr is not None else None
    body = {
        "size": _MAX_WINDOW,
        "query": _query(container, _check_status(status), clause),
        "_source": ["memory_id", "space_id", "memory_container_id", "created_time"],
    }
    return _records(await _search(svc, container, body), await instance.root_user_id(svc))


async def _delete_selector(svc: Svc, principal: Principal, selector: Any) -> int:
    if not isinstance(selector, Mapping) or not selector.get("spaceId"):
        raise BadRequest("filterSelector.spaceId is required")
    container = await read_space(svc, principal, str(selector["spaceId"]), "DELETE_MEMORY")
    chosen = await select_memories(svc, container, selector.get("statusFilter"), selector.get("filter"))
    return await delete_records(svc, container, chosen)


async def batch_delete_memories(
    svc: Svc, principal: Principal, body: Mapping[str, Any]
) -> list[tuple[ItemResult, int]]:
    """POST /v1/memories:batchDelete: per selector, (result, deleted count)."""
    requests = body.get("requests")
    if not isinstance(requests, list) or not requests:
        raise BadRequest("requests must be a non-empty array")
    out: list[tuple[ItemResult, int]] = []
    for raw in requests:
        memory_id = raw.get("memoryId") if isinstance(raw, Mapping) else None
        selector = raw.get("filterSelector") if isinstance(raw, Mapping) else None
        try:
            if (memory_id is None) == (selector is None):
                raise BadRequest("Each delete selector needs exactly one of memoryId and filterSelector")
            if memory_id is not None:
                deleted = await delete_memory(svc, principal, memory_id)
            else:
                deleted = await _delete_selector(svc, principal, selector)
            out.append((ItemResult(memory_id=memory_id), deleted))
        except MemproxyError as exc:
            out.append(
                (ItemResult(error=exc, memory_id=memory_id if isinstance(memory_id, str) else None), 0)
            )
    return out
