"""ml-commons' model APIs (``/_plugins/_ml/connectors``, ``model_groups``, ``models``, ``tasks``,
``_predict``), served from memproxy's model registry (:mod:`proxy.core.mlmodels`).

Bodies are read as ml-commons' parsers read them (unknown fields dropped, connector parameters and headers
made strings) and refused with its texts, in its order: what its parser refuses first, then its request
constructor, then its transport action (the core). Answers are ml-commons 3.6's shapes
(docs/mlcommons-model-apis-observed.md); remote failures become its error texts and statuses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from proxy.api.opensearch_memory.common import Handler, json_response, read_json, services
from proxy.api.opensearch_memory.configuration import _FUNCTION_NAMES
from proxy.api.opensearch_memory.lenient import (
    as_bool,
    as_object,
    as_str,
    coerce_string_map,
    optional,
    token_error,
    token_name,
)
from proxy.app_keys import PRINCIPAL
from proxy.core import mlmodels as core
from proxy.core.models import UntrustedEndpoint
from proxy.errors import BadRequest, MemproxyError, NotFound
from proxy.models.connector import BUILTIN_POST_PROCESS
from proxy.models.provider import (
    EndpointRefused,
    ProviderBadAnswer,
    ProviderError,
    ProviderOverloaded,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
)

__all__ = ["ML", "READ", "ROUTES", "WRITE"]

ML = "/_plugins/_ml"
_CONNECTOR = ML + "/connectors/{connector_id}"
_GROUP = ML + "/model_groups/{model_group_id}"
_MODEL = ML + "/models/{model_id}"

READ = "read"
WRITE = "write"

_ACTION_KEYS = (
    "action_type",
    "method",
    "url",
    "headers",
    "request_body",
    "pre_process_function",
    "post_process_function",
)
_MCP = core.MCP_PROTOCOLS
_EMPTY_UPDATE = "Failed to update connector: Request body is empty"


def _owner(request: web.Request) -> str | None:
    who = request.get(PRINCIPAL)
    return who.user_id if who is not None else None


async def _object(request: web.Request) -> dict[str, Any] | None:
    body = await read_json(request)
    if body is not None and not isinstance(body, dict):
        raise token_error("START_OBJECT", body)
    return body


def _string(body: Mapping[str, Any], key: str) -> str | None:
    return optional(body, key, as_str)


# --- connectors ------------------------------------------------------------------------------------------


def _action(raw: Any) -> dict[str, Any]:
    """One action as ml-commons' ``ConnectorAction`` parses and checks it."""
    fields = as_object(raw)
    action: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None or key not in _ACTION_KEYS:
            continue  # unknown fields are dropped, as ml-commons' parser skips them
        if key == "action_type":
            name = as_str(value).upper()
            if name not in core.ACTION_TYPES:
                raise BadRequest(
                    f"No enum constant org.opensearch.ml.common.connector.ConnectorAction.ActionType.{name}"
                )
            action[key] = name
        elif key == "headers":
            action[key] = coerce_string_map(value)
        else:
            action[key] = as_str(value)
    for key, what in (("action_type", "action type"), ("url", "url"), ("method", "method")):
        if key not in action:
            raise BadRequest(f"{what} can't be null")
    return {k: action[k] for k in _ACTION_KEYS if k in action}


def _connector_spec(body: Mapping[str, Any]) -> core.ConnectorSpec:
    actions = body.get("actions")
    if actions is not None and not isinstance(actions, list):
        raise token_error("START_ARRAY", actions)
    parameters = body.get("parameters")
    credential = body.get("credential")
    return core.ConnectorSpec(
        name=_string(body, "name"),
        version=_string(body, "version"),
        protocol=_string(body, "protocol"),
        description=_string(body, "description"),
        parameters=coerce_string_map(parameters) if parameters is not None else None,
        credential=coerce_string_map(credential) if credential is not None else None,
        actions=[_action(a) for a in actions] if actions is not None else None,
    )


async def create_connector(request: web.Request) -> web.Response:
    body = await _object(request)
    if body is None:
        raise MemproxyError("Create Connector request has empty body", os_type="i_o_exception")
    spec = _connector_spec(body)
    # ml-commons' request constructor, in its order.
    if spec.name is None:
        raise BadRequest("Connector name is null")
    if spec.version is None:
        raise BadRequest("Connector version is null")
    if spec.protocol is None:
        raise BadRequest("Connector protocol is null")
    if not spec.credential and spec.protocol not in _MCP:
        raise BadRequest("Connector credential is null or empty list")
    connector_id = await core.create_connector(services(request), spec, _owner(request))
    return json_response({"connector_id": connector_id})


