"""``/v1/embedders``: the local embedding models (list, get, update descriptive fields); create → 501. The
request bodies are read here into ``proxy.core.goodmem.embedders``' typed requests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from aiohttp import web
from pydantic import BeforeValidator, ValidationInfo, field_validator

from proxy.api.goodmem.coerce import json_int
from proxy.api.goodmem.render import embedder_json
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.wire import (
    ABSENT,
    Query,
    WireModel,
    json_body,
    label_change,
    raw_field,
    reply,
    wire_field,
)
from proxy.core.goodmem import embedders as core
from proxy.core.goodmem.embedders import EmbedderUpdate, NewEmbedder
from proxy.errors import BadRequest, Conflict

__all__ = ["routes"]

routes = web.RouteTableDef()


def _required_text(field: str) -> BeforeValidator:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise BadRequest(f"{field} is required")
        return value

    return BeforeValidator(check)


def _dimensionality(value: Any) -> int:
    message = "dimensionality is required and must be a positive integer"
    dims = json_int(value, "dimensionality", message=message, whole_floats=False)
    if dims is None or dims <= 0:
        raise BadRequest(message)
    return dims


def _distribution(value: Any) -> str:
    if value is ABSENT:
        value = "DENSE"
    if value not in ("DENSE", "SPARSE"):
        raise BadRequest("distributionType must be DENSE or SPARSE")
    return str(value)


class NewEmbedderBody(WireModel):
    """Validated as GoodMem would before registering (memproxy never registers: 409 or 501). An id that
    names a local model is refused first (the ``taken`` test in the validation context)."""

    embedder_id: str | None = wire_field("embedderId")
    display_name: Annotated[str, _required_text("displayName")] = wire_field("displayName")
    provider_type: Annotated[str, _required_text("providerType")] = wire_field("providerType")
    endpoint_url: Annotated[str, _required_text("endpointUrl")] = wire_field("endpointUrl")
    model_identifier: Annotated[str, _required_text("modelIdentifier")] = wire_field("modelIdentifier")
    dimensionality: Annotated[int, BeforeValidator(_dimensionality)] = wire_field("dimensionality")
    distribution_type: Annotated[str, BeforeValidator(_distribution)] = wire_field("distributionType", ABSENT)

    @field_validator("embedder_id", mode="before")
    @classmethod
    def _not_taken(cls, value: Any, info: ValidationInfo) -> str | None:
        if not isinstance(value, str):
            return None
        if (info.context or {})["taken"](value):
            raise Conflict("An embedder with this ID already exists")
        return value

    def to_core(self) -> NewEmbedder:
        return NewEmbedder(embedder_id=self.embedder_id)


def _editable(field: str) -> BeforeValidator:
    def check(value: Any) -> str | None:
        if value is not None and (
            not isinstance(value, str) or (field == "displayName" and not 1 <= len(value) <= 255)
        ):
            raise BadRequest(
                f"{field} must be a string" + (" of 1..255 characters" if field == "displayName" else "")
            )
        return value

    return BeforeValidator(check)


_IDENTITY = (
    "endpointUrl",
    "apiPath",
    "modelIdentifier",
    "dimensionality",
    "distributionType",
    "maxSequenceLength",
)


class EmbedderUpdateBody(WireModel):
    provider_type: Any = raw_field("providerType")
    credentials: Any = raw_field("credentials")
    display_name: Annotated[str | None, _editable("displayName")] = wire_field("displayName")
    description: Annotated[str | None, _editable("description")] = wire_field("description")
    version: Annotated[str | None, _editable("version")] = wire_field("version")
    monitoring_endpoint: Annotated[str | None, _editable("monitoringEndpoint")] = wire_field(
        "monitoringEndpoint"
    )
    replace_labels: Any = raw_field("replaceLabels")
    merge_labels: Any = raw_field("mergeLabels")

    @classmethod
    def read(cls, body: Mapping[str, Any]) -> EmbedderUpdate:
        """The update, with the identity fields sent (compared with the model's by the service)."""
        wire = cls.parse(body)
        return EmbedderUpdate(
            provider_type=wire.provider_type,
            identity={name: body[name] for name in _IDENTITY if body.get(name) is not None},
            credentials=wire.credentials is not None,
            display_name=wire.display_name,
            description=wire.description,
            version=wire.version,
            monitoring_endpoint=wire.monitoring_endpoint,
            labels=label_change(wire.replace_labels, wire.merge_labels),
        )


@routes.get("/v1/embedders")
async def list_embedders(request: web.Request) -> web.Response:
    await principal(request)
    q = Query(request)
    found = await core.list_embedders(
        goodmem(request), provider_type=q.text("providerType"), owner_id=q.text("ownerId"), labels=q.labels()
    )
    return reply({"embedders": [embedder_json(e) for e in found]})


@routes.post("/v1/embedders")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    gm = goodmem(request)
    body = await json_body(request)
    req = NewEmbedderBody.parse(body, context={"taken": lambda eid: core.find_embedder(gm, eid) is not None})
    return reply(embedder_json(await core.create_embedder(gm, who, req.to_core())), status=201)


@routes.get("/v1/embedders/{id}")
async def get(request: web.Request) -> web.Response:
    await principal(request)
    return reply(embedder_json(await core.get_embedder(goodmem(request), request.match_info["id"])))


@routes.put("/v1/embedders/{id}")
async def update(request: web.Request) -> web.Response:
    who = await principal(request)
    req = EmbedderUpdateBody.read(await json_body(request))
    return reply(
        embedder_json(await core.update_embedder(goodmem(request), who, request.match_info["id"], req))
    )


@routes.delete("/v1/embedders/{id}")
async def delete(request: web.Request) -> web.Response:
    who = await principal(request)
    await core.delete_embedder(goodmem(request), who, request.match_info["id"])
    return web.Response(status=204)
