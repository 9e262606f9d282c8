"""memproxy's erasure extension of the ml-commons API: every memory of one ``namespace.user_id``, with a
receipt (docs/opensearch-api.md, "Erasure").

``POST …/memory_containers/{id}/_memproxy_erase`` erases within one container (the route table's
``DELETE_MEMORY`` check runs first); ``POST …/memory_containers/_memproxy_erase`` within every container the
caller may delete memories of (what a data-subject request needs: the user's memories wherever they are).
Either answers the receipt, or with ``wait_for_completion=false`` the id of a durable job that erases (the
containers decided at the request) and whose receipt ``GET …/memory_containers/_memproxy_erase/{job_id}``
shows to the caller who asked for it (or an administrator).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.api.opensearch_memory.common import json_response, load_container, read_json, services
from proxy.api.opensearch_memory.lenient import as_bool, token_error
from proxy.app_keys import IDENTITY, JOBS, PRINCIPAL
from proxy.core.container_record import Container
from proxy.core.containers import every_container
from proxy.core.erasure import ERASE_JOB, Receipt, enqueue_namespace_erasure, erase_namespace_user
from proxy.core.identity import can_access_space
from proxy.errors import BadRequest, NotFound

__all__ = ["erase_everywhere", "erase_in_container", "erasure_job", "receipt_json"]

MAX_USER_ID_CHARS = 512


async def _user_id(request: web.Request) -> str:
    raw = await read_json(request)
    if raw is None:
        raise BadRequest("Erase request has empty body")
    if not isinstance(raw, dict):
        raise token_error("START_OBJECT", raw)
    user_id = raw.get("user_id")
    if not isinstance(user_id, str) or not user_id.strip():
        raise BadRequest("user_id is required: the namespace user_id whose memories are erased")
    if len(user_id) > MAX_USER_ID_CHARS:
        raise BadRequest(f"user_id must be at most {MAX_USER_ID_CHARS} characters")
    # Not stripped: the namespace value is matched exactly, as every namespace filter matches it.
    return user_id


def receipt_json(user_id: str, container_ids: list[str], receipt: Receipt) -> dict[str, Any]:
    check = receipt.verification
    return {
        "user_id": user_id,
        "memory_container_ids": sorted(container_ids),
        "erased_at": receipt.erased_at,
        "indices": [
            {"index": index, "deleted": deleted, "ids": ids, "ids_complete": len(ids) == deleted}
            for index, deleted, ids in receipt.indices()
        ],
        "total_deleted": receipt.total,
        "verification": {
            "verified": check.verified,
            "rounds": check.rounds,
            "searched": [{"index": i, "found": n} for i, n in sorted(check.found.items())],
        },
    }


async def _answer(request: web.Request, user_id: str, containers: list[Container]) -> web.Response:
    queue = request.app[JOBS].queue
    if not as_bool(request.query.get("wait_for_completion", "true")):
        who = request.get(PRINCIPAL)
        job = await enqueue_namespace_erasure(queue, containers, user_id, who.user_id if who else None)
        return json_response({"job_id": job.job_id, "state": job.state})
    receipt = await erase_namespace_user(services(request), containers, user_id, queue.docs)
    # A verification that still finds documents (writes that kept coming) is no success to report.
    status = 200 if receipt.verification.verified else 409
    return json_response(receipt_json(user_id, [c.id for c in containers], receipt), status=status)


async def erasure_job(request: web.Request) -> web.Response:
    """``GET …/_memproxy_erase/{job_id}``: the job and, once it ended, its receipt. Another caller's job is
    "not found", as one that does not exist."""
    job_id = request.match_info["job_id"]
    job = await request.app[JOBS].queue.find(job_id)
    who = request.get(PRINCIPAL)
    if (
        job is None
        or job.kind != ERASE_JOB
        or (who is not None and not who.is_admin and job.owner_id != who.user_id)
    ):
        raise NotFound(f"No erasure job {job_id}")
    receipt = None
    if job.result is not None:
        ids = [str(i) for i in job.result.get("memory_container_ids") or ()]
        receipt = receipt_json(str(job.payload.get("user_id")), ids, Receipt.from_json(job.result))
    return json_response(
        {
            "job_id": job.job_id,
            "state": job.state,
            "attempts": job.attempts,
            "created_at": job.created_at,
            "finished_at": job.finished_at,
            "last_error": job.last_error,
            "receipt": receipt,
        }
    )


async def erase_in_container(request: web.Request) -> web.Response:
    user_id = await _user_id(request)
    container = await load_container(request)
    return await _answer(request, user_id, [container])


async def erase_everywhere(request: web.Request) -> web.Response:
    user_id = await _user_id(request)
    who = request.get(PRINCIPAL)
    containers = [
        container
        async for container in every_container(services(request))
        # None: --auth none, where ml-commons without security allows everything.
        if who is None or await can_access_space(request.app[IDENTITY], who, container, "DELETE_MEMORY")
    ]
    return await _answer(request, user_id, containers)
