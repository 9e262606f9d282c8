"""``/v1/rerankers`` and ``/v1/llms``: create (201), list, get, update, delete (204); and the request fields
all three model resources share (embedders read theirs in ``proxy.api.goodmem.embedders`` with these).

Bodies are read into ``proxy.core.goodmem.providers``' typed requests. Each field is checked as the clients'
own models say (required fields, enums, ranges); the provider type against the resource is the service's
check, because it also decides which wire format memproxy speaks to the provider. The credentials (an
``EndpointAuthentication``) are read here and never appear in an error message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from aiohttp import web
from pydantic import BeforeValidator

from proxy.api.goodmem.coerce import json_bool, json_int, json_number
from proxy.api.goodmem.render import llm_created_json, model_json
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.wire import (
    Query,
    WireModel,
    json_body,
    label_change,
    labels_field,
    raw_field,
    reply,
    uuid_or_none,
    wire_field,
)
from proxy.core.goodmem import models as core
from proxy.core.goodmem.providers import (
    LLM,
    RERANKER,
    KindSpec,
    ModelQuery,
    ModelUpdate,
    NewModel,
    check_credentials_read,
)
from proxy.core.goodmem.validation import check_name
from proxy.errors import BadRequest

__all__ = [
    "ModelUpdateBody",
    "NewModelBody",
    "model_query",
    "positive_int",
    "read_credentials",
    "routes",
]

routes = web.RouteTableDef()

MODALITIES = ("TEXT", "IMAGE", "AUDIO", "VIDEO")
CREDENTIAL_KINDS = ("CREDENTIAL_KIND_API_KEY", "CREDENTIAL_KIND_GCP_ADC", "CREDENTIAL_KIND_UNSPECIFIED")
# An HTTP header name (RFC 9110 token).
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


# --- fields ----------------------------------------------------------------------------------------------


def required_text(field: str) -> BeforeValidator:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise BadRequest(f"{field} is required")
        return value

    return BeforeValidator(check)


def optional_text(field: str) -> BeforeValidator:
    def check(value: Any) -> str | None:
        if value is not None and not isinstance(value, str):
            raise BadRequest(f"{field} must be a string")
        return value

    return BeforeValidator(check)


def positive_int(field: str) -> BeforeValidator:
    def check(value: Any) -> int | None:
        message = f"{field} must be a positive integer"
        number = json_int(value, field, message=message, whole_floats=False)
        if number is not None and number <= 0:
            raise BadRequest(message)
        return number

    return BeforeValidator(check)


def _display_name(value: Any) -> str:
    return check_name(value, "displayName")


def _modalities(value: Any) -> tuple[str, ...]:
    """``supportedModalities``: TEXT/IMAGE/AUDIO/VIDEO; absent or empty: ``["TEXT"]``."""
    if value is None:
        return ()
    if not isinstance(value, list) or any(m not in MODALITIES for m in value):
        raise BadRequest(f"supportedModalities must be a list of {', '.join(MODALITIES)}")
    return tuple(dict.fromkeys(value))


def read_credentials(value: Any) -> dict[str, Any] | None:
    """An ``EndpointAuthentication``, normalised to ``{"kind", "apiKey": {"inlineSecret", "headerName"?,
    "prefix"?}}``; ``{}`` for an explicit CREDENTIAL_KIND_UNSPECIFIED; None when absent. memproxy calls
    providers with an API key only: a secret reference or GCP credentials are 400."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRequest("credentials must be an object (EndpointAuthentication)")
    api_key, adc = value.get("apiKey"), value.get("gcpAdc")
    kind = value.get("kind")
    if kind is None and api_key is not None:
        kind = "CREDENTIAL_KIND_API_KEY"
    if kind not in CREDENTIAL_KINDS:
        raise BadRequest(f"credentials.kind must be one of {', '.join(CREDENTIAL_KINDS)}")
    if api_key is not None and adc is not None:
        raise BadRequest("credentials: at most one of apiKey or gcpAdc may be set")
    if kind == "CREDENTIAL_KIND_UNSPECIFIED":
        if api_key is not None or adc is not None:
            raise BadRequest("credentials of kind CREDENTIAL_KIND_UNSPECIFIED must not carry a payload")
        return {}
    if kind == "CREDENTIAL_KIND_GCP_ADC":
        raise BadRequest(
            "memproxy does not support GCP application-default credentials (CREDENTIAL_KIND_GCP_ADC); "
            "use CREDENTIAL_KIND_API_KEY"
        )
    if not isinstance(api_key, Mapping):
        raise BadRequest("credentials.apiKey is required when kind is CREDENTIAL_KIND_API_KEY")
    inline, ref = api_key.get("inlineSecret"), api_key.get("secretRef")
    if (inline is None) == (ref is None):
        raise BadRequest("credentials.apiKey: exactly one of inlineSecret or secretRef must be set")
    if ref is not None:
        raise BadRequest(
            "memproxy cannot resolve credentials.apiKey.secretRef (an external secret manager); send the key "
            "as inlineSecret (it is stored encrypted)"
        )
    if not isinstance(inline, str) or not inline.strip() or any(c in inline for c in "\r\n"):
        raise BadRequest("credentials.apiKey.inlineSecret must be a non-empty single-line string")
    out: dict[str, Any] = {"inlineSecret": inline}
    header, prefix = api_key.get("headerName"), api_key.get("prefix")
    if header is not None:
        if not isinstance(header, str) or not _HEADER_NAME.match(header):
            raise BadRequest("credentials.apiKey.headerName must be an HTTP header name")
        out["headerName"] = header
    if prefix is not None:
        if not isinstance(prefix, str) or any(c in prefix for c in "\r\n"):
            raise BadRequest("credentials.apiKey.prefix must be a single-line string")
        out["prefix"] = prefix
    return {"kind": "CREDENTIAL_KIND_API_KEY", "apiKey": out}


