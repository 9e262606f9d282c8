"""Containers, sessions and working memory: the same calls to ml-commons 3.6 and to memproxy, compared."""

from __future__ import annotations

from tests.conformance.compare import Trace, compare_traces
from tests.conformance.deviations import (
    CONTAINER_UPDATE_REFRESHES,
    DELETE_BY_QUERY_PROCEEDS,
    UPDATE_ERRORS_4XX,
    WORKING_SESSION_ID_FIELD,
)
from tests.conformance.sides import MC, Side, both, new_prefix


def container_lifecycle(side: Side, prefix: str) -> Trace:
    t = side.trace()
    ml = side.client.plugins.ml
    body = {
        "name": f"{prefix}-full",
        "description": "every part of the configuration",
        "configuration": {
            **side.embedding(),
            "llm_id": side.llm_id,
            "index_prefix": prefix,
            "use_system_index": False,
            "strategies": [
                {"type": "SEMANTIC", "namespace": ["user_id"]},
                {"type": "USER_PREFERENCE", "namespace": ["user_id", "agent_id"]},
            ],
            "parameters": {"llm_result_path": "$.choices[0].message.content"},
        },
    }
    created = t.add("create", side.run(lambda c: ml.create_memory_container(body=body)))
    cid = created.body["memory_container_id"]
    t.add("get", side.run(lambda c: ml.get_memory_container(memory_container_id=cid)))
    by_id = {"query": {"ids": {"values": [cid]}}}
    t.add("search containers by id", side.call("POST", f"{MC}/_search", by_id))
    # constant_score: BM25 statistics of the container index differ between the two clusters.
    by_name = {"query": {"constant_score": {"filter": {"match_phrase": {"name": f"{prefix}-full"}}}}}
    t.add("search containers by name", side.call("GET", f"{MC}/_search", by_name))
    update = {"name": f"{prefix}-renamed", "description": "renamed"}
    t.add("update", side.run(lambda c: ml.update_memory_container(memory_container_id=cid, body=update)))
    t.add("get after update", side.call("GET", f"{MC}/{cid}"))
    listing = {"format": "json", "h": "index", "s": "index"}
    t.add("indices", side.call("GET", f"/_cat/indices/{prefix}-*", params=listing))
    params = {"delete_all_memories": "true"}
    t.add("delete", side.run(lambda c: ml.delete_memory_container(memory_container_id=cid, params=params)))
    t.add("get after delete", side.call("GET", f"{MC}/{cid}"))
    return t


def test_container_lifecycle(sides: tuple[Side, Side]) -> None:
    prefix = new_prefix("life")
    compare_traces(*both(sides, container_lifecycle, prefix), {"update": CONTAINER_UPDATE_REFRESHES})


def sessions_and_working(side: Side, prefix: str) -> Trace:
    t = side.trace()
    ml = side.client.plugins.ml
    body = {"name": prefix, "configuration": {"index_prefix": prefix, "use_system_index": False}}
    cid = t.add("create", side.call("POST", f"{MC}/_create", body)).body["memory_container_id"]
    base = f"{MC}/{cid}/memories"
    session = {"namespace": {"user_id": "u1"}, "summary": "about tea", "metadata": {"topic": "tea"}}
    sid = t.add("create session", side.call("POST", f"{base}/sessions", session)).body["session_id"]
    t.add("get session", side.call("GET", f"{base}/sessions/{sid}"))
    conversational = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "I only drink green tea."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Noted: green tea."}]},
        ],
        "namespace": {"user_id": "u1", "session_id": sid},
        "tags": {"topic": "tea", "turn": 1},
        "metadata": {"source": "chat"},
    }
    added = t.add(
        "add conversational",
        side.run(lambda c: ml.add_agentic_memory(memory_container_id=cid, body=conversational)),
    )
    wid = added.body["working_memory_id"]
    data = {"structured_data": {"favourite": "tea", "cups": 3}, "payload_type": "data",
            "namespace": {"user_id": "u1"}}  # fmt: skip
    t.add("add data", side.call("POST", base, data))
    t.add("get working", side.call("GET", f"{base}/working/{wid}"))
    t.add("update working", side.call("PUT", f"{base}/working/{wid}", {"tags": {"topic": "coffee"}}))
    t.add("get working after update", side.call("GET", f"{base}/working/{wid}"))
    search = {"query": {"match_all": {}}, "sort": [{"created_time": "asc"}]}
    t.add("search working", side.call("POST", f"{base}/working/_search", search))
    t.add("search sessions", side.call("GET", f"{base}/sessions/_search", {"query": {"match_all": {}}}))
    t.add("update session", side.call("PUT", f"{base}/sessions/{sid}", {"summary": "about coffee"}))
    t.add("get session after update", side.call("GET", f"{base}/sessions/{sid}"))
    t.add("get long-term (disabled)", side.call("GET", f"{base}/long-term/nothing"))
    t.add("get history (disabled)", side.call("GET", f"{base}/history/nothing"))
    t.add("get missing working", side.call("GET", f"{base}/working/nothing"))
    t.add("delete working", side.call("DELETE", f"{base}/working/{wid}"))
    t.add("get deleted working", side.call("GET", f"{base}/working/{wid}"))
    dbq = {"query": {"term": {"namespace.user_id": "u1"}}}
    t.add("delete_by_query working", side.call("POST", f"{base}/working/_delete_by_query", dbq))
    t.add("search working after delete", side.call("POST", f"{base}/working/_search", search))
    t.add("delete session", side.call("DELETE", f"{base}/sessions/{sid}"))
    t.add("delete", side.call("DELETE", f"{MC}/{cid}", params={"delete_all_memories": "true"}))
    return t