async def get_connector(request: web.Request) -> web.Response:
    connector_id = request.match_info["connector_id"]
    try:
        record = await core.get_connector(services(request), connector_id)
    except core.DocumentNotFound:
        raise NotFound(f"Failed to find connector with the provided connector id: {connector_id}") from None
    return json_response(record.view)


async def update_connector(request: web.Request) -> web.Response:
    """``PUT /_plugins/_ml/connectors/{id}``: the named fields replace the stored ones (ml-commons 2.11+)."""
    connector_id = request.match_info["connector_id"]
    body = await read_json(request)
    if body is None:
        raise BadRequest(_EMPTY_UPDATE, os_type="parse_exception")
    if not isinstance(body, dict):  # ml-commons' update parser reports where (create's does not)
        error = token_error("START_OBJECT", body)
        raise BadRequest(error.message, os_type=error.os_type, details={"line": 1, "col": 1})
    spec = _connector_spec(body)
    try:
        await core.update_connector(services(request), connector_id, spec)
    except core.DocumentNotFound:
        raise NotFound(f"Failed to find connector with the provided connector id: {connector_id}") from None
    return json_response(_write_result(core.CONNECTOR_INDEX, connector_id, "updated"))


def _write_result(index: str, doc_id: str, result: str) -> dict[str, Any]:
    """The node's write answer as ml-commons relays it (``deleted``, ``not_found``, ``updated``). The
    documents live in memproxy-models, so the bookkeeping numbers are memproxy's own, not those of an
    ml-commons index."""
    return {
        "_index": index,
        "_id": doc_id,
        "_version": 1 if result == "not_found" else 2,
        "result": result,
        "forced_refresh": True,
        "_shards": {"total": 1, "successful": 1, "failed": 0},
        "_seq_no": 0,
        "_primary_term": 1,
    }


def _delete_result(index: str, doc_id: str, deleted: bool) -> dict[str, Any]:
    return _write_result(index, doc_id, "deleted" if deleted else "not_found")


async def delete_connector(request: web.Request) -> web.Response:
    connector_id = request.match_info["connector_id"]
    deleted = await core.delete_connector(services(request), connector_id)
    return json_response(_delete_result(core.CONNECTOR_INDEX, connector_id, deleted))


async def _search(request: web.Request, kind: str, index: str) -> web.Response:
    body = await read_json(request)
    if body is None:
        raise BadRequest("request body or source parameter is required", os_type="parse_exception")
    if not isinstance(body, dict):
        raise BadRequest(
            f"Expected [START_OBJECT] but found [{token_name(body)}]", os_type="parsing_exception"
        )
    result = await core.search(services(request), kind, body)
    for hit in result.get("hits", {}).get("hits", []):
        hit["_index"] = index
    return json_response(result)


async def search_connectors(request: web.Request) -> web.Response:
    return await _search(request, "connector", core.CONNECTOR_INDEX)


# --- model groups ----------------------------------------------------------------------------------------


async def register_model_group(request: web.Request) -> web.Response:
    body = await _object(request)
    if body is None:
        raise BadRequest("Model group request has empty body", os_type="parse_exception")
    name = _string(body, "name")
    if name is None:
        raise MemproxyError("model group name must not be null", os_type="null_pointer_exception")
    if not name.strip():
        raise BadRequest(
            "Validation Failed: 1: Model group name is required and cannot be null or blank;",
            os_type="action_request_validation_exception",
        )
    group_id = await core.register_model_group(
        services(request), name, _string(body, "description"), _owner(request)
    )
    return json_response({"model_group_id": group_id, "status": "CREATED"})


async def get_model_group(request: web.Request) -> web.Response:
    group_id = request.match_info["model_group_id"]
    try:
        record = await core.get_model_group(services(request), group_id)
    except core.DocumentNotFound:
        raise NotFound(f"Failed to find model group with the provided model group id: {group_id}") from None
    return json_response(record.view)


async def delete_model_group(request: web.Request) -> web.Response:
    group_id = request.match_info["model_group_id"]
    deleted = await core.delete_model_group(services(request), group_id)
    return json_response(_delete_result(core.MODEL_GROUP_INDEX, group_id, deleted))


async def search_model_groups(request: web.Request) -> web.Response:
    return await _search(request, "model_group", core.MODEL_GROUP_INDEX)


# --- models ----------------------------------------------------------------------------------------------