def _capabilities(value: Any) -> dict[str, bool] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRequest("capabilities must be an object of booleans")
    names = (
        "supportsChat",
        "supportsCompletion",
        "supportsFunctionCalling",
        "supportsSystemMessages",
        "supportsStreaming",
        "supportsSamplingParameters",
    )
    out: dict[str, bool] = {}
    for name in names:
        flag = json_bool(value.get(name), f"capabilities.{name}", None)
        if flag is not None:
            out[name] = flag
    return out


def _in_range(value: Any, name: str, low: float, high: float) -> float | None:
    message = f"defaultSamplingParams.{name} must be a number in {low:g}..{high:g}"
    number = json_number(value, name, message=message)
    if number is not None and not low <= number <= high:
        raise BadRequest(message)
    return number


def _sampling(value: Any) -> dict[str, Any] | None:
    """``defaultSamplingParams``, with GoodMem's ranges."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRequest("defaultSamplingParams must be an object")
    out: dict[str, Any] = {}
    for name in ("maxTokens", "topK"):
        message = f"defaultSamplingParams.{name} must be a positive integer"
        number = json_int(value.get(name), name, message=message)
        if number is not None and number <= 0:
            raise BadRequest(message)
        if number is not None:
            out[name] = number
    for name, low, high in (
        ("temperature", 0.0, 2.0),
        ("topP", 0.0, 1.0),
        ("frequencyPenalty", -2.0, 2.0),
        ("presencePenalty", -2.0, 2.0),
    ):
        bounded = _in_range(value.get(name), name, low, high)
        if bounded is not None:
            out[name] = bounded
    stops = value.get("stopSequences")
    if stops is not None:
        if (
            not isinstance(stops, list)
            or len(stops) > 10
            or any(not isinstance(s, str) or len(s) > 100 for s in stops)
        ):
            raise BadRequest(
                "defaultSamplingParams.stopSequences must be at most 10 strings of at most 100 characters"
            )
        out["stopSequences"] = list(stops)
    return out


def _client_config(value: Any) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, Mapping):
        raise BadRequest("clientConfig must be an object")
    return dict(value) if value is not None else None


def model_query(request: web.Request) -> ModelQuery:
    q = Query(request)
    return ModelQuery(provider_type=q.text("providerType"), owner_id=q.text("ownerId"), labels=q.labels())


# --- bodies ----------------------------------------------------------------------------------------------


class NewModelBody(WireModel):
    """What every create body has (``EmbedderCreationRequest``, ``RerankerCreationRequest``,
    ``LLMCreationRequest``); subclasses add their id and own fields and say them in ``own_fields``."""

    display_name: Annotated[str, BeforeValidator(_display_name)] = wire_field("displayName")
    description: Annotated[str | None, optional_text("description")] = wire_field("description")
    provider_type: Annotated[str, required_text("providerType")] = wire_field("providerType")
    endpoint_url: Annotated[str, required_text("endpointUrl")] = wire_field("endpointUrl")
    api_path: Annotated[str | None, optional_text("apiPath")] = wire_field("apiPath")
    model_identifier: Annotated[str, required_text("modelIdentifier")] = wire_field("modelIdentifier")
    supported_modalities: Annotated[tuple[str, ...], BeforeValidator(_modalities)] = wire_field(
        "supportedModalities"
    )
    credentials: Annotated[dict[str, Any] | None, BeforeValidator(read_credentials)] = wire_field(
        "credentials"
    )
    labels: Annotated[dict[str, str], labels_field()] = wire_field("labels")
    version: Annotated[str | None, optional_text("version")] = wire_field("version")
    monitoring_endpoint: Annotated[str | None, optional_text("monitoringEndpoint")] = wire_field(
        "monitoringEndpoint"
    )
    owner_id: Annotated[str | None, uuid_or_none("ownerId")] = wire_field("ownerId")
    dialect: Annotated[str | None, optional_text("dashscopeApiDialect")] = wire_field("dashscopeApiDialect")

    def new_model(self, model_id: str | None, fields: Mapping[str, Any]) -> NewModel:
        return NewModel(
            display_name=self.display_name,
            provider_type=self.provider_type,
            endpoint_url=self.endpoint_url,
            model_identifier=self.model_identifier,
            api_path=self.api_path.strip() if self.api_path and self.api_path.strip() else None,
            description=self.description,
            supported_modalities=self.supported_modalities or ("TEXT",),
            credentials=self.credentials or None,
            labels=self.labels,
            version=self.version,
            monitoring_endpoint=self.monitoring_endpoint,
            owner_id=self.owner_id,
            model_id=model_id,
            dialect=self.dialect,
            fields={k: v for k, v in fields.items() if v is not None},
        )


class NewRerankerBody(NewModelBody):
    reranker_id: Annotated[str | None, uuid_or_none("rerankerId")] = wire_field("rerankerId")

    def to_core(self) -> NewModel:
        return self.new_model(self.reranker_id, {})


class NewLLMBody(NewModelBody):
    llm_id: Annotated[str | None, uuid_or_none("llmId")] = wire_field("llmId")
    capabilities: Annotated[dict[str, bool] | None, BeforeValidator(_capabilities)] = wire_field(
        "capabilities"
    )
    sampling: Annotated[dict[str, Any] | None, BeforeValidator(_sampling)] = wire_field(
        "defaultSamplingParams"
    )
    max_context_length: Annotated[int | None, positive_int("maxContextLength")] = wire_field(
        "maxContextLength"
    )
    client_config: Annotated[dict[str, Any] | None, BeforeValidator(_client_config)] = wire_field(
        "clientConfig"
    )

    def to_core(self) -> NewModel:
        return self.new_model(
            self.llm_id,
            {
                "capabilities": self.capabilities,
                "defaultSamplingParams": self.sampling,
                "maxContextLength": self.max_context_length,
                "clientConfig": self.client_config,
            },
        )


def _editable(field: str, *, non_empty: bool = False) -> BeforeValidator:
    def check(value: Any) -> str | None:
        if value is None:
            return None
        if field == "displayName":
            return check_name(value, field)
        if not isinstance(value, str) or (non_empty and not value.strip()):
            raise BadRequest(f"{field} must be a {'non-empty ' if non_empty else ''}string")
        return value

    return BeforeValidator(check)


def _update_credentials(value: Any) -> dict[str, Any] | None:
    read = read_credentials(value)
    if read is not None and not read:
        raise BadRequest("credentials must not be empty: omit the field to keep the stored credentials")
    return read


class ModelUpdateBody(WireModel):
    """What every update body has; ``changes()`` gives the response fields sent (camelCase → value)."""

    provider_type: Any = raw_field("providerType")
    display_name: Annotated[str | None, _editable("displayName")] = wire_field("displayName")
    description: Annotated[str | None, _editable("description")] = wire_field("description")
    endpoint_url: Annotated[str | None, _editable("endpointUrl", non_empty=True)] = wire_field("endpointUrl")
    api_path: Annotated[str | None, _editable("apiPath")] = wire_field("apiPath")
    model_identifier: Annotated[str | None, _editable("modelIdentifier", non_empty=True)] = wire_field(
        "modelIdentifier"
    )
    version: Annotated[str | None, _editable("version")] = wire_field("version")
    monitoring_endpoint: Annotated[str | None, _editable("monitoringEndpoint")] = wire_field(
        "monitoringEndpoint"
    )
    supported_modalities: Annotated[tuple[str, ...], BeforeValidator(_modalities)] = wire_field(
        "supportedModalities"
    )
    dialect: Annotated[str | None, _editable("dashscopeApiDialect")] = wire_field("dashscopeApiDialect")
    credentials: Annotated[dict[str, Any] | None, BeforeValidator(_update_credentials)] = wire_field(
        "credentials"
    )
    replace_labels: Any = raw_field("replaceLabels")
    merge_labels: Any = raw_field("mergeLabels")

    def own_changes(self) -> dict[str, Any]:
        """The kind's own fields sent (subclasses)."""
        return {}

    def to_core(self) -> ModelUpdate:
        changes: dict[str, Any] = {
            "displayName": self.display_name,
            "description": self.description,
            "endpointUrl": self.endpoint_url,
            "apiPath": self.api_path,
            "modelIdentifier": self.model_identifier,
            "version": self.version,
            "monitoringEndpoint": self.monitoring_endpoint,
            "dashscopeApiDialect": self.dialect,
            # Replaced only by a non-empty list (the clients' documented rule).
            "supportedModalities": list(self.supported_modalities) or None,
            **self.own_changes(),
        }
        return ModelUpdate(
            provider_type=self.provider_type,
            changes={k: v for k, v in changes.items() if v is not None},
            credentials=self.credentials,
            labels=label_change(self.replace_labels, self.merge_labels),
        )


