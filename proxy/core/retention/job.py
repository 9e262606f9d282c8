"""The retention job (kind ``retention``, docs/jobs.md): every container with a policy (its own, or the
cluster defaults applied to it once), planned and deleted as :mod:`proxy.core.retention.plan` says.

Scheduling: every process that runs jobs checks once a minute whether retention is enabled and, if so,
enqueues the job of the current interval slot under a fixed id (``retention-<hours>h-<slot>``, slot = now
divided by ``retention_job_interval_hours``, read afresh each time, so a changed interval applies from the
next check). ``op_type=create`` makes every process's enqueue of one slot the same single job, and its lease
makes one process run it. ``_execute`` enqueues one now, unless a retention job is already pending or running.
A run that finds another retention job running (a slot's run that outlasted its interval) does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.container_record import Container
from proxy.core.containers import list_containers, update_container
from proxy.core.jobs import PENDING, RUNNING, JobContext, JobQueue, JobRunner
from proxy.core.retention.plan import execute_plan, plan_container
from proxy.core.retention.settings import RetentionSettings
from proxy.core.services import Services
from proxy.errors import NotFound

__all__ = [
    "KIND",
    "SCHEDULE_EVERY_S",
    "all_containers",
    "register_retention",
    "run_all",
    "run_container",
    "schedule",
    "trigger",
]

log = logging.getLogger(__name__)

KIND = "retention"
SUBJECT = "memory-retention"
SCHEDULE_EVERY_S = 60.0
_PAGE = 100


async def _active(queue: JobQueue) -> bool:
    """A retention job is waiting or running (its lease alive)."""
    now = now_ms()
    for job in await queue.find_by_subject(SUBJECT, limit=20):
        if job.state == PENDING or (job.state == RUNNING and (job.lease_expires_at or 0) > now):
            return True
    return False


async def _runs_before(queue: JobQueue, job_id: str) -> bool:
    """Another retention job runs (lease alive) and started before this one (ties: the smaller id)."""
    now = now_ms()
    jobs = await queue.find_by_subject(SUBJECT, limit=20)
    mine = next((j for j in jobs if j.job_id == job_id), None)
    key = ((mine.started_at or now) if mine else now, job_id)
    return any(
        j.job_id != job_id
        and j.state == RUNNING
        and (j.lease_expires_at or 0) > now
        and ((j.started_at or 0), j.job_id) < key
        for j in jobs
    )


async def schedule(svc: Services, queue: JobQueue) -> str | None:
    """Enqueue the current slot's run when retention is enabled; its job id (None: disabled)."""
    settings = await svc.retention.current()
    if not settings.enabled:
        return None
    period_ms = settings.interval_hours * 3_600_000
    job_id = f"retention-{settings.interval_hours}h-{now_ms() // period_ms}"
    await queue.enqueue(KIND, {"trigger": "schedule"}, subject=SUBJECT, job_id=job_id, max_attempts=3)
    return job_id


async def trigger(svc: Services, queue: JobQueue) -> str:
    """``_execute``: ``triggered``, ``already_running`` or ``retention_disabled``."""
    if not (await svc.retention.current()).enabled:
        return "retention_disabled"
    if await _active(queue):
        return "already_running"
    await queue.enqueue(
        KIND, {"trigger": "execute"}, subject=SUBJECT, job_id=f"retention-now-{uuid.uuid4()}", max_attempts=3
    )
    return "triggered"


async def all_containers(svc: Services) -> list[Container]:
    found: list[Container] = []
    after: list[Any] | None = None
    while True:
        page = await list_containers(svc, size=_PAGE, search_after=after)
        found += page.containers
        if len(page.containers) < _PAGE or page.next_search_after is None:
            return found
        after = page.next_search_after


async def run_container(
    svc: Services, container: Container, settings: RetentionSettings
) -> dict[str, int] | None:
    """Plan and delete in one container; what it deleted by type (None: the container is gone)."""
    plan = await plan_container(svc, container, settings)
    if plan.policy_source == "cluster_default":
        # A default applies to a container once: from now on it is the container's own policy.
        try:
            await update_container(
                svc, container.id, configuration={"retention_policy": plan.effective_policy}
            )
        except NotFound:
            return None
    return await execute_plan(svc, container, plan)


async def run_all(svc: Services, ctx: JobContext | None = None) -> dict[str, Any]:
    """One run over every container; what it deleted."""
    settings = await svc.retention.current()
    if not settings.enabled:
        return {"skipped": "retention_disabled"}
    totals = {"sessions": 0, "long_term": 0, "history": 0, "working_memory": 0}
    evaluated = 0
    for n, container in enumerate(await all_containers(svc)):
        if ctx is not None:
            await ctx.set_stage(f"container {n + 1}: {container.id}")
        deleted = await run_container(svc, container, settings)
        if deleted is None:
            continue
        evaluated += 1
        for key, value in deleted.items():
            totals[key] += value
        if settings.throttle_seconds > 0:
            await asyncio.sleep(settings.throttle_seconds)
    log.info("retention: %d containers, deleted %s", evaluated, totals)
    return {"containers": evaluated, "deleted": totals}


def register_retention(runner: JobRunner, svc: Services) -> None:
    async def run(payload: Mapping[str, Any], ctx: JobContext) -> Mapping[str, Any]:
        if await _runs_before(runner.queue, ctx.job_id):
            return {"skipped": "already_running"}
        return await run_all(svc, ctx)

    async def scheduled() -> None:
        await schedule(svc, runner.queue)

    runner.register(KIND, run)
    runner.every(KIND, SCHEDULE_EVERY_S, scheduled)
