"""Rolling back GoodMem memory writes that did not finish (``proxy.core.goodmem.memories`` writes records
``PROCESSING`` first, then chunks, then marks the records ``COMPLETED``).

* A write that fails after its records exist is settled by the writer at once (:func:`roll_back`): undone,
  unless every chunk and record of it turns out to be stored (the node died after storing them, before
  answering), in which case its records are marked COMPLETED. When the node cannot be reached (it died: that
  is what failed the write), this is retried in the background until the node is back
  (:func:`roll_back_later`). Meanwhile a create that names one of its ids is told to retry (503).
* A write whose proxy died mid-way leaves records ``PROCESSING`` with some chunks; any proxy rolls those back
  once they are older than :data:`ABANDONED_AFTER_MS` (:func:`sweep_abandoned_writes`, started by a proxy's
  own writes at most every :data:`SWEEP_EVERY_S`).

Both delete chunks before records, so a chunk is never left without its record, and both act only on what is
theirs: the writer on its own chunk ids and the records carrying its write id; the sweep on records it first
claimed (``FAILED``, at the version it read), so a writer still alive cannot complete a record being removed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from proxy.core.container_record import Container
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.documents import requeue_orphans
from proxy.core.goodmem.ids import now_ms
from proxy.core.longterm import delete_long_term
from proxy.store.goodmem import MEMORIES
from proxy.store.query import Exists, Not, Range, Terms, all_of
from proxy.store.versioned import Versioned, delete_many, mget_versioned, search_versioned, update_many

__all__ = [
    "ABANDONED_AFTER_MS",
    "COMPLETED",
    "FAILED",
    "PROCESSING",
    "SWEEP_EVERY_S",
    "InterruptedWrite",
    "maybe_sweep",
    "roll_back",
    "roll_back_later",
    "sweep_abandoned_writes",
]

log = logging.getLogger(__name__)

PROCESSING, COMPLETED, FAILED = "PROCESSING", "COMPLETED", "FAILED"
# A write's records stay PROCESSING for one embedding and two node calls; one older than this was abandoned
# by a proxy that died mid-write, and any proxy may roll it back.
ABANDONED_AFTER_MS = 10 * 60 * 1000
SWEEP_EVERY_S = 60.0
# An undo the node refused (it was down) is retried this long, then left to the sweep.
RETRY_FOR_S = 600.0
_SWEEP_BATCH = 500


@dataclass(frozen=True)
class InterruptedWrite:
    """What one write of one space may have stored: its chunks (by id) and its records (by write id)."""

    container: Container
    write_id: str
    memory_ids: tuple[str, ...]
    chunk_ids: tuple[str, ...]


async def _chunks_present(gm: GoodMem, write: InterruptedWrite) -> int:
    """How many of the write's chunks the node holds (a realtime read: no refresh needed)."""
    index = write.container.index_name("long-term")
    if index is None or not write.chunk_ids:
        return 0
    found = await mget_versioned(gm.store, index, write.chunk_ids, routing=write.container.id)
    return sum(1 for v in found.values() if v.source.get("memory_container_id") == write.container.id)


async def _settle(gm: GoodMem, write: InterruptedWrite) -> str:
    """Finish or undo the write: ``completed`` when its records are all still its own (PROCESSING or
    COMPLETED) and every chunk is stored (what is left is marking the records COMPLETED), else ``rolled
    back``: chunks first (by their own ids: nothing of another write is touched), then the records that
    carry its write id (each at the version read)."""
    found = await mget_versioned(gm.store, MEMORIES, write.memory_ids)
    ours = [v for v in found.values() if v.source.get("write_id") == write.write_id]
    statuses = {v.source.get("processing_status") for v in ours}
    complete = len(ours) == len(write.memory_ids) and statuses <= {PROCESSING, COMPLETED}
    if complete and await _chunks_present(gm, write) == len(write.chunk_ids):
        pending = [v for v in ours if v.source.get("processing_status") == PROCESSING]
        outcome = await update_many(
            gm.store, MEMORIES, [(v, {"processing_status": COMPLETED}) for v in pending]
        )
        if all(int(item.get("status", 500)) < 300 for item in outcome):
            return "completed"
        found = await mget_versioned(gm.store, MEMORIES, write.memory_ids)  # claimed meanwhile: undo
        ours = [v for v in found.values() if v.source.get("write_id") == write.write_id]
    for start in range(0, len(write.chunk_ids), 1000):
        await delete_long_term(gm.svc, write.container, ids=list(write.chunk_ids[start : start + 1000]))
    await delete_many(gm.store, MEMORIES, ours)
    return "rolled back"


