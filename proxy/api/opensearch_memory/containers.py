"""Container routes: ``_create``, get / update / delete by id, ``_search``."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.api.opensearch_memory.common import json_response, object_body, read_json, services
from proxy.api.opensearch_memory.configuration import parse_configuration
from proxy.api.opensearch_memory.lenient import (
    as_bool,
    as_object,
    as_str,
    as_str_list,
    optional,
    token_error,
    token_name,
)
from proxy.app_keys import IDENTITY, PRINCIPAL
from proxy.core import containers as core
from proxy.core.identity import visible_container_ids
from proxy.core.index_families import FamilyClaim
from proxy.errors import BadRequest, NotFound

__all__ = ["create", "delete", "get", "search", "update"]

# GET re-serialises through ml-commons' container model: memproxy's own ``goodmem`` object stays inside.
_GET_KEYS = (
    "name",
    "description",
    "owner",
    "tenant_id",
    "created_time",
    "last_updated_time",
    "configuration",
    "backend_roles",
)


async def create(request: web.Request) -> web.Response:
    body = await object_body(request, "Request body is required")
    raw_configuration = optional(body, "configuration", as_object)
    backend_roles = optional(body, "backend_roles", as_str_list)
    if body.get("name") is None:
        raise BadRequest("name is null")
    configuration = parse_configuration(raw_configuration or {})
    # ml-commons 3.9: the caller may choose the id (its rules are checked in core, as for a GoodMem spaceId).
    chosen_id = optional(body, "memory_container_id", as_str)
    who = request.get(PRINCIPAL)
    container = await core.create_container(
        services(request),
        name=as_str(body["name"]),
        description=optional(body, "description", as_str),
        configuration=configuration,
        backend_roles=backend_roles,
        container_id=chosen_id,
        owner=who.owner_record() if who is not None else None,
        claim=FamilyClaim(request.app[IDENTITY], who) if who is not None else None,
    )
    return json_response({"memory_container_id": container.id, "status": "created"})


async def get(request: web.Request) -> web.Response:
    container_id = request.match_info["memory_container_id"]
    try:
        container = await core.get_container(services(request), container_id)
    except core.ContainerNotFound as exc:
        if exc.index_missing:
            raise NotFound("Failed to find memory container index") from None
        raise NotFound(
            f"Failed to find memory container with the provided memory container id: {container_id}"
        ) from None
    source = container.source()
    return json_response({k: source[k] for k in _GET_KEYS if k in source})


async def update(request: web.Request) -> web.Response:
    body = await object_body(request, "Update memory container request has empty body")
    backend_roles = optional(body, "backend_roles", as_str_list)
    raw_configuration = optional(body, "configuration", as_object)
    configuration = (
        parse_configuration(raw_configuration, is_update=True) if raw_configuration is not None else None
    )
    _, result = await core.update_container(
        services(request),
        request.match_info["memory_container_id"],
        name=optional(body, "name", as_str),
        description=optional(body, "description", as_str),
        backend_roles=backend_roles,
        configuration=configuration,
    )
    return json_response(result)


def _delete_options(request: web.Request, body: dict[str, Any]) -> tuple[bool, list[str]]:
    """URL parameters win; the JSON body is consulted only for what the URL does not say."""
    if "delete_all_memories" in request.query:
        delete_all = as_bool(request.query["delete_all_memories"] or "true")
    else:
        delete_all = bool(optional(body, "delete_all_memories", as_bool))
    if "delete_memories" in request.query:
        types = [t.strip() for t in request.query["delete_memories"].split(",") if t.strip()]
    elif body.get("delete_memories") is not None:
        raw = body["delete_memories"]
        types = [as_str(raw)] if isinstance(raw, str) else as_str_list(raw)
    else:
        types = []
    return delete_all, types


async def delete(request: web.Request) -> web.Response:
    raw = await read_json(request)
    if raw is not None and not isinstance(raw, dict):
        raise token_error("START_OBJECT", raw)
    delete_all, types = _delete_options(request, raw or {})
    for memory_type in types:
        core.parse_memory_type(memory_type)
    result = await core.delete_container(
        services(request),
        request.match_info["memory_container_id"],
        delete_memory_types=types,
        delete_all_memories=delete_all,
    )
    return json_response(result)


async def search(request: web.Request) -> web.Response:
    body = await read_json(request)
    if body is None:
        raise BadRequest("request body or source parameter is required", os_type="parse_exception")
    if not isinstance(body, dict):
        raise BadRequest(
            f"Expected [START_OBJECT] but found [{token_name(body)}]", os_type="parsing_exception"
        )
    who = request.get(PRINCIPAL)
    only_ids = await visible_container_ids(request.app[IDENTITY], who) if who is not None else None
    return json_response(await core.search_containers(services(request), body, only_ids=only_ids))
