"""The model APIs every agentic-memory tutorial starts with, and the container checks that rest on them.

Each flow runs on the reference ml-commons 3.6 and on memproxy (which serves these routes from its own model
registry) and compares every answer. Besides ids and the timestamps ``compare`` already sets aside, the
timestamps of tasks and deployments and the node id (ml-commons': the reference node's; memproxy's:
``proxy.core.mlmodels.NODE_ID``) are compared by type / as ``<node>`` (:class:`ModelSide`). Model names are
unique per run and the same on both sides, so the group a model joins and its version are compared too.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from proxy.core.mlmodels import NODE_ID
from tests.conformance.compare import Deviation, Reply, Trace, compare_traces
from tests.conformance.conftest import ReferenceModels
from tests.conformance.deviations import (
    CONNECTOR_IN_USE_EXACT,
    CONNECTOR_MAP_TYPE_ERROR,
    CONNECTOR_SCRIPTS_REFUSED,
    CONNECTOR_UPDATE_CHECKED,
    LOCAL_MODELS_REFUSED,
)
from tests.conformance.sides import MC, Side, new_prefix
from tests.opensearch_memory_helpers import EMBEDDER
from tests.support.fake_llm import FakeLLM
from tests.support.reference import ML, embedding_connector, llm_connector

# Timestamps of tasks, deployments and chat answers: compared by type only.
_VOLATILE = frozenset({"create_time", "last_update_time", "last_deployed_time", "created"})


class ModelSide:
    """A side whose answers have the node id replaced by ``<node>`` and the model APIs' own timestamps by
    their type."""

    def __init__(self, side: Side, node_id: str):
        self.side = side
        self.node_id = node_id

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Reply:
        reply = self.side.call(method, path, body, params)
        return Reply(reply.status, self._stable(reply.body))

    def _stable(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                ("<node>" if k == self.node_id else k): (
                    f"<{type(v).__name__}>" if k in _VOLATILE else self._stable(v)
                )
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._stable(v) for v in value]
        return "<node>" if value == self.node_id else value

    def trace(self) -> Trace:
        """A trace without the container flows' model names (these flows make their own models)."""
        return Trace(self.side.name)

    def task(self, task_id: str) -> Reply:
        """The task once it has finished: ml-commons may answer ``CREATED``/``RUNNING`` for a moment after
        register or deploy returned (tutorials poll it, as here)."""
        return self._settled(f"{ML}/tasks/{task_id}", "state", {"CREATED", "RUNNING"})

    def deployed(self, model_id: str) -> Reply:
        """The model once ``?deploy=true`` has deployed it (ml-commons deploys right after the register task
        completes, which may be just after register answered)."""
        return self._settled(f"{ML}/models/{model_id}", "model_state", {"REGISTERED", "DEPLOYING"})

    def undeploy(self, model_id: str) -> Reply:
        """Undeploy the model and wait until it is: ml-commons undeploys in the background, and a predict's
        auto-deploy may still be landing, so on a busy node the next call could still find it deployed."""
        self.deployed(model_id)
        reply = self.call("POST", f"{ML}/models/{model_id}/_undeploy")
        self._settled(f"{ML}/models/{model_id}", "model_state", {"DEPLOYED", "DEPLOYING"})
        return reply

    def _settled(self, path: str, key: str, passing: set[str]) -> Reply:
        """``GET path`` until its ``key`` is in none of the ``passing`` states, or 30 s went by."""
        deadline = time.monotonic() + 30
        while True:
            reply = self.call("GET", path)
            state = reply.body.get(key) if isinstance(reply.body, dict) else None
            if state not in passing or time.monotonic() > deadline:
                return reply
            time.sleep(0.2)


