"""Memory routes: add (working), create session, get / update / delete by type, ``_search``,
``_delete_by_query``, and memproxy's long-term write extension."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from proxy.api.opensearch_memory.common import (
    json_response,
    load_container,
    object_body,
    read_json,
    refuse_other_container,
    search_failures,
    services,
)
from proxy.api.opensearch_memory.lenient import (
    as_bool,
    as_int,
    as_object,
    as_str,
    coerce_string_map,
    optional,
    scalar_string_map,
    token_error,
)
from proxy.app_keys import JOBS, PRINCIPAL
from proxy.core import memories as core
from proxy.core.configuration import STRATEGY_TYPES
from proxy.core.container_record import parse_memory_type
from proxy.core.infer.jobs import enqueue_infer, infer_job_id
from proxy.core.jobs import Job
from proxy.core.longterm import LongTermMemory, write_long_term
from proxy.errors import BadRequest, Forbidden, NotFound
from proxy.store.query import RawDsl

__all__ = [
    "add_long_term",
    "add_long_term_bulk",
    "add_memory",
    "create_session",
    "delete_by_query",
    "delete_memory",
    "get_inference",
    "get_memory",
    "render_memory",
    "search_memories",
    "update_memory",
]

_PAYLOAD_TYPES = ("conversational", "data")
MAX_LONG_TERM_BATCH = 10_000
# ml-commons 3.6 leaves the check to the node's request validation (3.8 words it as a status_exception).
DELETE_BY_QUERY_NEEDS_QUERY = "Validation Failed: 1: Query is required;"

# GET re-serialises through ml-commons' typed models: these keys, in this order, nulls and empties omitted.
_GET_KEYS = {
    "sessions": (
        "owner_id",
        "memory_container_id",
        "summary",
        "created_time",
        "last_updated_time",
        "metadata",
        "agents",
        "additional_info",
        "namespace",
        "tenant_id",
        "pinned",
    ),
    "working": (
        "memory_container_id",
        "payload_type",
        "messages",
        "message_id",
        "binary_data",
        "structured_data",
        "structured_data_blob",
        "namespace",
        "namespace_size",
        "infer",
        "metadata",
        "tags",
        "created_time",
        "last_updated_time",
        "owner_id",
        "checkpoint_id",
    ),
    "long-term": (
        "memory",
        "strategy_type",
        "tags",
        "namespace",
        "namespace_size",
        "created_time",
        "last_updated_time",
        "memory_embedding",
        "owner_id",
        "strategy_id",
        "pinned",
    ),
    "history": (
        "owner_id",
        "memory_container_id",
        "memory_id",
        "action",
        "before",
        "after",
        "namespace",
        "namespace_size",
        "tags",
        "created_time",
        "tenant_id",
        "error",
        "pinned",
    ),
}


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise token_error("START_ARRAY", raw)
    out: list[dict[str, Any]] = []
    for item in raw:
        message = as_object(item)
        role, content = message.get("role"), message.get("content")
        if role is None or content is None:
            raise BadRequest("Message must have role and content")
        if not isinstance(content, list):
            raise token_error("START_ARRAY", content)
        # ml-commons reads each content item as a map (and the flat_object mapping refuses anything else).
        out.append({"role": as_str(role), "content": [as_object(item) for item in content]})
    return out


def _owner(request: web.Request) -> str | None:
    """Whom ml-commons records as a written document's ``owner_id`` (the body's own is ignored)."""
    who = request.get(PRINCIPAL)
    return who.user_id if who is not None else None


def _add_memory_request(body: dict[str, Any], owner_id: str | None) -> core.AddMemoryRequest:
    if body.get("pinned") is not None:
        raise BadRequest(core.PINNED_WORKING, os_type="status_exception")
    payload_type = "conversational"
    if body.get("payload_type") is not None:
        payload_type = as_str(body["payload_type"]).lower()
        if payload_type not in _PAYLOAD_TYPES:
            raise BadRequest(
                f"Invalid working memory type: {body['payload_type']}. Must be one of: CONVERSATIONAL, DATA"
            )
    return core.AddMemoryRequest(
        messages=optional(body, "messages", _messages),
        payload_type=payload_type,
        structured_data=optional(body, "structured_data", as_object),
        structured_data_blob=optional(body, "structured_data_blob", as_object),
        binary_data=optional(body, "binary_data", as_str),
        message_id=optional(body, "message_id", as_int),
        checkpoint_id=optional(body, "checkpoint_id", as_str),
        namespace=optional(body, "namespace", coerce_string_map),
        metadata=optional(body, "metadata", coerce_string_map),
        tags=optional(body, "tags", coerce_string_map),
        infer=bool(optional(body, "infer", as_bool)),
        parameters=optional(body, "parameters", as_object),
        owner_id=owner_id,
    )


async def add_memory(request: web.Request) -> web.Response:
    raw = await read_json(request)
    if raw is None:
        # ml-commons 3.6 answers a 500 (an IOException); the caller's mistake is a 400 here, as documented.
        raise BadRequest("Add memory request has empty body")
    if not isinstance(raw, dict):
        raise token_error("START_OBJECT", raw)
    refuse_other_container(request, raw)
    req = _add_memory_request(raw, _owner(request))
    container = await load_container(request)
    added = await core.add_memory(services(request), container, req)
    response = dict(added.response)
    if added.infer is not None:
        queue = request.app[JOBS].queue
        job = await enqueue_infer(queue, added.infer)
        # memproxy's extension for scripts and tests: answer once the extraction has run.
        if _wants_to_wait(request, raw):
            job = await queue.wait(job.job_id, WAIT_FOR_INFERENCE_S)
            response["inference"] = inference_view(job)
    return json_response(response)


WAIT_FOR_INFERENCE_S = 120.0


def _wants_to_wait(request: web.Request, body: Mapping[str, Any]) -> bool:
    flag = request.query.get("wait_for_inference", body.get("wait_for_inference"))
    return flag is True or (isinstance(flag, str) and flag.lower() == "true")


async def get_inference(request: web.Request) -> web.Response:
    """memproxy's extension: the extraction job of one ``infer: true`` add (404 when that add did not
    infer); its state, attempts, stage, last error and result."""
    container = await load_container(request)
    working_memory_id = request.match_info["working_memory_id"]
    job = await request.app[JOBS].queue.find(infer_job_id(working_memory_id))
    if job is None or job.payload.get("container_id") != container.id:
        raise NotFound(f"No inference for working memory {working_memory_id}")
    return json_response({"working_memory_id": working_memory_id, **inference_view(job)})


def inference_view(job: Job) -> dict[str, Any]:
    """A job as memproxy shows an extraction's progress (``wait_for_inference``, the inference route)."""
    view: dict[str, Any] = {"job_id": job.job_id, "state": job.state, "attempts": job.attempts}
    for key in ("stage", "last_error", "failure_stage", "result"):
        if getattr(job, key, None) is not None:
            view[key] = getattr(job, key)
    return view