def test_sessions_and_working_memory(sides: tuple[Side, Side]) -> None:
    prefix = new_prefix("work")
    deviations = {
        "search working": WORKING_SESSION_ID_FIELD,
        "delete_by_query working": DELETE_BY_QUERY_PROCEEDS,
    }
    compare_traces(*both(sides, sessions_and_working, prefix), deviations)


def configuration_changes(side: Side, prefix: str) -> Trace:
    t = side.trace()
    body = {"name": prefix, "configuration": side.configuration(prefix)}
    cid = t.add("create", side.call("POST", f"{MC}/_create", body)).body["memory_container_id"]
    strategy = t.add("get", side.call("GET", f"{MC}/{cid}")).body["configuration"]["strategies"][0]
    more = {
        "configuration": {"strategies": [{"type": "USER_PREFERENCE", "namespace": ["user_id", "agent_id"]}]}
    }
    t.add("add a strategy", side.call("PUT", f"{MC}/{cid}", more))
    t.add("get with two strategies", side.call("GET", f"{MC}/{cid}"))
    off = {"configuration": {"strategies": [{"id": strategy["id"], "type": "SEMANTIC", "enabled": False}]}}
    t.add("disable a strategy", side.call("PUT", f"{MC}/{cid}", off))
    retype = {"configuration": {"strategies": [{"id": strategy["id"], "type": "SUMMARY"}]}}
    t.add("change a strategy's type", side.call("PUT", f"{MC}/{cid}", retype))
    embedding = {"configuration": {**side.embedding(), "embedding_dimension": 768}}
    t.add("change the embedding", side.call("PUT", f"{MC}/{cid}", embedding))
    t.add("get after changes", side.call("GET", f"{MC}/{cid}"))
    base = f"{MC}/{cid}/memories"
    custom = {"session_id": f"{prefix}-s1", "summary": "first"}
    t.add("create custom session", side.call("POST", f"{base}/sessions", custom))
    t.add(
        "create custom session again", side.call("POST", f"{base}/sessions", {**custom, "summary": "second"})
    )
    t.add("get custom session", side.call("GET", f"{base}/sessions/{prefix}-s1"))
    data = {
        "binary_data": "aGVsbG8=",
        "payload_type": "data",
        "namespace": {"agent_id": "a1"},
        "tags": {"n": 7},
    }
    wid = t.add("add binary data", side.call("POST", base, data)).body["working_memory_id"]
    t.add("get binary data", side.call("GET", f"{base}/working/{wid}"))
    t.add(
        "search with GET", side.call("GET", f"{base}/working/_search", {"query": {"term": {"tags.n": "7"}}})
    )
    params = {"delete_memories": "working"}
    t.add("delete keeping sessions", side.call("DELETE", f"{MC}/{cid}", params=params))
    t.add(
        "indices left",
        side.call("GET", f"/_cat/indices/{prefix}-*", params={"format": "json", "h": "index", "s": "index"}),
    )
    return t


def test_configuration_changes_sessions_and_data(sides: tuple[Side, Side]) -> None:
    prefix = new_prefix("conf")
    deviations = {
        "add a strategy": CONTAINER_UPDATE_REFRESHES,
        "disable a strategy": CONTAINER_UPDATE_REFRESHES,
        "change a strategy's type": UPDATE_ERRORS_4XX,
        "change the embedding": UPDATE_ERRORS_4XX,
    }
    compare_traces(*both(sides, configuration_changes, prefix), deviations)