def rekey(reply: Reply, names: dict[str, str]) -> Reply:
    """The reply with object keys that are ids renamed (an undeploy answer is keyed by model id)."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {names.get(k, k): walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return Reply(reply.status, walk(reply.body))


@pytest.fixture(scope="module")
def model_sides(sides: tuple[Side, Side]) -> tuple[ModelSide, ModelSide]:
    ref, mp = sides
    nodes = ref.call("GET", "/_nodes/_local").body["nodes"]
    return ModelSide(ref, next(iter(nodes))), ModelSide(mp, NODE_ID)


def test_reference_models_registered_as_the_spec_says(reference_models: ReferenceModels) -> None:
    """The harness itself: register and deploy answered the shapes mlcommons-reference-node.md records."""
    calls = reference_models.calls
    assert set(calls["embedding.connector"].body) == {"connector_id"}
    assert calls["embedding.register"].body["status"] == "CREATED"
    assert set(calls["embedding.register"].body) == {"task_id", "status", "model_id"}
    assert calls["llm.deploy"].body["task_type"] == "DEPLOY_MODEL"


def _tag() -> str:
    return uuid.uuid4().hex[:8]


def model_flow(ms: ModelSide, memproxy_url: str, tag: str) -> Trace:
    """The tutorial's embedding model end to end: connector, register, deploy, predict, undeploy, delete,
    with every read in between."""
    t = ms.trace()
    connector = t.add(
        "create connector", ms.call("POST", f"{ML}/connectors/_create", embedding_connector(memproxy_url))
    )
    connector_id = connector.body.get("connector_id", "none")
    t.add("get connector", ms.call("GET", f"{ML}/connectors/{connector_id}"))
    ids = {"query": {"ids": {"values": [connector_id]}}}
    t.add("search connectors", ms.call("POST", f"{ML}/connectors/_search", ids))
    body = {"name": f"emb-{tag}", "function_name": "remote", "connector_id": connector_id}
    model = t.add("register model", ms.call("POST", f"{ML}/models/_register", body))
    model_id = (model.body or {}).get("model_id", "none")
    t.add("register task", ms.task(str(model.body.get("task_id"))))
    registered = t.add("get registered model", ms.call("GET", f"{ML}/models/{model_id}"))
    group_id = str(registered.body.get("model_group_id"))
    t.name(group_id, "<group>")
    deploy = t.add("deploy model", ms.call("POST", f"{ML}/models/{model_id}/_deploy"))
    t.add("deploy task", ms.task(str(deploy.body.get("task_id"))))
    t.add("get deployed model", ms.call("GET", f"{ML}/models/{model_id}"))
    predict = {"parameters": {"input": ["The user only drinks green tea."]}}
    t.add("predict", ms.call("POST", f"{ML}/models/{model_id}/_predict", predict))
    docs = {"text_docs": ["green tea", "black coffee"]}
    t.add("predict text_docs", ms.call("POST", f"{ML}/_predict/text_embedding/{model_id}", docs))
    t.add("text_docs on the model route", ms.call("POST", f"{ML}/models/{model_id}/_predict", docs))
    t.add("predict without body", ms.call("POST", f"{ML}/models/{model_id}/_predict"))
    t.add("delete connector in use", ms.call("DELETE", f"{ML}/connectors/{connector_id}"))
    t.add("delete deployed model", ms.call("DELETE", f"{ML}/models/{model_id}"))
    t.add("deploy again", ms.call("POST", f"{ML}/models/{model_id}/_deploy"))
    model_key = {model_id: "<model>"}
    t.add("undeploy", rekey(ms.call("POST", f"{ML}/models/{model_id}/_undeploy"), model_key))
    t.add("undeploy again", rekey(ms.call("POST", f"{ML}/models/{model_id}/_undeploy"), model_key))
    t.add("get undeployed model", ms.call("GET", f"{ML}/models/{model_id}"))
    t.add(
        "search models", ms.call("POST", f"{ML}/models/_search", {"query": {"ids": {"values": [model_id]}}})
    )
    t.add("get group", ms.call("GET", f"{ML}/model_groups/{group_id}"))
    t.add("delete group in use", ms.call("DELETE", f"{ML}/model_groups/{group_id}"))
    t.add("delete model", ms.call("DELETE", f"{ML}/models/{model_id}"))
    t.add("delete model again", ms.call("DELETE", f"{ML}/models/{model_id}"))
    t.add("predict deleted model", ms.call("POST", f"{ML}/models/{model_id}/_predict", predict))
    t.add("delete connector", ms.call("DELETE", f"{ML}/connectors/{connector_id}"))
    t.add("delete connector again", ms.call("DELETE", f"{ML}/connectors/{connector_id}"))
    t.add("get deleted connector", ms.call("GET", f"{ML}/connectors/{connector_id}"))
    t.add("delete group", ms.call("DELETE", f"{ML}/model_groups/{group_id}"))
    t.add("delete group again", ms.call("DELETE", f"{ML}/model_groups/{group_id}"))
    return t


# ml-commons 3.6 counts models of other connectors whose ids share a token (whether ids do depends on the
# day: a node's auto ids share their time-based middle part): these steps differ only then.
_IN_USE_DEVIATIONS: dict[str, Deviation] = {
    label: CONNECTOR_IN_USE_EXACT
    for label in (
        "delete connector in use",
        "delete connector",
        "delete connector again",
        "get deleted connector",
    )
}


def test_model_apis(model_sides: tuple[ModelSide, ModelSide]) -> None:
    ref, mp = model_sides
    tag = _tag()
    compare_traces(model_flow(ref, mp.side.url, tag), model_flow(mp, mp.side.url, tag), _IN_USE_DEVIATIONS)


@contextmanager
def _only_models_of_the_flow(ms: ModelSide) -> Iterator[None]:
    """The side's other deployed models undeployed for the block, deployed again after it. ml-commons 3.6
    refuses a connector update while *any* deployed model's connector id shares a token with it (deviation
    ``connector-in-use-exact``), which the session's own models always do on the reference node."""
    query = {
        "size": 1000,
        "query": {"terms": {"model_state": ["DEPLOYED", "PARTIALLY_DEPLOYED", "DEPLOYING"]}},
    }
    undeployed: list[str] = []
    deadline = time.monotonic() + 60
    while True:  # a model still deploying (another test's) is undeployed once it is
        found = ms.call("POST", f"{ML}/models/_search", query).body
        hits = found.get("hits", {}).get("hits", []) if isinstance(found, dict) else []
        if not hits:
            break
        assert time.monotonic() < deadline, f"models still deployed: {[h['_id'] for h in hits]}"
        for hit in hits:
            ms.call("POST", f"{ML}/models/{hit['_id']}/_undeploy")
            undeployed.append(hit["_id"])
        time.sleep(0.5)
    deployed = list(dict.fromkeys(undeployed))
    try:
        yield
    finally:
        for model_id in deployed:
            ms.call("POST", f"{ML}/models/{model_id}/_deploy")
        for model_id in deployed:
            ms.deployed(model_id)