def _model_spec(body: Mapping[str, Any]) -> core.ModelSpec:
    function_name = _string(body, "function_name")
    if function_name is not None and function_name.upper() not in _FUNCTION_NAMES:
        raise BadRequest("Wrong function name")
    name = _string(body, "name")
    if name is None:
        raise BadRequest("model name is null")
    if function_name is None or function_name.upper() != "REMOTE":
        if body.get("model_format") is None:
            raise BadRequest("model format is null")
        raise BadRequest(
            "memproxy registers remote models only (function_name: remote, with a connector); local "
            "models are served by memproxy's own embedders (--embedder)"
        )
    raw_connector = body.get("connector")
    connector_id = _string(body, "connector_id")
    if raw_connector is None and connector_id is None:
        raise BadRequest(
            "You must provide connector content when creating a remote model without connector id!"
        )
    return core.ModelSpec(
        name=name,
        description=_string(body, "description"),
        model_group_id=_string(body, "model_group_id"),
        connector_id=connector_id if raw_connector is None else None,
        connector=_connector_spec(as_object(raw_connector)) if raw_connector is not None else None,
    )


async def register_model(request: web.Request) -> web.Response:
    body = await _object(request)
    if body is None:
        raise BadRequest("request body is required", os_type="parse_exception")
    spec = _model_spec(body)
    deploy = as_bool(request.query["deploy"] or "true") if "deploy" in request.query else False
    task_id, model_id = await core.register_model(
        services(request), spec, deploy=deploy, owner_id=_owner(request)
    )
    return json_response({"task_id": task_id, "status": "CREATED", "model_id": model_id})


async def get_model(request: web.Request) -> web.Response:
    model_id = request.match_info["model_id"]
    try:
        record = await core.get_model(services(request), model_id)
    except core.DocumentNotFound:
        raise NotFound(f"Failed to find model with the provided model id: {model_id}") from None
    return json_response(core.model_view(record))


async def delete_model(request: web.Request) -> web.Response:
    model_id = request.match_info["model_id"]
    await core.delete_model(services(request), model_id)
    return json_response(_delete_result(core.MODEL_INDEX, model_id, True))


async def search_models(request: web.Request) -> web.Response:
    return await _search(request, "remote", core.MODEL_INDEX)


async def deploy_model(request: web.Request) -> web.Response:
    task_id = await core.deploy_model(services(request), request.match_info["model_id"])
    return json_response({"task_id": task_id, "task_type": "DEPLOY_MODEL", "status": "COMPLETED"})


async def undeploy_model(request: web.Request) -> web.Response:
    model_id = request.match_info["model_id"]
    was_deployed = await core.undeploy_model(services(request), model_id)
    state = "undeployed" if was_deployed else "not_found"
    return json_response({core.NODE_ID: {"stats": {model_id: state}}})


async def get_task(request: web.Request) -> web.Response:
    record = await core.get_task(services(request), request.match_info["task_id"])
    return json_response(record.view)


# --- predict ---------------------------------------------------------------------------------------------

_REFUSED = re.compile(r"Cannot connect to host (\S+) ssl:\S+ \[Connect call failed")


def _communication_cause(exc: ProviderError) -> str:
    """What failed on the way to the model, in Java's words where memproxy knows them (a refused
    connection); otherwise the client's own text."""
    refused = _REFUSED.search(exc.message)
    if refused:
        return f"Connection refused: /{refused.group(1)}"
    return exc.message.split(": ", 1)[1] if ": " in exc.message else exc.message


def _post_process_target(post_process: str | None) -> str:
    return "data" if BUILTIN_POST_PROCESS.get(post_process or "") == "openai" else "embeddings"


def _remote_failure(exc: ProviderError, post_process: str | None) -> MemproxyError:
    """A provider failure as ml-commons reports it: the remote's status and body for an HTTP error, 500
    for a network failure or an answer its post-process function cannot read."""
    if isinstance(exc, ProviderBadAnswer):
        target = _post_process_target(post_process)
        if (post_process or "") not in BUILTIN_POST_PROCESS:
            cause = {"type": "illegal_argument_exception", "reason": exc.message}
        elif exc.provider_status is not None:  # 2xx whose body is not JSON
            cause = {
                "type": "path_not_found_exception",
                "reason": f"Expected to find an object with property ['{target}'] in path $ but found "
                "'java.lang.String'. This is not a json object according to the JsonProvider: "
                "'com.jayway.jsonpath.spi.json.JsonSmartJsonProvider'.",
            }
        else:
            cause = {"type": "path_not_found_exception", "reason": f"Missing property in path $['{target}']"}
        return MemproxyError(
            "Fail to execute PREDICT in aws connector", os_type="m_l_exception", details={"caused_by": cause}
        )
    if isinstance(exc, EndpointRefused):
        return BadRequest(exc.message)
    if (
        isinstance(exc, ProviderRejected | ProviderOverloaded | ProviderUnavailable)
        and exc.provider_status is not None
    ):
        # ml-commons quotes the remote's body; memproxy only a body in a model's own error shape
        # (``ProviderClient`` keeps no other), so an endpoint cannot relay another service's answer.
        said = exc.provider_body if exc.provider_body is not None else "(not a model error; not shown)"
        error = MemproxyError(f"Error from remote service: {said}")
        error.status = exc.provider_status
        return error
    if isinstance(exc, ProviderTimeout):
        return MemproxyError(f"Error communicating with remote model: {exc.message}")
    return MemproxyError(f"Error communicating with remote model: {_communication_cause(exc)}")


