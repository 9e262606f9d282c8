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
The jobs themselves are :mod:`proxy.core.embedding_switch_jobs`.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.container_indices import create_memory_indices, embedder_dimension, prepare_long_term
from proxy.core.container_record import LONG_TERM_INDEX_KEY, SWITCH_KEY, Container
from proxy.core.containers import get_container
from proxy.core.jobs import Job, JobQueue
from proxy.core.longterm_mirror import COPYING, drop_target
from proxy.core.services import Services
from proxy.errors import BadRequest, Conflict, NotFound
from proxy.store import memories as docs
from proxy.store.containers import CONTAINER_INDEX

__all__ = [
    "BATCH",
    "DEFAULT_GRACE_S",
    "KIND",
    "SwitchRequest",
    "cancel_switch",
    "start_switch",
    "subject",
    "switch_progress",
    "switched_view",
    "target_index",
    "without_switch",
    "write_record",
]

KIND = "embedding-switch"
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


def switched_view(container: Container, switch: Mapping[str, Any]) -> Container:
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


async def write_record(svc: Services, container: Container) -> Container:
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


def without_switch(container: Container) -> Container:
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
    target_view = switched_view(container, switch)
    await prepare_long_term(svc, target_view)  # an existing index of that name must be for that model
    await create_memory_indices(svc, target_view, ("long-term",))
    try:
        recorded = await write_record(svc, replace(container, extra={**container.extra, SWITCH_KEY: switch}))
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
        await asyncio.shield(write_record(svc, without_switch(recorded)))
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
            await write_record(svc, without_switch(container))
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
