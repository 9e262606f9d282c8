"""Read-only views of a container for the inspection console: its indices, how many documents of each
memory type it holds, the indices' mappings and settings, and its newest memories with vectors left out.

Indices are shared by every container with the same ``index_prefix``, so counts and samples are always
scoped to the container (``memory_container_id``), as every memory operation is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core.container_record import MEMORY_TYPES, Container
from proxy.core.containers import ContainerPage
from proxy.core.search import INTERNAL_SOURCE_FIELDS
from proxy.core.services import Services
from proxy.core.tasks import gather
from proxy.store import inspection
from proxy.store.client import IndexMissing
from proxy.store.memories import count
from proxy.store.query import Term

__all__ = [
    "MAX_SAMPLE",
    "MemoryTypeCount",
    "find_containers",
    "index_details",
    "memory_counts",
    "sample_memories",
]

MAX_SAMPLE = 100
# Every knn field of a memory index is memory_embedding or memory_embedding__<n> (Container.vector_fields).
_VECTOR_FIELDS = "memory_embedding*"


@dataclass(frozen=True)
class MemoryTypeCount:
    """One memory type of a container: its index (None: the type is disabled) and its documents there."""

    memory_type: str
    index: str | None
    count: int


async def find_containers(
    svc: Services, text: str | None = None, *, size: int, from_: int = 0
) -> ContainerPage:
    """A page of containers, newest first; ``text`` narrows it to names starting with it, or that id."""
    try:
        result = await inspection.find_containers(
            svc.store, (text or "").strip() or None, size=size, from_=from_
        )
    except IndexMissing:
        return ContainerPage([], 0, None)
    hits = result["hits"]["hits"]
    return ContainerPage([Container.from_hit(h) for h in hits], int(result["hits"]["total"]["value"]), None)


def _scope(container: Container) -> Term:
    return Term("memory_container_id", container.id)


async def _count(svc: Services, container: Container, memory_type: str) -> MemoryTypeCount:
    index = container.index_name(memory_type)
    if index is None:
        return MemoryTypeCount(memory_type, None, 0)
    try:
        found = await count(svc.store, index, _scope(container), routing=container.id)
    except IndexMissing:  # nothing of this type was written yet
        found = 0
    return MemoryTypeCount(memory_type, index, found)


async def memory_counts(svc: Services, container: Container) -> list[MemoryTypeCount]:
    """Every memory type (sessions, working, long-term, history), in that order."""
    return await gather([_count(svc, container, t) for t in MEMORY_TYPES])


async def index_details(svc: Services, container: Container) -> dict[str, dict[str, Any] | None]:
    """Each enabled memory type's index mapping and settings, as the node has them (None: not created
    yet)."""
    types = [t for t in MEMORY_TYPES if container.index_name(t) is not None]
    found = await gather([inspection.index_details(svc.store, str(container.index_name(t))) for t in types])
    return dict(zip(types, found, strict=True))


async def sample_memories(
    svc: Services, container: Container, memory_type: str, size: int = 10
) -> list[dict[str, Any]]:
    """The container's newest memories of one type, as ``{"_id", "_index", "_source"}`` without vectors."""
    index = container.index_name(memory_type)
    if index is None:
        return []
    excludes = [_VECTOR_FIELDS, *(name for name, _ in container.vector_fields()), *INTERNAL_SOURCE_FIELDS]
    hits = await inspection.newest_documents(
        svc.store, index, _scope(container), size=max(1, min(size, MAX_SAMPLE)), source_excludes=excludes
    )
    return [{"_id": h.id, "_index": h.index, "_source": h.source} for h in hits]
