"""GoodMem's own indices (keys, users, grants, embedder records, memory records) and plain document
operations.

Indices are created lazily on first use, from ``index_templates/goodmem_*.json.j2``; when one already exists
its mapping is extended additively (so a newer template, e.g. once ``proxy.filters`` adds ``metadata_index``,
applies to an index created by an older proxy). Every write that a later read must see says ``refresh=true``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from proxy.errors import Conflict
from proxy.filters import render_metadata_mapping
from proxy.store.client import OpenSearchError, Store
from proxy.store.templates import render_index_body

__all__ = [
    "APIKEYS",
    "EMBEDDERS",
    "GRANTS",
    "MEMORIES",
    "SYSTEM",
    "USERS",
    "count",
    "delete_by_query",
    "delete_doc",
    "ensure_index",
    "get_doc",
    "index_doc",
    "mget",
    "search",
]

log = logging.getLogger(__name__)

APIKEYS = "memproxy-goodmem-apikeys"
USERS = "memproxy-goodmem-users"
SYSTEM = "memproxy-goodmem-system"
EMBEDDERS = "memproxy-goodmem-embedders"
GRANTS = "memproxy-goodmem-grants"
MEMORIES = "memproxy-goodmem-memories"

_TEMPLATES = {
    APIKEYS: "goodmem_apikeys",
    USERS: "goodmem_users",
    SYSTEM: "goodmem_system",
    EMBEDDERS: "goodmem_embedders",
    GRANTS: "goodmem_grants",
    MEMORIES: "goodmem_memories",
}

_ensured: weakref.WeakKeyDictionary[Store, set[str]] = weakref.WeakKeyDictionary()
_locks: weakref.WeakKeyDictionary[Store, asyncio.Lock] = weakref.WeakKeyDictionary()


def _body(index: str) -> dict[str, Any]:
    # Memory records carry the same filterable ``metadata_index`` as chunks, so list filters match retrieve's.
    mapping = render_metadata_mapping() if index == MEMORIES else None
    return render_index_body(_TEMPLATES[index], metadata_mapping=mapping)


async def ensure_index(store: Store, index: str) -> None:
    """Create ``index`` from its template once per process; extend the mapping of an existing one."""
    done = _ensured.setdefault(store, set())
    if index in done:
        return
    lock = _locks.setdefault(store, asyncio.Lock())
    async with lock:
        if index in done:
            return
        body = _body(index)
        try:
            await store.request("PUT", f"/{index}", body=body)
        except OpenSearchError as exc:
            if exc.os_type != "resource_already_exists_exception":
                raise
            try:
                await store.request("PUT", f"/{index}/_mapping", body=body["mappings"])
            except OpenSearchError as mexc:  # an incompatible old mapping: keep serving with it
                log.warning("could not extend the mapping of %s: %s", index, mexc.message)
        done.add(index)


async def get_doc(store: Store, index: str, doc_id: str) -> dict[str, Any] | None:
    """The document's ``_source``, or None when it (or the index) does not exist."""
    try:
        res = await store.request("GET", f"/{index}/_doc/{_quote(doc_id)}")
    except OpenSearchError as exc:
        if exc.status == 404:
            return None
        raise
    if not isinstance(res, dict) or not res.get("found"):
        return None
    source: dict[str, Any] = res.get("_source") or {}
    return source


async def mget(store: Store, index: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Sources by id for the ids that exist."""
    if not ids:
        return {}
    await ensure_index(store, index)
    res = await store.request("POST", f"/{index}/_mget", body={"ids": list(dict.fromkeys(ids))})
    return {d["_id"]: d["_source"] for d in res.get("docs", []) if d.get("found")}


async def index_doc(
    store: Store,
    index: str,
    doc_id: str,
    body: Mapping[str, Any],
    *,
    create: bool = False,
    refresh: bool = True,
    conflict_message: str = "Resource already exists",
) -> None:
    """Write a document; ``create=True`` refuses to overwrite (409 Conflict with ``conflict_message``)."""
    await ensure_index(store, index)
    params: dict[str, Any] = {"refresh": "true" if refresh else "false"}
    if create:
        params["op_type"] = "create"
    try:
        await store.request("PUT", f"/{index}/_doc/{_quote(doc_id)}", body=dict(body), params=params)
    except OpenSearchError as exc:
        if exc.status == 409:
            raise Conflict(conflict_message) from None
        raise


async def delete_doc(store: Store, index: str, doc_id: str, *, refresh: bool = True) -> bool:
    """Delete one document; False when it was not there."""
    try:
        res = await store.request(
            "DELETE", f"/{index}/_doc/{_quote(doc_id)}", params={"refresh": "true" if refresh else "false"}
        )
    except OpenSearchError as exc:
        if exc.status == 404:
            return False
        raise
    return bool(isinstance(res, dict) and res.get("result") == "deleted")


async def search(
    store: Store, index: str, body: Mapping[str, Any], *, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    await ensure_index(store, index)
    res: dict[str, Any] = await store.request("POST", f"/{index}/_search", body=dict(body), params=params)
    return res


async def count(store: Store, index: str, query: Mapping[str, Any]) -> int:
    await ensure_index(store, index)
    res = await store.request("POST", f"/{index}/_count", body={"query": dict(query)})
    return int(res.get("count", 0))


async def delete_by_query(
    store: Store, index: str, query: Mapping[str, Any], *, ignore_missing: bool = False
) -> int:
    """Delete every matching document (refreshed, conflicts skipped); the number deleted."""
    params: dict[str, Any] = {"refresh": "true", "conflicts": "proceed"}
    if ignore_missing:
        params.update({"ignore_unavailable": "true", "allow_no_indices": "true"})
    else:
        await ensure_index(store, index)
    try:
        res = await store.request(
            "POST", f"/{index}/_delete_by_query", body={"query": dict(query)}, params=params
        )
    except OpenSearchError as exc:
        if ignore_missing and exc.status == 404:
            return 0
        raise
    return int(res.get("deleted", 0))


def _quote(doc_id: str) -> str:
    return quote(doc_id, safe="")