async def roll_back(gm: GoodMem, write: InterruptedWrite) -> bool:
    """Settle the write now (:func:`_settle`: undone, or completed when nothing of it is missing); True when
    it turned out complete. If the node cannot be reached, keep trying in the background (False). Raises
    nothing but a cancellation: the caller reports the failure that interrupted the write."""
    try:
        outcome = await _settle(gm, write)
    except asyncio.CancelledError:
        roll_back_later(gm, write)
        raise
    except Exception as exc:
        log.warning("memory write %s: roll-back failed (%s); retrying in the background", write.write_id, exc)
        roll_back_later(gm, write)
        return False
    log.debug("memory write %s: %s", write.write_id, outcome)
    return outcome == "completed"


def roll_back_later(gm: GoodMem, write: InterruptedWrite, *, retry_for_s: float = RETRY_FOR_S) -> None:
    """Settle in the background, retrying (0.2 s doubling to 5 s) until it succeeds or ``retry_for_s`` is up
    (then the sweep finds the records once they are abandoned)."""

    async def retry() -> None:
        deadline = time.monotonic() + retry_for_s
        pause = 0.2
        while True:
            try:
                log.info("memory write %s: %s", write.write_id, await _settle(gm, write))
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise  # left to sweep_abandoned_writes
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)

    gm.background.spawn(retry(), f"roll back memory write {write.write_id}")


def maybe_sweep(gm: GoodMem) -> None:
    """Start :func:`sweep_abandoned_writes` in the background, at most once per :data:`SWEEP_EVERY_S` in
    this process."""
    clock = time.monotonic()
    if clock - gm.docs.maintenance.get("sweep", float("-inf")) < SWEEP_EVERY_S:
        return
    gm.docs.maintenance["sweep"] = clock

    async def sweep() -> None:
        rolled = await sweep_abandoned_writes(gm)
        if rolled:
            log.info("rolled back %d abandoned memory writes", rolled)
        requeued = await requeue_orphans(gm)
        if requeued:
            log.info("enqueued the jobs of %d memories whose process stopped before it could", requeued)

    gm.background.spawn(sweep(), "sweep abandoned memory writes")


async def sweep_abandoned_writes(gm: GoodMem, *, older_than_ms: int = ABANDONED_AFTER_MS) -> int:
    """Roll back writes whose records stayed PROCESSING longer than ``older_than_ms`` (and finish those a
    sweep claimed, FAILED, but did not remove): claim, delete the chunks, delete the record. How many."""
    cutoff = now_ms() - older_than_ms
    # A record with a job is its job's to finish or fail (proxy.core.goodmem.documents), however long.
    unfinished = all_of(
        [
            Terms("processing_status", (PROCESSING, FAILED)),
            Range("last_updated_time", lt=cutoff),
            Not(Exists("job_id")),
        ]
    )
    stale = await search_versioned(
        gm.store,
        MEMORIES,
        unfinished,
        size=_SWEEP_BATCH,
        sort=({"last_updated_time": "asc"},),
        source_excludes=("original_content_b64", "metadata_index"),
    )
    rolled = 0
    for record in stale:
        if record.source.get("processing_status") == PROCESSING:
            [claim] = await update_many(gm.store, MEMORIES, [(record, {"processing_status": FAILED})])
            if int(claim.get("status", 500)) >= 300:
                continue  # its writer finished meanwhile (or another sweep claimed it)
            record = Versioned(record.id, record.source, claim.get("_seq_no"), claim.get("_primary_term"))
        await gm.docs.delete_chunks_of([record.id])
        await delete_many(gm.store, MEMORIES, [record])
        rolled += 1
    return rolled