def connector_update_flow(ms: ModelSide, memproxy_url: str, tag: str) -> Trace:
    """``PUT /connectors/{id}``: what replaces what, what is refused (in ml-commons' order: the body, the
    connector, its actions and URL, then the deployed models using it), and that a model deployed after an
    update calls the updated connector (a model name it does not know, then the right one again)."""
    with _only_models_of_the_flow(ms):
        return _connector_update_steps(ms, memproxy_url, tag)


def _connector_update_steps(ms: ModelSide, memproxy_url: str, tag: str) -> Trace:
    t = ms.trace()
    base = embedding_connector(memproxy_url)
    connector_id = str(t.note(ms.call("POST", f"{ML}/connectors/_create", base)).body["connector_id"])
    at = f"{ML}/connectors/{connector_id}"
    action = base["actions"][0]
    renamed = {"name": f"renamed-{tag}", "parameters": {"model": EMBEDDER, "extra": "x"}, "unknown": 1}
    t.add("update name and parameters", ms.call("PUT", at, renamed))
    t.add("get updated", ms.call("GET", at))
    t.add("update with empty parameters", ms.call("PUT", at, {"parameters": {}, "description": "d2"}))
    t.add("get after empty parameters", ms.call("GET", at))
    t.add(
        "update numbers and credential",
        ms.call("PUT", at, {"name": 5, "version": 3, "credential": {"openAI_key": "replaced"}}),
    )
    t.add("get after numbers", ms.call("GET", at))
    t.add("update without body", ms.call("PUT", at, ""))
    t.add("update empty object", ms.call("PUT", at, {}))
    t.add("update with an array", ms.call("PUT", at, [1]))
    t.add("update parameters not an object", ms.call("PUT", at, {"parameters": "x"}))
    untrusted = {"actions": [{**action, "url": "http://10.1.1.1/v1/embeddings"}]}
    t.add("update untrusted url", ms.call("PUT", at, untrusted))
    t.add("update action without url", ms.call("PUT", at, {"actions": [{"action_type": "predict"}]}))
    t.add("update unknown action type", ms.call("PUT", at, {"actions": [{**action, "action_type": "nope"}]}))
    t.add("update missing connector", ms.call("PUT", f"{ML}/connectors/no-such-{tag}", {"name": "x"}))
    t.add("get unchanged by refusals", ms.call("GET", at))
    body = {"name": f"upd-{tag}", "function_name": "remote", "connector_id": connector_id}
    model = t.note(ms.call("POST", f"{ML}/models/_register", body, {"deploy": "true"}))
    model_id = str(model.body.get("model_id"))
    t.name(str(t.note(ms.deployed(model_id)).body.get("model_group_id")), "<group>")
    t.add("update while deployed", rekey(ms.call("PUT", at, {"name": "in use"}), {model_id: "<model>"}))
    t.add("update while deployed, untrusted url", ms.call("PUT", at, untrusted))
    t.note(ms.call("POST", f"{ML}/models/{model_id}/_undeploy"))
    t.add("update after undeploy", ms.call("PUT", at, {"parameters": {"model": f"no-such-model-{tag}"}}))
    t.add("get model after update", ms.call("GET", f"{ML}/models/{model_id}"))
    predict = {"parameters": {"input": ["The user only drinks green tea."]}}
    t.add("predict with the updated connector", ms.call("POST", f"{ML}/models/{model_id}/_predict", predict))
    t.note(ms.undeploy(model_id))
    t.add("update back", ms.call("PUT", at, {"parameters": {"model": EMBEDDER}}))
    t.add("predict after update back", ms.call("POST", f"{ML}/models/{model_id}/_predict", predict))
    t.note(ms.undeploy(model_id))
    # A model deployed on another connector: ml-commons 3.6 takes it for a user of this one.
    other = str(t.note(ms.call("POST", f"{ML}/connectors/_create", base)).body["connector_id"])
    body = {"name": f"other-{tag}", "function_name": "remote", "connector_id": other}
    other_model = str(
        t.note(ms.call("POST", f"{ML}/models/_register", body, {"deploy": "true"})).body["model_id"]
    )
    t.note(ms.deployed(other_model))
    t.add("update while another connector's model is deployed", ms.call("PUT", at, {"description": "d3"}))
    t.note(ms.undeploy(other_model))
    t.note(ms.call("DELETE", f"{ML}/models/{other_model}"))
    t.note(ms.call("DELETE", f"{ML}/connectors/{other}"))
    t.note(ms.call("DELETE", f"{ML}/models/{model_id}"))
    t.add("update protocol to mcp", ms.call("PUT", at, {"protocol": "mcp_sse"}))
    t.note(ms.call("DELETE", at))
    # After every compared id is numbered: ml-commons answers this one with an id of its own.
    odd = {**base, "parameters": "x"}
    created = t.add("create parameters not an object", ms.call("POST", f"{ML}/connectors/_create", odd))
    if created.status == 200:
        ms.call("DELETE", f"{ML}/connectors/{created.body['connector_id']}")
    # Last, on a connector of its own: ml-commons cannot read this one back afterwards.
    doomed = str(t.note(ms.call("POST", f"{ML}/connectors/_create", base)).body["connector_id"])
    t.add("update unknown protocol", ms.call("PUT", f"{ML}/connectors/{doomed}", {"protocol": "ftp"}))
    t.add("get after unknown protocol", ms.call("GET", f"{ML}/connectors/{doomed}"))
    t.note(ms.call("DELETE", f"{ML}/connectors/{doomed}"))
    return t


