"""The embedding-switch jobs (docs/jobs.md, "The embedding-switch jobs"): ``embedding-switch`` copies,
verifies and switches; ``embedding-switch-cleanup`` ends the dual writes and empties the old index after the
grace period. The switch's requests and its container record are :mod:`proxy.core.embedding_switch`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.container_record import SWITCH_KEY, Container, ContainerNotFound
from proxy.core.containers import get_container
from proxy.core.embedding_switch import BATCH, KIND, subject, switched_view, without_switch, write_record
from proxy.core.jobs import Job, JobContext, JobRunner, PermanentJobError
from proxy.core.longterm_mirror import (
    COPYING,
    SWITCHED,
    drop_target,
    drop_tombstones,
    embedded_documents,
    raise_bulk_errors,
)
from proxy.core.services import Services
from proxy.errors import Conflict
from proxy.store import memories as docs
from proxy.store.layout import CONTAINER_FIELD
from proxy.store.query import MatchAll, Term
from proxy.store.transfer import pages, refresh
from proxy.store.versioned import mget_versioned

__all__ = ["CLEANUP_KIND", "register_embedding_switch"]

CLEANUP_KIND = "embedding-switch-cleanup"
_WRITE_ATTEMPTS = 5


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
        view = switched_view(container, switch)
        try:
            return await write_record(svc, replace(view, extra={**view.extra, SWITCH_KEY: switched}))
        except Conflict:
            current = await _ours(svc, container.id, job_id)
            if current is None:
                return None
            container = current
    raise RuntimeError("the memory container kept changing: could not switch")


def register_embedding_switch(runner: JobRunner, svc: Services) -> None:
    async def schedule_cleanup(
        container_id: str, job_id: str, owner_id: str | None, switch: Mapping[str, Any]
    ) -> None:
        # A fixed id: scheduling it again (a rerun after a crash, the failure hook) is harmless.
        await runner.queue.enqueue(
            CLEANUP_KIND,
            {"container_id": container_id, "switch_job_id": job_id},
            subject=f"{subject(container_id)}:cleanup",
            owner_id=owner_id,
            job_id=f"{job_id}-cleanup",
            delay_s=max(0.0, (int(switch.get("grace_until") or 0) - now_ms()) / 1000),
        )

    async def failed(job: Job) -> None:
        """The switch failed for good: before the switch, it is undone (the container keeps its model and
        writes stop reaching the new index); after it, the clean-up is scheduled as on success."""
        container_id = str(job.payload.get("container_id"))
        for _ in range(_WRITE_ATTEMPTS):
            container = await _ours(svc, container_id, job.job_id)
            if container is None:
                return
            switch = container.embedding_switch or {}
            if switch.get("state") == SWITCHED:
                await schedule_cleanup(container_id, job.job_id, job.owner_id, switch)
                return
            try:
                await write_record(svc, without_switch(container))
            except Conflict:
                continue
            await drop_target(svc, container_id, switch)
            return

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
        await schedule_cleanup(container_id, ctx.job_id, ctx.owner_id, switch)
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
                await write_record(svc, without_switch(container))
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

    runner.register(KIND, run, on_failed=failed)
    runner.register(CLEANUP_KIND, cleanup)
