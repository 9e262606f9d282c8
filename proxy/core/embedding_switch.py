"""Switching a container's (= a space's) embedding model without downtime (docs/data-model.md, "Switching
the embedding model").

:func:`start_switch` creates the new model's long-term index beside the old one
(``<base>long-term-<12 hex of sha256 of the model id>``, shared by every container of the family that
switches to that model), records the switch on the container (``copying``: writes from then on go to both
indices, proxy.core.longterm_mirror) and enqueues one durable job, ``embedding-switch``:

1. ``copy``: every long-term memory of the container, in ``_id`` order (point in time + ``search_after``),
   re-embedded by the new model in batches and written with ``create`` (a memory dual-written meanwhile is
   newer and stays; a deleted one left a tombstone the ``create`` fails on); after each batch the cursor,
   the count and the ETA are the job's checkpoint (``progress``), so an attempt after a crash resumes there;
2. ``verify``: a merge of both indices' sorted id lists copies what the new one lacks and deletes what the
   old one no longer holds; then the counts must agree;
3. ``switch``: one conditional write (``if_seq_no``) of the container: the new model, its dimension and
   index; searches use it from then on (other processes within ``--cache-ttl-s``); writes still reach the
   old index (``switched``) so a process with a cached container finds everything;
4. a follow-up job, ``embedding-switch-cleanup``, due after the grace period: it ends the dual writes and
   deletes the container's documents from the old index.

:func:`cancel_switch` (before the switch only) removes the switch from the container, so the old model stays
in force, and deletes the container's documents from the new index; the job stops at its next batch.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.container_indices import create_memory_indices, embedder_dimension, prepare_long_term
from proxy.core.container_record import LONG_TERM_INDEX_KEY, SWITCH_KEY, Container, ContainerNotFound
from proxy.core.containers import get_container
from proxy.core.jobs import Job, JobContext, JobQueue, JobRunner, PermanentJobError
from proxy.core.longterm_mirror import (
    COPYING,
    SWITCHED,
    drop_target,
    drop_tombstones,
    embedded_documents,
    raise_bulk_errors,
)
from proxy.core.services import Services
from proxy.errors import BadRequest, Conflict, NotFound
from proxy.store import memories as docs
from proxy.store.containers import CONTAINER_INDEX
from proxy.store.layout import CONTAINER_FIELD
from proxy.store.query import MatchAll, Term
from proxy.store.transfer import pages, refresh
from proxy.store.versioned import mget_versioned

__all__ = [
    "CLEANUP_KIND",
    "DEFAULT_GRACE_S",
    "KIND",
    "SwitchRequest",
    "cancel_switch",
    "register_embedding_switch",
    "start_switch",
    "switch_progress",
    "target_index",
]

KIND = "embedding-switch"
CLEANUP_KIND = "embedding-switch-cleanup"
DEFAULT_GRACE_S = 300.0
# Memories re-embedded and written per batch (one embed call, one _bulk, one checkpoint).
BATCH = 256
_WRITE_ATTEMPTS = 5


@dataclass(frozen=True)
class SwitchRequest:
    embedding_model_id: str
    embedding_dimension: int | None = None
    grace_period_s: float = DEFAULT_GRACE_S
    batch: int = BATCH


def subject(container_id: str) -> str:
    return f"embedding-switch:{container_id}"


def target_index(container: Container, model_id: str) -> str:
    digest = hashlib.sha256(model_id.encode()).hexdigest()[:12]
    return f"{container.index_base}long-term-{digest}"


def _switched_view(container: Container, switch: Mapping[str, Any]) -> Container:
    """The container as it is once switched: the new model, its dimension and index (and, for a space, its
    first space embedder)."""
    target = switch["target"]
    configuration = {
        **container.configuration,
        "embedding_model_id": target["embedding_model_id"],
        "embedding_dimension": target["embedding_dimension"],
    }
    goodmem = container.goodmem
    embedders = list((goodmem or {}).get("space_embedders") or [])
    if goodmem is not None and embedders and isinstance(embedders[0], Mapping):
        embedders[0] = {**embedders[0], "embedder_id": target["embedding_model_id"], "updated_at": now_ms()}
        goodmem = {**goodmem, "space_embedders": embedders}
    return replace(
        container,
        configuration=configuration,
        goodmem=goodmem,
        extra={**container.extra, LONG_TERM_INDEX_KEY: target["index"]},
    )


async def _write(svc: Services, container: Container) -> Container:
    """One conditional write of the container record (Conflict when it changed since it was read)."""
    result = await docs.index_doc(
        svc.store,
        CONTAINER_INDEX,
        container.source(),
        doc_id=container.id,
        refresh=True,
        if_seq_no=container.seq_no,
        if_primary_term=container.primary_term,
    )
    svc.caches.containers.invalidate(container.id)
    return replace(container, seq_no=result.get("_seq_no"), primary_term=result.get("_primary_term"))


def _without_switch(container: Container) -> Container:
    return replace(container, extra={k: v for k, v in container.extra.items() if k != SWITCH_KEY})


# --- the API's three operations ---------------------------------------------------------------------


async def start_switch(
    svc: Services, queue: JobQueue, container_id: str, req: SwitchRequest, *, owner_id: str | None = None
) -> Job:
    """Validate, create the new index, record the switch on the container and enqueue its job."""
    container = await get_container(svc, container_id)
    if container.embedder_id is None:
        raise BadRequest("the memory container has no embedding model to switch from")
    if (running := container.embedding_switch) is not None:
        raise Conflict(
            f"an embedding model switch of this memory container is under way (task {running['job_id']})"
        )
    if req.grace_period_s < 0:
        raise BadRequest("grace_period_s must be 0 or more")
    model_id, dimension = await embedder_dimension(svc, req.embedding_model_id)
    current_id, _ = await embedder_dimension(svc, container.embedder_id)
    if model_id == current_id:
        raise BadRequest(f"the memory container already uses the embedding model {model_id}")
    if req.embedding_dimension is not None and req.embedding_dimension != dimension:
        raise BadRequest(
            f"embedding_dimension {req.embedding_dimension} does not match the dimension of the embedding "
            f"model {model_id} ({dimension})"
        )
    job_id = str(uuid.uuid4())
    switch = {
        "job_id": job_id,
        "state": COPYING,
        "started_at": now_ms(),
        "grace_period_s": req.grace_period_s,
        "batch": req.batch,
        "source": {
            "index": container.index_name("long-term"),
            "embedding_model_id": container.embedder_id,
            "embedding_dimension": container.configuration.get("embedding_dimension"),
        },
        "target": {
            "index": target_index(container, model_id),
            "embedding_model_id": model_id,
            "embedding_dimension": dimension,
        },
    }
    target_view = _switched_view(container, switch)
    await prepare_long_term(svc, target_view)  # an existing index of that name must be for that model
    await create_memory_indices(svc, target_view, ("long-term",))
    try:
        recorded = await _write(svc, replace(container, extra={**container.extra, SWITCH_KEY: switch}))
    except Conflict:
        raise Conflict("the memory container changed while the switch was being started: try again") from None
    try:
        return await queue.enqueue(
            KIND,
            {"container_id": container_id},
            subject=subject(container_id),
            owner_id=owner_id,
            job_id=job_id,
        )
    except BaseException:
        await asyncio.shield(_write(svc, _without_switch(recorded)))
        raise


async def cancel_switch(svc: Services, queue: JobQueue, container_id: str) -> dict[str, Any]:
    """Stop a switch before it switched: the old model stays in force, the new index loses the container's
    documents. 404 without a switch, 409 once it has switched (the old index then goes after the grace)."""
    for _ in range(_WRITE_ATTEMPTS):
        container = await get_container(svc, container_id)
        switch = container.embedding_switch
        if switch is None:
            raise NotFound("no embedding model switch of this memory container is under way")
        if switch.get("state") != COPYING:
            raise Conflict(
                "the embedding model switch is done: the old model's memories are deleted after the grace "
                "period"
            )
        try:
            await _write(svc, _without_switch(container))
        except Conflict:
            continue
        await drop_target(svc, container_id, switch)
        return {"task_id": switch["job_id"], "status": "CANCELLED"}
    raise Conflict("the memory container kept changing: try again")


async def switch_progress(svc: Services, queue: JobQueue, container_id: str) -> dict[str, Any]:
    """The latest switch of the container: its job's state and stage, copied/total, ETA, errors."""
    container = await get_container(svc, container_id)
    jobs = await queue.find_by_subject(subject(container_id), limit=1)
    if not jobs:
        raise NotFound("no embedding model switch of this memory container was found")
    job = jobs[0]
    progress = job.progress or {}
    result = job.result or {}
    switch = container.embedding_switch
    state = "CANCELLED" if result.get("cancelled") else job.state
    answer: dict[str, Any] = {
        "task_id": job.job_id,
        "state": state,
        "stage": job.stage,
        # copying → switched (searches use the new model; the old index is kept for the grace period) → done
        "switch_state": (
            switch.get("state") if switch is not None and switch.get("job_id") == job.job_id else "done"
        ),
        "embedding_model_id": container.embedder_id,
        "copied": int(progress.get("copied") or result.get("copied") or 0),
        "total": int(progress.get("total") or result.get("total") or 0),
        "eta_s": progress.get("eta_s") if job.state in ("PENDING", "RUNNING") else 0,
        "attempts": job.attempts,
        "errors": [h["error"] for h in job.history if h.get("error")],
        "created_time": job.created_at,
        "last_updated_time": job.updated_at,
    }
    if switch is not None and switch.get("job_id") == job.job_id:
        answer["source"], answer["target"] = switch["source"], switch["target"]
        if switch.get("grace_until"):
            answer["grace_until"] = switch["grace_until"]
    if state == "FAILED":
        answer["error"] = job.last_error
    return answer