_UPDATE_DEVIATIONS: dict[str, Deviation] = {
    "update while another connector's model is deployed": CONNECTOR_IN_USE_EXACT,
    "update parameters not an object": CONNECTOR_MAP_TYPE_ERROR,
    "create parameters not an object": CONNECTOR_MAP_TYPE_ERROR,
    "update protocol to mcp": CONNECTOR_UPDATE_CHECKED,
    "update unknown protocol": CONNECTOR_UPDATE_CHECKED,
    "get after unknown protocol": CONNECTOR_UPDATE_CHECKED,
}


def test_connector_update(model_sides: tuple[ModelSide, ModelSide]) -> None:
    ref, mp = model_sides
    tag = _tag()
    compare_traces(
        connector_update_flow(ref, mp.side.url, tag),
        connector_update_flow(mp, mp.side.url, tag),
        _UPDATE_DEVIATIONS,
    )


def groups_flow(ms: ModelSide, memproxy_url: str, tag: str) -> Trace:
    """Model groups by hand, models registered into them (versions count up), ``?deploy=true``, an inline
    connector, and predict deploying a registered model."""
    t = ms.trace()
    group = t.add(
        "register group",
        ms.call("POST", f"{ML}/model_groups/_register", {"name": f"g-{tag}", "description": "d", "foo": 1}),
    )
    group_id = str(group.body.get("model_group_id"))
    t.name(group_id, "<group>")
    t.add("same name again", ms.call("POST", f"{ML}/model_groups/_register", {"name": f"g-{tag}"}))
    t.add("get new group", ms.call("GET", f"{ML}/model_groups/{group_id}"))
    connector = ms.call("POST", f"{ML}/connectors/_create", embedding_connector(memproxy_url))
    t.note(connector)
    connector_id = connector.body["connector_id"]
    first = {
        "name": f"m-{tag}",
        "function_name": "remote",
        "model_group_id": group_id,
        "description": "first",
        "connector_id": connector_id,
    }
    one = t.add("register into group", ms.call("POST", f"{ML}/models/_register", first, {"deploy": "true"}))
    t.add("get model deployed at register", ms.deployed(str(one.body.get("model_id"))))
    inline = {
        "name": f"m-{tag}",
        "function_name": "remote",
        "model_group_id": group_id,
        "connector": embedding_connector(memproxy_url),
    }
    two = t.add("register inline connector", ms.call("POST", f"{ML}/models/_register", inline))
    two_id = two.body.get("model_id")
    t.add("get inline model", ms.call("GET", f"{ML}/models/{two_id}"))
    t.add("get group with two", ms.call("GET", f"{ML}/model_groups/{group_id}"))
    by_name = {"query": {"term": {"name.keyword": f"g-{tag}"}}}
    t.add("search groups", ms.call("POST", f"{ML}/model_groups/_search", by_name))
    docs = {"text_docs": ["auto deploy"]}
    t.add("predict registered model", ms.call("POST", f"{ML}/_predict/text_embedding/{two_id}", docs))
    for model_id in (one.body.get("model_id"), two_id):
        t.note(ms.call("POST", f"{ML}/models/{model_id}/_undeploy"))
        t.note(ms.call("DELETE", f"{ML}/models/{model_id}"))
    t.add("delete group", ms.call("DELETE", f"{ML}/model_groups/{group_id}"))
    t.note(ms.call("DELETE", f"{ML}/connectors/{connector_id}"))
    return t


