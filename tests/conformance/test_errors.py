"""The error catalogue (spec Appendix A, the rows that apply without the security plugin), on both sides.

Every row is one call; status, ``error.type`` and ``error.reason`` must be equal, or differ as a documented
deviation. The rows that need a model registry memproxy does not have yet are in test_models.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.compare import Trace, compare_traces
from tests.conformance.deviations import (
    ADD_MEMORY_EMPTY_BODY,
    DIMENSION_CHECKED,
    DSL_ALLOWLIST,
    LONG_TERM_WITHOUT_STRATEGIES,
    SCRIPTS_REFUSED,
    UPDATE_ERRORS_4XX,
)
from tests.conformance.sides import MC, SEMANTIC, Side, both, new_prefix

MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "I like tea."}]}]
ALL: dict[str, Any] = {"query": {"match_all": {}}}
NONE = "/no-such-container"
SMART_LT = "/{smart}/memories/long-term"
EMBEDDING = {
    "embedding_model_type": "TEXT_EMBEDDING",
    "embedding_model_id": "no-such-model",
    "embedding_dimension": 384,
}


def _containers(side: Side, t: Trace, prefix: str) -> dict[str, str]:
    def create(label: str, configuration: dict[str, Any]) -> str:
        body = {"name": f"{prefix}-{label}", "configuration": {"use_system_index": False, **configuration}}
        return str(
            t.add(f"create {label}", side.call("POST", f"{MC}/_create", body)).body["memory_container_id"]
        )

    return {
        "plain": create("plain", {"index_prefix": f"{prefix}-plain"}),
        "nosession": create("nosession", {"index_prefix": f"{prefix}-nos", "disable_session": True}),
        "smart": create("smart", side.configuration(f"{prefix}-smart")),
        "embedded": create("embedded", {**side.embedding(), "index_prefix": f"{prefix}-emb"}),
    }


# (label, method, path under the container prefix with {plain}/{smart}/… placeholders, body)
ROWS: list[tuple[str, str, str, Any]] = [
    ("bad memory type", "GET", "/{plain}/memories/shortterm/x", None),
    ("bad memory type on search", "POST", "/{plain}/memories/shortterm/_search", ALL),
    ("container missing: add", "POST", NONE + "/memories", {"messages": MESSAGES}),
    ("container missing: get memory", "GET", NONE + "/memories/working/x", None),
    ("container missing: search", "POST", NONE + "/memories/working/_search", ALL),
    ("get container missing", "GET", NONE, None),
    ("delete container missing", "DELETE", NONE, None),
    ("create no body", "POST", "/_create", None),
    ("create no name", "POST", "/_create", {"configuration": {}}),
    ("create control char prefix", "POST", "/_create",
     {"name": "x", "configuration": {"index_prefix": "a\u0001b"}}),
    ("create invalid prefix", "POST", "/_create", {"name": "x", "configuration": {"index_prefix": "_bad"}}),
    ("create unknown embedding model", "POST", "/_create",
     {"name": "x", "configuration": EMBEDDING}),
    ("create strategy without llm", "POST", "/_create",
     {"name": "x", "configuration": {"strategies": [SEMANTIC]}}),
    ("update no body", "PUT", "/{plain}", None),
    ("update container missing", "PUT", NONE, {"name": "x"}),
    ("update unknown strategy", "PUT", "/{smart}",
     {"configuration": {"strategies": [{**SEMANTIC, "id": "no-such-strategy"}]}}),
    ("add memory empty object", "POST", "/{plain}/memories", {}),
    ("add memory no body", "POST", "/{plain}/memories", None),
    ("add memory no role", "POST", "/{plain}/memories", {"messages": [{"content": MESSAGES[0]["content"]}]}),
    ("add memory bad payload", "POST", "/{plain}/memories", {"messages": MESSAGES, "payload_type": "blob"}),
    ("infer without messages", "POST", "/{smart}/memories",
     {"structured_data": {"a": 1}, "payload_type": "data", "infer": True}),
    ("infer without llm", "POST", "/{plain}/memories", {"messages": MESSAGES, "infer": True}),
    ("create session no body", "POST", "/{plain}/memories/sessions", None),
    ("create session disabled", "POST", "/{nosession}/memories/sessions", {"summary": "x"}),
    ("get type disabled", "GET", "/{plain}/memories/long-term/x", None),
    ("update type disabled", "PUT", "/{plain}/memories/history/x", {"memory": "x"}),
    ("delete type disabled", "DELETE", "/{plain}/memories/long-term/x", None),
    ("get memory missing", "GET", "/{plain}/memories/working/no-such-memory", None),
    ("delete memory missing", "DELETE", "/{plain}/memories/working/no-such-memory", None),
    ("update memory missing", "PUT", "/{plain}/memories/working/no-such-memory", {"tags": {"a": "b"}}),
    ("update memory no body", "PUT", "/{plain}/memories/working/x", None),
    ("update long-term empty", "PUT", SMART_LT + "/x", {}),
    ("update history", "PUT", "/{smart}/memories/history/x", {"memory": "x"}),
    ("search no body", "POST", "/{plain}/memories/working/_search", None),
    ("search bad query", "POST", "/{plain}/memories/working/_search", {"query": {"no_such_query": {}}}),
    ("search with a global aggregation", "POST", "/{plain}/memories/working/_search",
     {"size": 0, "aggs": {"all": {"global": {}, "aggs": {"hits": {"top_hits": {}}}}}}),
    ("search with a script", "POST", "/{plain}/memories/working/_search",
     {"query": {"script": {"script": {"source": "return true;"}}}}),
    ("delete by query no query", "POST", "/{plain}/memories/working/_delete_by_query", {}),
    ("delete by query no body", "POST", "/{plain}/memories/working/_delete_by_query", None),
    ("delete by query type disabled", "POST", "/{plain}/memories/long-term/_delete_by_query",
     ALL),
    ("semantic no body", "POST", SMART_LT + "/_semantic_search", None),
    ("semantic blank query", "POST", SMART_LT + "/_semantic_search", {"query": " "}),
    ("semantic k 0", "POST", SMART_LT + "/_semantic_search", {"query": "tea", "k": 0}),
    ("semantic k 10001", "POST", SMART_LT + "/_semantic_search", {"query": "tea", "k": 10001}),
    ("semantic without long-term", "POST", "/{plain}/memories/long-term/_semantic_search", {"query": "tea"}),
    ("semantic without strategies", "POST", "/{embedded}/memories/long-term/_semantic_search",
     {"query": "tea"}),
    ("hybrid no body", "POST", SMART_LT + "/_hybrid_search", None),
    ("hybrid blank query", "POST", SMART_LT + "/_hybrid_search", {"query": ""}),
    ("hybrid weight range", "POST", SMART_LT + "/_hybrid_search",
     {"query": "tea", "bm25_weight": 1.5, "neural_weight": -0.5}),
    ("hybrid weight sum", "POST", SMART_LT + "/_hybrid_search",
     {"query": "tea", "bm25_weight": 0.6, "neural_weight": 0.6}),
    ("router no handler", "GET", "/x/y/z/w", None),
    ("router wrong method", "DELETE", "/_create", None),
]  # fmt: skip


def error_flow(side: Side, prefix: str) -> Trace:
    t = side.trace()
    ids = _containers(side, t, prefix)
    for label, method, path, body in ROWS:
        t.add(label, side.call(method, MC + path.format(**ids), body))
    dim = {
        **side.embedding(),
        "embedding_dimension": 768,
        "index_prefix": f"{prefix}-dim",
        "use_system_index": False,
    }
    t.add(
        "create dimension mismatch", side.call("POST", f"{MC}/_create", {"name": "dim", "configuration": dim})
    )
    t.add(
        "indices of embedded",
        side.call(
            "GET", f"/_cat/indices/{prefix}-emb-*", params={"format": "json", "h": "index", "s": "index"}
        ),
    )
    for cid in ids.values():
        side.call("DELETE", f"{MC}/{cid}", params={"delete_all_memories": "true"})
    return t


@pytest.fixture(scope="module")
def error_traces(sides: tuple[Side, Side]) -> tuple[Trace, Trace]:
    return both(sides, error_flow, new_prefix("err"))


def test_error_catalogue(error_traces: tuple[Trace, Trace]) -> None:
    deviations = {
        "add memory no body": ADD_MEMORY_EMPTY_BODY,
        "update container missing": UPDATE_ERRORS_4XX,
        "update unknown strategy": UPDATE_ERRORS_4XX,
        "search bad query": DSL_ALLOWLIST,
        "search with a global aggregation": DSL_ALLOWLIST,
        "search with a script": SCRIPTS_REFUSED,
        "create dimension mismatch": DIMENSION_CHECKED,
        "indices of embedded": LONG_TERM_WITHOUT_STRATEGIES,
        "semantic without strategies": LONG_TERM_WITHOUT_STRATEGIES,
    }
    compare_traces(*error_traces, deviations)