# --- the jobs ----------------------------------------------------------------------------------------


async def _ours(svc: Services, container_id: str, job_id: str) -> Container | None:
    """The container while this job's switch is on it; None once it was cancelled or deleted."""
    try:
        container = await get_container(svc, container_id)
    except ContainerNotFound:
        return None
    switch = container.embedding_switch
    return container if switch is not None and switch.get("job_id") == job_id else None


def _scope(container_id: str) -> Term:
    return Term(CONTAINER_FIELD, container_id)


async def _copy(svc: Services, container: Container, ctx: JobContext) -> bool:
    """Copy from the checkpoint on; False when the switch was cancelled meanwhile."""
    switch = container.embedding_switch or {}
    source, target = str(switch["source"]["index"]), str(switch["target"]["index"])
    model = str(switch["target"]["embedding_model_id"])
    done = dict(ctx.progress)
    copied = int(done.get("copied") or 0)
    total = await docs.count(svc.store, source, _scope(container.id), routing=container.id)
    resumed_at, started = copied, time.monotonic()
    await ctx.set_progress({**done, "copied": copied, "total": total, "resumed_from": copied})
    batch = int(switch.get("batch") or BATCH)
    async for page in pages(svc.store, source, _scope(container.id), size=batch, after=done.get("after")):
        if await _ours(svc, container.id, ctx.job_id) is None:
            # Cancelled: what this attempt wrote since the canceller's own clean-up goes too.
            await drop_target(svc, container.id, switch)
            return False
        written = await embedded_documents(svc, model, [(str(h["_id"]), h["_source"]) for h in page])
        ops: list[docs.BulkOp] = [("create", target, doc_id, doc) for doc_id, doc in written]
        # 409: a newer version (dual-written) or a tombstone is there already, and wins.
        raise_bulk_errors(await docs.bulk(svc.store, ops, refresh=False), allowed=(409,))
        copied += len(page)
        total = max(total, copied)
        rate = (copied - resumed_at) / max(time.monotonic() - started, 1e-3)
        await ctx.set_progress(
            {
                "after": page[-1]["sort"],
                "copied": copied,
                "total": total,
                "resumed_from": resumed_at,
                "eta_s": round((total - copied) / rate, 1) if rate > 0 else None,
            }
        )
    return True


