"""``POST /v1/admin/background-jobs:purge``: an administrator deletes ended background jobs before a cutoff.

GoodMem's terminal job statuses map onto memproxy's job states: SUCCEEDED is COMPLETED and FAILED is FAILED.
memproxy never cancels a job, so CANCELED selects nothing. The purge covers every kind of job (document
processing, ``infer: true`` extraction): the one queue serves both APIs, as the retention of
``--jobs-retention-days`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.goodmem.context import GoodMem
from proxy.core.identity import Principal, require_admin
from proxy.core.jobs import COMPLETED, FAILED, Purged

__all__ = ["JOB_STATUSES", "JobPurge", "purge_jobs"]

# GoodMem's purgeable statuses (canonical names and their short aliases) → memproxy's state, None for none.
JOB_STATUSES: dict[str, str | None] = {
    "BACKGROUND_JOB_SUCCEEDED": COMPLETED,
    "SUCCEEDED": COMPLETED,
    "BACKGROUND_JOB_FAILED": FAILED,
    "FAILED": FAILED,
    "BACKGROUND_JOB_CANCELED": None,
    "CANCELED": None,
}


@dataclass(frozen=True)
class JobPurge:
    """A purge request, validated: jobs that ended before ``older_than_ms`` in ``statuses`` (keys of
    :data:`JOB_STATUSES`; empty: every terminal status), at most ``limit`` (0: no limit)."""

    older_than_ms: int
    statuses: tuple[str, ...] = ()
    dry_run: bool = False
    limit: int = 0


async def purge_jobs(gm: GoodMem, principal: Principal, req: JobPurge) -> Purged:
    require_admin(principal, "purging background jobs")
    if req.statuses:
        states = tuple(dict.fromkeys(s for s in (JOB_STATUSES[name] for name in req.statuses) if s))
    else:
        states = (COMPLETED, FAILED)
    if gm.jobs is None or not states:
        return Purged()
    return await gm.jobs.purge(req.older_than_ms, states=states, limit=req.limit, dry_run=req.dry_run)
