"""The reads and deletes of the retention job: always within one container (its ``memory_container_id``
term AND its routing, since containers share indices), bounded, oldest first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.store.client import IndexMissing, Store
from proxy.store.layout import CONTAINER_FIELD
from proxy.store.memories import count, delete_by_query, search
from proxy.store.query import And, Filter, Term, Terms
from proxy.store.query_dsl import compile_filter

__all__ = ["DELETE_BATCH", "count_in", "delete_ids", "distinct_values", "oldest"]

DELETE_BATCH = 1000
_PAGE = 5000


def _scoped(container_id: str, selection: Filter) -> Filter:
    return And((Term(CONTAINER_FIELD, container_id), selection))


async def count_in(store: Store, index: str, container_id: str, selection: Filter) -> int:
    try:
        return await count(store, index, _scoped(container_id, selection), routing=container_id)
    except IndexMissing:
        return 0


async def oldest(
    store: Store,
    index: str,
    container_id: str,
    selection: Filter,
    *,
    sort_field: str,
    limit: int,
    fields: Sequence[str] = (),
) -> list[tuple[str, dict[str, Any]]]:
    """(id, the ``fields`` of its source) of at most ``limit`` documents ``selection`` matches, by
    ``sort_field`` ascending (ties by id; documents without the field last)."""
    out: list[tuple[str, dict[str, Any]]] = []
    body: dict[str, Any] = {
        "query": compile_filter(_scoped(container_id, selection)),
        "sort": [{sort_field: {"order": "asc", "missing": "_last", "unmapped_type": "long"}}, {"_id": "asc"}],
        "_source": list(fields) if fields else False,
        "track_total_hits": False,
    }
    while len(out) < limit:
        body["size"] = min(_PAGE, limit - len(out))
        try:
            res = await search(store, index, body, routing=container_id)
        except IndexMissing:
            return out
        hits = res.get("hits", {}).get("hits", [])
        out += [(str(h["_id"]), dict(h.get("_source") or {})) for h in hits]
        if len(hits) < body["size"]:
            break
        body["search_after"] = hits[-1]["sort"]
    return out


async def distinct_values(
    store: Store, index: str, container_id: str, field: str, selection: Filter, *, limit: int
) -> list[str]:
    """The distinct values of a keyword ``field`` among the documents ``selection`` matches (at most
    ``limit``), in value order: a composite aggregation, paged."""
    values: list[str] = []
    after: dict[str, Any] | None = None
    while len(values) < limit:
        composite: dict[str, Any] = {
            "size": min(1000, limit - len(values)),
            "sources": [{"v": {"terms": {"field": field}}}],
        }
        if after is not None:
            composite["after"] = after
        body = {
            "size": 0,
            "query": compile_filter(_scoped(container_id, selection)),
            "aggs": {"values": {"composite": composite}},
        }
        try:
            res = await search(store, index, body, routing=container_id)
        except IndexMissing:
            return values
        agg = res.get("aggregations", {}).get("values", {})
        buckets = agg.get("buckets", [])
        values += [str(b["key"]["v"]) for b in buckets]
        after = agg.get("after_key")
        if not buckets or after is None:
            break
    return values


async def delete_ids(store: Store, index: str, container_id: str, ids: Sequence[str]) -> int:
    """Delete these ids of this container (in batches of :data:`DELETE_BATCH`); how many were deleted."""
    deleted = 0
    for start in range(0, len(ids), DELETE_BATCH):
        batch = tuple(ids[start : start + DELETE_BATCH])
        result = await delete_by_query(
            store, index, Terms("_id", batch), container_id=container_id, refresh=True, ignore_missing=True
        )
        deleted += int(result.get("deleted", 0))
    return deleted
