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
from proxy.errors import NotFound
from proxy.store import inspection
from proxy.store.client import IndexMissing
from proxy.store.goodmem import MEMORIES
from proxy.store.memories import count, get_doc
from proxy.store.query import Filter, Term

__all__ = [
    "GOODMEM_SERIES",
    "MAX_SAMPLE",
    "MAX_VECTOR_SAMPLE",
    "MemoryTypeCount",
    "Series",
    "Timeline",
    "VectorSample",
    "bucket_interval",
    "find_containers",
    "get_memory",
    "index_details",
    "memories_over_time",
    "memory_counts",
    "sample_memories",
    "vector_sample",
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


async def get_memory(svc: Services, container: Container, memory_type: str, memory_id: str) -> dict[str, Any]:
    """One memory of the container, as ``{"_id", "_index", "_source"}`` (vectors included: the page elides
    them); NotFound when the type is disabled, the document absent, or it belongs to another container of the
    same (shared) index."""
    index = container.index_name(memory_type)
    if index is None:
        raise NotFound(f"This container has no {memory_type} memory")
    try:
        doc = await get_doc(svc.store, index, memory_id, routing=container.id)
    except IndexMissing:
        doc = None
    source = (doc or {}).get("_source") or {}
    if doc is None or source.get("memory_container_id") != container.id:
        raise NotFound(f"No {memory_type} memory {memory_id} in this container")
    return {"_id": doc["_id"], "_index": doc["_index"], "_source": source}


# --- memories over time ---------------------------------------------------------------------------------

# The series of a GoodMem space's own memory records (its long-term series holds their chunks).
GOODMEM_SERIES = "GoodMem memories"
TIMELINE_BUCKETS = 30
_SECOND = 1000
_MINUTE = 60 * _SECOND
_HOUR = 60 * _MINUTE
_DAY = 24 * _HOUR
# Bucket widths a person reads at a glance ("per hour", "per day"); beyond 30 days, whole multiples of it.
_NICE_INTERVALS = (
    *(n * _SECOND for n in (1, 5, 15, 30)),
    *(n * _MINUTE for n in (1, 5, 15, 30)),
    *(n * _HOUR for n in (1, 3, 6, 12)),
    *(n * _DAY for n in (1, 7, 30)),
)


def bucket_interval(span_ms: int, buckets: int = TIMELINE_BUCKETS) -> int:
    """The narrowest readable bucket width that covers ``span_ms`` in at most ``buckets`` buckets."""
    wanted = max(1, -(-max(span_ms, 1) // max(buckets, 1)))
    for interval in _NICE_INTERVALS:
        if interval >= wanted:
            return interval
    return -(-wanted // (30 * _DAY)) * 30 * _DAY


@dataclass(frozen=True)
class Series:
    """One line of the chart: a memory type (or GoodMem's records) and its count in each bucket."""

    name: str
    counts: list[int]


@dataclass(frozen=True)
class Timeline:
    """Documents created per bucket; every series has one count per entry of ``starts`` (epoch ms)."""

    starts: list[int]
    interval_ms: int
    series: list[Series]


def _timeline_sources(container: Container) -> list[tuple[str, str, Filter]]:
    sources: list[tuple[str, str, Filter]] = [
        (t, index, _scope(container)) for t in MEMORY_TYPES if (index := container.index_name(t)) is not None
    ]
    if container.goodmem is not None:
        sources.append((GOODMEM_SERIES, MEMORIES, Term("space_id", container.id)))
    return sources


async def memories_over_time(
    svc: Services, container: Container, buckets: int = TIMELINE_BUCKETS
) -> Timeline | None:
    """How many memories of each type the container gained per bucket of ``created_time``, over the span of
    all of them (one bucket width for every series, so the lines share their x axis); None when it holds
    none. Two rounds of aggregations on the node, each series in parallel: the span, then the histogram."""
    sources = _timeline_sources(container)

    async def span(index: str, selection: Filter) -> tuple[int, int] | None:
        return await inspection.time_bounds(
            svc.store, index, selection, field="created_time", routing=container.id
        )

    spans = [s for s in await gather([span(index, sel) for _, index, sel in sources]) if s is not None]
    if not spans:
        return None
    start, end = min(s[0] for s in spans), max(s[1] for s in spans)
    interval = bucket_interval(end - start + 1, buckets)
    start -= start % interval  # whole buckets ("10:00", not "10:03:17") that still hold the first memory
    end = start + ((end - start) // interval) * interval

    async def histogram(index: str, selection: Filter) -> list[tuple[int, int]]:
        return await inspection.date_histogram(
            svc.store,
            index,
            selection,
            field="created_time",
            interval_ms=interval,
            bounds=(start, end),
            routing=container.id,
        )

    found = await gather([histogram(index, sel) for _, index, sel in sources])
    starts = list(range(start, end + 1, interval))
    series = []
    for (name, _, _), buckets_found in zip(sources, found, strict=True):
        by_start = dict(buckets_found)
        series.append(Series(name, [by_start.get(t, 0) for t in starts]))
    return Timeline(starts, interval, series)


# --- a sample of the vectors ----------------------------------------------------------------------------

MAX_VECTOR_SAMPLE = 2000
# A fixed seed: the same container draws the same sample on every visit until it changes.
SAMPLE_SEED = 29


@dataclass(frozen=True)
class VectorSample:
    """Memories drawn at random from the container's long-term index: ids, texts and vectors of one knn
    field, and how many the index holds in all (``total``)."""

    index: str
    field: str
    ids: list[str]
    texts: list[str]
    vectors: list[list[float]]
    total: int


async def vector_sample(
    svc: Services, container: Container, size: int = MAX_VECTOR_SAMPLE, *, seed: int = SAMPLE_SEED
) -> VectorSample | None:
    """Up to ``size`` long-term memories of the container with their first knn field's vectors, sampled by
    the node (:func:`proxy.store.inspection.random_sample`); None when the container embeds nothing."""
    index = container.index_name("long-term")
    fields = container.vector_fields()
    if index is None or not fields:
        return None
    field = fields[0][0]
    hits, total = await inspection.random_sample(
        svc.store,
        index,
        _scope(container),
        size=max(1, min(size, MAX_VECTOR_SAMPLE)),
        seed=seed,
        source_includes=[field, "memory"],
        routing=container.id,
    )
    ids, texts, vectors = [], [], []
    for hit in hits:
        vector = hit.source.get(field)
        if isinstance(vector, list) and vector:  # a memory still waiting for its embedding has none
            ids.append(hit.id)
            text = hit.source.get("memory")
            texts.append(text if isinstance(text, str) else "")
            vectors.append(vector)
    return VectorSample(index, field, ids, texts, vectors, total)
