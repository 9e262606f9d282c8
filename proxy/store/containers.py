"""The container index and the per-container memory indices: creation, mappings, deletion, and the searches
that read the container index.

Index bodies come from ``index_templates/``; every call tolerates a concurrent proxy having done the same
thing first (an index that already exists is reused, one already gone is not an error). Container documents
are read and written with the general document calls of :mod:`proxy.store.memories` on
:data:`CONTAINER_INDEX`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.store.client import IndexExists, IndexMissing, NodeBadRequest, Store, url
from proxy.store.layout import LAYOUT_META_KEY, ROUTED_LAYOUT
from proxy.store.memories import delete_by_query_deadline, search
from proxy.store.query import Filter
from proxy.store.query_dsl import compile_filter, container_term
from proxy.store.search import ml_search
from proxy.store.templates import MemoryLayout, render_index_body

__all__ = [
    "CONTAINER_INDEX",
    "EMBEDDING_META_KEY",
    "create_index",
    "delete_index",
    "ensure_container_index",
    "get_index_meta",
    "index_exists",
    "list_containers",
    "purge_container_documents",
    "put_mapping",
    "render_memory_index",
    "search_containers",
]

CONTAINER_INDEX = ".plugins-ml-am-memory-container"
# Where a long-term index records the embedding it was built for, so that a second container sharing the
# index can be checked against it (ml-commons reads its ingest pipeline for the same purpose).
EMBEDDING_META_KEY = "memproxy_embedding"
# The default order of a container listing: total, so ``search_after`` pages neither skip nor repeat.
_LIST_ORDER = [{"created_time": "asc"}, {"_id": "asc"}]


async def index_exists(store: Store, index: str) -> bool:
    return bool(await store.request("HEAD", url(index)))


async def create_index(store: Store, index: str, body: Mapping[str, Any]) -> bool:
    """Create ``index``; ``False`` when it existed already (another container or proxy made it)."""
    try:
        await store.request("PUT", url(index), body=dict(body))
    except IndexExists:
        return False
    except NodeBadRequest as exc:
        if "already exists as alias" not in exc.message:
            raise
        return False  # the name of an index the layout migration moved (proxy.store.migrate)
    return True


async def ensure_container_index(store: Store) -> None:
    if not await index_exists(store, CONTAINER_INDEX):
        await create_index(store, CONTAINER_INDEX, render_index_body("containers"))


async def delete_index(store: Store, index: str) -> bool:
    try:
        await store.request("DELETE", url(index))
    except IndexMissing:
        return False
    except NodeBadRequest as exc:
        if "matches an alias" not in exc.message:
            raise
        # A migrated index answers to its old name as an alias: the index behind it goes.
        aliased = await store.request("GET", url("_alias", index))
        for concrete in aliased:
            await delete_index(store, concrete)
    return True


async def put_mapping(store: Store, index: str, properties: Mapping[str, Any]) -> None:
    """Add fields to an index's mapping (mappings only grow)."""
    await store.request("PUT", url(index, "_mapping"), body={"properties": dict(properties)})


async def get_index_meta(store: Store, index: str) -> dict[str, Any] | None:
    """The ``_meta`` of an index's mapping, its knn fields' dimensions (``knn_dimensions``) and its field
    names (``properties``); ``None`` if there is no index."""
    try:
        result = await store.request("GET", url(index, "_mapping"))
    except IndexMissing:
        return None
    first: dict[str, Any] = next(iter(result.values()), {})
    mapping: dict[str, Any] = first.get("mappings", {})
    dims = {
        name: spec.get("dimension")
        for name, spec in mapping.get("properties", {}).items()
        if spec.get("type") == "knn_vector"
    }
    meta: dict[str, Any] = dict(mapping.get("_meta") or {})
    meta["knn_dimensions"] = dims
    meta["properties"] = sorted(mapping.get("properties", {}))
    return meta


_TEMPLATE_OF = {"sessions": "sessions", "working": "working", "long-term": "long_term", "history": "history"}


def render_memory_index(
    memory_type: str,
    *,
    index_settings: Mapping[str, Any] | None = None,
    vector_fields: Sequence[Mapping[str, Any]] = (),
    meta: Mapping[str, Any] | None = None,
    metadata_mapping: Mapping[str, Any] | None = None,
    layout: MemoryLayout | None = None,
) -> dict[str, Any]:
    body = render_index_body(
        _TEMPLATE_OF[memory_type],
        vector_fields=vector_fields,
        index_settings=index_settings,
        metadata_mapping=metadata_mapping if memory_type == "long-term" else None,
        layout=layout,
    )
    # Every document memproxy writes to a memory index is routed by its container: the marker says so, for
    # the processes that read this index later (proxy.store.layout) and for the layout migration.
    recorded = body.setdefault("mappings", {}).setdefault("_meta", {})
    recorded[LAYOUT_META_KEY] = dict(ROUTED_LAYOUT)
    recorded.update(meta or {})
    return body


# Every memory index of every container, whatever its prefix (system indices need expand_wildcards=all);
# ``long-term-*``: the long-term indices of the embedding models containers switched to (docs/data-model.md).
MEMORY_INDEX_PATTERN = ",".join(
    f"{prefix}-memory-{kind}"
    for kind in ("long-term", "long-term-*", "working", "sessions", "history")
    for prefix in (".plugins-ml-am-*", "*")
)


async def purge_container_documents(store: Store, container_id: str) -> int:
    """Delete every document of container ``container_id`` from every memory index of every prefix
    (refreshed); how many. A container id reused after a delete must find nothing of its predecessor."""
    res = await store.request(
        "POST",
        url(MEMORY_INDEX_PATTERN, "_delete_by_query"),
        body={"query": container_term(container_id)},
        params={
            "refresh": "true",
            "conflicts": "proceed",
            "expand_wildcards": "all",
            "ignore_unavailable": "true",
            "allow_no_indices": "true",
            **delete_by_query_deadline(store),
            **await store.layouts.params(MEMORY_INDEX_PATTERN, container_id),
        },
    )
    return int(res.get("deleted", 0))


# --- the container index's searches ----------------------------------------------------------------


async def list_containers(
    store: Store,
    selection: Filter,
    *,
    size: int,
    from_: int = 0,
    search_after: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """One page of container documents (with ``_seq_no``/``_primary_term`` and ``sort`` on every hit) in
    creation order, ties broken by id; ``IndexMissing`` before the first container exists."""
    body: dict[str, Any] = {
        "size": size,
        "track_total_hits": True,
        "seq_no_primary_term": True,
        "query": compile_filter(selection) or {"match_all": {}},
        "sort": list(_LIST_ORDER),
    }
    if search_after is not None:
        body["search_after"] = list(search_after)
    elif from_:
        body["from"] = from_
    return await search(store, CONTAINER_INDEX, body)


async def search_containers(
    store: Store, body: Mapping[str, Any], *, only_ids: Sequence[str] | None = None
) -> dict[str, Any]:
    """ml-commons' container ``_search`` of a caller's body; ``IndexMissing`` before the first container.
    ``only_ids``: the caller's query is kept as a scoring clause and the ids become a filter beside it."""
    if only_ids is not None:
        narrowed = dict(body)
        query = body.get("query") or {"match_all": {}}
        narrowed["query"] = {"bool": {"must": [query], "filter": [{"ids": {"values": list(only_ids)}}]}}
        body = narrowed
    return await ml_search(store, CONTAINER_INDEX, body)
