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

__all__ = ["find_containers", "index_details", "newest_documents"]

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
