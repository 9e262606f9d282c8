"""The GoodMem JSON of every resource memproxy answers with; each carries the fields both client generations
require (Gen A ``goodmem-client``, Gen B ``goodmem``), in camelCase."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy import __version__
from proxy.core.goodmem.apikeys import ApiKey
from proxy.core.goodmem.grants import Grant
from proxy.core.goodmem.ids import NIL_UUID, now_ms
from proxy.core.goodmem.models import CreatedLLM
from proxy.core.goodmem.providers import ProviderModel
from proxy.core.goodmem.records import MemoryRecord
from proxy.core.goodmem.spaces import Space
from proxy.core.goodmem.system import Initialized, Instance
from proxy.core.goodmem.users import User
from proxy.core.jobs import Job

__all__ = [
    "JOB_STATUS",
    "api_key_json",
    "chunk_json",
    "grant_json",
    "init_json",
    "instance_json",
    "llm_created_json",
    "memory_json",
    "model_json",
    "page_image_json",
    "processing_history_json",
    "space_json",
    "system_info",
    "user_json",
]


def system_info() -> dict[str, Any]:
    """SystemInfoResponse: memproxy's version in GoodMem's shape."""
    parts = [int(p) if p.isdigit() else 0 for p in [*__version__.split("+")[0].split("."), "0", "0"][:3]]
    return {
        "version": __version__,
        "major": parts[0],
        "minor": parts[1],
        "patch": parts[2],
        "dirty": False,
        "capabilities": {
            "server": "memproxy",
            "store": "opensearch",
            "embedders": "local and provider",
            "rerankers": "local and provider",
            "llms": "provider",
        },
    }


def init_json(result: Initialized) -> dict[str, Any]:
    if result.root_api_key is None:
        return {"alreadyInitialized": True, "message": "System already initialized"}
    return {
        "alreadyInitialized": False,
        "message": "System initialized successfully",
        "rootApiKey": result.root_api_key,
        "userId": result.user_id,
    }


def instance_json(instance: Instance) -> dict[str, Any]:
    """Gen B GoodMemInstance: the instance id (= its root user's id) and its owner (root)."""
    root, created = instance.root_user_id, instance.created_at
    return {
        "instanceId": root,
        "ownerId": root,
        "createdAt": created,
        "updatedAt": created,
        "createdById": root,
        "updatedById": root,
    }


def user_json(user: User) -> dict[str, Any]:
    """UserResponse; ``displayName`` is always present because Gen A requires it."""
    out: dict[str, Any] = {
        "userId": user.user_id,
        "email": user.email,
        "displayName": user.display_name,
        "labels": dict(user.labels),
        "createdAt": user.created_at,
        "updatedAt": user.updated_at,
        "createdById": user.created_by_id,
        "updatedById": user.updated_by_id,
    }
    if user.username:
        out["username"] = user.username
    if user.deleted_at:
        out["deletedAt"] = user.deleted_at
        out["deletedById"] = user.deleted_by_id
    return out


def api_key_json(key: ApiKey, now: int | None = None) -> dict[str, Any]:
    """ApiKeyResponse: Gen A's ``userId`` and Gen B's principals, authority and lifecycle."""
    state = key.lifecycle(now_ms() if now is None else now)
    out: dict[str, Any] = {
        "apiKeyId": key.api_key_id,
        "userId": key.user_id,
        "subjectPrincipalId": key.user_id,
        "ownerPrincipalId": key.owner_id,
        "authorityMode": "INHERIT_SUBJECT",
        "ceiling": [],
        "ceilingOmitted": False,
        "keyPrefix": key.key_prefix,
        "status": "ACTIVE" if state == "USABLE" else "INACTIVE",
        "lifecycleState": state,
        "labels": dict(key.labels),
        "validFrom": int(key.valid_from or key.created_at),
        "createdAt": key.created_at,
        "updatedAt": key.updated_at,
        "createdById": key.created_by_id,
        "updatedById": key.updated_by_id,
    }
    for name, value in (
        ("expiresAt", key.expires_at),
        ("lastUsedAt", key.last_used_at),
        ("revokedAt", key.revoked_at),
        ("revokedById", key.revoked_by_id),
    ):
        if value is not None:
            out[name] = value
    return out


def grant_json(grant: Grant) -> dict[str, Any]:
    audience: dict[str, Any] = (
        {"allAuthenticated": True} if grant.all_authenticated else {"principalId": grant.principal_id}
    )
    rule: dict[str, Any] = {"operation": grant.operation, "selector": grant.selector}
    if grant.resource_id:
        rule["assignedResource"] = {"kind": grant.resource_kind, "resourceId": grant.resource_id}
    out: dict[str, Any] = {
        "grantId": grant.grant_id,
        "audience": audience,
        "rule": rule,
        "createdAt": grant.created_at,
        "createdById": grant.created_by_id,
    }
    if grant.revoked_at:
        out["revokedAt"] = grant.revoked_at
        out["revokedById"] = grant.revoked_by_id
    return out


def space_json(space: Space) -> dict[str, Any]:
    """The GoodMem Space (union of both generations: ``publicRead`` for Gen A)."""
    return {
        "spaceId": space.space_id,
        "name": space.name,
        "labels": dict(space.labels),
        "spaceEmbedders": [
            {
                "spaceId": e.space_id,
                "embedderId": e.embedder_id,
                "defaultRetrievalWeight": e.default_retrieval_weight,
                "createdAt": e.created_at,
                "updatedAt": e.updated_at,
                "createdById": e.created_by_id,
                "updatedById": e.updated_by_id,
            }
            for e in space.embedders
        ],
        "createdAt": space.created_at,
        "updatedAt": space.updated_at,
        "ownerId": space.owner_id,
        "createdById": space.created_by_id,
        "updatedById": space.updated_by_id,
        "publicRead": space.public_read,
        "defaultChunkingConfig": space.chunking.to_json(),
    }


def model_json(model: ProviderModel) -> dict[str, Any]:
    """EmbedderResponse / RerankerResponse / LLMResponse: the stored response fields, which hold both
    generations' required ones. ``credentials`` is never part of them (nor of any answer)."""
    out = {k: v for k, v in model.view.items() if k != "credentials"}
    out.setdefault("labels", {})
    out.setdefault("supportedModalities", ["TEXT"])
    if model.spec.kind == "llm":
        out.setdefault("capabilities", {})
    return out


def llm_created_json(created: CreatedLLM) -> dict[str, Any]:
    """CreateLLMResponse: ``{llm, statuses}``."""
    return {
        "llm": model_json(created.llm),
        "statuses": [{"code": s.code, "message": s.message} for s in created.statuses],
    }


JOB_STATUS = {
    "PENDING": "BACKGROUND_JOB_PENDING",
    "RUNNING": "BACKGROUND_JOB_RUNNING",
    "COMPLETED": "BACKGROUND_JOB_SUCCEEDED",
    "FAILED": "BACKGROUND_JOB_FAILED",
}
_STAGE_PREFIX = "DOCUMENT_PROCESSING_STAGE_"


def processing_history_json(job: Job, number: int) -> dict[str, Any]:
    """``processingHistory``: the latest job (``BackgroundJobSummary``) and its attempts, oldest first, each
    with a status message listing the stages it went through."""
    latest: dict[str, Any] = {
        "jobId": number,
        "jobType": job.kind,
        "status": JOB_STATUS.get(job.state, "BACKGROUNDJOB_STATUS_UNSPECIFIED"),
        "attempts": job.attempts,
        "maxAttempts": job.max_attempts,
        "runAt": job.not_before,
        "updatedAt": job.updated_at,
    }
    running = job.state == "RUNNING"
    if running:
        latest["leaseUntil"] = job.lease_expires_at
        latest["lockedBy"] = job.lease_owner
    if job.last_error:
        latest["lastError"] = job.last_error
    # GoodMem omits the failure stage once a newer attempt runs or succeeded.
    if job.failure_stage and job.state in ("FAILED", "PENDING"):
        latest["failureStage"] = _STAGE_PREFIX + job.failure_stage
    out: dict[str, Any] = {"latestJob": latest}
    ended = [_attempt_json(number, h) for h in job.history]
    if running:
        ended.append(
            _attempt_json(
                number,
                {"attempt": job.attempts, "worker": job.lease_owner, "started_at": job.started_at},
                job.stages,
            )
        )
    elif not ended and job.attempts:  # a job stored before attempts were kept: its latest one
        ended.append(
            _attempt_json(
                number,
                {
                    "attempt": job.attempts,
                    "worker": job.lease_owner,
                    "started_at": job.started_at,
                    "finished_at": job.finished_at,
                    "ok": job.state == "COMPLETED",
                    "error": job.last_error if job.state != "COMPLETED" else None,
                    "failure_stage": job.failure_stage if job.state != "COMPLETED" else None,
                },
                job.stages,
            )
        )
    if ended:
        out["attempts"] = ended
    return out


def _attempt_json(
    number: int, attempt: Mapping[str, Any], stages: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """One ``BackgroundJobAttempt`` from a job's attempt record (proxy.core.jobs.Job.with_attempt); one
    still running has no ``ok`` and no ``finishedAt``."""
    steps = list(attempt.get("stages") or ()) if stages is None else list(stages)
    failure_stage = attempt.get("failure_stage")
    out: dict[str, Any] = {
        "attemptId": attempt.get("attempt"),
        "jobId": number,
        "startedAt": attempt.get("started_at"),
        "finishedAt": attempt.get("finished_at"),
        "ok": attempt.get("ok"),
        "workerId": attempt.get("worker"),
        "progressCurrent": len(steps),
        "progressUnit": "stages",
        "progressUpdatedAt": steps[-1].get("at") if steps else None,
        "statusMessage": " > ".join(str(s.get("stage")) for s in steps) or None,
        "errorMessage": attempt.get("error"),
        "failureStage": _STAGE_PREFIX + failure_stage if failure_stage else None,
    }
    return {k: v for k, v in out.items() if v is not None}


def memory_json(record: MemoryRecord, include_content: bool, job: Job | None = None) -> dict[str, Any]:
    """The GoodMem Memory object with every field either client generation requires.

    ``originalContent`` (base64) only when ``include_content``; ``processingHistory`` when ``job`` (the
    memory's background job) is given. A memory without page images (text, DOCX, HTML) shows
    ``pageImageStatus`` COMPLETED with a count of 0: a terminal state no client waits on.
    """
    out: dict[str, Any] = {
        "memoryId": record.memory_id,
        "spaceId": record.space_id,
        "contentType": record.content_type,
        "processingStatus": record.processing_status,
        "pageImageStatus": record.page_image_status,
        "pageImageCount": record.page_image_count,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
        "createdById": record.created_by_id,
        "updatedById": record.updated_by_id,
    }
    if record.content_length is not None:
        out["originalContentLength"] = record.content_length
    if record.content_sha256 is not None:
        out["originalContentSha256"] = record.content_sha256
    if record.content_ref is not None:
        out["originalContentRef"] = record.content_ref
    if include_content and record.content_b64 is not None:
        out["originalContent"] = record.content_b64
    out["metadata"] = dict(record.metadata) if record.metadata is not None else {}
    if record.chunking_config is not None:
        out["chunkingConfig"] = record.chunking_config
    if job is not None and record.job_number is not None:
        out["processingHistory"] = processing_history_json(job, record.job_number)
    return out


def page_image_json(source: Mapping[str, Any]) -> dict[str, Any]:
    """``MemoryPageImage``: one stored rendition of one page."""
    return {
        "memoryId": source["memory_id"],
        "pageIndex": int(source["page_index"]),
        "dpi": int(source["dpi"]),
        "contentType": source["content_type"],
        "imageContentLength": source.get("image_content_length"),
        "imageContentSha256": source.get("image_content_sha256"),
        "createdAt": int(source.get("created_time") or 0),
        "updatedAt": int(source.get("last_updated_time") or 0),
        "createdById": source.get("created_by_id") or "",
        "updatedById": source.get("updated_by_id") or "",
    }


def chunk_json(doc_id: str, source: Mapping[str, Any], *, actor_id: str | None = None) -> dict[str, Any]:
    """MemoryChunkResponse for one long-term document (a chunk, or an OpenSearch-API memory as one chunk)."""
    text = str(source.get("memory") or "")
    memory_id = str(source.get("memory_id") or doc_id)
    created = int(source.get("created_time") or 0)
    actor = str(source.get("owner_id") or actor_id or NIL_UUID)
    out: dict[str, Any] = {
        "chunkId": doc_id,
        "memoryId": memory_id,
        "chunkSequenceNumber": int(source.get("chunk_sequence") or 0),
        "chunkText": text,
        "vectorStatus": "COMPLETED",
        "startOffset": int(source["start_offset"]) if source.get("start_offset") is not None else 0,
        "endOffset": int(source["end_offset"]) if source.get("end_offset") is not None else len(text),
        "createdAt": created,
        "updatedAt": int(source.get("last_updated_time") or created),
        "createdById": actor,
        "updatedById": actor,
    }
    if isinstance(source.get("metadata"), Mapping):
        out["metadata"] = dict(source["metadata"])
    return out
