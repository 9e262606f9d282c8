"""The ml-commons agentic-memory API through the real proxy, driven by opensearch-py (``client.plugins.ml``).

A flow like spec Appendix B, then the routes one by one, then every error row of Appendix A that applies
to a node without security, retention or an LLM, checked for status, ``error.type`` and ``error.reason``.
"""

from __future__ import annotations

import time
import uuid

from opensearchpy import OpenSearch

from tests.opensearch_memory_helpers import (
    EMBEDDER,
    EMBEDDING,
    MC,
    assert_error,
    call,
    new_prefix,
)

# --- Appendix B ----------------------------------------------------------------------------------------


def test_appendix_b_flow(client: OpenSearch, demo: str) -> None:
    ml = client.plugins.ml
    uuid.UUID(demo)  # container ids are UUIDs: valid GoodMem space ids too
    added = ml.add_agentic_memory(
        memory_container_id=demo,
        body={
            "messages": [{"role": "user", "content": [{"type": "text", "text": "I only drink green tea."}]}],
            "namespace": {"user_id": "u1"},
            "infer": True,
        },
    )
    assert set(added) == {"session_id", "working_memory_id"}  # S1 auto-created because llm_id is set
    # No LLM: memproxy writes the long-term memory through its extension route instead of extraction.
    written = call(
        client,
        "POST",
        f"{MC}/{demo}/memories/long-term/_memproxy_add",
        {
            "memory": "The user only drinks green tea.",
            "strategy_type": "USER_PREFERENCE",
            "namespace": {"user_id": "u1"},
        },
    )
    lt_id = written["long_term_memory_id"]
    call(
        client,
        "POST",
        f"{MC}/{demo}/memories/long-term/_memproxy_bulk",
        {
            "memories": [
                {"memory": "The user is training for a marathon.", "namespace": {"user_id": "u1"}},
                {"memory": "The user only drinks coffee.", "namespace": {"user_id": "u2"}},
            ]
        },
    )
    found = call(
        client,
        "POST",
        f"{MC}/{demo}/memories/long-term/_semantic_search",
        {"query": "what does the user drink", "k": 3, "namespace": {"user_id": "u1"}},
    )
    hits = found["hits"]["hits"]
    assert hits[0]["_id"] == lt_id
    assert all(h["_source"]["namespace"] == {"user_id": "u1"} for h in hits)
    assert all("memory_embedding" not in h["_source"] for h in hits)
    assert hits[0]["_index"].endswith("-memory-long-term")
    working = ml.get_agentic_memory(
        memory_container_id=demo, doc_type="working", id=added["working_memory_id"]
    )
    assert working["memory_container_id"] == demo
    assert working["payload_type"] == "conversational"
    assert working["namespace"] == {"user_id": "u1", "session_id": added["session_id"]}
    assert working["namespace_size"] == 2
    assert working["infer"] is True
    assert isinstance(working["created_time"], int) and working["created_time"] > 1_600_000_000_000
    assert list(working)[:2] == ["memory_container_id", "payload_type"]
    session = ml.get_agentic_memory(memory_container_id=demo, doc_type="sessions", id=added["session_id"])
    assert session["memory_container_id"] == demo
    # infer:true ran as a job through the session's LLM (llm1): the fact is in long-term memory, with its
    # ADD in history (docs/infer.md; tests/test_infer.py covers the pipeline).
    deadline = time.monotonic() + 30
    facts: list[str] = []
    while time.monotonic() < deadline and "I only drink green tea" not in facts:
        found = ml.search_agentic_memory(
            memory_container_id=demo,
            doc_type="long-term",
            body={"query": {"term": {"namespace.user_id": "u1"}}, "size": 50},
        )
        facts = [h["_source"]["memory"] for h in found["hits"]["hits"]]
        time.sleep(0.2)
    assert "I only drink green tea" in facts


# --- containers ----------------------------------------------------------------------------------------


