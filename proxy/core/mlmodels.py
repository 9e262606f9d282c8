"""ml-commons' model APIs over the model registry: connectors, model groups, remote models, tasks, predict.

Every document lives in the registry (``memproxy-models``, :mod:`proxy.core.models`) as a ``ModelRecord`` of
api ``ml-commons`` whose ``view`` is the document exactly as ml-commons' GET renders it, so ``_search`` over
the registry returns ml-commons-shaped hits:

* ``connector``: name, version, description, protocol, parameters, actions, times; its ``credential`` is
  sealed on the record and never part of the view;
* ``model_group``: name, latest_version, description, access, times; ``fingerprint`` is its name (names are
  unique, as in ml-commons);
* ``remote``: an ml-commons remote model (its view is the stored document, which GET shows less an empty
  ``planning_worker_nodes``, as ml-commons does); its ``call`` is the connector's actions and parameters,
  copied at register time, and the connector's credential is re-sealed for the model's id, so the model
  can be called without its connector (ml-commons copies the connector into the model too);
* ``task``: the register and deploy tasks, ``COMPLETED`` when their call returns.

Remote models are called on demand, so deploying one only records it as ``DEPLOYED`` on memproxy's one
"node" (:data:`NODE_ID`, a constant: every memproxy process serves every model) and undeploying records it
``UNDEPLOYED``; predict deploys a model that is not (ml-commons' default ``model_auto_deploy``).

What each route answers (ids, texts, statuses) is docs/mlcommons-model-apis-observed.md, the real 3.6.
"""

from __future__ import annotations

import base64
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from proxy.core.clock import now_ms
from proxy.core.models import ModelRecord, UntrustedEndpoint
from proxy.core.search import check_caller_dsl
from proxy.core.services import Services
from proxy.errors import BadRequest, Conflict, MemproxyError, NotFound
from proxy.models.connector import BUILTIN_POST_PROCESS, BUILTIN_PRE_PROCESS, PredictOutput, parse_action

__all__ = [
    "ACTION_TYPES",
    "API",
    "CONNECTOR_INDEX",
    "MCP_PROTOCOLS",
    "MODEL_GROUP_INDEX",
    "MODEL_INDEX",
    "NODE_ID",
    "PROTOCOLS",
    "ConnectorSpec",
    "DocumentNotFound",
    "ModelSpec",
    "Prediction",
    "create_connector",
    "delete_connector",
    "delete_model",
    "delete_model_group",
    "deploy_model",
    "get_connector",
    "get_model",
    "get_model_group",
    "get_task",
    "model_view",
    "new_id",
    "predict",
    "register_model",
    "register_model_group",
    "search",
    "undeploy_model",
    "update_connector",
]

log = logging.getLogger(__name__)

API: Final = "ml-commons"
# The one worker node memproxy reports (task ``worker_node``, a model's ``planning_worker_nodes``, the key of
# an undeploy answer): any memproxy process calls any remote model, so there is nothing per-process to name.
NODE_ID = "memproxy"
# ml-commons' system indices, named in what memproxy answers (search hits, delete results) as ml-commons
# names them; the documents themselves are in memproxy-models.
CONNECTOR_INDEX = ".plugins-ml-connector"
MODEL_GROUP_INDEX = ".plugins-ml-model-group"
MODEL_INDEX = ".plugins-ml-model"
PROTOCOLS = ("aws_sigv4", "http", "mcp_sse", "mcp_streamable_http")
MCP_PROTOCOLS = ("mcp_sse", "mcp_streamable_http")
ACTION_TYPES = ("PREDICT", "EXECUTE", "BATCH_PREDICT", "CANCEL_BATCH_PREDICT", "BATCH_PREDICT_STATUS")