async def _ids(svc: Services, index: str, container_id: str) -> AsyncIterator[str]:
    async for page in pages(svc.store, index, _scope(container_id), size=1000, source=False):
        for hit in page:
            yield str(hit["_id"])


async def _reconcile(svc: Services, container: Container) -> dict[str, int]:
    """Make the new index hold exactly the old one's ids: a merge of both sorted id lists; what is missing is
    copied, what the old index no longer has is deleted."""
    switch = container.embedding_switch or {}
    source, target = str(switch["source"]["index"]), str(switch["target"]["index"])
    missing: list[str] = []
    extra: list[str] = []
    olds, news = _ids(svc, source, container.id), _ids(svc, target, container.id)
    # The new index's snapshot first: a memory created between the two is then "missing" (copied, or a 409
    # when its dual write got there), never "extra" (deleted from the new index while the old one has it).
    new = await anext(news, None)
    old = await anext(olds, None)
    while old is not None or new is not None:
        if new is None or (old is not None and old < new):
            missing.append(str(old))
            old = await anext(olds, None)
        elif old is None or new < old:
            extra.append(new)
            new = await anext(news, None)
        else:
            old, new = await anext(olds, None), await anext(news, None)
    for start in range(0, len(missing), BATCH):
        found = await mget_versioned(svc.store, source, missing[start : start + BATCH], routing=container.id)
        model = str(switch["target"]["embedding_model_id"])
        written = await embedded_documents(svc, model, [(i, v.source) for i, v in found.items()])
        ops: list[docs.BulkOp] = [("create", target, i, doc) for i, doc in written]
        if ops:
            raise_bulk_errors(await docs.bulk(svc.store, ops, refresh=False), allowed=(409,))
    for start in range(0, len(extra), 1000):
        deletes: list[docs.BulkOp] = [("delete", target, i, None) for i in extra[start : start + 1000]]
        raise_bulk_errors(
            await docs.bulk(svc.store, deletes, refresh=False, routing=container.id), allowed=(404,)
        )
    return {"missing": len(missing), "extra": len(extra)}


