"""Routing by container: which memory indices take ``routing=<container id>``, and the parameters that say so.

A memory index memproxy creates records :data:`ROUTED_LAYOUT` under :data:`LAYOUT_META_KEY` in its mapping's
``_meta``: every document of it was written with the routing of its container (``memory_container_id``; a
GoodMem space id is its container id), so one container's writes, gets, searches and deletes touch one shard.
An index without the marker is routed too when it has one primary (routing cannot move a document there).
Only a legacy index with several primaries and no marker is not routed: its documents sit on the shard of
their ``_id``, and a routed read would miss them; ``memproxy migrate-layout`` moves it into the new layout.

Routing is an optimisation, never the isolation: every search still carries the container's scope filter.

The answer is cached per index expression for :data:`LAYOUT_TTL_S`, since other processes (and the
migration) change indices. A legacy index under a write block (being migrated) is never cached, so once the
migration has blocked writes and waited :data:`LAYOUT_TTL_S`, no process still believes the old layout
when the alias switches to the new index.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from proxy.errors import NotFound

__all__ = [
    "CONTAINER_FIELD",
    "LAYOUT_META_KEY",
    "LAYOUT_TTL_S",
    "ROUTED_LAYOUT",
    "IndexLayouts",
    "routed_by_layout",
    "routing_of",
    "strip_routing",
]

LAYOUT_META_KEY = "memproxy_layout"
CONTAINER_FIELD = "memory_container_id"
ROUTED_LAYOUT: dict[str, str] = {"routing": "container", "field": CONTAINER_FIELD}
LAYOUT_TTL_S = 5.0
_FILTER = (
    "*.settings.index.number_of_shards,*.settings.index.blocks.write,*.mappings._meta." + LAYOUT_META_KEY
)


def routed_by_layout(index_info: Mapping[str, Any]) -> bool:
    """Whether one index (its ``GET /<index>`` answer) takes routing: marked, or one primary."""
    meta = (index_info.get("mappings") or {}).get("_meta") or {}
    if meta.get(LAYOUT_META_KEY, {}).get("routing") == "container":
        return True
    shards = ((index_info.get("settings") or {}).get("index") or {}).get("number_of_shards")
    return str(shards) == "1"


def _blocked(index_info: Mapping[str, Any]) -> bool:
    blocks = ((index_info.get("settings") or {}).get("index") or {}).get("blocks") or {}
    return str(blocks.get("write", "false")).lower() == "true"


def routing_of(containers: str | Iterable[str] | None) -> str | None:
    """The ``routing`` value of one container or several (a comma list for a search). ``None`` when there
    is none, or when an id holds a comma (the node would split it): such a search visits every shard."""
    if containers is None:
        return None
    ids = [containers] if isinstance(containers, str) else sorted(set(containers))
    if not ids or any("," in c or not c for c in ids):
        return None
    return ",".join(ids)


def strip_routing(answer: Any) -> Any:
    """The node's answer without ``_routing`` on its hits and documents: ml-commons 3.6 routes nothing, so
    the answers memproxy relays never carried it."""
    if isinstance(answer, dict):
        answer.pop("_routing", None)
        for doc in answer.get("docs") or ():
            if isinstance(doc, dict):
                doc.pop("_routing", None)
        hits = answer.get("hits")
        for hit in (hits.get("hits") or ()) if isinstance(hits, dict) else ():
            if isinstance(hit, dict):
                hit.pop("_routing", None)
    return answer


class IndexLayouts:
    """Whether an index expression (a name, a pattern, a comma list) takes routing, looked up once per
    :data:`LAYOUT_TTL_S`; a missing index does (memproxy creates memory indices marked)."""

    def __init__(self, request: Callable[..., Awaitable[Any]], path: Callable[[str], str]) -> None:
        # The store's own call and path builder (the client module owns both and imports this one).
        self._request = request
        self._path = path
        self._known: dict[str, tuple[bool, float]] = {}

    def forget(self, expression: str) -> None:
        self._known.pop(expression, None)

    async def routed(self, expression: str) -> bool:
        known = self._known.get(expression)
        now = time.monotonic()
        if known is not None and known[1] > now:
            return known[0]
        try:
            info: dict[str, Any] = await self._request(
                "GET",
                self._path(expression),
                params={
                    "filter_path": _FILTER,
                    "expand_wildcards": "all",
                    "ignore_unavailable": "true",
                    "allow_no_indices": "true",
                },
            )
        except NotFound:  # no such index yet: memproxy creates memory indices marked
            return True
        indices = [v for v in (info or {}).values() if isinstance(v, Mapping)]
        routed = all(routed_by_layout(i) for i in indices)
        if indices and not any(not routed_by_layout(i) and _blocked(i) for i in indices):
            self._known[expression] = (routed, now + LAYOUT_TTL_S)
        return routed

    async def params(self, expression: str, containers: str | Iterable[str] | None) -> dict[str, str]:
        """``{"routing": ...}`` for a call on ``expression`` within ``containers``, or nothing."""
        value = routing_of(containers)
        if value is None or not await self.routed(expression):
            return {}
        return {"routing": value}
