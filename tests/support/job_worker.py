"""A memproxy job worker in a process of its own, for the kill test of ``tests/test_jobs.py``.

It runs jobs of one kind with :func:`write_output` and then hangs, so that the test can kill it with SIGKILL
after the job's effect is written but before the job is recorded COMPLETED: the worst moment for
at-least-once delivery, which the retry must survive without duplicating the effect.

    python -m tests.support.job_worker OPENSEARCH_URL JOBS_INDEX KIND OUT_INDEX WORKER_ID LEASE_S
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from proxy.config import Settings
from proxy.core.jobs import JobContext, JobQueue, JobRunner
from proxy.store.client import Store, url
from proxy.store.jobs import JobDocs


async def write_output(store: Store, out_index: str, ctx: JobContext) -> None:
    """The job's effect, idempotent: one document whose id is the job's, so a second attempt overwrites
    the first attempt's document instead of adding another."""
    await store.request(
        "PUT",
        url(out_index, "_doc", ctx.job_id),
        body={"job_id": ctx.job_id, "attempt": ctx.attempt, "worker": ctx.worker},
        params={"refresh": "true"},
    )


async def main(argv: list[str]) -> None:
    opensearch_url, jobs_index, kind, out_index, worker_id, lease_s = argv
    store = Store(Settings(opensearch_url=opensearch_url))
    runner = JobRunner(
        JobQueue(JobDocs(store, jobs_index)),
        workers=1,
        lease_s=float(lease_s),
        poll_s=0.1,
        worker_id=worker_id,
    )

    async def hang_after_writing(payload: dict[str, Any], ctx: JobContext) -> None:
        await write_output(store, out_index, ctx)
        await asyncio.Event().wait()  # until the test kills this process

    runner.register(kind, hang_after_writing)
    runner.start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