class LLMUpdateBody(ModelUpdateBody):
    capabilities: Annotated[dict[str, bool] | None, BeforeValidator(_capabilities)] = wire_field(
        "capabilities"
    )
    sampling: Annotated[dict[str, Any] | None, BeforeValidator(_sampling)] = wire_field(
        "defaultSamplingParams"
    )
    max_context_length: Annotated[int | None, positive_int("maxContextLength")] = wire_field(
        "maxContextLength"
    )
    client_config: Annotated[dict[str, Any] | None, BeforeValidator(_client_config)] = wire_field(
        "clientConfig"
    )

    def own_changes(self) -> dict[str, Any]:
        return {
            "capabilities": self.capabilities,
            "defaultSamplingParams": self.sampling,
            "maxContextLength": self.max_context_length,
            "clientConfig": self.client_config,
        }


# --- routes ----------------------------------------------------------------------------------------------

_SPECS: dict[str, KindSpec] = {"rerankers": RERANKER, "llms": LLM}
_KINDS = r"{kind:rerankers|llms}"


def _spec(request: web.Request) -> KindSpec:
    return _SPECS[request.match_info["kind"]]


@routes.get(f"/v1/{_KINDS}")
async def list_models(request: web.Request) -> web.Response:
    who = await principal(request)
    spec = _spec(request)
    found = await core.list_models(goodmem(request), who, spec, model_query(request))
    return reply({request.match_info["kind"]: [model_json(m) for m in found]})