async def create_session(request: web.Request) -> web.Response:
    body = await object_body(request, "Request body is required")
    refuse_other_container(request, body)
    req = core.CreateSessionRequest(
        session_id=optional(body, "session_id", as_str),
        summary=optional(body, "summary", as_str),
        metadata=optional(body, "metadata", as_object),
        agents=optional(body, "agents", as_object),
        additional_info=optional(body, "additional_info", as_object),
        namespace=optional(body, "namespace", scalar_string_map),
        owner_id=_owner(request),
    )
    container = await load_container(request)
    return json_response(await core.create_session(services(request), container, req))


def render_memory(memory_type: str, source: Mapping[str, Any]) -> dict[str, Any]:
    """A stored document as ml-commons' GET returns it: known keys only, in its order, no id."""
    out: dict[str, Any] = {}
    for key in _GET_KEYS[memory_type]:
        if key == "namespace_size":
            if source.get("namespace"):
                out[key] = len(source["namespace"])
            continue
        value = source.get(key)
        if memory_type == "working" and key in ("payload_type", "infer"):
            out[key] = value if value is not None else ("conversational" if key == "payload_type" else False)
            continue
        if value is None or (isinstance(value, dict | list) and not value):
            continue
        out[key] = value
    return out


def _type_and_id(request: web.Request) -> tuple[str, str]:
    return parse_memory_type(request.match_info["memory_type"]), request.match_info["memory_id"]


async def get_memory(request: web.Request) -> web.Response:
    memory_type, memory_id = _type_and_id(request)
    container = await load_container(request)
    source = await core.get_memory(services(request), container, memory_type, memory_id)
    return json_response(render_memory(memory_type, source))


