"""``infer: true`` as a durable job (``proxy.core.jobs``): enqueued by the add-memory request, run by any
memproxy process, retried with backoff when a model or the node fails, recorded in history when it gives up.

The job id derives from the working memory's id, so adding it again (a retried request, a replayed job) is
the same job; the pipeline's writes derive their ids from it too (``proxy.core.infer.pipeline``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.container_record import Container
from proxy.core.containers import get_container
from proxy.core.infer.pipeline import InferRequest, apply_plan, plan_infer, strategies_for
from proxy.core.jobs import Job, JobContext, JobQueue, JobRunner, PermanentJobError
from proxy.core.services import Services
from proxy.errors import MemproxyError, NotFound
from proxy.store import memories as docs

__all__ = ["INFER_JOB", "enqueue_infer", "infer_job_id", "record_failure", "register_infer"]

log = logging.getLogger(__name__)

INFER_JOB = "infer"
_JOB_IDS = uuid.UUID("2b0d3c4e-8a51-4f6b-b0a7-6c5e9d1f7a22")


def infer_job_id(working_memory_id: str) -> str:
    return str(uuid.uuid5(_JOB_IDS, working_memory_id))


async def enqueue_infer(queue: JobQueue, req: InferRequest) -> Job:
    return await queue.enqueue(
        INFER_JOB, req.to_json(), subject=req.key, owner_id=req.owner_id, job_id=infer_job_id(req.key)
    )


async def record_failure(svc: Services, container: Container, req: InferRequest, message: str) -> None:
    """An error history record per strategy that would have run (ml-commons writes one when extraction
    fails), best effort."""
    index = container.index_name("history")
    if index is None:
        return
    now = now_ms()
    for _, namespace in strategies_for(container, req.namespace):
        doc: dict[str, Any] = {"owner_id": req.owner_id} if req.owner_id is not None else {}
        doc.update(memory_container_id=container.id, created_time=now, namespace=namespace)
        doc["namespace_size"] = len(namespace)
        if req.tags:
            doc["tags"] = dict(req.tags)
        doc["error"] = message
        try:
            await docs.index_doc(svc.store, index, doc, refresh=True)
        except MemproxyError:
            log.exception("could not write the history record of a failed extraction")


def register_infer(runner: JobRunner, svc: Services) -> None:
    async def run(payload: Mapping[str, Any], ctx: JobContext) -> Mapping[str, Any]:
        req = InferRequest.from_json(payload)
        try:
            container = await get_container(svc, req.container_id)
        except NotFound:
            raise PermanentJobError("the memory container was deleted", stage="load") from None
        await ctx.set_stage("extract")
        plan = await plan_infer(svc, container, req)
        await ctx.set_stage("apply")
        await apply_plan(svc, container, req, plan)
        return {
            "strategies": [
                {
                    "strategy_id": s.strategy_id,
                    "events": [d.event for d in s.decisions],
                    **({"error": s.error} if s.error else {}),
                }
                for s in plan.strategies
            ]
        }

    async def failed(job: Job) -> None:
        req = InferRequest.from_json(job.payload)
        try:
            container = await get_container(svc, req.container_id)
        except NotFound:
            return
        await record_failure(svc, container, req, job.last_error or "extraction failed")

    runner.register(INFER_JOB, run, on_failed=failed)