async def _predict(
    request: web.Request, parameters: Mapping[str, Any], text_docs: Sequence[str] | None
) -> web.Response:
    svc = services(request)
    model_id = request.match_info["model_id"]
    try:
        prediction = await core.predict(svc, model_id, parameters, text_docs)
    except UntrustedEndpoint:
        raise BadRequest("Connector URL is not matching the trusted connector endpoint regex") from None
    except ProviderError as exc:
        record = await core.get_model(svc, model_id)
        actions = record.call.get("actions") or [{}]
        raise _remote_failure(exc, actions[0].get("post_process_function")) from None
    output = prediction.output
    if prediction.embedding and output.vectors is not None:
        items: list[dict[str, Any]] = [
            {"name": "sentence_embedding", "data_type": "FLOAT32", "shape": [len(v)], "data": v}
            for v in output.vectors
        ]
    else:
        items = [{"name": "response", "dataAsMap": output.answer}]
    return json_response({"inference_results": [{"output": items, "status_code": 200}]})


def _parameters(body: Mapping[str, Any]) -> dict[str, Any]:
    raw = body.get("parameters")
    return as_object(raw) if raw is not None else {}


async def predict(request: web.Request) -> web.Response:
    """``/models/{id}/_predict``: ``parameters`` only; ``text_docs`` are not mapped here (3.6 leaves the
    connector's placeholders unfilled)."""
    await core.get_model(services(request), request.match_info["model_id"])  # 404 before reading the body
    body = await _object(request)
    if body is None:
        raise BadRequest("request body is required", os_type="parse_exception")
    return await _predict(request, _parameters(body), None)


async def predict_algorithm(request: web.Request) -> web.Response:
    """``/_predict/{algorithm}/{id}`` (what neural-search calls): ``text_docs`` go through the connector's
    pre-process function."""
    await core.get_model(services(request), request.match_info["model_id"])  # 404 before reading the body
    body = await _object(request)
    if body is None:
        raise BadRequest("request body is required", os_type="parse_exception")
    raw_docs = body.get("text_docs")
    if raw_docs is not None and not isinstance(raw_docs, list):
        raise token_error("START_ARRAY", raw_docs)
    text_docs = [as_str(d) for d in raw_docs] if raw_docs is not None else None
    return await _predict(request, _parameters(body), text_docs)


# (methods, path, handler, access), literal paths before parameter ones, as OpenSearch's path trie prefers.
ROUTES: Sequence[tuple[tuple[str, ...], str, Handler, str]] = (
    (("POST",), ML + "/connectors/_create", create_connector, WRITE),
    (("GET", "POST"), ML + "/connectors/_search", search_connectors, READ),
    (("GET",), _CONNECTOR, get_connector, READ),
    (("PUT",), _CONNECTOR, update_connector, WRITE),
    (("DELETE",), _CONNECTOR, delete_connector, WRITE),
    (("POST",), ML + "/model_groups/_register", register_model_group, WRITE),
    (("GET", "POST"), ML + "/model_groups/_search", search_model_groups, READ),
    (("GET",), _GROUP, get_model_group, READ),
    (("DELETE",), _GROUP, delete_model_group, WRITE),
    (("POST",), ML + "/models/_register", register_model, WRITE),
    (("GET", "POST"), ML + "/models/_search", search_models, READ),
    (("GET",), _MODEL, get_model, READ),
    (("DELETE",), _MODEL, delete_model, WRITE),
    (("POST",), _MODEL + "/_deploy", deploy_model, WRITE),
    (("POST",), _MODEL + "/_undeploy", undeploy_model, WRITE),
    (("POST",), _MODEL + "/_predict", predict, READ),
    (("POST",), ML + "/_predict/{algorithm}/{model_id}", predict_algorithm, READ),
    (("GET",), ML + "/tasks/{task_id}", get_task, READ),
)
