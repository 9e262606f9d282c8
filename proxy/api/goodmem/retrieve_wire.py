"""The retrieve request on the wire, shared by both forms, and its GET form: the query string the old client
sends. The POST body is :mod:`.retrieve_body`; both are read into the core's :class:`RetrieveRequest`.

Unknown query parameters are tolerated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from multidict import MultiMapping

from proxy.api.goodmem.coerce import json_bool, json_int, json_number, query_bool, query_int
from proxy.core.goodmem.ids import check_id
from proxy.core.goodmem.retrieve.postprocess import check_template
from proxy.core.goodmem.retrieve.request import (
    DEFAULT_REQUESTED_SIZE,
    MAX_MESSAGE_CHARS,
    MAX_REQUESTED_SIZE,
    ChatConfig,
    RetrieveRequest,
    SpaceKey,
    check_space_count,
)
from proxy.errors import BadRequest
from proxy.ids import is_uuid

__all__ = [
    "check_fetch_content",
    "check_message",
    "filter_text",
    "parse_chat_config",
    "parse_get_query",
    "requested_size",
]


def check_message(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise BadRequest("message is required and must be a non-empty string")
    if len(value) > MAX_MESSAGE_CHARS:
        raise BadRequest(f"message must be at most {MAX_MESSAGE_CHARS} characters")
    return value


def requested_size(size: int | None) -> int:
    if size is None or size == 0:
        return DEFAULT_REQUESTED_SIZE
    if size < 0:
        raise BadRequest("requestedSize must not be negative")
    if size > MAX_REQUESTED_SIZE:
        raise BadRequest(f"requestedSize must be at most {MAX_REQUESTED_SIZE}")
    return size


def filter_text(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a string")
    # An empty expression constrains nothing; it is the same as no filter.
    return value if value.strip() else None


def check_fetch_content(fetch_memory: bool, fetch_content: bool) -> bool:
    if fetch_content and not fetch_memory:
        raise BadRequest("fetchMemoryContent requires fetchMemory=true")
    return fetch_content


# --- the ChatPostProcessor's configuration (POST ``postProcessor.config``, GET ``pp_*``) ----------------

_CHAT_KEYS = frozenset(
    {
        "reranker_id",
        "llm_id",
        "relevance_threshold",
        "chronological_resort",
        "llm_temp",
        "max_results",
        "sys_prompt",
        "prompt",
        "gen_token_budget",
    }
)


def _config_uuid(config: Mapping[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is None:
        return None
    if not is_uuid(value):
        raise BadRequest(f"postProcessor.config.{key} must be a UUID, got {value!r}")
    return str(value)


def _config_positive_int(config: Mapping[str, Any], key: str) -> int | None:
    message = f"postProcessor.config.{key} must be a positive integer"
    value = json_int(config.get(key), key, message=message)
    if value is not None and value <= 0:
        raise BadRequest(message)
    return value


def _config_template(config: Mapping[str, Any], key: str) -> str | None:
    """A prompt template: compiled now, so a syntax error is a 400 before streaming."""
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"postProcessor.config.{key} must be a string")
    problem = check_template(value)
    if problem is not None:
        raise BadRequest(f"postProcessor.config.{key} {problem}")
    return value


def parse_chat_config(config: Mapping[str, Any]) -> ChatConfig:
    """Validate the ChatPostProcessor config up front (the live server validates ids before streaming)."""
    unknown = sorted(set(config) - _CHAT_KEYS)
    if unknown:
        raise BadRequest(f"Unrecognized ChatPostProcessor config key: {unknown[0]}")
    resort = config.get("chronological_resort")
    if resort is not None:
        resort = json_bool(resort, "postProcessor.config.chronological_resort", False)
    temp = json_number(config.get("llm_temp"), "postProcessor.config.llm_temp")
    if temp is not None and not 0.0 <= temp <= 2.0:
        raise BadRequest("postProcessor.config.llm_temp must be between 0.0 and 2.0")
    return ChatConfig(
        reranker_id=_config_uuid(config, "reranker_id"),
        llm_id=_config_uuid(config, "llm_id"),
        relevance_threshold=json_number(
            config.get("relevance_threshold"), "postProcessor.config.relevance_threshold"
        ),
        chronological_resort=resort,
        llm_temp=temp,
        max_results=_config_positive_int(config, "max_results"),
        sys_prompt=_config_template(config, "sys_prompt"),
        prompt=_config_template(config, "prompt"),
        gen_token_budget=_config_positive_int(config, "gen_token_budget"),
    )


# --- GET: the query string ------------------------------------------------------------------------------

# GET spelling → ChatPostProcessor config key: ``pp_<key>`` and ``postProcessor<Key>``, both in circulation.
_PP_PARAMS: Mapping[str, str] = {
    name: key
    for key, camel in (
        ("llm_id", "LlmId"),
        ("reranker_id", "RerankerId"),
        ("relevance_threshold", "RelevanceThreshold"),
        ("llm_temp", "LlmTemp"),
        ("max_results", "MaxResults"),
        ("chronological_resort", "ChronologicalResort"),
        ("sys_prompt", "SysPrompt"),
        ("prompt", "Prompt"),
        ("gen_token_budget", "GenTokenBudget"),
    )
    for name in (f"pp_{key}", f"postProcessor{camel}")
}
_PP_FLOATS = {"relevance_threshold", "llm_temp"}
_PP_INTS = {"max_results", "gen_token_budget"}


def _one(query: MultiMapping[str], *names: str) -> str | None:
    values = [v for name in names for v in query.getall(name, [])]
    if len(values) > 1:
        raise BadRequest(f"query parameter {names[0]} must be given once")
    return values[0] if values else None


def _pp_value(key: str, text: str) -> Any:
    if key == "chronological_resort":
        return query_bool(text, f"pp_{key}", False, strict=True)
    if key in _PP_INTS:
        return query_int(text, f"pp_{key}", strict=True)
    if key in _PP_FLOATS:
        try:
            value = float(text)
        except ValueError:
            raise BadRequest(f"pp_{key} must be a number") from None
        if not math.isfinite(value):
            raise BadRequest(f"pp_{key} must be a finite number")
        return value
    return text


def _query_chat(query: MultiMapping[str]) -> ChatConfig | None:
    """Any ``pp_*`` / ``postProcessor*`` parameter selects the ChatPostProcessor (as in the docs' example)."""
    config: dict[str, Any] = {}
    for name, key in _PP_PARAMS.items():
        text = _one(query, name)
        if text is None:
            continue
        if key in config:
            raise BadRequest(f"post-processor parameter {key} given twice")
        config[key] = _pp_value(key, text)
    return parse_chat_config(config) if config else None


def _query_space_ids(query: MultiMapping[str]) -> list[str]:
    """``spaceIds=a,b`` (the old client's form); repeated ``spaceIds=`` and ``space_ids`` also work."""
    raw = [*query.getall("spaceIds", []), *query.getall("space_ids", [])]
    ids = [part.strip() for value in raw for part in value.split(",") if part.strip()]
    if not ids:
        raise BadRequest("spaceIds is required and must list at least one space")
    check_space_count(len(ids), "spaceIds")
    return ids


def parse_get_query(query: MultiMapping[str]) -> RetrieveRequest:
    """The GET form: one ``filter`` applies to every listed space."""
    space_filter = filter_text(_one(query, "filter"), "filter")
    keys = tuple(
        SpaceKey(space_id=check_id(sid, f"spaceIds[{i}]"), filter=space_filter)
        for i, sid in enumerate(_query_space_ids(query))
    )
    fetch_memory = query_bool(_one(query, "fetchMemory", "fetch_memory"), "fetchMemory", True, strict=True)
    fetch_memory_content = check_fetch_content(
        fetch_memory,
        query_bool(
            _one(query, "fetchMemoryContent", "fetch_memory_content"),
            "fetchMemoryContent",
            False,
            strict=True,
        ),
    )
    size = query_int(_one(query, "requestedSize", "requested_size"), "requestedSize", strict=True)
    return RetrieveRequest(
        message=check_message(_one(query, "message")),
        space_keys=keys,
        requested_size=requested_size(size),
        requested_size_set=size is not None and size > 0,
        fetch_memory=fetch_memory,
        fetch_memory_content=fetch_memory_content,
        chat=_query_chat(query),
    )