def test_model_groups(model_sides: tuple[ModelSide, ModelSide]) -> None:
    ref, mp = model_sides
    tag = _tag()
    compare_traces(groups_flow(ref, mp.side.url, tag), groups_flow(mp, mp.side.url, tag))


def llm_flow(ms: ModelSide, llm: FakeLLM, tag: str) -> Trace:
    """An LLM model: the provider's answer as ``dataAsMap``, unfilled placeholders, the provider's 400."""
    t = ms.trace()
    connector = ms.call("POST", f"{ML}/connectors/_create", llm_connector(llm.url))
    t.note(connector)
    body = {"name": f"llm-{tag}", "function_name": "remote", "connector_id": connector.body["connector_id"]}
    model = ms.call("POST", f"{ML}/models/_register", body, {"deploy": "true"})
    t.note(model)
    predict = f"{ML}/models/{model.body['model_id']}/_predict"
    prompts = {"parameters": {"system_prompt": "s", "user_prompt": 'say "hi"\nnow'}}
    t.add("predict", ms.call("POST", predict, prompts))
    t.add(
        "predict other model",
        ms.call("POST", predict, {"parameters": {**prompts["parameters"], "model": "x"}}),
    )
    t.add("user prompt only", ms.call("POST", predict, {"parameters": {"user_prompt": "u"}}))
    docs = f"{ML}/_predict/text_embedding/{model.body['model_id']}"
    t.add("text_docs", ms.call("POST", docs, {"text_docs": ["hello"]}))
    refusal = {
        "error": {"message": "bad request", "type": "invalid_request_error", "param": None, "code": None}
    }
    llm.fail_next(400, refusal)
    t.add("provider refuses", ms.call("POST", predict, prompts))
    t.note(ms.call("POST", f"{ML}/models/{model.body['model_id']}/_undeploy"))
    t.note(ms.call("DELETE", f"{ML}/models/{model.body['model_id']}"))
    t.note(ms.call("DELETE", f"{ML}/connectors/{connector.body['connector_id']}"))
    return t


