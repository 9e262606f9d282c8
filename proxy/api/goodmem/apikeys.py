"""``/v1/apikeys``: create (201, raw key shown once), list, get, update, delete (204); the request bodies as
wire models (camelCase, GoodMem's messages), read into ``proxy.core.goodmem.apikeys``' typed requests."""

from __future__ import annotations

from typing import Annotated, Any

from aiohttp import web
from pydantic import BeforeValidator, ValidationInfo, field_validator

from proxy.api.goodmem.coerce import json_int
from proxy.api.goodmem.render import api_key_json
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.wire import (
    Query,
    WireModel,
    json_body,
    label_change,
    labels_field,
    page_reply,
    raw_field,
    reply,
    uuid_or_none,
    wire_field,
)
from proxy.core.goodmem import apikeys as core
from proxy.core.goodmem.apikeys import ApiKeyUpdate, NewApiKey
from proxy.core.goodmem.ids import now_ms
from proxy.errors import BadRequest

__all__ = ["routes"]

routes = web.RouteTableDef()


def _epoch_ms(field: str) -> BeforeValidator:
    return BeforeValidator(
        lambda v: json_int(v, field, message=f"{field} must be an integer (milliseconds since the epoch)")
    )


class NewApiKeyBody(WireModel):
    labels: Annotated[dict[str, str], labels_field()] = wire_field("labels")
    expires_at: Annotated[int | None, _epoch_ms("expiresAt")] = wire_field("expiresAt")
    valid_from: Annotated[int | None, _epoch_ms("validFrom")] = wire_field("validFrom")
    authority_mode: Any = raw_field("authorityMode")
    ceiling: Any = wire_field("ceiling")  # checked even when absent: it also checks authorityMode
    subject_id: Annotated[str | None, uuid_or_none("subjectPrincipalId")] = wire_field("subjectPrincipalId")
    api_key_id: Annotated[str | None, uuid_or_none("apiKeyId")] = wire_field("apiKeyId")

    @field_validator("valid_from")
    @classmethod
    def _window(cls, valid_from: int | None, info: ValidationInfo) -> int | None:
        expires_at = info.data.get("expires_at")
        if expires_at is not None and expires_at <= now_ms():
            raise BadRequest("expiresAt must be in the future")
        if expires_at is not None and valid_from is not None and valid_from >= expires_at:
            raise BadRequest("validFrom must be before expiresAt")
        return valid_from

    @field_validator("ceiling")
    @classmethod
    def _inherit_only(cls, ceiling: Any, info: ValidationInfo) -> Any:
        if (
            info.data.get("authority_mode") not in (None, "INHERIT_SUBJECT", "AUTHORITY_MODE_UNSPECIFIED")
            or ceiling
        ):
            raise BadRequest("Only INHERIT_SUBJECT API keys are supported (no scoped ceilings)")
        return ceiling

    def to_core(self) -> NewApiKey:
        return NewApiKey(
            labels=self.labels,
            expires_at=self.expires_at,
            valid_from=self.valid_from,
            subject_id=self.subject_id,
            api_key_id=self.api_key_id,
        )


def _key_status(value: Any) -> Any:
    if value not in (None, "ACTIVE", "INACTIVE", "STATUS_UNSPECIFIED"):
        raise BadRequest("status must be ACTIVE or INACTIVE")
    return value


class ApiKeyUpdateBody(WireModel):
    status: Annotated[str | None, BeforeValidator(_key_status)] = wire_field("status")
    replace_labels: Any = raw_field("replaceLabels")
    merge_labels: Any = raw_field("mergeLabels")

    def to_core(self) -> ApiKeyUpdate:
        return ApiKeyUpdate(status=self.status, labels=label_change(self.replace_labels, self.merge_labels))


@routes.post("/v1/apikeys")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    req = NewApiKeyBody.parse(await json_body(request, required=False)).to_core()
    issued = await core.create_api_key(goodmem(request), who, req)
    return reply({"apiKeyMetadata": api_key_json(issued.key), "rawApiKey": issued.raw_key}, status=201)


@routes.get("/v1/apikeys")
async def list_keys(request: web.Request) -> web.Response:
    who = await principal(request)
    q = Query(request)
    page = await core.list_api_keys(
        goodmem(request),
        who,
        subject_id=q.text("subjectPrincipalId"),
        owner_id=q.text("ownerPrincipalId"),
        lifecycle_state=q.text("lifecycleState"),
        max_results=q.integer("maxResults"),
        next_token=q.text("nextToken"),
    )
    return page_reply("keys", [api_key_json(k) for k in page.items], page)


@routes.get("/v1/apikeys/{id}")
async def get(request: web.Request) -> web.Response:
    who = await principal(request)
    return reply(api_key_json(await core.get_api_key(goodmem(request), who, request.match_info["id"])))


@routes.put("/v1/apikeys/{id}")
async def update(request: web.Request) -> web.Response:
    who = await principal(request)
    req = ApiKeyUpdateBody.parse(await json_body(request)).to_core()
    return reply(
        api_key_json(await core.update_api_key(goodmem(request), who, request.match_info["id"], req))
    )


@routes.delete("/v1/apikeys/{id}")
async def delete(request: web.Request) -> web.Response:
    who = await principal(request)
    await core.delete_api_key(goodmem(request), who, request.match_info["id"])
    return web.Response(status=204)
