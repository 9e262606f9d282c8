"""memproxy's extension: switching a container's embedding model without downtime
(``…/memory_containers/{id}/_memproxy_switch_embedding``: POST starts, GET shows progress, DELETE cancels;
docs/opensearch-api.md). The work is proxy.core.embedding_switch's durable job."""

from __future__ import annotations

from aiohttp import web

from proxy.api.opensearch_memory.common import json_response, object_body, services
from proxy.api.opensearch_memory.lenient import as_float, as_int, as_str, optional
from proxy.app_keys import JOBS, PRINCIPAL
from proxy.core import embedding_switch as core
from proxy.errors import BadRequest

__all__ = ["cancel", "parse_request", "progress", "start"]

_KEYS = ("embedding_model_id", "embedding_dimension", "grace_period_s")
# Memories per batch: small enough for one embed call and one _bulk, at least a few per checkpoint.
_BATCH = (1, 2000)


def parse_request(body: dict[str, object]) -> core.SwitchRequest:
    unknown = sorted(set(body) - {*_KEYS, "batch_size"})
    if unknown:
        raise BadRequest(f"unknown field(s) {', '.join(unknown)}: expected {', '.join(_KEYS)}")
    model = optional(body, "embedding_model_id", as_str)
    if not model or not model.strip():
        raise BadRequest("embedding_model_id is required")
    grace = optional(body, "grace_period_s", as_float)
    if grace is not None and not 0 <= grace <= 30 * 86_400:
        raise BadRequest("grace_period_s must be between 0 and 2592000 (30 days)")
    batch = optional(body, "batch_size", as_int)
    if batch is not None and not _BATCH[0] <= batch <= _BATCH[1]:
        raise BadRequest(f"batch_size must be between {_BATCH[0]} and {_BATCH[1]}")
    return core.SwitchRequest(
        embedding_model_id=model.strip(),
        embedding_dimension=optional(body, "embedding_dimension", as_int),
        grace_period_s=core.DEFAULT_GRACE_S if grace is None else grace,
        batch=batch or core.BATCH,
    )


async def start(request: web.Request) -> web.Response:
    """``POST``: ``{"embedding_model_id", "embedding_dimension"?, "grace_period_s"?}`` →
    ``{"task_id", "status": "CREATED"}``, as ml-commons answers its own asynchronous tasks."""
    req = parse_request(await object_body(request, "Switch embedding request has empty body"))
    who = request.get(PRINCIPAL)
    job = await core.start_switch(
        services(request),
        request.app[JOBS].queue,
        request.match_info["memory_container_id"],
        req,
        owner_id=who.user_id if who is not None else None,
    )
    return json_response({"task_id": job.job_id, "status": "CREATED"})


async def progress(request: web.Request) -> web.Response:
    container_id = request.match_info["memory_container_id"]
    return json_response(await core.switch_progress(services(request), request.app[JOBS].queue, container_id))


async def cancel(request: web.Request) -> web.Response:
    container_id = request.match_info["memory_container_id"]
    return json_response(await core.cancel_switch(services(request), request.app[JOBS].queue, container_id))
