"""``/v1/spaces``: create (201), list, get, update, delete (204). A space is a memory container; the request
bodies and the list query are read here into ``proxy.core.goodmem.spaces``' typed requests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from aiohttp import web
from pydantic import BeforeValidator

from proxy.api.goodmem.coerce import json_bool, json_number
from proxy.api.goodmem.render import space_json
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.wire import (
    ABSENT,
    Query,
    WireModel,
    json_body,
    label_change,
    labels_field,
    page_reply,
    raw_field,
    reply,
    sort_descending,
    uuid_or_none,
    wire_field,
)
from proxy.app_keys import JOBS
from proxy.core import embedding_switch
from proxy.core.goodmem import spaces as core
from proxy.core.goodmem.chunking import DEFAULT_CHUNKING, ChunkingConfig, parse_chunking
from proxy.core.goodmem.ids import check_uuid
from proxy.core.goodmem.spaces import NewSpace, SpaceEmbedderSpec, SpaceUpdate
from proxy.core.goodmem.validation import check_name
from proxy.errors import BadRequest

__all__ = ["routes"]

routes = web.RouteTableDef()


def _space_embedders(value: Any) -> tuple[SpaceEmbedderSpec, ...]:
    if not isinstance(value, list) or not value:
        raise BadRequest("spaceEmbedders must list at least one embedder")
    out: list[SpaceEmbedderSpec] = []
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise BadRequest(f"spaceEmbedders[{i}] must be an object with embedderId")
        embedder_id = entry.get("embedderId")
        if not isinstance(embedder_id, str) or not embedder_id:
            raise BadRequest("embedderId is required")
        message = f"spaceEmbedders[{i}].defaultRetrievalWeight must be a number >= 0"
        weight = json_number(entry.get("defaultRetrievalWeight", 1.0), "", finite=False, message=message)
        if weight is not None and weight < 0:
            raise BadRequest(message)
        out.append(SpaceEmbedderSpec(embedder_id, 1.0 if weight is None else weight))
    return tuple(out)


def _public_read(value: Any) -> bool:
    if value is ABSENT:
        return False
    if value is None:  # sent as null: not a boolean
        raise BadRequest("publicRead must be a boolean")
    return json_bool(value, "publicRead", False)


class NewSpaceBody(WireModel):
    name: Annotated[str, BeforeValidator(check_name)] = wire_field("name")
    labels: Annotated[dict[str, str], labels_field()] = wire_field("labels")
    embedders: Annotated[tuple[SpaceEmbedderSpec, ...], BeforeValidator(_space_embedders)] = wire_field(
        "spaceEmbedders"
    )
    chunking: Annotated[
        ChunkingConfig,
        BeforeValidator(
            lambda v: parse_chunking(v, field="defaultChunkingConfig") if v is not None else DEFAULT_CHUNKING
        ),
    ] = wire_field("defaultChunkingConfig")
    public_read: Annotated[bool, BeforeValidator(_public_read)] = wire_field("publicRead", ABSENT)
    owner_id: Annotated[str | None, uuid_or_none("ownerId")] = wire_field("ownerId")
    space_id: Annotated[str | None, uuid_or_none("spaceId")] = wire_field("spaceId")

    def to_core(self) -> NewSpace:
        return NewSpace(
            name=self.name,
            embedders=self.embedders,
            labels=self.labels,
            chunking=self.chunking,
            public_read=self.public_read,
            owner_id=self.owner_id,
            space_id=self.space_id,
        )


def _given_embedders(value: Any) -> tuple[object, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadRequest("spaceEmbedders is immutable")
    return tuple(e.get("embedderId") if isinstance(e, Mapping) else e for e in value)


class SpaceUpdateBody(WireModel):
    owner_id: Any = raw_field("ownerId")
    embedder_ids: Annotated[tuple[object, ...] | None, BeforeValidator(_given_embedders)] = wire_field(
        "spaceEmbedders"
    )
    chunking: Annotated[
        ChunkingConfig | None, BeforeValidator(lambda v: parse_chunking(v) if v is not None else None)
    ] = wire_field("defaultChunkingConfig")
    name: Annotated[str | None, BeforeValidator(lambda v: check_name(v) if v is not None else None)] = (
        wire_field("name")
    )
    replace_labels: Any = raw_field("replaceLabels")
    merge_labels: Any = raw_field("mergeLabels")
    public_read: Any = raw_field("publicRead")

    def to_core(self) -> SpaceUpdate:
        labels = label_change(self.replace_labels, self.merge_labels)
        return SpaceUpdate(
            name=self.name,
            labels=labels,
            public_read=json_bool(self.public_read, "publicRead", None),
            owner_id=self.owner_id,
            embedder_ids=self.embedder_ids,
            chunking=self.chunking,
        )


def _space_query(q: Query) -> core.SpaceQuery:
    owner_id, name_filter, labels = q.text("ownerId"), q.text("nameFilter"), q.labels()
    max_results, next_token = q.integer("maxResults"), q.text("nextToken")
    sort_by = q.text("sortBy") or "created_time"
    if sort_by not in core.SORT_KEYS:
        raise BadRequest("sortBy must be one of created_time, updated_time, name")
    return core.SpaceQuery(
        owner_id=owner_id,
        name_filter=name_filter,
        labels=labels,
        sort_by=sort_by,
        descending=sort_descending(q.text("sortOrder")),
        max_results=max_results,
        next_token=next_token,
    )


@routes.post("/v1/spaces")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    req = NewSpaceBody.parse(await json_body(request)).to_core()
    return reply(space_json(await core.create_space(goodmem(request), who, req)), status=201)


@routes.get("/v1/spaces")
async def list_spaces(request: web.Request) -> web.Response:
    who = await principal(request)
    page = await core.list_spaces(goodmem(request), who, _space_query(Query(request)))
    return page_reply("spaces", [space_json(s) for s in page.items], page)


@routes.get("/v1/spaces/{id}")
async def get(request: web.Request) -> web.Response:
    who = await principal(request)
    return reply(space_json(await core.show_space(goodmem(request), who, request.match_info["id"])))


@routes.put("/v1/spaces/{id}")
async def update(request: web.Request) -> web.Response:
    who = await principal(request)
    req = SpaceUpdateBody.parse(await json_body(request)).to_core()
    return reply(space_json(await core.update_space(goodmem(request), who, request.match_info["id"], req)))


def _new_owner(value: Any) -> str:
    if value is None:
        raise BadRequest("newOwnerId is required")
    return check_uuid(value, "newOwnerId")


class TransferBody(WireModel):
    new_owner_id: Annotated[str, BeforeValidator(_new_owner)] = wire_field("newOwnerId")


@routes.post("/v1/spaces/{id}:transferOwnership")
async def transfer(request: web.Request) -> web.Response:
    who = await principal(request)
    body = TransferBody.parse(await json_body(request))
    space = await core.transfer_space(goodmem(request), who, request.match_info["id"], body.new_owner_id)
    return reply({"space": space_json(space)})


@routes.delete("/v1/spaces/{id}")
async def delete(request: web.Request) -> web.Response:
    who = await principal(request)
    await core.delete_space(goodmem(request), who, request.match_info["id"])
    return web.Response(status=204)


# --- memproxy's extension: switching a space's (first) embedder, proxy.core.embedding_switch -------------


def _grace(value: Any) -> float:
    if value is None:
        return embedding_switch.DEFAULT_GRACE_S
    grace = json_number(value, "gracePeriodSeconds")
    if grace is None or not 0 <= grace <= 30 * 86_400:
        raise BadRequest("gracePeriodSeconds must be between 0 and 2592000 (30 days)")
    return grace


def _embedder_id(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest("embedderId is required")
    return value.strip()


class SwitchEmbedderBody(WireModel):
    embedder_id: Annotated[str, BeforeValidator(_embedder_id)] = wire_field("embedderId")
    grace_period_s: Annotated[float, BeforeValidator(_grace)] = wire_field("gracePeriodSeconds")

    def to_core(self) -> embedding_switch.SwitchRequest:
        return embedding_switch.SwitchRequest(self.embedder_id, grace_period_s=self.grace_period_s)


def _switch_json(progress: Mapping[str, Any]) -> dict[str, Any]:
    """The core's progress in GoodMem's camelCase."""
    keys = {
        "task_id": "jobId",
        "state": "state",
        "stage": "stage",
        "switch_state": "switchState",
        "embedding_model_id": "embedderId",
        "copied": "copied",
        "total": "total",
        "eta_s": "etaSeconds",
        "attempts": "attempts",
        "errors": "errors",
        "created_time": "createdAt",
        "last_updated_time": "updatedAt",
        "grace_until": "graceUntil",
        "error": "error",
    }
    return {wire: progress[key] for key, wire in keys.items() if key in progress}


@routes.post("/v1/spaces/{id}:switchEmbedder")
async def switch_embedder(request: web.Request) -> web.Response:
    """Re-embed the space's memories with another embedder without downtime: a durable job."""
    who = await principal(request)
    gm = goodmem(request)
    space = await core.read_space(gm, who, request.match_info["id"], "UPDATE_SPACE")
    req = SwitchEmbedderBody.parse(await json_body(request)).to_core()
    queue = request.app[JOBS].queue
    job = await embedding_switch.start_switch(gm.svc, queue, space.id, req, owner_id=who.user_id)
    return reply({"jobId": job.job_id, "status": "CREATED"})


@routes.get("/v1/spaces/{id}/embedderSwitch")
async def embedder_switch(request: web.Request) -> web.Response:
    who = await principal(request)
    gm = goodmem(request)
    space = await core.read_space(gm, who, request.match_info["id"])
    return reply(
        _switch_json(await embedding_switch.switch_progress(gm.svc, request.app[JOBS].queue, space.id))
    )


@routes.post("/v1/spaces/{id}:cancelEmbedderSwitch")
async def cancel_embedder_switch(request: web.Request) -> web.Response:
    who = await principal(request)
    gm = goodmem(request)
    space = await core.read_space(gm, who, request.match_info["id"], "UPDATE_SPACE")
    cancelled = await embedding_switch.cancel_switch(gm.svc, request.app[JOBS].queue, space.id)
    return reply({"jobId": cancelled["task_id"], "status": cancelled["status"]})