async def _counts(svc: Services, container: Container) -> tuple[int, int]:
    switch = container.embedding_switch or {}
    source, target = str(switch["source"]["index"]), str(switch["target"]["index"])
    await refresh(svc.store, [source, target])
    scope = _scope(container.id)
    return (
        await docs.count(svc.store, source, scope, routing=container.id),
        await docs.count(svc.store, target, scope, routing=container.id),
    )


async def _switch(svc: Services, container: Container, job_id: str) -> Container | None:
    """The atomic step: one conditional write of the container (retried when something else changed it)."""
    for _ in range(_WRITE_ATTEMPTS):
        switch = container.embedding_switch or {}
        # At least twice the cache's life: no process still searches the old index by then.
        grace_s = max(float(switch.get("grace_period_s") or 0), 2 * svc.caches.containers.ttl_s + 1)
        now = now_ms()
        switched = {**switch, "state": SWITCHED, "switched_at": now, "grace_until": now + int(grace_s * 1000)}
        view = _switched_view(container, switch)
        try:
            return await _write(svc, replace(view, extra={**view.extra, SWITCH_KEY: switched}))
        except Conflict:
            current = await _ours(svc, container.id, job_id)
            if current is None:
                return None
            container = current
    raise RuntimeError("the memory container kept changing: could not switch")


def register_embedding_switch(runner: JobRunner, svc: Services) -> None:
    async def run(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        container_id = str(payload["container_id"])
        await ctx.set_stage("copy")
        container = await _ours(svc, container_id, ctx.job_id)
        if container is None:
            return {"cancelled": True}
        repaired: dict[str, int] = {}
        if (container.embedding_switch or {}).get("state") == COPYING:
            if not await _copy(svc, container, ctx):
                return {"cancelled": True, **ctx.progress}
            await ctx.set_stage("verify")
            # Equal counts could hide one memory missing and one too many: the id lists are compared.
            await _counts(svc, container)  # refreshes both
            repaired = await _reconcile(svc, container)
            old, new = await _counts(svc, container)
            if old != new:  # writes meanwhile: the next attempt checks again
                raise RuntimeError(f"the new index holds {new} memories, the old one {old}")
            await ctx.set_stage("switch")
            switched = await _switch(svc, container, ctx.job_id)
            if switched is None:
                await drop_target(svc, container_id, container.embedding_switch or {})
                return {"cancelled": True, **ctx.progress}
            container = switched
        switch = container.embedding_switch or {}
        await ctx.set_stage("schedule-cleanup")
        delay_s = max(0.0, (int(switch.get("grace_until") or 0) - now_ms()) / 1000)
        await runner.queue.enqueue(
            CLEANUP_KIND,
            {"container_id": container_id, "switch_job_id": ctx.job_id},
            subject=f"embedding-switch-cleanup:{container_id}",
            owner_id=ctx.owner_id,
            job_id=f"{ctx.job_id}-cleanup",
            delay_s=delay_s,
        )
        return {
            "copied": int(ctx.progress.get("copied") or 0),
            "total": int(ctx.progress.get("total") or 0),
            "resumed_from": int(ctx.progress.get("resumed_from") or 0),
            "repaired": repaired,
            "embedding_model_id": switch["target"]["embedding_model_id"],
            "grace_until": switch.get("grace_until"),
        }

    async def cleanup(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        container_id, job_id = str(payload["container_id"]), str(payload["switch_job_id"])
        await ctx.set_stage("end-dual-writes")
        for _ in range(_WRITE_ATTEMPTS):
            container = await _ours(svc, container_id, job_id)
            if container is None or (container.embedding_switch or {}).get("state") != SWITCHED:
                return {"done": "nothing to clean"}
            switch = container.embedding_switch or {}
            wait_s = (int(switch.get("grace_until") or 0) - now_ms()) / 1000
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            try:
                await _write(svc, _without_switch(container))
            except Conflict:
                continue
            # A write that read the container just before sees the switch still; let it land first.
            await asyncio.sleep(1.0)
            await ctx.set_stage("drop-old")
            source, target = str(switch["source"]["index"]), str(switch["target"]["index"])
            await refresh(svc.store, [source, target])
            deleted = await docs.delete_by_query(
                svc.store, source, MatchAll(), container_id=container_id, ignore_missing=True
            )
            await drop_tombstones(svc, container_id, target)
            return {"old_index": source, "deleted": int(deleted.get("deleted", 0))}
        raise PermanentJobError("the memory container kept changing", stage="end-dual-writes")

    runner.register(KIND, run)
    runner.register(CLEANUP_KIND, cleanup)