def test_llm_predict(model_sides: tuple[ModelSide, ModelSide], fake_llm: FakeLLM) -> None:
    ref, mp = model_sides
    tag = _tag()
    compare_traces(llm_flow(ref, fake_llm, tag), llm_flow(mp, fake_llm, tag))


def _connector(url: str = "http://127.0.0.1:9/v1/embeddings", **changes: Any) -> dict[str, Any]:
    body = embedding_connector("http://127.0.0.1:9")
    body["actions"] = [{**body["actions"][0], "url": url}]
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


_ACTION = _connector()["actions"][0]

# (label, method, path under _plugins/_ml, body): refusals and unknown ids.
_ERRORS: list[tuple[str, str, str, Any]] = [
    ("get unknown connector", "GET", "/connectors/nonexistent-id-123", None),
    ("delete unknown connector", "DELETE", "/connectors/nonexistent-id-123", None),
    ("get unknown model", "GET", "/models/nonexistent-model", None),
    ("delete unknown model", "DELETE", "/models/nonexistent-model", None),
    ("deploy unknown model", "POST", "/models/nonexistent-model/_deploy", None),
    ("undeploy unknown model", "POST", "/models/nonexistent-model/_undeploy", None),
    ("predict unknown model", "POST", "/models/nonexistent-model/_predict", {"parameters": {"input": ["a"]}}),
    ("text_docs unknown model", "POST", "/_predict/text_embedding/nonexistent-model", {"text_docs": ["a"]}),
    ("predict unknown model without body", "POST", "/models/nonexistent-model/_predict", None),
    ("text_docs unknown model without body", "POST", "/_predict/text_embedding/nonexistent-model", None),
    ("get unknown group", "GET", "/model_groups/nonexistent-group", None),
    ("delete unknown group", "DELETE", "/model_groups/nonexistent-group", None),
    ("get unknown task", "GET", "/tasks/nonexistent-task", None),
    ("connector without credential", "POST", "/connectors/_create", _connector(credential=None)),
    ("connector empty credential", "POST", "/connectors/_create", _connector(credential={})),
    ("connector without actions", "POST", "/connectors/_create", _connector(actions=None)),
    ("connector with no action", "POST", "/connectors/_create", _connector(actions=[])),
    ("connector empty object", "POST", "/connectors/_create", {}),
    ("connector without name", "POST", "/connectors/_create", _connector(name=None)),
    ("connector without version", "POST", "/connectors/_create", _connector(version=None)),
    ("connector without protocol", "POST", "/connectors/_create", _connector(protocol=None)),
    ("connector ftp", "POST", "/connectors/_create", _connector(protocol="ftp")),
    ("connector untrusted url", "POST", "/connectors/_create", _connector("http://10.0.0.1/x")),
    (
        "connector bogus action type",
        "POST",
        "/connectors/_create",
        _connector(actions=[{**_ACTION, "action_type": "bogus"}]),
    ),
    (
        "connector action without url",
        "POST",
        "/connectors/_create",
        _connector(actions=[{k: v for k, v in _ACTION.items() if k != "url"}]),
    ),
    (
        "connector action without method",
        "POST",
        "/connectors/_create",
        _connector(actions=[{k: v for k, v in _ACTION.items() if k != "method"}]),
    ),
    ("connector unknown fields", "POST", "/connectors/_create", _connector(foo="bar")),
    (
        "connector painless",
        "POST",
        "/connectors/_create",
        _connector(actions=[{**_ACTION, "pre_process_function": "return params.text_docs;"}]),
    ),
    ("register no name", "POST", "/models/_register", {"function_name": "remote", "connector_id": "x"}),
    ("register empty object", "POST", "/models/_register", {}),
    ("register bogus function", "POST", "/models/_register", {"name": "x", "function_name": "bogus"}),
    ("register no function", "POST", "/models/_register", {"name": "x", "connector_id": "x"}),
    (
        "register remote without connector",
        "POST",
        "/models/_register",
        {"name": "x", "function_name": "remote"},
    ),
    (
        "register local model",
        "POST",
        "/models/_register",
        {"name": "x", "function_name": "TEXT_EMBEDDING", "model_format": "TORCH_SCRIPT", "version": "1.0.1"},
    ),
    (
        "register unknown group",
        "POST",
        "/models/_register",
        {"name": "x", "function_name": "remote", "model_group_id": "nonexistent-group", "connector_id": "x"},
    ),
    ("group empty name", "POST", "/model_groups/_register", {"name": ""}),
    ("group without name", "POST", "/model_groups/_register", {"description": "d"}),
    ("search connectors without body", "POST", "/connectors/_search", None),
]