@routes.post(f"/v1/{_KINDS}")
async def create_model(request: web.Request) -> web.Response:
    who = await principal(request)
    gm = goodmem(request)
    body = await json_body(request)
    if _spec(request) is RERANKER:
        reranker = await core.create_reranker(gm, who, NewRerankerBody.parse(body).to_core())
        return reply(model_json(reranker), status=201)
    created = await core.create_llm(gm, who, NewLLMBody.parse(body).to_core())
    return reply(llm_created_json(created), status=201)


@routes.get(f"/v1/{_KINDS}/{{id}}")
async def get_model(request: web.Request) -> web.Response:
    who = await principal(request)
    spec = _spec(request)
    found = await core.get_model(goodmem(request), who, spec, request.match_info["id"])
    if Query(request).flag("includeCredentials"):
        check_credentials_read(spec)
    return reply(model_json(found))


@routes.put(f"/v1/{_KINDS}/{{id}}")
async def update_model(request: web.Request) -> web.Response:
    who = await principal(request)
    spec, gm = _spec(request), goodmem(request)
    current = await core.get_model(gm, who, spec, request.match_info["id"])
    wire = LLMUpdateBody if spec is LLM else ModelUpdateBody
    req = wire.parse(await json_body(request)).to_core()
    return reply(model_json(await core.update_model_of(gm, who, current, req)))


@routes.delete(f"/v1/{_KINDS}/{{id}}")
async def delete_model(request: web.Request) -> web.Response:
    who = await principal(request)
    await core.delete_model(goodmem(request), who, _spec(request), request.match_info["id"])
    return web.Response(status=204)
