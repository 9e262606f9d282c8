"""The layout migration: move a memory index without the routing marker (a legacy one, made before routing by
container) into the new layout, keeping its name (docs/data-model.md, "Migrating an index").

Steps, each safe to repeat, so a run that stopped anywhere is resumed by running it again:

1. create ``<name>-<suffix>`` with the old index's mappings, the layout marker and the store's layout
   (an existing one, from an earlier run, is reused);
2. block writes on the old index (memproxy answers writes to it 503 meanwhile; reads go on);
3. copy every document in ``_id`` order with the ``index`` action, routed by its container: the same
   ``_id`` overwrites, so a re-run never duplicates;
4. verify the counts match, and wait until no process can still hold the old layout
   (:data:`proxy.store.layout.LAYOUT_TTL_S`);
5. switch in one ``_aliases`` call: ``remove_index`` the old index and ``add`` its name as an alias of the
   new one. Nothing is deleted before this call, and it is atomic: every name keeps resolving.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.store.client import IndexMissing, Store, url
from proxy.store.layout import LAYOUT_META_KEY, LAYOUT_TTL_S, ROUTED_LAYOUT
from proxy.store.memories import bulk
from proxy.store.query import MatchAll
from proxy.store.transfer import pages

__all__ = ["DEFAULT_SUFFIX", "MigrationReport", "migrate_layout"]

DEFAULT_SUFFIX = "routed"
# Index settings a migrated index keeps from the old one (shards and replicas come from the layout).
_KEPT_SETTINGS = ("knn", "knn.algo_param.ef_search", "hidden", "refresh_interval", "analysis")


@dataclass(frozen=True)
class MigrationReport:
    name: str
    target: str
    state: str  # "migrated", "already migrated", "interrupted"
    copied: int
    source_count: int
    target_count: int


def _flat(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and name != "analysis":
            out.update(_flat(value, name + "."))
        else:
            out[name] = value
    return out


async def _count(store: Store, index: str) -> int:
    await store.request("POST", url(index, "_refresh"))
    result = await store.request("GET", url(index, "_count"))
    return int(result.get("count", 0))


def _target_body(store: Store, old: Mapping[str, Any]) -> dict[str, Any]:
    index_settings = _flat((old.get("settings") or {}).get("index") or {})
    settings: dict[str, Any] = {k: index_settings[k] for k in _KEPT_SETTINGS if k in index_settings}
    settings["number_of_shards"] = str(store.memory_layout.shards)
    settings["number_of_replicas"] = str(store.memory_layout.replicas)
    mappings = dict(old.get("mappings") or {})
    mappings["_meta"] = {**(mappings.get("_meta") or {}), LAYOUT_META_KEY: dict(ROUTED_LAYOUT)}
    return {"settings": {"index": settings}, "mappings": mappings}


async def migrate_layout(
    store: Store,
    name: str,
    *,
    suffix: str = DEFAULT_SUFFIX,
    batch: int = 500,
    stop_after: int | None = None,
    settle_s: float = LAYOUT_TTL_S + 1.0,
) -> MigrationReport:
    """Migrate the memory index ``name`` (see the module's steps); ``stop_after`` stops once that many
    documents are copied (an interrupted run, as a crash would leave it)."""
    found: dict[str, Any] = await store.request("GET", url(name), params={"expand_wildcards": "all"})
    concrete, info = next(iter(found.items()))
    meta = (info.get("mappings") or {}).get("_meta") or {}
    if concrete != name or LAYOUT_META_KEY in meta:
        count = await _count(store, concrete)
        return MigrationReport(name, concrete, "already migrated", 0, count, count)
    target = f"{name}-{suffix}"
    try:
        await store.request("GET", url(target))
    except IndexMissing:
        await store.request("PUT", url(target), body=_target_body(store, info))
    await store.request("PUT", url(name, "_settings"), body={"index.blocks.write": True})
    blocked_at = time.monotonic()
    store.layouts.forget(name)
    copied = 0
    async for page in pages(store, name, MatchAll(), size=batch):
        ops = [("index", target, str(hit["_id"]), hit.get("_source") or {}) for hit in page]
        if stop_after is not None:
            ops = ops[: max(0, stop_after - copied)]
        if ops:
            result = await bulk(store, ops, refresh=False)
            if result.get("errors"):
                failed = next(i for i in (next(iter(x.values())) for x in result["items"]) if i.get("error"))
                raise RuntimeError(f"copying into {target} failed: {failed.get('error')}")
        copied += len(ops)
        if stop_after is not None and copied >= stop_after:
            source_count, target_count = await _count(store, name), await _count(store, target)
            return MigrationReport(name, target, "interrupted", copied, source_count, target_count)
    source_count, target_count = await _count(store, name), await _count(store, target)
    if source_count != target_count:
        raise RuntimeError(f"{target} holds {target_count} documents, {name} {source_count}: not switched")
    await asyncio.sleep(max(0.0, settle_s - (time.monotonic() - blocked_at)))
    hidden = str(_flat((info.get("settings") or {}).get("index") or {}).get("hidden", "false")) == "true"
    add: dict[str, Any] = {"index": target, "alias": name, "is_write_index": True}
    if hidden:
        add["is_hidden"] = True
    await store.request(
        "POST", url("_aliases"), body={"actions": [{"remove_index": {"index": name}}, {"add": add}]}
    )
    store.layouts.forget(name)
    return MigrationReport(name, target, "migrated", copied, source_count, target_count)