_DEVIATIONS: dict[str, Deviation] = {
    "connector painless": CONNECTOR_SCRIPTS_REFUSED,
    "register local model": LOCAL_MODELS_REFUSED,
}


def errors_flow(ms: ModelSide, tag: str) -> Trace:
    t = ms.trace()
    created: list[str] = []
    for label, method, path, body in _ERRORS:
        reply = t.add(label, ms.call(method, ML + path, body))
        if reply.status == 200 and isinstance(reply.body, dict) and "connector_id" in reply.body:
            created.append(reply.body["connector_id"])
    t.add("empty connector body", ms.call("POST", f"{ML}/connectors/_create", ""))
    t.add("empty register body", ms.call("POST", f"{ML}/models/_register", ""))
    t.add("empty group body", ms.call("POST", f"{ML}/model_groups/_register", ""))
    name = f"unknown-conn-{tag}"
    body = {"name": name, "function_name": "remote", "connector_id": "nonexistent-conn"}
    t.add("register unknown connector", ms.call("POST", f"{ML}/models/_register", body))
    by_name = {"query": {"term": {"name.keyword": name}}}
    groups = t.add("groups after failed register", ms.call("POST", f"{ML}/model_groups/_search", by_name))
    for hit in groups.body.get("hits", {}).get("hits", []) if isinstance(groups.body, dict) else []:
        ms.call("DELETE", f"{ML}/model_groups/{hit['_id']}")
    refused = _connector(url=f"http://127.0.0.1:9/v1/embeddings/{tag}")
    connector = ms.call("POST", f"{ML}/connectors/_create", refused)
    t.note(connector)
    created.append(connector.body["connector_id"])
    register = {
        "name": f"refused-{tag}",
        "function_name": "remote",
        "connector_id": connector.body["connector_id"],
    }
    model = ms.call("POST", f"{ML}/models/_register", register)
    t.note(model)
    unknown_group = {**register, "name": f"refused-2-{tag}", "model_group_id": "nonexistent-group"}
    t.add("register unknown group, known connector", ms.call("POST", f"{ML}/models/_register", unknown_group))
    predict = {"parameters": {"input": ["a"]}}
    t.add(
        "remote refuses connections",
        ms.call("POST", f"{ML}/models/{model.body['model_id']}/_predict", predict),
    )
    t.note(ms.call("POST", f"{ML}/models/{model.body['model_id']}/_undeploy"))
    t.note(ms.call("DELETE", f"{ML}/models/{model.body['model_id']}"))
    for connector_id in created:
        ms.call("DELETE", f"{ML}/connectors/{connector_id}")
    return t


