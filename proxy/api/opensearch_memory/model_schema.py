"""The OpenAPI description (proxy.api.openapi) of ml-commons' model APIs as memproxy serves them
(:mod:`.models`): connectors, model groups, remote models, tasks and predict.

The bodies name the fields the handlers read; the handlers read them as ml-commons' parsers do (numbers as
strings, unknown keys dropped), so these models describe what a client should send. The answers are ml-commons
3.6's shapes (docs/mlcommons-model-apis-observed.md): the keys memproxy always writes are named, the ones that
depend on a record's state are allowed.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from proxy.api.openapi import Api, OpenSearchError, Operation, Raw
from proxy.api.opensearch_memory.models import ML
from proxy.api.opensearch_memory.schema import SearchBody, SearchResponse, WriteResult, _In, _Out

__all__ = ["MODEL_API"]

_CONNECTOR = ML + "/connectors/{connector_id}"
_GROUP = ML + "/model_groups/{model_group_id}"
_MODEL = ML + "/models/{model_id}"

Scalar = str | int | float | bool


# --- connectors ------------------------------------------------------------------------------------------


class ConnectorAction(_In):
    action_type: str = Field(description="predict (case-insensitive)")
    method: str
    url: str = Field(description="checked against --trusted-model-endpoints")
    headers: dict[str, Scalar] | None = None
    request_body: str | None = None
    pre_process_function: str | None = None
    post_process_function: str | None = None


class NewConnector(_In):
    name: str
    version: Scalar
    protocol: str = Field(description="http (aws_sigv4 and the MCP protocols are refused)")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    credential: dict[str, Scalar] | None = Field(
        None, description="encrypted at rest, never returned; required unless the protocol is MCP"
    )
    actions: list[ConnectorAction] | None = None


class ConnectorUpdate(_In):
    """The fields to replace; an empty ``parameters`` or ``credential`` keeps the stored one."""

    name: str | None = None
    version: Scalar | None = None
    protocol: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    credential: dict[str, Scalar] | None = Field(None, description="encrypted at rest, never returned")
    actions: list[ConnectorAction] | None = None


class ConnectorCreated(_Out):
    connector_id: str


class Connector(_Out):
    """A connector as GET shows it: no id key, no credential, ``version`` a string."""

    name: str
    version: str | None = None
    description: str | None = None
    protocol: str
    parameters: dict[str, Any] | None = None
    actions: list[dict[str, Any]] | None = None
    created_time: int | None = None
    last_updated_time: int | None = None


# --- model groups ----------------------------------------------------------------------------------------


class NewModelGroup(_In):
    name: str
    description: str | None = None


class ModelGroupCreated(_Out):
    model_group_id: str
    status: str


class ModelGroup(_Out):
    name: str
    latest_version: int
    description: str | None = None
    access: str | None = None
    created_time: int | None = None
    last_updated_time: int | None = None


# --- models ----------------------------------------------------------------------------------------------


class NewModel(_In):
    name: str
    function_name: str = Field(description="remote: memproxy registers remote models only")
    description: str | None = None
    model_group_id: str | None = None
    connector_id: str | None = None
    connector: NewConnector | None = Field(None, description="an inline connector instead of connector_id")
    model_format: str | None = Field(None, description="read only to refuse local models as ml-commons does")


class RegisterQuery(_In):
    deploy: bool | None = Field(None, description="deploy at once (synchronous for remote models)")


class ModelRegistered(_Out):
    task_id: str
    status: str
    model_id: str


class Model(_Out):
    name: str
    model_group_id: str | None = None
    algorithm: str
    model_version: str | None = None
    description: str | None = None
    model_state: str
    created_time: int | None = None
    last_updated_time: int | None = None
    is_hidden: bool | None = None
    connector_id: str | None = None
    connector: dict[str, Any] | None = None


class Deployed(_Out):
    task_id: str
    task_type: str
    status: str


_UNDEPLOYED = Raw(
    {
        "application/json": {
            "type": "object",
            "description": "keyed by node id: {stats: {model_id: undeployed | not_found}}",
            "additionalProperties": {
                "type": "object",
                "properties": {"stats": {"type": "object", "additionalProperties": {"type": "string"}}},
            },
        }
    }
)


class Task(_Out):
    task_type: str
    function_name: str | None = None
    state: str
    model_id: str | None = None
    worker_node: list[str] | None = None
    create_time: int | None = None
    last_update_time: int | None = None
    is_async: bool | None = None


# --- predict ---------------------------------------------------------------------------------------------


class PredictBody(_In):
    parameters: dict[str, Any] | None = Field(None, description="fills the connector's request_body")


class AlgorithmPredictBody(PredictBody):
    text_docs: list[str] | None = Field(None, description="through the connector's pre-process function")


class Prediction(_Out):
    inference_results: list[dict[str, Any]]


def _search(kind: str, summary: str) -> dict[tuple[str, str], Operation]:
    """A search route, served for GET and POST alike as ml-commons serves it."""
    operation = Operation(summary, {200: SearchResponse}, body=SearchBody)
    return {(method, f"{ML}/{kind}/_search"): operation for method in ("GET", "POST")}


_OPERATIONS: dict[tuple[str, str], Operation] = {
    ("POST", ML + "/connectors/_create"): Operation(
        "Create a connector to a remote model", {200: ConnectorCreated}, body=NewConnector
    ),
    **_search("connectors", "Search connectors"),
    ("GET", _CONNECTOR): Operation("A connector (never its credential)", {200: Connector}),
    ("PUT", _CONNECTOR): Operation(
        "Update a connector no deployed model uses", {200: WriteResult}, body=ConnectorUpdate
    ),
    ("DELETE", _CONNECTOR): Operation("Delete a connector no model uses", {200: WriteResult}),
    ("POST", ML + "/model_groups/_register"): Operation(
        "Register a model group", {200: ModelGroupCreated}, body=NewModelGroup
    ),
    **_search("model_groups", "Search model groups"),
    ("GET", _GROUP): Operation("A model group", {200: ModelGroup}),
    ("DELETE", _GROUP): Operation("Delete a model group without models", {200: WriteResult}),
    ("POST", ML + "/models/_register"): Operation(
        "Register a remote model", {200: ModelRegistered}, body=NewModel, query=RegisterQuery
    ),
    **_search("models", "Search models"),
    ("GET", _MODEL): Operation("A model", {200: Model}),
    ("DELETE", _MODEL): Operation("Delete a model that no container uses", {200: WriteResult}),
    ("POST", _MODEL + "/_deploy"): Operation("Deploy a remote model", {200: Deployed}),
    ("POST", _MODEL + "/_undeploy"): Operation("Undeploy a model", {200: _UNDEPLOYED}),
    ("POST", _MODEL + "/_predict"): Operation(
        "Call a model with parameters", {200: Prediction}, body=PredictBody
    ),
    ("POST", ML + "/_predict/{algorithm}/{model_id}"): Operation(
        "Call a model with text_docs (as neural-search does)", {200: Prediction}, body=AlgorithmPredictBody
    ),
    ("GET", ML + "/tasks/{task_id}"): Operation("A register or deploy task", {200: Task}),
}

# 500 is in ml-commons' own table: it answers a few refusals with 500 (an unknown model group at register,
# a remote model's failure), and memproxy keeps its statuses (docs/mlcommons-model-apis-observed.md).
MODEL_API = Api(
    tag="ml-commons models",
    error=OpenSearchError,
    error_statuses=(400, 401, 403, 404, 409, 413, 429, 500, 503),
    operations=_OPERATIONS,
)