def test_container_lifecycle(client: OpenSearch, node: OpenSearch) -> None:
    ml = client.plugins.ml
    prefix = new_prefix("life")
    created = ml.create_memory_container(
        body={
            "name": "life",
            "description": "d",
            "backend_roles": ["team:a"],
            "configuration": {"index_prefix": prefix},
            "x": 1,
        }
    )
    assert created["status"] == "created"
    cid = created["memory_container_id"]
    got = ml.get_memory_container(memory_container_id=cid)
    assert list(got) == [
        "name",
        "description",
        "owner",  # an authenticated caller created it, as under the security plugin
        "created_time",
        "last_updated_time",
        "configuration",
        "backend_roles",
    ]
    assert set(got["owner"]) == {"name", "backend_roles", "roles"} and got["owner"]["roles"] == ["ROOT"]
    assert got["configuration"] == {
        "index_prefix": prefix,
        "disable_history": False,
        "disable_session": False,
        "use_system_index": True,
    }
    updated = ml.update_memory_container(
        memory_container_id=cid, body={"name": "life2", "configuration": {**EMBEDDING}, "ignored": True}
    )
    assert updated["result"] == "updated" and updated["_id"] == cid and updated["_version"] == 2
    got = ml.get_memory_container(memory_container_id=cid)
    assert got["name"] == "life2" and got["configuration"]["embedding_model_id"] == EMBEDDER
    assert got["last_updated_time"] >= got["created_time"]
    # the first embedding model creates the long-term index: long-term writes work now
    call(client, "POST", f"{MC}/{cid}/memories/long-term/_memproxy_add", {"memory": "hello"})
    found = ml.search_memory_container(body={"query": {"term": {"name.keyword": "life2"}}, "size": 5})
    hit = next(h for h in found["hits"]["hits"] if h["_id"] == cid)
    assert {"_version", "_seq_no", "_primary_term"} <= set(hit)
    found_get = call(client, "GET", f"{MC}/_search", {"query": {"ids": {"values": [cid]}}})
    assert [h["_id"] for h in found_get["hits"]["hits"]] == [cid]
    deleted = ml.delete_memory_container(
        memory_container_id=cid, params={"delete_memories": "working,long-term"}
    )
    assert deleted["result"] == "deleted" and deleted["_id"] == cid
    assert not node.indices.exists(index=f".plugins-ml-am-{prefix}-memory-long-term")
    assert not node.indices.exists(index=f".plugins-ml-am-{prefix}-memory-working")
    assert node.indices.exists(index=f".plugins-ml-am-{prefix}-memory-history")
    node.indices.delete(index=f".plugins-ml-am-{prefix}-memory-*", expand_wildcards="all")


def test_delete_container_body_options(client: OpenSearch, node: OpenSearch) -> None:
    prefix = new_prefix("dbody")
    cid = client.plugins.ml.create_memory_container(
        body={"name": "x", "configuration": {"index_prefix": prefix}}
    )["memory_container_id"]
    working = f".plugins-ml-am-{prefix}-memory-working"
    assert node.indices.exists(index=working)
    call(client, "DELETE", f"{MC}/{cid}", {"delete_memories": ["working"]})
    assert not node.indices.exists(index=working)
    assert node.indices.exists(index=f".plugins-ml-am-{prefix}-memory-sessions")
    node.indices.delete(index=f".plugins-ml-am-{prefix}-memory-sessions")


# --- memories by type ----------------------------------------------------------------------------------


