"""Dual writes while a container's embedding model is switched (proxy.core.embedding_switch).

During a switch a container's long-term memories live in two indices: the one searches use (the *primary*,
``Container.index_name("long-term")``) and its *mirror*, embedded by the other model:

* while the copy runs (``copying``), the mirror is the new model's index, which searches do not use yet;
* after the switch, until the grace period ends (``switched``), the mirror is the old index, which a
  process whose cached container predates the switch may still search.

Every write path of long-term memory calls :func:`sync_mirror` (or :func:`mirror_deleted`) after its
write to the primary succeeded: the mirror's copies of those ids are brought in line with the primary,
re-embedded by the mirror's model. A memory deleted while the copy runs leaves a *tombstone* in the new
index: a document under its id without ``memory_container_id`` (so no container-scoped read, count or
search ever sees it) that makes the copy's ``create`` of a version read before the delete fail, instead
of bringing the deleted memory back. Tombstones go when the switch ends or is cancelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.container_record import Container
from proxy.core.query import DEFAULT_VECTOR_FIELD
from proxy.core.services import Services
from proxy.store import memories as docs
from proxy.store.client import node_error
from proxy.store.layout import CONTAINER_FIELD
from proxy.store.query import Filter, MatchAll, Term, all_of
from proxy.store.transfer import pages, refresh
from proxy.store.versioned import mget_versioned

__all__ = [
    "COPYING",
    "SWITCHED",
    "TOMBSTONE_FIELD",
    "Mirror",
    "drop_mirror",
    "drop_target",
    "drop_tombstones",
    "embedded_documents",
    "ids_matching",
    "mirror_deleted",
    "mirror_of",
    "raise_bulk_errors",
    "sync_mirror",
    "tombstones_of",
]

COPYING = "copying"
SWITCHED = "switched"
# A tombstone names its container here (a dynamic text field with a ``keyword`` sub-field).
TOMBSTONE_FIELD = "memproxy_tombstone_of"
_BATCH = 500


@dataclass(frozen=True)
class Mirror:
    index: str
    embedder_id: str
    # Deletes leave tombstones (only while the copy may still write an older version).
    tombstones: bool


def mirror_of(container: Container) -> Mirror | None:
    """Where the container's long-term writes must also go, if a switch is under way."""
    switch = container.embedding_switch
    if not switch:
        return None
    if switch.get("state") == COPYING:
        target = switch["target"]
        return Mirror(str(target["index"]), str(target["embedding_model_id"]), True)
    if switch.get("state") == SWITCHED:
        source = switch["source"]
        return Mirror(str(source["index"]), str(source["embedding_model_id"]), False)
    return None


def tombstones_of(container_id: str) -> Filter:
    return Term(f"{TOMBSTONE_FIELD}.keyword", container_id)


def raise_bulk_errors(result: Mapping[str, Any], *, allowed: Sequence[int] = ()) -> None:
    """The first failed item of a ``_bulk`` answer as the error it maps to (statuses in ``allowed`` pass)."""
    if not result.get("errors"):
        return
    for item in result.get("items", []):
        outcome = next(iter(item.values()))
        status = int(outcome.get("status", 500))
        if status >= 300 and status not in allowed:
            raise node_error(status, outcome.get("error") or {"type": "exception"})


async def embedded_documents(
    svc: Services, embedder_id: str, sources: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[tuple[str, dict[str, Any]]]:
    """The documents with ``memory_embedding`` re-embedded by ``embedder_id`` (one batched ``embed``);
    a space's further embedders' fields are kept as they are."""
    if not sources:
        return []
    model = await svc.models.embedding_model(embedder_id)
    vectors = await model.embed([str(src.get("memory") or " ") for _, src in sources])
    return [
        (doc_id, {**src, DEFAULT_VECTOR_FIELD: [float(x) for x in vector]})
        for (doc_id, src), vector in zip(sources, vectors, strict=True)
    ]


async def mirror_deleted(
    svc: Services, container: Container, ids: Sequence[str], *, refresh: bool | str = False
) -> None:
    """``ids`` were deleted from the primary: delete them from the mirror (tombstones while copying)."""
    mirror = mirror_of(container)
    if mirror is None or not ids:
        return
    for start in range(0, len(ids), _BATCH):
        part = ids[start : start + _BATCH]
        ops: list[docs.BulkOp] = (
            [("index", mirror.index, i, {TOMBSTONE_FIELD: container.id}) for i in part]
            if mirror.tombstones
            else [("delete", mirror.index, i, None) for i in part]
        )
        result = await docs.bulk(svc.store, ops, refresh=refresh, routing=container.id)
        raise_bulk_errors(result, allowed=(404,))


async def sync_mirror(
    svc: Services, container: Container, ids: Sequence[str], *, refresh: bool | str = False
) -> None:
    """After writes to the primary: the mirror's copies of ``ids`` as the primary holds them now (a realtime
    read), each re-embedded by the mirror's model; ids the primary no longer holds are deleted there."""
    mirror = mirror_of(container)
    primary = container.index_name("long-term")
    if mirror is None or primary is None or not ids:
        return
    for start in range(0, len(ids), _BATCH):
        part = list(dict.fromkeys(ids[start : start + _BATCH]))
        found = await mget_versioned(svc.store, primary, part, routing=container.id)
        present = [(i, found[i].source) for i in part if i in found]
        written = await embedded_documents(svc, mirror.embedder_id, present)
        if written:
            ops: list[docs.BulkOp] = [("index", mirror.index, i, doc) for i, doc in written]
            raise_bulk_errors(await docs.bulk(svc.store, ops, refresh=refresh))
        await mirror_deleted(svc, container, [i for i in part if i not in found], refresh=refresh)


async def ids_matching(svc: Services, container: Container, selection: Filter | None) -> list[str]:
    """The ids of the container's long-term memories ``selection`` matches (before a delete by query, so
    that the mirror loses the same ones); [] when no switch is under way."""
    primary = container.index_name("long-term")
    if mirror_of(container) is None or primary is None:
        return []
    scope = all_of([Term(CONTAINER_FIELD, container.id), selection])
    return [
        str(hit["_id"])
        async for page in pages(svc.store, primary, scope, size=1000, source=False)
        for hit in page
    ]


async def drop_mirror(svc: Services, container: Container) -> None:
    """The mirror's copies of the container's memories, and its tombstones (the container deleted
    mid-switch); nothing without a switch."""
    switch = container.embedding_switch
    mirror = mirror_of(container)
    if switch is None or mirror is None:
        return
    await refresh(svc.store, [mirror.index])
    await docs.delete_by_query(
        svc.store, mirror.index, MatchAll(), container_id=container.id, ignore_missing=True
    )
    await drop_tombstones(svc, container.id, str(switch["target"]["index"]))


async def drop_target(svc: Services, container_id: str, switch: Mapping[str, Any]) -> None:
    """A switch cancelled before it switched: the container's copies and tombstones in the new index."""
    index = str(switch["target"]["index"])
    # A delete by query sees what was refreshed: the copy's batches are written without a refresh.
    await refresh(svc.store, [index])
    await docs.delete_by_query(svc.store, index, MatchAll(), container_id=container_id, ignore_missing=True)
    await drop_tombstones(svc, container_id, index)


async def drop_tombstones(svc: Services, container_id: str, index: str) -> None:
    await docs.delete_by_query(svc.store, index, tombstones_of(container_id), ignore_missing=True)
