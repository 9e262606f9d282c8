"""Conditional writes on documents memproxy owns: read a document with its version, then change or delete it
only if nobody else has since (``if_seq_no``/``if_primary_term``).

GoodMem's memory writes use them so that two parties never both act on one record: the writer that marks its
record ``COMPLETED`` and a clean-up that rolls an abandoned write back (``proxy.core.goodmem.memories``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.store.client import IndexMissing, Store, url
from proxy.store.encoding import compact_json
from proxy.store.layout import CONTAINER_FIELD
from proxy.store.memories import search
from proxy.store.query import Filter
from proxy.store.query_dsl import compile_filter

__all__ = ["Versioned", "delete_many", "mget_versioned", "search_versioned", "update_many"]


@dataclass(frozen=True)
class Versioned:
    """A stored document with the version a conditional write names (``if_seq_no``/``if_primary_term``)."""

    id: str
    source: dict[str, Any]
    seq_no: int | None
    primary_term: int | None


def _versioned(doc: Mapping[str, Any]) -> Versioned:
    return Versioned(str(doc["_id"]), doc.get("_source") or {}, doc.get("_seq_no"), doc.get("_primary_term"))


async def mget_versioned(
    store: Store, index: str, ids: Sequence[str], *, routing: str | None = None
) -> dict[str, Versioned]:
    """The documents that exist, by id, with their versions (a realtime read; {} when the index does not);
    ``routing``: the container they belong to (:mod:`proxy.store.layout`)."""
    if not ids:
        return {}
    params = await store.layouts.params(index, routing) if routing is not None else {}
    try:
        res = await store.request(
            "POST", url(index, "_mget"), body={"ids": list(dict.fromkeys(ids))}, params=params or None
        )
    except IndexMissing:
        return {}
    return {d["_id"]: _versioned(d) for d in res.get("docs", []) if d.get("found")}


async def search_versioned(
    store: Store,
    index: str,
    where: Filter,
    *,
    size: int,
    sort: Sequence[Mapping[str, Any]] = (),
    source_excludes: Sequence[str] = (),
) -> list[Versioned]:
    """The documents of one search, with their versions; [] when the index does not exist."""
    body: dict[str, Any] = {
        "size": size,
        "seq_no_primary_term": True,
        "query": compile_filter(where) or {"match_all": {}},
    }
    if sort:
        body["sort"] = [dict(s) for s in sort]
    if source_excludes:
        body["_source"] = {"excludes": list(source_excludes)}
    try:
        res = await search(store, index, body)
    except IndexMissing:
        return []
    return [_versioned(h) for h in res.get("hits", {}).get("hits", [])]


async def _conditional_bulk(
    store: Store,
    action: str,
    index: str,
    docs: Sequence[tuple[Versioned, Mapping[str, Any] | None]],
    refresh: bool,
) -> list[dict[str, Any]]:
    lines: list[str] = []
    routed = await store.layouts.routed(index)
    for doc, body in docs:
        meta: dict[str, Any] = {"_index": index, "_id": doc.id}
        container = doc.source.get(CONTAINER_FIELD)
        if routed and isinstance(container, str) and container and "," not in container:
            meta["routing"] = container
        if doc.seq_no is not None and doc.primary_term is not None:
            meta["if_seq_no"], meta["if_primary_term"] = doc.seq_no, doc.primary_term
        lines.append(compact_json({action: meta}))
        if body is not None:
            lines.append(compact_json(body))
    res = await store.request(
        "POST",
        url("_bulk"),
        body="\n".join(lines) + "\n",
        params={"refresh": "true" if refresh else "false"},
    )
    return [next(iter(item.values())) for item in res.get("items", [])]


async def update_many(
    store: Store, index: str, updates: Sequence[tuple[Versioned, Mapping[str, Any]]], *, refresh: bool = True
) -> list[dict[str, Any]]:
    """Set fields on documents, each only if it is still at the version given (else that item is 409, or
    404 when it is gone), in one ``_bulk``; each one's outcome (``status``, ``error``) in order."""
    if not updates:
        return []
    return await _conditional_bulk(
        store, "update", index, [(d, {"doc": dict(f)}) for d, f in updates], refresh
    )


async def delete_many(
    store: Store, index: str, docs: Sequence[Versioned], *, refresh: bool = True
) -> list[dict[str, Any]]:
    """Delete documents, each only if it is still at the version given, in one ``_bulk``."""
    if not docs:
        return []
    return await _conditional_bulk(store, "delete", index, [(d, None) for d in docs], refresh)