def test_working_memory_round_trip(client: OpenSearch, plain: str) -> None:
    ml = client.plugins.ml
    added = ml.add_agentic_memory(
        memory_container_id=plain,
        body={
            "payload_type": "DATA",
            "structured_data": {"k": "v"},
            "binary_data": "aGVsbG8=",
            "checkpoint_id": "cp1",
            "message_id": 3,
            "namespace": {"thread_id": "t1", "idx": 2},
            "metadata": {"type": "checkpoint", "step": 1},
            "tags": {"obj": {"a": 1}},
            "memory_type": "conversational",
        },
    )
    assert list(added) == ["working_memory_id"]  # no session: payload is data
    wid = added["working_memory_id"]
    got = ml.get_agentic_memory(memory_container_id=plain, doc_type="working", id=wid)
    assert got["payload_type"] == "data"
    assert got["namespace"] == {"thread_id": "t1", "idx": "2"}  # coerced to strings
    assert got["metadata"] == {"type": "checkpoint", "step": "1"}
    assert got["tags"] == {"obj": '{"a":1}'}
    assert got["infer"] is False and got["checkpoint_id"] == "cp1" and got["message_id"] == 3
    found = ml.search_agentic_memory(
        memory_container_id=plain,
        doc_type="working",
        body={
            "query": {"bool": {"filter": [{"term": {"namespace.thread_id": "t1"}}]}},
            "sort": [{"message_id": "desc"}],
        },
    )
    assert [h["_id"] for h in found["hits"]["hits"]] == [wid]
    assert found["hits"]["hits"][0]["_version"] == 1
    updated = ml.update_agentic_memory(
        memory_container_id=plain,
        doc_type="working",
        id=wid,
        body={"tags": {"x": 1}, "payload_type": "conversational"},
    )
    assert updated["result"] == "updated"
    got2 = ml.get_agentic_memory(memory_container_id=plain, doc_type="working", id=wid)
    assert got2["tags"] == {"x": 1} and got2["payload_type"] == "data"
    assert got2["last_updated_time"] == got["last_updated_time"]  # tags are not content (3.8)
    ml.update_agentic_memory(
        memory_container_id=plain, doc_type="working", id=wid, body={"structured_data": {"k": "w"}}
    )
    got3 = ml.get_agentic_memory(memory_container_id=plain, doc_type="working", id=wid)
    assert got3["last_updated_time"] >= got["last_updated_time"] and got3["structured_data"] == {"k": "w"}
    deleted = ml.delete_agentic_memory(memory_container_id=plain, doc_type="working", id=wid)
    assert deleted["result"] == "deleted"
    assert_error(
        lambda: ml.get_agentic_memory(memory_container_id=plain, doc_type="working", id=wid),
        404,
        "status_exception",
        "Memory not found",
    )


def test_sessions(client: OpenSearch, plain: str) -> None:
    ml = client.plugins.ml
    sid = f"s-{uuid.uuid4().hex[:8]}"
    body = {"session_id": sid, "summary": "first", "metadata": {"n": 1}, "namespace": {"user_id": 7}}
    assert ml.create_memory_container_session(memory_container_id=plain, body=body) == {
        "session_id": sid,
        "status": "created",
    }
    again = ml.create_memory_container_session(
        memory_container_id=plain, body={"session_id": sid, "summary": "2"}
    )
    assert again == {"session_id": sid, "status": "exists"}
    got = ml.get_agentic_memory(memory_container_id=plain, doc_type="sessions", id=sid)
    assert got["summary"] == "first" and got["metadata"] == {"n": 1} and got["namespace"] == {"user_id": "7"}
    auto = ml.create_memory_container_session(memory_container_id=plain, body={"summary": "auto"})
    assert auto["status"] == "created" and auto["session_id"] != sid
    # Strands' update sends an unknown "name": ignored; agents replaced
    ml.update_agentic_memory(
        memory_container_id=plain, doc_type="sessions", id=sid, body={"name": sid, "agents": {"a": {"x": 1}}}
    )
    assert ml.get_agentic_memory(memory_container_id=plain, doc_type="sessions", id=sid)["agents"] == {
        "a": {"x": 1}
    }
    # 3.8: add-memory with a client session id upserts the session and links the working doc
    sid2 = f"s-{uuid.uuid4().hex[:8]}"
    added = ml.add_agentic_memory(
        memory_container_id=plain,
        body={"messages": [{"role": "user", "content": [{"text": "hi"}]}], "namespace": {"session_id": sid2}},
    )
    assert added["session_id"] == sid2
    assert (
        ml.get_agentic_memory(memory_container_id=plain, doc_type="sessions", id=sid2)["memory_container_id"]
        == plain
    )
    by_session = ml.search_agentic_memory(
        memory_container_id=plain, doc_type="working", body={"query": {"term": {"session_id": sid2}}}
    )
    assert by_session["hits"]["total"]["value"] == 1


