"""``/v1/embedders``: create (201), list, get, update, delete (204) — memproxy's local models and the
provider embedders clients register. The request bodies are read here (with the fields every model resource
shares, ``proxy.api.goodmem.models``) into ``proxy.core.goodmem.providers``' typed requests."""

from __future__ import annotations

from typing import Annotated, Any

from aiohttp import web
from pydantic import BeforeValidator

from proxy.api.goodmem.coerce import json_int
from proxy.api.goodmem.models import ModelUpdateBody, NewModelBody, model_query, positive_int
from proxy.api.goodmem.render import model_json
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.wire import ABSENT, Query, json_body, reply, uuid_or_none, wire_field
from proxy.core.goodmem import embedders as core
from proxy.core.goodmem.providers import EMBEDDER, NewModel, check_credentials_read
from proxy.errors import BadRequest

__all__ = ["routes"]

routes = web.RouteTableDef()


def _dimensionality(value: Any) -> int:
    message = "dimensionality is required and must be a positive integer"
    dims = json_int(value, "dimensionality", message=message, whole_floats=False)
    if dims is None or dims <= 0:
        raise BadRequest(message)
    return dims


def _distribution(value: Any) -> str | None:
    if value is ABSENT or value is None:
        return None
    if value not in ("DENSE", "SPARSE"):
        raise BadRequest("distributionType must be DENSE or SPARSE")
    return str(value)


class NewEmbedderBody(NewModelBody):
    """``EmbedderCreationRequest``; ``distributionType`` defaults to DENSE (as both SDKs send it)."""

    embedder_id: Annotated[str | None, uuid_or_none("embedderId")] = wire_field("embedderId")
    dimensionality: Annotated[int, BeforeValidator(_dimensionality)] = wire_field("dimensionality")
    distribution_type: Annotated[str | None, BeforeValidator(_distribution)] = wire_field(
        "distributionType", ABSENT
    )
    max_sequence_length: Annotated[int | None, positive_int("maxSequenceLength")] = wire_field(
        "maxSequenceLength"
    )

    def to_core(self) -> NewModel:
        return self.new_model(
            self.embedder_id,
            {
                "dimensionality": self.dimensionality,
                "distributionType": self.distribution_type or "DENSE",
                "maxSequenceLength": self.max_sequence_length,
            },
        )


class EmbedderUpdateBody(ModelUpdateBody):
    """``UpdateEmbedderRequest``: ``supportedModalities`` is creation-time only (ignored here)."""

    dimensionality: Annotated[int | None, positive_int("dimensionality")] = wire_field("dimensionality")
    distribution_type: Annotated[str | None, BeforeValidator(_distribution)] = wire_field("distributionType")
    max_sequence_length: Annotated[int | None, positive_int("maxSequenceLength")] = wire_field(
        "maxSequenceLength"
    )

    def own_changes(self) -> dict[str, Any]:
        return {
            "dimensionality": self.dimensionality,
            "distributionType": self.distribution_type,
            "maxSequenceLength": self.max_sequence_length,
            "supportedModalities": None,
        }


@routes.get("/v1/embedders")
async def list_embedders(request: web.Request) -> web.Response:
    who = await principal(request)
    found = await core.list_embedders(goodmem(request), who, model_query(request))
    return reply({"embedders": [model_json(e) for e in found]})


@routes.post("/v1/embedders")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    req = NewEmbedderBody.parse(await json_body(request)).to_core()
    return reply(model_json(await core.create_embedder(goodmem(request), who, req)), status=201)


@routes.get("/v1/embedders/{id}")
async def get(request: web.Request) -> web.Response:
    who = await principal(request)
    found = await core.get_embedder(goodmem(request), who, request.match_info["id"])
    if Query(request).flag("includeCredentials"):
        check_credentials_read(EMBEDDER)
    return reply(model_json(found))


@routes.put("/v1/embedders/{id}")
async def update(request: web.Request) -> web.Response:
    who, gm = await principal(request), goodmem(request)
    current = await core.get_embedder(gm, who, request.match_info["id"])
    req = EmbedderUpdateBody.parse(await json_body(request)).to_core()
    return reply(model_json(await core.update_embedder(gm, who, current, req)))


@routes.delete("/v1/embedders/{id}")
async def delete(request: web.Request) -> web.Response:
    who = await principal(request)
    await core.delete_embedder(goodmem(request), who, request.match_info["id"])
    return web.Response(status=204)