async def update_memory(request: web.Request) -> web.Response:
    memory_type, memory_id = _type_and_id(request)
    body = await object_body(request, "Update memory request has empty body")
    refuse_other_container(request, body)
    if not body:
        raise BadRequest("Text cannot be null or empty")
    update = core.MemoryUpdate(
        fields={k: v for k, v in body.items() if k in core.UPDATABLE_FIELDS},
        pinned=optional(body, "pinned", as_bool),
    )
    container = await load_container(request)
    return json_response(
        await core.update_memory(services(request), container, memory_type, memory_id, update)
    )


async def delete_memory(request: web.Request) -> web.Response:
    memory_type, memory_id = _type_and_id(request)
    container = await load_container(request)
    return json_response(await core.delete_memory(services(request), container, memory_type, memory_id))


async def search_memories(request: web.Request) -> web.Response:
    memory_type = parse_memory_type(request.match_info["memory_type"])
    body = await object_body(request, "Search memories request has empty body")
    container = await load_container(request)
    with search_failures("Search execution failed"):
        result = await core.search_memories(services(request), container, memory_type, body)
    return json_response(result)


async def delete_by_query(request: web.Request) -> web.Response:
    memory_type = parse_memory_type(request.match_info["memory_type"])
    raw = await read_json(request)
    if raw is not None and not isinstance(raw, dict):
        raise token_error("START_OBJECT", raw)
    query = (raw or {}).get("query")
    if query is None:
        raise BadRequest(DELETE_BY_QUERY_NEEDS_QUERY, os_type="action_request_validation_exception")
    container = await load_container(request)
    result = await core.delete_by_query(services(request), container, memory_type, RawDsl(as_object(query)))
    # ml-commons renders the node's BulkByScrollResponse itself, which names the counters the REST
    # _delete_by_query leaves out (always 0 for a delete).
    return json_response({"updated": 0, "created": 0, **result})


# --- memproxy extension: write long-term memories without an LLM -----------------------------------


def _long_term_memory(raw: Any, owner_id: str | None) -> LongTermMemory:
    body = as_object(raw)
    text = body.get("memory")
    if text is None or not as_str(text).strip():
        raise BadRequest("memory cannot be null or blank")
    strategy_type = as_str(body.get("strategy_type") or "SEMANTIC").upper()
    if strategy_type not in STRATEGY_TYPES:
        raise BadRequest(
            f"Invalid memory type: {body['strategy_type']}. Must be SEMANTIC, USER_PREFERENCE, or SUMMARY"
        )
    return LongTermMemory(
        memory=as_str(text),
        namespace=optional(body, "namespace", coerce_string_map) or {},
        tags=optional(body, "tags", coerce_string_map) or {},
        strategy_type=strategy_type,
        strategy_id=optional(body, "strategy_id", as_str),
        metadata=optional(body, "metadata", as_object),
        owner_id=owner_id,
        pinned=optional(body, "pinned", as_bool),
    )


async def _check_pinning(request: web.Request, memories: list[LongTermMemory]) -> None:
    """A memory written pinned needs retention on, as a pin by update does."""
    if (
        any(m.pinned is not None for m in memories)
        and not (await services(request).retention.current()).enabled
    ):
        raise Forbidden(core.PINNED_DISABLED)


async def add_long_term(request: web.Request) -> web.Response:
    """``POST …/memories/long-term/_memproxy_add``: one memory → ``{"long_term_memory_id", "status"}``."""
    body = await object_body(request, "Add long-term memory request has empty body")
    refuse_other_container(request, body)
    memory = _long_term_memory(body, _owner(request))
    await _check_pinning(request, [memory])
    container = await load_container(request)
    ids = await write_long_term(services(request), container, [memory])
    return json_response({"long_term_memory_id": ids[0], "status": "created"})


async def add_long_term_bulk(request: web.Request) -> web.Response:
    """``POST …/memories/long-term/_memproxy_bulk``: ``{"memories": [...]}``, all or nothing."""
    body = await object_body(request, "Add long-term memory request has empty body")
    raw = body.get("memories")
    if not isinstance(raw, list):
        raise token_error("START_ARRAY", raw)
    if not raw or len(raw) > MAX_LONG_TERM_BATCH:
        raise BadRequest(f"memories must hold between 1 and {MAX_LONG_TERM_BATCH} memories")
    for item in (body, *raw):
        refuse_other_container(request, item)
    memories = [_long_term_memory(item, _owner(request)) for item in raw]
    await _check_pinning(request, memories)
    container = await load_container(request)
    ids = await write_long_term(services(request), container, memories)
    return json_response({"long_term_memory_ids": ids, "status": "created"})
