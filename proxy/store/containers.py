"""The container index and the per-container memory indices: creation, mappings, deletion.

Index bodies come from ``index_templates/``; every call tolerates a concurrent proxy having done the same
thing first (an index that already exists is reused, one already gone is not an error).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from proxy.store.client import OpenSearchError, Store
from proxy.store.memories import error_type, is_index_missing
from proxy.store.templates import render_index_body

__all__ = [
    "CONTAINER_INDEX",
    "EMBEDDING_META_KEY",
    "create_index",
    "delete_index",
    "ensure_container_index",
    "get_index_meta",
    "index_exists",
    "render_memory_index",
]

CONTAINER_INDEX = ".plugins-ml-am-memory-container"
# Where a long-term index records the embedding it was built for, so that a second container sharing the
# index can be checked against it (ml-commons reads its ingest pipeline for the same purpose).
EMBEDDING_META_KEY = "memproxy_embedding"


def _p(part: str) -> str:
    return quote(part, safe="")


async def index_exists(store: Store, index: str) -> bool:
    return bool(await store.request("HEAD", f"/{_p(index)}"))


async def create_index(store: Store, index: str, body: Mapping[str, Any]) -> bool:
    """Create ``index``; ``False`` when it existed already (another container or proxy made it)."""
    try:
        await store.request("PUT", f"/{_p(index)}", body=dict(body))
    except OpenSearchError as exc:
        if error_type(exc) == "resource_already_exists_exception":
            return False
        raise
    return True


async def ensure_container_index(store: Store) -> None:
    if not await index_exists(store, CONTAINER_INDEX):
        await create_index(store, CONTAINER_INDEX, render_index_body("containers"))


async def delete_index(store: Store, index: str) -> bool:
    try:
        await store.request("DELETE", f"/{_p(index)}")
    except OpenSearchError as exc:
        if is_index_missing(exc):
            return False
        raise
    return True


async def get_index_meta(store: Store, index: str) -> dict[str, Any] | None:
    """The ``_meta`` of an index's mapping, its knn fields' dimensions (``knn_dimensions``) and its field
    names (``properties``); ``None`` if there is no index."""
    try:
        result = await store.request("GET", f"/{_p(index)}/_mapping")
    except OpenSearchError as exc:
        if is_index_missing(exc):
            return None
        raise
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
) -> dict[str, Any]:
    body = render_index_body(
        _TEMPLATE_OF[memory_type],
        vector_fields=vector_fields,
        index_settings=index_settings,
        metadata_mapping=metadata_mapping if memory_type == "long-term" else None,
    )
    if meta:
        body.setdefault("mappings", {}).setdefault("_meta", {}).update(meta)
    return body
