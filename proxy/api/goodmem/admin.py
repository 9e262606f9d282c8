"""``POST /v1/admin/background-jobs:purge`` (administrators): ended background jobs older than a cutoff go."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from aiohttp import web
from pydantic import BeforeValidator

from proxy.api.goodmem.coerce import json_bool, json_int
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.wire import WireModel, json_body, raw_field, reply, wire_field
from proxy.core.goodmem.admin import JOB_STATUSES, JobPurge, purge_jobs
from proxy.errors import BadRequest

__all__ = ["routes"]

routes = web.RouteTableDef()


def _cutoff_ms(value: Any) -> int:
    """``olderThan``: an ISO-8601 instant (``2026-01-31T00:00:00Z``, an offset, or none for UTC), in ms."""
    if value is None:
        raise BadRequest("olderThan is required")
    try:
        when = datetime.fromisoformat(value)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return int(when.timestamp() * 1000)
    except (TypeError, ValueError, OverflowError):  # not a string, not a date, or past year 1 or 9999 in UTC
        raise BadRequest(f"olderThan must be an ISO-8601 timestamp, got {value!r}") from None


def _statuses(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest("statuses must be an array of status names")
    unknown = [v for v in value if v not in JOB_STATUSES]
    if unknown:
        raise BadRequest(f"statuses: unknown status {unknown[0]!r}; one of {', '.join(JOB_STATUSES)}")
    return tuple(value)


class PurgeBody(WireModel):
    older_than_ms: Annotated[int, BeforeValidator(_cutoff_ms)] = wire_field("olderThan")
    statuses: Annotated[tuple[str, ...], BeforeValidator(_statuses)] = wire_field("statuses")
    dry_run: Any = raw_field("dryRun")
    limit: Any = raw_field("limit")

    def to_core(self) -> JobPurge:
        limit = json_int(self.limit, "limit") or 0
        if limit < 0:
            raise BadRequest("limit must be >= 0 (0 means no limit)")
        return JobPurge(
            older_than_ms=self.older_than_ms,
            statuses=self.statuses,
            dry_run=json_bool(self.dry_run, "dryRun", False),
            limit=limit,
        )


@routes.post("/v1/admin/background-jobs:purge")
async def purge(request: web.Request) -> web.Response:
    who = await principal(request)
    req = PurgeBody.parse(await json_body(request)).to_core()
    purged = await purge_jobs(goodmem(request), who, req)
    return reply(
        {
            "jobsPurged": purged.jobs,
            "attemptsPurged": purged.attempts,
            "referencesPurged": purged.references,
            "dryRun": req.dry_run,
        }
    )
