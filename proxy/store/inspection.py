"""What the inspection console reads from the node: an index's mapping and settings, and a page of documents.

The bodies are built here, like every other body memproxy sends; the console reaches them through
:mod:`proxy.core.inspection`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.store import search as searches
from proxy.store.client import IndexMissing, Store, url
from proxy.store.containers import CONTAINER_INDEX
from proxy.store.memories import search
from proxy.store.query import Filter, Hit
from proxy.store.query_dsl import compile_filter

__all__ = [
    "date_histogram",
    "find_containers",
    "index_details",
    "newest_documents",
    "random_sample",
    "time_bounds",
]

# Every memory index maps created_time; a type whose index maps it differently still sorts (unmapped_type).
_NEWEST_FIRST = [{"created_time": {"order": "desc", "unmapped_type": "date"}}, {"_id": "asc"}]


def _name_or_id(text: str) -> dict[str, Any]:
    """Containers whose name starts with the words of ``text``, is ``text``, or whose id is ``text``."""
    return {
        "bool": {
            "should": [
                {"match_phrase_prefix": {"name": text}},
                {"term": {"name.keyword": text}},
                {"ids": {"values": [text]}},
            ],
            "minimum_should_match": 1,
        }
    }


async def find_containers(store: Store, text: str | None, *, size: int, from_: int = 0) -> dict[str, Any]:
    """A page of container documents, newest first (a person looks for what was just made), narrowed to
    those ``text`` names when given; ``IndexMissing`` before the first container exists."""
    body: dict[str, Any] = {
        "size": size,
        "from": from_,
        "track_total_hits": True,
        "query": _name_or_id(text) if text else {"match_all": {}},
        "sort": [{"created_time": {"order": "desc"}}, {"_id": "asc"}],
    }
    return await search(store, CONTAINER_INDEX, body)


async def index_details(store: Store, index: str) -> dict[str, Any] | None:
    """The index's ``mappings`` and ``settings`` as the node answers ``GET /<index>``; None when it does not
    exist."""
    try:
        answer: dict[str, Any] = await store.request("GET", url(index))
    except IndexMissing:
        return None
    first: dict[str, Any] = next(iter(answer.values()), {})
    return {"mappings": first.get("mappings", {}), "settings": first.get("settings", {})}


async def newest_documents(
    store: Store, index: str, selection: Filter, *, size: int, source_excludes: Sequence[str] = ()
) -> list[Hit]:
    """The ``size`` newest documents of ``index`` that ``selection`` matches, without the ``source_excludes``
    fields; none when the index does not exist."""
    body: dict[str, Any] = {
        "size": size,
        "query": compile_filter(selection) or {"match_all": {}},
        "sort": _NEWEST_FIRST,
        "_source": {"excludes": list(source_excludes)},
    }
    try:
        return searches.hits(await search(store, index, body))
    except IndexMissing:
        return []


async def time_bounds(
    store: Store, index: str, selection: Filter, *, field: str, routing: str | None = None
) -> tuple[int, int] | None:
    """The earliest and latest ``field`` (epoch ms) of the documents ``selection`` matches; None when there
    is none (or no index)."""
    body: dict[str, Any] = {
        "size": 0,
        "query": compile_filter(selection) or {"match_all": {}},
        "aggs": {"first": {"min": {"field": field}}, "last": {"max": {"field": field}}},
    }
    try:
        answer = await search(store, index, body, routing=routing)
    except IndexMissing:
        return None
    aggs = answer.get("aggregations") or {}
    first, last = (aggs.get(k, {}).get("value") for k in ("first", "last"))
    if first is None or last is None:
        return None
    return int(first), int(last)


async def date_histogram(
    store: Store,
    index: str,
    selection: Filter,
    *,
    field: str,
    interval_ms: int,
    bounds: tuple[int, int],
    routing: str | None = None,
) -> list[tuple[int, int]]:
    """(bucket start in epoch ms, documents) for every ``interval_ms`` bucket whose start lies from
    ``bounds[0]`` to ``bounds[1]`` (the first and last buckets' starts), empty buckets included, so that
    several series over the same bounds line up bucket for bucket; [] when there is no index."""
    body: dict[str, Any] = {
        "size": 0,
        "query": compile_filter(selection) or {"match_all": {}},
        "aggs": {
            "over_time": {
                "date_histogram": {
                    "field": field,
                    "fixed_interval": f"{interval_ms}ms",
                    # Buckets start at the bounds' start, not at the epoch's multiples of the interval.
                    "offset": f"{bounds[0] % interval_ms}ms",
                    "min_doc_count": 0,
                    # Not hard_bounds as well: this node's histogram then miscounts (a document inside
                    # the bounds counted in no bucket). A document written after the span was read lands
                    # in a bucket past the bounds, which the caller leaves out.
                    "extended_bounds": {"min": bounds[0], "max": bounds[1]},
                }
            }
        },
    }
    try:
        answer = await search(store, index, body, routing=routing)
    except IndexMissing:
        return []
    buckets = (answer.get("aggregations") or {}).get("over_time", {}).get("buckets", [])
    return [(int(b["key"]), int(b["doc_count"])) for b in buckets]


async def random_sample(
    store: Store,
    index: str,
    selection: Filter,
    *,
    size: int,
    seed: int,
    source_includes: Sequence[str],
    routing: str | None = None,
) -> tuple[list[Hit], int]:
    """(up to ``size`` documents, how many matched) of those ``selection`` matches, drawn uniformly at
    random by the node (``random_score`` seeded on ``_seq_no``: the same seed draws the same sample while
    the index is unchanged), with only the ``source_includes`` fields; none when the index does not exist.
    The node scores every matching document but returns only the top ``size``; nothing else leaves it.

    The vectors come from ``_source``, the node's costliest part of this search (docs/console.md has the
    figures): reading them from doc values through ``script_fields`` was several times faster, but on this
    node it gave some documents another document's vector."""
    body: dict[str, Any] = {
        "size": size,
        "query": {
            "function_score": {
                "query": compile_filter(selection) or {"match_all": {}},
                "random_score": {"seed": seed, "field": "_seq_no"},
                "boost_mode": "replace",
            }
        },
        "_source": {"includes": list(source_includes)},
        "track_total_hits": True,
    }
    try:
        answer = await search(store, index, body, routing=routing)
    except IndexMissing:
        return [], 0
    return searches.hits(answer), int(answer["hits"]["total"]["value"])
