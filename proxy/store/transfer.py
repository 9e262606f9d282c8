"""Reading a container's documents in pages and writing them back verbatim, for export and import.

A read holds a point in time on its index and pages through it with ``search_after`` on ``_id``: the memory
footprint is one page whatever the container's size, the snapshot does not move while documents are written
meanwhile, and the order is the same on any cluster (two exports of equal contents are equal byte for byte).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from proxy.store.client import IndexMissing, Store, url
from proxy.store.memories import BulkOp, bulk, search_deadline
from proxy.store.query import Filter
from proxy.store.query_dsl import compile_filter

__all__ = ["create_all", "delete_ids", "pages", "refresh"]

_KEEP_ALIVE = "2m"
_WILDCARDS = {"expand_wildcards": "all"}


async def pages(
    store: Store,
    index: str,
    selection: Filter,
    *,
    size: int = 500,
    after: Sequence[Any] | None = None,
    source: bool = True,
) -> AsyncIterator[list[dict[str, Any]]]:
    """The hits (``_id``, ``_source``, and ``sort``: the cursor) of ``index`` that ``selection`` matches,
    ``size`` at a time, by id; nothing when the index does not exist. ``after``: start past this cursor (a
    hit's ``sort``), resuming an earlier read; ``source=False``: ids only."""
    try:
        opened = await store.request(
            "POST", url(index, "_search", "point_in_time"), params={"keep_alive": _KEEP_ALIVE, **_WILDCARDS}
        )
    except IndexMissing:
        return
    pit_id = opened["pit_id"]
    body: dict[str, Any] = {
        "size": size,
        "query": compile_filter(selection) or {"match_all": {}},
        "sort": [{"_id": "asc"}],
        "track_total_hits": False,
    }
    if not source:
        body["_source"] = False
    if after is not None:
        body["search_after"] = list(after)
    try:
        while True:
            body["pit"] = {"id": pit_id, "keep_alive": _KEEP_ALIVE}
            res = await _pit_search(store, body)
            hits: list[dict[str, Any]] = res.get("hits", {}).get("hits", [])
            pit_id = res.get("pit_id", pit_id)
            if not hits:
                return
            yield hits
            if len(hits) < size:
                return
            body["search_after"] = hits[-1]["sort"]
    finally:
        await store.request("DELETE", url("_search", "point_in_time"), body={"pit_id": [pit_id]})


async def _pit_search(store: Store, body: Mapping[str, Any]) -> dict[str, Any]:
    # A search under a point in time names no index (the point in time is its index), so it cannot go
    # through proxy.store.memories.search; it carries the same deadline.
    deadline = search_deadline(store)
    sent = dict(body)
    if "timeout" in deadline:
        sent["timeout"] = deadline["timeout"]
    params = {k: v for k, v in deadline.items() if k == "cancel_after_time_interval"}
    result: dict[str, Any] = await store.request("POST", url("_search"), body=sent, params=params)
    return result


async def create_all(
    store: Store, docs: Sequence[tuple[str, str, Mapping[str, Any]]]
) -> list[dict[str, Any]]:
    """Create each (index, id, source) in one ``_bulk`` without a refresh (:func:`refresh` once at the end);
    each item's outcome in order (``status``, ``error``)."""
    ops: Iterable[BulkOp] = [("create", index, doc_id, source) for index, doc_id, source in docs]
    res = await bulk(store, ops, refresh=False)
    return [next(iter(item.values())) for item in res.get("items", [])]


async def delete_ids(store: Store, docs: Sequence[tuple[str, str, Mapping[str, Any]]]) -> None:
    """Delete (index, id, source) documents in one ``_bulk`` (undoing a batch that was partly written); the
    source is not sent, it names the container each delete is routed by."""
    if docs:
        await bulk(
            store, [("delete", index, doc_id, source) for index, doc_id, source in docs], refresh=False
        )


async def refresh(store: Store, indices: Iterable[str]) -> None:
    names = sorted(set(indices))
    if names:
        await store.request("POST", url(",".join(names), "_refresh"), params=_WILDCARDS)