def test_long_term_get_update_delete(client: OpenSearch, demo: str, node: OpenSearch) -> None:
    ml = client.plugins.ml
    lt = call(
        client,
        "POST",
        f"{MC}/{demo}/memories/long-term/_memproxy_add",
        {"memory": "The sky is blue.", "tags": {"t": "1"}, "metadata": {"source": "web", "n": 2}},
    )
    lt_id = lt["long_term_memory_id"]
    uuid.UUID(lt_id)
    got = ml.get_agentic_memory(memory_container_id=demo, doc_type="long-term", id=lt_id)
    assert got["memory"] == "The sky is blue." and got["strategy_type"] == "SEMANTIC"
    assert len(got["memory_embedding"]) == 384 and "memory_container_id" not in got
    before = got["memory_embedding"]
    ml.update_agentic_memory(
        memory_container_id=demo, doc_type="long-term", id=lt_id, body={"memory": "Grass is green."}
    )
    after = ml.get_agentic_memory(memory_container_id=demo, doc_type="long-term", id=lt_id)
    assert after["memory"] == "Grass is green." and after["memory_embedding"] != before  # re-embedded
    assert after["last_updated_time"] >= got["last_updated_time"]
    raw = node.get(index=after_index(client, demo), id=lt_id)["_source"]
    assert raw["memory_container_id"] == demo
    assert raw["metadata"] == {"source": "web", "n": 2} and raw["metadata_index"]  # for GoodMem filters
    assert "metadata" not in after
    ml.delete_agentic_memory(memory_container_id=demo, doc_type="long-term", id=lt_id)
    assert_error(
        lambda: ml.get_agentic_memory(memory_container_id=demo, doc_type="long-term", id=lt_id),
        404,
        "status_exception",
        "Memory not found",
    )


def after_index(client: OpenSearch, cid: str) -> str:
    prefix = client.plugins.ml.get_memory_container(memory_container_id=cid)["configuration"]["index_prefix"]
    return f".plugins-ml-am-{prefix}-memory-long-term"


def test_memory_of_another_container_is_not_found(client: OpenSearch, node: OpenSearch) -> None:
    """Containers sharing a prefix share indices; ids never leak across containers."""
    ml = client.plugins.ml
    prefix = new_prefix("shared")
    a, b = (
        ml.create_memory_container(body={"name": n, "configuration": {"index_prefix": prefix}})[
            "memory_container_id"
        ]
        for n in ("a", "b")
    )
    wid = ml.add_agentic_memory(
        memory_container_id=a, body={"payload_type": "data", "structured_data": {"x": "1"}}
    )["working_memory_id"]
    assert_error(
        lambda: ml.get_agentic_memory(memory_container_id=b, doc_type="working", id=wid),
        404,
        "status_exception",
        "Memory not found",
    )
    assert (
        ml.search_agentic_memory(
            memory_container_id=b, doc_type="working", body={"query": {"match_all": {}}}
        )["hits"]["hits"]
        == []
    )
    assert (
        ml.delete_agentic_memory_query(
            memory_container_id=b, doc_type="working", body={"query": {"match_all": {}}}
        )["deleted"]
        == 0
    )
    # A shares its indices with B: deleting A with its memories removes A's documents, not B's indices
    # (ml-commons refuses the delete with 409, deviation shared-family-delete).
    bid = ml.add_agentic_memory(
        memory_container_id=b, body={"payload_type": "data", "structured_data": {"x": "2"}}
    )["working_memory_id"]
    working = f".plugins-ml-am-{prefix}-memory-working"
    ml.delete_memory_container(memory_container_id=a, params={"delete_all_memories": "true"})
    assert (
        ml.get_agentic_memory(memory_container_id=b, doc_type="working", id=bid)["memory_container_id"] == b
    )
    left = node.count(index=working, body={"query": {"term": {"memory_container_id": a}}})
    assert left["count"] == 0
    ml.delete_memory_container(memory_container_id=b, params={"delete_all_memories": "true"})
    assert not node.indices.exists(index=working)


def test_delete_by_query(client: OpenSearch, plain: str) -> None:
    ml = client.plugins.ml
    for i in range(3):
        ml.add_agentic_memory(
            memory_container_id=plain, body={"payload_type": "data", "namespace": {"dbq": "yes", "i": i}}
        )
    result = ml.delete_agentic_memory_query(
        memory_container_id=plain, doc_type="working", body={"query": {"term": {"namespace.dbq": "yes"}}}
    )
    assert result["deleted"] == 3 and result["failures"] == []
    left = ml.search_agentic_memory(
        memory_container_id=plain,
        doc_type="working",
        body={"query": {"term": {"namespace.dbq": "yes"}}, "size": 0},
    )
    assert left["hits"]["total"]["value"] == 0


def test_search_without_match_is_a_standard_empty_response(client: OpenSearch, plain: str) -> None:
    found = client.plugins.ml.search_agentic_memory(
        memory_container_id=plain, doc_type="sessions", body={"query": {"term": {"summary": "no-such-thing"}}}
    )
    assert found["hits"]["hits"] == [] and found["timed_out"] is False
