"""Every error row of spec Appendix A that applies to memproxy (no security, retention or LLM), plus bad
input in general: the OpenSearch envelope with the right status, ``type`` and ``reason``, never a 500 with
a traceback, and nothing stored half."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from opensearchpy import OpenSearch
from opensearchpy.exceptions import TransportError

from tests.opensearch_memory_helpers import (
    EMBEDDER,
    EMBEDDING,
    MC,
    assert_error,
    call,
    container_doc_count,
    error_body,
    new_prefix,
)

# --- Appendix A ----------------------------------------------------------------------------------------

_PINNED_OFF = (
    "Cannot set pinned: the memory retention feature is not enabled. To enable it, please update the cluster "
    "setting plugins.ml_commons.memory.retention_enabled"
)


def _errors(demo: str, plain: str, missing: str) -> list[tuple[str, str, str, Any, int, str, str]]:
    """(id, method, path, body, status, type, reason) for every applicable Appendix A row."""
    lt = f"{MC}/{demo}/memories/long-term"
    return [
        (
            "bad type",
            "GET",
            f"{MC}/{demo}/memories/short/x",
            None,
            400,
            "illegal_argument_exception",
            "Invalid memory type: short. Must be one of: sessions, working, long-term, history",
        ),
        (
            "container missing",
            "POST",
            f"{MC}/{missing}/memories",
            {"payload_type": "data"},
            404,
            "status_exception",
            "Memory container not found",
        ),
        (
            "container missing search",
            "GET",
            f"{MC}/{missing}/memories/working/_search",
            {"query": {"match_all": {}}},
            404,
            "status_exception",
            "Memory container not found",
        ),
        (
            "create no body",
            "POST",
            f"{MC}/_create",
            None,
            400,
            "illegal_argument_exception",
            "Request body is required",
        ),
        (
            "create no name",
            "POST",
            f"{MC}/_create",
            {"description": "x"},
            400,
            "illegal_argument_exception",
            "name is null",
        ),
        (
            "create bad model type",
            "POST",
            f"{MC}/_create",
            {"name": "x", "configuration": {"embedding_model_type": "x"}},
            400,
            "illegal_argument_exception",
            "Wrong function name",
        ),
        (
            "create unknown model",
            "POST",
            f"{MC}/_create",
            {"name": "x", "configuration": {**EMBEDDING, "embedding_model_id": "no-such-model"}},
            400,
            "illegal_argument_exception",
            "Embedding model with ID no-such-model not found",
        ),
        (
            "create sparse",
            "POST",
            f"{MC}/_create",
            {
                "name": "x",
                "configuration": {"embedding_model_type": "SPARSE_ENCODING", "embedding_model_id": EMBEDDER},
            },
            400,
            "illegal_argument_exception",
            "Embedding model must be of type SPARSE_ENCODING or REMOTE, found: TEXT_EMBEDDING",
        ),
        (
            "create bad prefix",
            "POST",
            f"{MC}/_create",
            {"name": "x", "configuration": {"index_prefix": "a#b"}},
            400,
            "parse_exception",
            "missing or invalid index prefix [a#b] must not contain '#'",
        ),
        (
            "create prefix control",
            "POST",
            f"{MC}/_create",
            {"name": "x", "configuration": {"index_prefix": "a\u0001"}},
            400,
            "parse_exception",
            "Index prefix must not contain any control characters",
        ),
        (
            "create bad role",
            "POST",
            f"{MC}/_create",
            {"name": "x", "backend_roles": [""]},
            400,
            "parse_exception",
            "Backend role cannot be empty or blank",
        ),
        (
            "create retention",
            "POST",
            f"{MC}/_create",
            {"name": "x", "configuration": {"retention_policy": {"sessions": {"max_count": 3}}}},
            403,
            "status_exception",
            "Cannot set retention_policy: the memory retention feature is not enabled. To enable it, please "
            "update the cluster setting plugins.ml_commons.memory.retention_enabled",
        ),
        (
            "get container missing",
            "GET",
            f"{MC}/{missing}",
            None,
            404,
            "status_exception",
            f"Failed to find memory container with the provided memory container id: {missing}",
        ),
        (
            "update no body",
            "PUT",
            f"{MC}/{plain}",
            None,
            400,
            "illegal_argument_exception",
            "Update memory container request has empty body",
        ),
        (
            "update missing",
            "PUT",
            f"{MC}/{missing}",
            {"name": "x"},
            404,
            "status_exception",
            "Memory container not found",
        ),
        (
            "update strategy id",
            "PUT",
            f"{MC}/{demo}",
            {"configuration": {"strategies": [{"id": "nope"}]}},
            404,
            "status_exception",
            "Strategy with id nope not found",
        ),
        (
            "delete missing",
            "DELETE",
            f"{MC}/{missing}",
            None,
            404,
            "status_exception",
            "Memory container not found",
        ),
        (
            "add empty body",
            "POST",
            f"{MC}/{plain}/memories",
            None,
            400,
            "illegal_argument_exception",
            "Add memory request has empty body",
        ),
        (
            "add no role",
            "POST",
            f"{MC}/{plain}/memories",
            {"messages": [{"content": []}]},
            400,
            "illegal_argument_exception",
            "Message must have role and content",
        ),
        (
            "add bad payload",
            "POST",
            f"{MC}/{plain}/memories",
            {"payload_type": "x"},
            400,
            "illegal_argument_exception",
            "Invalid working memory type: x. Must be one of: CONVERSATIONAL, DATA",
        ),
        (
            "add infer no messages",
            "POST",
            f"{MC}/{demo}/memories",
            {"infer": True},
            400,
            "illegal_argument_exception",
            "No messages provided when inferring memory",
        ),
        (
            "add infer no llm",
            "POST",
            f"{MC}/{plain}/memories",
            {"infer": True, "messages": [{"role": "user", "content": [{"text": "x"}]}]},
            400,
            "illegal_argument_exception",
            "infer=true requires llm_model_id to be configured in memory storage",
        ),
        (
            "add pinned",
            "POST",
            f"{MC}/{plain}/memories",
            {"pinned": True},
            400,
            "status_exception",
            "pinned field is not supported for working memory type. To preserve a conversation, pin the "
            "session instead.",
        ),
        (
            "add content not array",
            "POST",
            f"{MC}/{plain}/memories",
            {"messages": [{"role": "u", "content": "x"}]},
            400,
            "parsing_exception",
            "Failed to parse object: expecting token of type [START_ARRAY] but found [VALUE_STRING]",
        ),
        (
            "session no body",
            "POST",
            f"{MC}/{plain}/memories/sessions",
            None,
            400,
            "illegal_argument_exception",
            "Request body is required",
        ),
        (
            "type disabled get",
            "GET",
            f"{MC}/{plain}/memories/long-term/x",
            None,
            404,
            "status_exception",
            "Memory index not found",
        ),
        (
            "doc missing",
            "GET",
            f"{MC}/{plain}/memories/working/nope",
            None,
            404,
            "status_exception",
            "Memory not found",
        ),
        (
            "doc missing delete",
            "DELETE",
            f"{MC}/{plain}/memories/working/nope",
            None,
            404,
            "status_exception",
            "Memory not found",
        ),
        (
            "update memory no body",
            "PUT",
            f"{MC}/{plain}/memories/working/x",
            None,
            400,
            "illegal_argument_exception",
            "Update memory request has empty body",
        ),
        (
            "update memory empty",
            "PUT",
            f"{MC}/{plain}/memories/working/x",
            {},
            400,
            "illegal_argument_exception",
            "Text cannot be null or empty",
        ),
        (
            "update history",
            "PUT",
            f"{MC}/{demo}/memories/history/x",
            {"a": 1},
            404,
            "status_exception",
            "Can't update memory history",
        ),
        (
            "update pinned",
            "PUT",
            f"{MC}/{plain}/memories/sessions/x",
            {"pinned": True},
            403,
            "status_exception",
            _PINNED_OFF,
        ),
        (
            "search no body",
            "POST",
            f"{MC}/{plain}/memories/working/_search",
            None,
            400,
            "illegal_argument_exception",
            "Search memories request has empty body",
        ),
        (
            "dbq no query",
            "POST",
            f"{MC}/{plain}/memories/working/_delete_by_query",
            {},
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: Query is required;",
        ),
        (
            "dbq disabled",
            "POST",
            f"{MC}/{plain}/memories/long-term/_delete_by_query",
            {"query": {"match_all": {}}},
            400,
            "status_exception",
            "Invalid memory type or memory type is disabled: long-term",
        ),
        (
            "semantic no body",
            "POST",
            f"{lt}/_semantic_search",
            None,
            400,
            "illegal_argument_exception",
            "Semantic search memories request has empty body",
        ),
        (
            "hybrid no body",
            "POST",
            f"{lt}/_hybrid_search",
            None,
            400,
            "illegal_argument_exception",
            "Hybrid search memories request has empty body",
        ),
        (
            "semantic blank",
            "POST",
            f"{lt}/_semantic_search",
            {"query": "  "},
            400,
            "illegal_argument_exception",
            "query cannot be null or blank",
        ),
        (
            "semantic k",
            "POST",
            f"{lt}/_semantic_search",
            {"query": "x", "k": 10001},
            400,
            "illegal_argument_exception",
            "k must be between 1 and 10000",
        ),
        (
            "hybrid k",
            "POST",
            f"{lt}/_hybrid_search",
            {"query": "x", "k": 0},
            400,
            "illegal_argument_exception",
            "k must be between 1 and 10000",
        ),
        (
            "hybrid range",
            "POST",
            f"{lt}/_hybrid_search",
            {"query": "x", "bm25_weight": 1.5, "neural_weight": -0.5},
            400,
            "illegal_argument_exception",
            "bm25_weight and neural_weight must be between 0.0 and 1.0",
        ),
        (
            "hybrid sum",
            "POST",
            f"{lt}/_hybrid_search",
            {"query": "x", "bm25_weight": 0.6, "neural_weight": 0.6},
            400,
            "illegal_argument_exception",
            "bm25_weight and neural_weight must sum to 1.0, got 1.2",
        ),
        (
            "not searchable",
            "POST",
            f"{MC}/{plain}/memories/long-term/_semantic_search",
            {"query": "x"},
            400,
            "status_exception",
            "This memory container does not have an embedding model configured. Semantic search requires a "
            "memory container with an embedding model (TEXT_EMBEDDING or SPARSE_ENCODING). Please update the "
            "memory container configuration to add an embedding model.",
        ),
        (
            "semantic missing",
            "POST",
            f"{MC}/{missing}/memories/long-term/_semantic_search",
            {"query": "x"},
            404,
            "status_exception",
            "Memory container not found",
        ),
    ]


def test_error_catalogue(client: OpenSearch, demo: str, plain: str) -> None:
    missing = str(uuid.uuid4())
    for label, method, path, body, status, etype, reason in _errors(demo, plain, missing):
        try:
            client.transport.perform_request(method, path, body=body)
        except TransportError as exc:
            info = error_body(exc)
            assert exc.status_code == status, (label, info)
            assert info["status"] == status, label
            assert info["error"]["type"] == etype, (label, info)
            assert info["error"]["reason"] == reason, (label, info)
            assert info["error"]["root_cause"][0] == {"type": etype, "reason": reason}, label
        else:
            pytest.fail(f"{label}: {method} {path} succeeded")


def test_update_embedding_change_and_strategy_type(client: OpenSearch, demo: str) -> None:
    cfg = client.plugins.ml.get_memory_container(memory_container_id=demo)["configuration"]
    sid = cfg["strategies"][0]["id"]
    assert_error(
        lambda: client.plugins.ml.update_memory_container(
            memory_container_id=demo, body={"configuration": {**EMBEDDING, "embedding_dimension": 768}}
        ),
        400,
        "illegal_argument_exception",
        "Cannot change embedding configuration once strategies are configured. The long-term memory index "
        f"already exists with specific embedding mappings. Current: {{embedding_model_id={EMBEDDER}, "
        "embedding_model_type=TEXT_EMBEDDING, dimension=384}. Create a new memory container if you need "
        "different embedding configuration.",
    )
    assert_error(
        lambda: client.plugins.ml.update_memory_container(
            memory_container_id=demo, body={"configuration": {"strategies": [{"id": sid, "type": "SUMMARY"}]}}
        ),
        400,
        "illegal_argument_exception",
        f"Cannot change strategy type from USER_PREFERENCE to SUMMARY for strategy {sid}",
    )


def test_dimension_must_match_the_embedder(client: OpenSearch) -> None:
    assert_error(
        lambda: client.plugins.ml.create_memory_container(
            body={"name": "x", "configuration": {**EMBEDDING, "embedding_dimension": 768}}
        ),
        400,
        "illegal_argument_exception",
        f"Embedding dimension 768 does not match the dimension of embedding model {EMBEDDER} (384)",
    )


def test_shared_index_conflict(client: OpenSearch, node: OpenSearch) -> None:
    prefix = new_prefix("conflict")
    index = f"{prefix}-memory-long-term"
    node.indices.create(
        index=index,
        body={
            "settings": {"index": {"knn": True}},
            "mappings": {
                "properties": {
                    "memory_embedding": {
                        "type": "knn_vector",
                        "dimension": 8,
                        "method": {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"},
                    }
                }
            },
        },
    )
    try:
        with pytest.raises(TransportError) as err:
            client.plugins.ml.create_memory_container(
                body={
                    "name": "x",
                    "configuration": {**EMBEDDING, "index_prefix": prefix, "use_system_index": False},
                }
            )
        assert err.value.status_code == 400
        assert error_body(err.value)["error"]["reason"].startswith(
            "Cannot create memory container: Embedding configuration conflicts with existing shared index."
        )
        assert not node.indices.exists(index=f"{prefix}-memory-working")  # nothing created half
    finally:
        node.indices.delete(index=index)


def test_search_failure_is_wrapped(client: OpenSearch, plain: str) -> None:
    with pytest.raises(TransportError) as err:
        client.plugins.ml.search_agentic_memory(
            memory_container_id=plain,
            doc_type="working",
            body={"query": {"match_all": {}}, "sort": [{"nope": "asc"}]},
        )
    assert err.value.status_code == 500
    error = error_body(err.value)["error"]
    assert error["type"] == "exception" and error["reason"].startswith("Search execution failed: ")
    assert error["caused_by"]["type"]
    # a clause off the Query DSL allowlist is a 400 naming it (deviation dsl-allowlist)
    with pytest.raises(TransportError) as bad:
        client.plugins.ml.search_agentic_memory(
            memory_container_id=plain, doc_type="working", body={"query": {"no_such_query": {}}}
        )
    assert bad.value.status_code == 400
    assert error_body(bad.value)["error"]["type"] == "illegal_argument_exception"
    assert "[no_such_query]" in error_body(bad.value)["error"]["reason"]
    # so is a value the source parser refuses (the fuzz suite's find: a 500 before)
    with pytest.raises(TransportError) as negative:
        client.plugins.ml.search_agentic_memory(
            memory_container_id=plain, doc_type="working", body={"query": {"match_all": {}}, "size": -1}
        )
    assert negative.value.status_code == 400
    assert error_body(negative.value)["error"]["type"] == "illegal_argument_exception"
    with pytest.raises(TransportError) as huge:
        client.plugins.ml.search_agentic_memory(
            memory_container_id=plain, doc_type="working", body={"size": 3.078183046438335e16}
        )
    assert huge.value.status_code == 400
    assert error_body(huge.value)["error"]["type"] == "input_coercion_exception"


def test_router_answers(client: OpenSearch, plain: str) -> None:
    with pytest.raises(TransportError) as err:
        client.transport.perform_request("POST", f"{MC}/{plain}")
    assert err.value.status_code == 405
    reason = f"Incorrect HTTP method for uri [{MC}/{plain}] and method [POST], allowed: [GET, PUT, DELETE]"
    assert err.value.info == {
        "error": reason,
        "status": 405,
    }
    with pytest.raises(TransportError) as err2:
        client.transport.perform_request(
            "POST", f"{MC}/{plain}/memories/_delete_by_query", body={"query": {}}
        )
    assert err2.value.status_code == 400
    assert err2.value.info == {
        "error": f"no handler found for uri [{MC}/{plain}/memories/_delete_by_query] and method [POST]"
    }


# --- bad input: never a 500, nothing stored half -------------------------------------------------------

_GARBAGE: list[Any] = [
    [],
    "text",
    3,
    {"k": "abc"},
    {"namespace": [1]},
    {"messages": "x"},
    {"query": {"a": []}},
    {"query": ["x"]},
    {"memories": [1]},
    {"messages": [{"role": "user", "content": ["not an object"]}]},
    {"configuration": []},
]


# Three routes ignore body fields they do not use, as ml-commons 3.6 does (checked against the reference node,
# which answers 2xx to each of these pairs too): these (body, route) pairs must be accepted, every other pair
# must be a 4xx with a JSON error body, and none may be a 5xx. (ml-commons itself also accepts the
# non-object message content on POST memories, and answers 500 to {"namespace": [1]} there and on sessions;
# memproxy answers 400 to both.)
_ACCEPTED_AS_UPSTREAM: dict[str, set[str]] = {
    '{"k": "abc"}': {"PUT container", "POST memories", "POST sessions"},
    '{"namespace": [1]}': {"PUT container"},
    '{"messages": "x"}': {"PUT container", "POST sessions"},
    '{"query": {"a": []}}': {"PUT container", "POST memories", "POST sessions"},
    '{"query": ["x"]}': {"PUT container", "POST memories", "POST sessions"},
    '{"memories": [1]}': {"PUT container", "POST memories", "POST sessions"},
    '{"messages": [{"role": "user", "content": ["not an object"]}]}': {"PUT container", "POST sessions"},
    '{"configuration": []}': {"POST memories", "POST sessions"},
}


@pytest.mark.parametrize("body", _GARBAGE, ids=[json.dumps(g)[:20] for g in _GARBAGE])
def test_garbage_bodies_are_4xx(client: OpenSearch, demo: str, body: Any) -> None:
    labels = {
        "PUT container": f"PUT {MC}/{demo}",
        "POST memories": f"POST {MC}/{demo}/memories",
        "POST sessions": f"POST {MC}/{demo}/memories/sessions",
    }
    accepted_as_upstream = {labels[r] for r in _ACCEPTED_AS_UPSTREAM.get(json.dumps(body), set())}
    routes = [
        ("POST", f"{MC}/_create"),
        ("PUT", f"{MC}/{demo}"),
        ("POST", f"{MC}/{demo}/memories"),
        ("POST", f"{MC}/{demo}/memories/sessions"),
        ("PUT", f"{MC}/{demo}/memories/working/x"),
        ("POST", f"{MC}/{demo}/memories/working/_search"),
        ("POST", f"{MC}/{demo}/memories/working/_delete_by_query"),
        ("POST", f"{MC}/{demo}/memories/long-term/_semantic_search"),
        ("POST", f"{MC}/{demo}/memories/long-term/_hybrid_search"),
        ("POST", f"{MC}/{demo}/memories/long-term/_memproxy_add"),
        ("POST", f"{MC}/{demo}/memories/long-term/_memproxy_bulk"),
    ]
    accepted = set()
    for method, path in routes:
        try:
            client.transport.perform_request(method, path, body=body)
        except TransportError as exc:
            assert isinstance(exc.status_code, int) and 400 <= exc.status_code < 500, (method, path, exc.info)
            assert "error" in error_body(exc), (method, path, exc.info)
        else:
            accepted.add(f"{method} {path}")
    assert accepted == accepted_as_upstream, f"garbage body {body!r}"


def test_invalid_json_is_a_400(client: OpenSearch, memproxy_url: str, admin_headers: dict[str, str]) -> None:
    req = urllib.request.Request(
        f"{memproxy_url}{MC}/_create",
        data=b"{bad",
        method="POST",
        headers={"Content-Type": "application/json", **admin_headers},
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req)
    assert err.value.code == 400
    assert json.loads(err.value.read())["error"]["type"] == "json_parse_exception"


def test_bulk_is_all_or_nothing(client: OpenSearch, demo: str) -> None:
    before = container_doc_count(client, demo, "long-term")
    # one invalid item: rejected before anything is written
    with pytest.raises(TransportError) as err:
        call(
            client,
            "POST",
            f"{MC}/{demo}/memories/long-term/_memproxy_bulk",
            {"memories": [{"memory": "fine"}, {"memory": " "}]},
        )
    assert err.value.status_code == 400
    # one item the node refuses (a keyword term over Lucene's 32766-byte limit): the others are undone
    with pytest.raises(TransportError) as err2:
        call(
            client,
            "POST",
            f"{MC}/{demo}/memories/long-term/_memproxy_bulk",
            {
                "memories": [
                    {"memory": "first"},
                    {"memory": "second", "strategy_id": "x" * 40000},
                    {"memory": "third"},
                ]
            },
        )
    assert err2.value.status_code == 400
    assert error_body(err2.value)["error"]["type"] == "illegal_argument_exception"
    assert container_doc_count(client, demo, "long-term") == before


def test_refused_add_memory_stores_no_session(client: OpenSearch, demo: str) -> None:
    sessions, working = (
        container_doc_count(client, demo, "sessions"),
        container_doc_count(client, demo, "working"),
    )
    for body in (
        {"messages": [{"role": "user", "content": ["not an object"]}], "namespace": {"session_id": "never"}},
        {
            "messages": [{"role": "user", "content": [{"text": "x"}]}],
            "message_id": "seven",
            "namespace": {"u": "1"},
        },
    ):
        with pytest.raises(TransportError) as err:
            client.plugins.ml.add_agentic_memory(memory_container_id=demo, body=body)
        assert err.value.status_code == 400
    assert container_doc_count(client, demo, "sessions") == sessions
    assert container_doc_count(client, demo, "working") == working