# GET's key orders.
_CONNECTOR_KEYS = (
    "name",
    "version",
    "description",
    "protocol",
    "parameters",
    "actions",
    "created_time",
    "last_updated_time",
)
_GROUP_KEYS = ("name", "latest_version", "description", "access", "created_time", "last_updated_time")
_MODEL_KEYS = (
    "name",
    "model_group_id",
    "algorithm",
    "model_version",
    "description",
    "model_state",
    "created_time",
    "last_updated_time",
    "last_deployed_time",
    "auto_redeploy_retry_times",
    "planning_worker_node_count",
    "current_worker_node_count",
    "planning_worker_nodes",
    "deploy_to_all_nodes",
    "is_hidden",
    "connector_id",
    "connector",
)
_TASK_KEYS = (
    "model_id",
    "task_type",
    "function_name",
    "state",
    "worker_node",
    "create_time",
    "last_update_time",
    "error",
    "is_async",
)
_DEPLOYED = ("DEPLOYED", "DEPLOYING", "PARTIALLY_DEPLOYED")
_PARAMETER = re.compile(r"\$\{parameters\.([^}]+)\}")
_TRUSTED_URL = "Connector URL is not matching the trusted connector endpoint regex"


def new_id() -> str:
    """A 20-character id of ``[A-Za-z0-9_-]``, like the node's auto ids ml-commons uses."""
    return base64.urlsafe_b64encode(secrets.token_bytes(15)).decode()


