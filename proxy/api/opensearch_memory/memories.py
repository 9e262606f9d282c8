"""Memory routes: add (working), create session, get / update / delete by type, ``_search``,
``_delete_by_query``, and memproxy's long-term write extension."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.api.opensearch_memory.common import (
    json_response,
    load_container,
    object_body,
    read_json,
    search_failures,
    services,
)
from proxy.core import memories as core
from proxy.core.containers import parse_memory_type
from proxy.core.lenient import (
    as_bool,
    as_int,
    as_object,
    as_str,
    coerce_string_map,
    scalar_string_map,
    token_error,
)
from proxy.core.longterm import LongTermMemory, write_long_term
from proxy.errors import BadRequest, Forbidden

__all__ = [
    "add_long_term",
    "add_long_term_bulk",
    "add_memory",
    "create_session",
    "delete_by_query",
    "delete_memory",
    "get_memory",
    "search_memories",
    "update_memory",
]

_PAYLOAD_TYPES = ("conversational", "data")
STRATEGY_TYPES = ("SEMANTIC", "USER_PREFERENCE", "SUMMARY")
MAX_LONG_TERM_BATCH = 10_000


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


def _optional(body: dict[str, Any], key: str, parse: Any) -> Any:
    return parse(body[key]) if body.get(key) is not None else None


def _add_memory_request(body: dict[str, Any]) -> core.AddMemoryRequest:
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
        messages=_optional(body, "messages", _messages),
        payload_type=payload_type,
        structured_data=_optional(body, "structured_data", as_object),
        structured_data_blob=_optional(body, "structured_data_blob", as_object),
        binary_data=_optional(body, "binary_data", as_str),
        message_id=_optional(body, "message_id", as_int),
        checkpoint_id=_optional(body, "checkpoint_id", as_str),
        namespace=_optional(body, "namespace", coerce_string_map),
        metadata=_optional(body, "metadata", coerce_string_map),
        tags=_optional(body, "tags", coerce_string_map),
        infer=bool(_optional(body, "infer", as_bool)),
        parameters=_optional(body, "parameters", as_object),
    )


async def add_memory(request: web.Request) -> web.Response:
    raw = await read_json(request)
    if raw is None:
        # ml-commons 3.6 answers a 500 (an IOException); the caller's mistake is a 400 here, as documented.
        raise BadRequest("Add memory request has empty body")
    if not isinstance(raw, dict):
        raise token_error("START_OBJECT", raw)
    req = _add_memory_request(raw)
    # ml-commons lets a body memory_container_id override the path.
    container_id = _optional(raw, "memory_container_id", as_str)
    container = await load_container(request, container_id)
    return json_response(await core.add_memory(services(request), container, req))


async def create_session(request: web.Request) -> web.Response:
    body = await object_body(request, "Request body is required")
    req = core.CreateSessionRequest(
        session_id=_optional(body, "session_id", as_str),
        summary=_optional(body, "summary", as_str),
        metadata=_optional(body, "metadata", as_object),
        agents=_optional(body, "agents", as_object),
        additional_info=_optional(body, "additional_info", as_object),
        namespace=_optional(body, "namespace", scalar_string_map),
    )
    container = await load_container(request)
    return json_response(await core.create_session(services(request), container, req))


def _type_and_id(request: web.Request) -> tuple[str, str]:
    return parse_memory_type(request.match_info["memory_type"]), request.match_info["memory_id"]


async def get_memory(request: web.Request) -> web.Response:
    memory_type, memory_id = _type_and_id(request)
    container = await load_container(request)
    return json_response(await core.get_memory(services(request), container, memory_type, memory_id))


async def update_memory(request: web.Request) -> web.Response:
    memory_type, memory_id = _type_and_id(request)
    body = await object_body(request, "Update memory request has empty body")
    if not body:
        raise BadRequest("Text cannot be null or empty")
    container = await load_container(request)
    return json_response(await core.update_memory(services(request), container, memory_type, memory_id, body))


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
        raise BadRequest(core.DELETE_BY_QUERY_NEEDS_QUERY, os_type="action_request_validation_exception")
    container = await load_container(request)
    result = await core.delete_by_query(services(request), container, memory_type, as_object(query))
    # ml-commons renders the node's BulkByScrollResponse itself, which names the counters the REST
    # _delete_by_query leaves out (always 0 for a delete).
    return json_response({"updated": 0, "created": 0, **result})


# --- memproxy extension: write long-term memories without an LLM -----------------------------------


def _long_term_memory(raw: Any) -> LongTermMemory:
    body = as_object(raw)
    text = body.get("memory")
    if text is None or not as_str(text).strip():
        raise BadRequest("memory cannot be null or blank")
    strategy_type = as_str(body.get("strategy_type") or "SEMANTIC").upper()
    if strategy_type not in STRATEGY_TYPES:
        raise BadRequest(
            f"Invalid memory type: {body['strategy_type']}. Must be SEMANTIC, USER_PREFERENCE, or SUMMARY"
        )
    if body.get("pinned") is not None:
        raise Forbidden(core.PINNED_DISABLED)
    return LongTermMemory(
        memory=as_str(text),
        namespace=_optional(body, "namespace", coerce_string_map) or {},
        tags=_optional(body, "tags", coerce_string_map) or {},
        strategy_type=strategy_type,
        strategy_id=_optional(body, "strategy_id", as_str),
        metadata=_optional(body, "metadata", as_object),
    )


async def add_long_term(request: web.Request) -> web.Response:
    """``POST …/memories/long-term/_memproxy_add``: one memory → ``{"long_term_memory_id", "status"}``."""
    body = await object_body(request, "Add long-term memory request has empty body")
    memory = _long_term_memory(body)
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
    memories = [_long_term_memory(item) for item in raw]
    container = await load_container(request)
    ids = await write_long_term(services(request), container, memories)
    return json_response({"long_term_memory_ids": ids, "status": "created"})
