"""The model APIs every agentic-memory tutorial starts with, and the container checks that rest on them.

memproxy has no model registry yet: these calls are forwarded to a cluster without ml-commons. The flows are
written now and expected to fail until issue 14 (models: LLMs, rerankers and remote embedders) lands;
``strict`` makes an unexpected pass fail, so the marker is removed the day they match.
"""

from __future__ import annotations

import pytest

from tests.conformance.compare import Trace, compare_traces
from tests.conformance.conftest import ReferenceModels
from tests.conformance.sides import MC, Side, new_prefix
from tests.support.reference import ML, embedding_connector

ISSUE_14 = pytest.mark.xfail(
    strict=True, reason="issue 14: memproxy has no model registry (connectors, register, deploy, predict)"
)


def test_reference_models_registered_as_the_spec_says(reference_models: ReferenceModels) -> None:
    """The harness itself: register and deploy answered the shapes mlcommons-reference-node.md records."""
    calls = reference_models.calls
    assert set(calls["embedding.connector"].body) == {"connector_id"}
    assert calls["embedding.register"].body["status"] == "CREATED"
    assert set(calls["embedding.register"].body) == {"task_id", "status", "model_id"}
    assert calls["llm.deploy"].body["task_type"] == "DEPLOY_MODEL"


def model_flow(side: Side, memproxy_url: str) -> Trace:
    t = side.trace()
    connector = t.add(
        "create connector", side.call("POST", f"{ML}/connectors/_create", embedding_connector(memproxy_url))
    )
    body = {
        "name": "emb",
        "function_name": "remote",
        "connector_id": connector.body.get("connector_id", "none"),
    }
    model = t.add("register model", side.call("POST", f"{ML}/models/_register", body))
    model_id = (model.body or {}).get("model_id", "none")
    t.add("deploy model", side.call("POST", f"{ML}/models/{model_id}/_deploy"))
    predict = {"parameters": {"input": ["The user only drinks green tea."]}}
    t.add("predict", side.call("POST", f"{ML}/models/{model_id}/_predict", predict))
    return t


@ISSUE_14
def test_model_apis(sides: tuple[Side, Side]) -> None:
    ref, mp = sides
    compare_traces(model_flow(ref, mp.url), model_flow(mp, mp.url))


def llm_check_flow(side: Side) -> Trace:
    t = side.trace()
    prefix = new_prefix("llm")
    body = {
        "name": prefix,
        "configuration": {"llm_id": "no-such-llm", "index_prefix": prefix, "use_system_index": False},
    }
    t.add("create with unknown llm", side.call("POST", f"{MC}/_create", body))
    return t


@ISSUE_14
def test_unknown_llm_refused(sides: tuple[Side, Side]) -> None:
    ref, mp = sides
    compare_traces(llm_check_flow(ref), llm_check_flow(mp))