def _ordered(doc: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    return {k: doc[k] for k in keys if doc.get(k) is not None}


class DocumentNotFound(NotFound):
    """No ml-commons document of the wanted kind has this id; each route words its own 404."""

    def __init__(self, kind: str, doc_id: str):
        super().__init__(f"Failed to find {kind}")
        self.kind = kind
        self.doc_id = doc_id


# --- connectors ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConnectorSpec:
    """A connector as ml-commons' parser and constructor leave it: parameters and headers as strings,
    actions in GET's shape (``action_type`` upper case, unknown fields dropped)."""

    name: str | None
    version: str | None
    protocol: str | None
    description: str | None = None
    parameters: dict[str, str] | None = None
    credential: dict[str, str] | None = None
    actions: list[dict[str, Any]] | None = None

    def view(self) -> dict[str, Any]:
        """The connector as GET shows it, without times (a model's inline ``connector``)."""
        return _ordered(
            {
                "name": self.name,
                "version": self.version,
                "description": self.description,
                "protocol": self.protocol,
                "parameters": self.parameters,
                "actions": self.actions,
            },
            _CONNECTOR_KEYS,
        )


def _call_actions(actions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The actions as ``proxy.models.connector`` runs them (``action_type`` lower case)."""
    return [{**a, "action_type": str(a.get("action_type", "")).lower()} for a in actions]


def _check_connector(svc: Services, spec: ConnectorSpec) -> None:
    """What ml-commons' transport checks once the request is parsed, in its order; then what memproxy needs
    to run the predict action (built-in pre/post-process functions only, POST)."""
    if spec.protocol is None:  # only an inline connector gets here without one
        raise BadRequest("connector protocol is null")
    if spec.protocol not in PROTOCOLS:
        raise BadRequest(f"Unsupported connector protocol. Please use one of [{', '.join(PROTOCOLS)}]")
    if spec.actions is None:
        raise BadRequest("No actions configured for this connector")
    parameters = spec.parameters or {}
    for action in spec.actions:
        # As ml-commons: the URL with the connector's own parameters filled in must be trusted.
        url = _PARAMETER.sub(lambda m: parameters.get(m.group(1), m.group(0)), str(action.get("url")))
        try:
            svc.models.check_endpoint(url)
        except UntrustedEndpoint:
            raise BadRequest(_TRUSTED_URL) from None
    if any(a.get("action_type") == "PREDICT" for a in spec.actions):
        parse_action(_call_actions(spec.actions))


async def create_connector(svc: Services, spec: ConnectorSpec, owner_id: str | None = None) -> str:
    _check_connector(svc, spec)
    connector_id = new_id()
    now = now_ms()
    view = _ordered({**spec.view(), "created_time": now, "last_updated_time": now}, _CONNECTOR_KEYS)
    record = ModelRecord(
        model_id=connector_id,
        kind="connector",
        api=API,
        owner_id=owner_id,
        created_at=now,
        updated_at=now,
        view=view,
        credential=await svc.models.seal(connector_id, spec.credential),
    )
    await svc.models.save(record, create=True)
    return connector_id


async def get_connector(svc: Services, connector_id: str) -> ModelRecord:
    record = await svc.models.get(connector_id, ("connector",))
    if record is None or record.api != API:
        raise DocumentNotFound("connector", connector_id)
    return record


async def _ids_where(
    svc: Services, kind: str, field: str, value: str, *, states: Sequence[str] | None = None
) -> list[str]:
    """Ids of the ml-commons documents of ``kind`` whose view ``field`` is ``value`` (and whose
    ``model_state`` is one of ``states``, when given), newest first."""
    query: dict[str, Any] = {"term": {f"{field}.keyword": value}}
    if states is not None:
        query = {"bool": {"filter": [query, {"terms": {"model_state.keyword": list(states)}}]}}
    body = {
        "size": 10_000,
        "_source": False,
        "query": query,
        "sort": [{"created_time": {"order": "desc", "unmapped_type": "long"}}],
    }
    result = await svc.models.docs.search_view([kind], body)
    return [str(h["_id"]) for h in result.get("hits", {}).get("hits", [])]


async def delete_connector(svc: Services, connector_id: str) -> bool:
    """Whether there was one; 409 while models use it (ml-commons' text, ids newest first)."""
    record = await svc.models.get(connector_id, ("connector",))
    if record is None or record.api != API:
        return False
    users = await _ids_where(svc, "remote", "connector_id", connector_id)
    if users:
        raise Conflict(
            f"{len(users)} models are still using this connector, please delete or update the models first: "
            f"[{', '.join(users)}]"
        )
    return await svc.models.remove(connector_id)


def _merged(old: ConnectorSpec, update: ConnectorSpec) -> ConnectorSpec:
    """The connector after an update, field by field as ml-commons' ``HttpConnector.update`` applies one:
    what the update names replaces what was there; an empty ``parameters`` or ``credential`` map leaves the
    old one (an empty ``actions`` list does not)."""
    return ConnectorSpec(
        name=update.name if update.name is not None else old.name,
        version=update.version if update.version is not None else old.version,
        protocol=update.protocol if update.protocol is not None else old.protocol,
        description=update.description if update.description is not None else old.description,
        parameters=update.parameters if update.parameters else old.parameters,
        credential=update.credential if update.credential else old.credential,
        actions=update.actions if update.actions is not None else old.actions,
    )


async def update_connector(svc: Services, connector_id: str, update: ConnectorSpec) -> ModelRecord:
    """``PUT /_plugins/_ml/connectors/{id}``: the connector merged with ``update`` and checked as a new one
    would be; refused (400, ml-commons' text) while a deployed model uses it, since a deployed model keeps
    calling the connector it was deployed with. Models deployed later call the updated one
    (:func:`_set_deployed`)."""
    record = await get_connector(svc, connector_id)
    old = ConnectorSpec(
        name=record.view.get("name"),
        version=record.view.get("version"),
        protocol=record.view.get("protocol"),
        description=record.view.get("description"),
        parameters=record.view.get("parameters"),
        credential=await svc.models.unseal(record),
        actions=record.view.get("actions"),
    )
    merged = _merged(old, update)
    # An MCP connector has no actions and no model can be made from it: crossing that line would leave a
    # connector its models cannot call (ml-commons 3.6 stores it, and its later updates fail with a 500).
    if (merged.protocol in MCP_PROTOCOLS) != (old.protocol in MCP_PROTOCOLS):
        raise BadRequest(
            f"Cannot change connector protocol from [{old.protocol}] to [{merged.protocol}]: an MCP "
            "connector and an inference connector are not interchangeable."
        )
    _check_connector(svc, merged)
    users = await _ids_where(svc, "remote", "connector_id", connector_id, states=_DEPLOYED)
    if users:
        raise BadRequest(
            f"{len(users)} models are still using this connector, please undeploy the models first: "
            f"[{', '.join(users)}]",
            os_type="status_exception",
        )
    now = now_ms()
    view = _ordered(
        {**merged.view(), "created_time": record.view.get("created_time"), "last_updated_time": now},
        _CONNECTOR_KEYS,
    )
    updated = replace(
        record, view=view, updated_at=now, credential=await svc.models.seal(connector_id, merged.credential)
    )
    return await svc.models.save(updated)


# --- model groups ----------------------------------------------------------------------------------------


async def _group_named(svc: Services, name: str) -> ModelRecord | None:
    found = await svc.models.find(["model_group"], fingerprint=name, api=API)
    return found[0] if found else None


def _group_record(group_id: str, name: str, description: str | None, owner_id: str | None) -> ModelRecord:
    now = now_ms()
    view = _ordered(
        {
            "name": name,
            "latest_version": 0,
            "description": description,
            "access": "public",
            "created_time": now,
            "last_updated_time": now,
        },
        _GROUP_KEYS,
    )
    return ModelRecord(
        model_id=group_id,
        kind="model_group",
        api=API,
        owner_id=owner_id,
        created_at=now,
        updated_at=now,
        view=view,
        fingerprint=name,
    )


async def register_model_group(
    svc: Services, name: str, description: str | None = None, owner_id: str | None = None
) -> str:
    existing = await _group_named(svc, name)
    if existing is not None:
        raise BadRequest(
            f"The name you provided is already being used by a model group with ID: {existing.model_id}."
        )
    group_id = new_id()
    await svc.models.save(_group_record(group_id, name, description, owner_id), create=True)
    return group_id


async def get_model_group(svc: Services, group_id: str) -> ModelRecord:
    record = await svc.models.get(group_id, ("model_group",))
    if record is None or record.api != API:
        raise DocumentNotFound("model group", group_id)
    return record


async def delete_model_group(svc: Services, group_id: str) -> bool:
    record = await svc.models.get(group_id, ("model_group",))
    if record is None or record.api != API:
        return False
    if await _ids_where(svc, "remote", "model_group_id", group_id):
        raise Conflict("Cannot delete the model group when it has associated model versions")
    return await svc.models.remove(group_id)


# --- tasks -----------------------------------------------------------------------------------------------


def _task_record(model_id: str, task_type: str, is_async: bool, now: int) -> ModelRecord:
    task_id = new_id()
    view = _ordered(
        {
            "model_id": model_id,
            "task_type": task_type,
            "function_name": "REMOTE",
            "state": "COMPLETED",
            "worker_node": [NODE_ID],
            "create_time": now,
            "last_update_time": now,
            "is_async": is_async,
        },
        _TASK_KEYS,
    )
    return ModelRecord(
        model_id=task_id, kind="task", api=API, owner_id=None, created_at=now, updated_at=now, view=view
    )


async def get_task(svc: Services, task_id: str) -> ModelRecord:
    record = await svc.models.get(task_id, ("task",))
    if record is None or record.api != API:
        raise DocumentNotFound("task", task_id)
    return record


# --- models ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """A remote model to register: by ``connector_id``, or with an inline ``connector``."""

    name: str
    description: str | None = None
    model_group_id: str | None = None
    connector_id: str | None = None
    connector: ConnectorSpec | None = None


def model_view(record: ModelRecord) -> dict[str, Any]:
    """The model as GET renders it: the stored document without an empty ``planning_worker_nodes``."""
    return {k: v for k, v in record.view.items() if not (k == "planning_worker_nodes" and not v)}


async def get_model(svc: Services, model_id: str) -> ModelRecord:
    record = await svc.models.get(model_id, ("remote",))
    if record is None or record.api != API:
        raise DocumentNotFound("model", model_id)
    return record


async def _resolve_group(svc: Services, spec: ModelSpec, owner_id: str | None) -> tuple[ModelRecord, bool]:
    """The model's group (given, else the one named after the model, else a new one) and whether it is
    new (and so still to be saved)."""
    if spec.model_group_id is not None:
        record = await svc.models.get(spec.model_group_id, ("model_group",))
        if record is None or record.api != API:
            raise MemproxyError(
                f"Model Group Response is empty for {spec.model_group_id}",
                os_type="m_l_resource_not_found_exception",
            )
        return record, False
    existing = await _group_named(svc, spec.name)
    if existing is not None:
        return existing, False
    return _group_record(new_id(), spec.name, None, owner_id), True


async def register_model(
    svc: Services, spec: ModelSpec, *, deploy: bool = False, owner_id: str | None = None
) -> tuple[str, str]:
    """(task id, model id). Everything is checked before anything is written, and what was written is
    removed again when a later write fails: a model that fails at registration leaves nothing behind."""
    if spec.connector is not None:
        _check_connector(svc, spec.connector)
        connector_view: dict[str, Any] | None = spec.connector.view()
        actions = spec.connector.actions or []
        parameters = spec.connector.parameters or {}
        credential: Mapping[str, Any] | None = spec.connector.credential
    else:  # ml-commons checks the connector before the group
        connector = await svc.models.get(str(spec.connector_id), ("connector",))
        if connector is None or connector.api != API:
            raise NotFound(f"Failed to find connector:{spec.connector_id}")
        connector_view = None
        actions = list(connector.view.get("actions") or [])
        parameters = dict(connector.view.get("parameters") or {})
        credential = await svc.models.unseal(connector)
    group, new_group = await _resolve_group(svc, spec, owner_id)
    now = now_ms()
    version = int(group.view.get("latest_version") or 0) + 1
    task = _task_record("", "REGISTER_MODEL", False, now)  # ml-commons makes the task id, then the model's
    model_id = new_id()
    task = replace(task, view=_ordered({**task.view, "model_id": model_id}, _TASK_KEYS))
    view = _ordered(
        {
            "name": spec.name,
            "model_group_id": group.model_id,
            "algorithm": "REMOTE",
            "model_version": str(version),
            "description": spec.description,
            "model_state": "REGISTERED",
            "created_time": now,
            "last_updated_time": now,
            "is_hidden": False,
            "connector_id": spec.connector_id,
            "connector": connector_view,
        },
        _MODEL_KEYS,
    )
    model = ModelRecord(
        model_id=model_id,
        kind="remote",
        api=API,
        owner_id=owner_id,
        created_at=now,
        updated_at=now,
        view=view,
        call={"form": "connector", "actions": _call_actions(actions), "parameters": parameters},
        provider="connector",
        credential=await svc.models.seal(model_id, credential),
    )
    updated_group = replace(
        group,
        view=_ordered({**group.view, "latest_version": version, "last_updated_time": now}, _GROUP_KEYS),
        updated_at=now,
    )
    written: list[str] = []
    try:
        await svc.models.save(updated_group, create=new_group)
        if new_group:
            written.append(group.model_id)
        await svc.models.save(task, create=True)
        written.append(task.model_id)
        await svc.models.save(model, create=True)
    except BaseException:
        for doc_id in reversed(written):
            try:
                await svc.models.remove(doc_id)
            except Exception:  # the original failure is what the caller must see
                log.warning("could not remove %s after a failed model registration", doc_id)
        if not new_group:
            await svc.models.save(group)
        raise
    if deploy:
        await _set_deployed(svc, model)
    return task.model_id, model_id


def _deployed_view(view: Mapping[str, Any], now: int) -> dict[str, Any]:
    return _ordered(
        {
            **view,
            "model_state": "DEPLOYED",
            "last_updated_time": now,
            "last_deployed_time": now,
            "auto_redeploy_retry_times": view.get("auto_redeploy_retry_times", 0),
            "planning_worker_node_count": 1,
            "current_worker_node_count": 1,
            "planning_worker_nodes": [NODE_ID],
            "deploy_to_all_nodes": True,
        },
        _MODEL_KEYS,
    )


async def _set_deployed(svc: Services, model: ModelRecord) -> ModelRecord:
    """Deploying reads the model's connector again, as ml-commons loads it at deploy: a connector updated
    while the model was undeployed is what the deployed model calls."""
    model = await _with_current_connector(svc, model)
    deployed = replace(model, view=_deployed_view(model.view, now_ms()))
    return await svc.models.save(deployed)


async def _with_current_connector(svc: Services, model: ModelRecord) -> ModelRecord:
    """``model`` calling its ``connector_id``'s connector as it is now. ``updated_at`` is the version of how
    the model is called: it moves only when that changed (a new version makes the registry build a new
    HTTP client)."""
    connector_id = model.view.get("connector_id")
    connector = await svc.models.get(str(connector_id), ("connector",)) if connector_id else None
    if connector is None or connector.api != API:
        return model  # an inline connector, or one deleted under a model (ml-commons then fails the call)
    call = {
        "form": "connector",
        "actions": _call_actions(connector.view.get("actions") or []),
        "parameters": dict(connector.view.get("parameters") or {}),
    }
    credential = await svc.models.unseal(connector)
    if call == model.call and credential == await svc.models.unseal(model):
        return model
    return replace(
        model, call=call, credential=await svc.models.seal(model.model_id, credential), updated_at=now_ms()
    )


async def deploy_model(svc: Services, model_id: str) -> str:
    """The (already completed) deploy task's id; a deployed model is deployed again, as ml-commons does."""
    model = await get_model(svc, model_id)
    await _set_deployed(svc, model)
    task = _task_record(model_id, "DEPLOY_MODEL", True, now_ms())
    await svc.models.save(task, create=True)
    return task.model_id


async def undeploy_model(svc: Services, model_id: str) -> bool:
    """Whether the model was deployed; it is ``UNDEPLOYED`` afterwards either way, as in ml-commons."""
    model = await get_model(svc, model_id)
    was_deployed = model.view.get("model_state") in _DEPLOYED
    view = dict(model.view)
    # ml-commons stores an empty node list, which its GET leaves out (``model_view``) and _search shows.
    view.update(
        model_state="UNDEPLOYED",
        last_updated_time=now_ms(),
        planning_worker_node_count=0,
        current_worker_node_count=0,
        planning_worker_nodes=[],
    )
    await svc.models.save(replace(model, view=_ordered(view, _MODEL_KEYS)))
    return was_deployed


async def delete_model(svc: Services, model_id: str) -> None:
    model = await get_model(svc, model_id)
    if model.view.get("model_state") in _DEPLOYED:
        raise BadRequest(
            "Model cannot be deleted in deploying or deployed state. Try undeploy model first then delete",
            os_type="status_exception",
        )
    await svc.models.remove(model_id)


# --- search ----------------------------------------------------------------------------------------------


async def search(svc: Services, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """A caller's ``_search`` over one kind of ml-commons document, as ml-commons' search routes run it
    (with ``_version``, ``_seq_no`` and ``_primary_term`` on each hit). The body is checked against
    the Query DSL allowlist first (scripts only with ``--allow-scripts``)."""
    check_caller_dsl(svc, body)
    query = {"version": True, "seq_no_primary_term": True, **body}
    return await svc.models.docs.search_view([kind], query)


# --- predict ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    output: PredictOutput
    # Whether the connector post-processes embeddings (the answer is vectors, not the provider's JSON).
    embedding: bool


async def predict(
    svc: Services,
    model_id: str,
    parameters: Mapping[str, Any],
    text_docs: Sequence[str] | None = None,
) -> Prediction:
    """Call the model (deploying it first when it is not, as 3.6 does by default). ``text_docs`` go through
    the connector's pre-process function; a connector without one leaves its placeholders unfilled, as in
    ml-commons."""
    model = await get_model(svc, model_id)
    if model.view.get("model_state") not in _DEPLOYED:
        model = await _set_deployed(svc, model)
    handle = await svc.models.connector_model(model)
    action = handle.action
    docs = list(text_docs) if text_docs is not None and action.pre_process in BUILTIN_PRE_PROCESS else None
    output = await handle.predict(parameters, text_docs=docs)
    return Prediction(output, embedding=(action.post_process or "") in BUILTIN_POST_PROCESS)