def test_model_api_errors(model_sides: tuple[ModelSide, ModelSide]) -> None:
    ref, mp = model_sides
    tag = _tag()
    compare_traces(errors_flow(ref, tag), errors_flow(mp, tag), _DEVIATIONS)


def llm_check_flow(side: Side) -> Trace:
    t = side.trace()
    prefix = new_prefix("llm")
    body = {
        "name": prefix,
        "configuration": {"llm_id": "no-such-llm", "index_prefix": prefix, "use_system_index": False},
    }
    t.add("create with unknown llm", side.call("POST", f"{MC}/_create", body))
    return t


def test_unknown_llm_refused(sides: tuple[Side, Side]) -> None:
    ref, mp = sides
    compare_traces(llm_check_flow(ref), llm_check_flow(mp))


def container_models_flow(ms: ModelSide, memproxy_url: str, tag: str) -> Trace:
    """A container whose embedding model and LLM are remote models registered through the model APIs."""
    side = ms.side
    t = ms.trace()
    models: dict[str, str] = {}
    connectors: list[str] = []
    for kind, connector_body in (
        ("embedding", embedding_connector(memproxy_url)),
        ("llm", llm_connector("http://127.0.0.1:9")),
    ):
        connector = ms.call("POST", f"{ML}/connectors/_create", connector_body)
        t.note(connector)
        connectors.append(connector.body["connector_id"])
        body = {
            "name": f"{kind}-{tag}",
            "function_name": "remote",
            "connector_id": connector.body["connector_id"],
        }
        model = ms.call("POST", f"{ML}/models/_register", body)
        t.note(model)
        models[kind] = model.body["model_id"]
    prefix = f"conf-models-{tag}"
    configuration = {
        "embedding_model_type": "TEXT_EMBEDDING",
        "embedding_model_id": models["embedding"],
        "embedding_dimension": 384,
        "llm_id": models["llm"],
        "index_prefix": prefix,
        "use_system_index": False,
        "strategies": [{"type": "SEMANTIC", "namespace": ["user_id"]}],
    }
    created = t.add(
        "create container",
        side.call("POST", f"{MC}/_create", {"name": prefix, "configuration": configuration}),
    )
    container_id = created.body.get("memory_container_id")
    got = t.add("get container", side.call("GET", f"{MC}/{container_id}"))
    if got.status == 200:
        for strategy in got.body["configuration"].get("strategies", []):
            t.name(strategy["id"], "<strategy>")
    embedding = t.add("get registered embedding model", ms.call("GET", f"{ML}/models/{models['embedding']}"))
    t.name(str(embedding.body.get("model_group_id")), "<group>")
    side.call("DELETE", f"{MC}/{container_id}", params={"delete_all_memories": "true"})
    for model_id in models.values():
        ms.call("POST", f"{ML}/models/{model_id}/_undeploy")
        ms.call("DELETE", f"{ML}/models/{model_id}")
    for connector_id in connectors:
        ms.call("DELETE", f"{ML}/connectors/{connector_id}")
    return t


def test_container_on_registered_models(model_sides: tuple[ModelSide, ModelSide]) -> None:
    ref, mp = model_sides
    tag = _tag()
    compare_traces(container_models_flow(ref, mp.side.url, tag), container_models_flow(mp, mp.side.url, tag))
