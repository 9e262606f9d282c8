"""ml-commons 3.9's caller-chosen container id and 3.8's session rules, through the real proxy.

The differences from ml-commons 3.6 are compared with the reference in
``tests/conformance/test_session_rules.py``; these are memproxy's own cases: every id rule with its
message, the id as a GoodMem space, and an add whose session document cannot be written.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from opensearchpy import OpenSearch

from tests.opensearch_memory_helpers import EMBEDDING, MC, assert_error, call, container_doc_count, new_prefix

_RULES = "memory container id must contain only letters, digits, underscores, and hyphens, and must start "
_RULES += "with a letter or digit"


@pytest.fixture
def prefix(node: OpenSearch) -> Iterator[str]:
    """A private non-system prefix, its indices dropped afterwards whatever the test left."""
    p = new_prefix("ids")
    yield p
    node.indices.delete(index=f"{p}-memory-*", expand_wildcards="all", ignore_unavailable=True)


def _body(prefix: str, chosen: object, **configuration: object) -> dict[str, object]:
    return {
        "name": prefix,
        "memory_container_id": chosen,
        "configuration": {"index_prefix": prefix, "use_system_index": False, **configuration},
    }


def test_chosen_container_id(
    client: OpenSearch, prefix: str, proxy_url: str, admin_headers: dict[str, str]
) -> None:
    chosen = f"{prefix}-Mine_1"
    ml = client.plugins.ml
    created = ml.create_memory_container(body=_body(prefix, chosen, **EMBEDDING))
    assert created == {"memory_container_id": chosen, "status": "created"}
    assert ml.get_memory_container(memory_container_id=chosen)["name"] == prefix
    # Taken, whatever the rest of the body says.
    assert_error(
        lambda: ml.create_memory_container(body={"name": "other", "memory_container_id": chosen}),
        409,
        "status_exception",
        f"memory container id '{chosen}' already exists",
    )
    # A container is a GoodMem space: found by the same id.
    space = httpx.get(f"{proxy_url}/v1/spaces/{chosen}", headers=admin_headers, timeout=30)
    assert space.status_code == 200 and space.json()["spaceId"] == chosen, space.text
    wid = ml.add_agentic_memory(
        memory_container_id=chosen, body={"payload_type": "data", "structured_data": {"k": "v"}}
    )["working_memory_id"]
    assert ml.get_agentic_memory(memory_container_id=chosen, doc_type="working", id=wid)["structured_data"]
    ml.delete_memory_container(memory_container_id=chosen, params={"delete_all_memories": "true"})
    assert_error(
        lambda: ml.get_memory_container(memory_container_id=chosen),
        404,
        "status_exception",
        f"Failed to find memory container with the provided memory container id: {chosen}",
    )


def test_a_number_is_read_as_its_text(client: OpenSearch, prefix: str) -> None:
    chosen = int(uuid.uuid4().int % 10**12) + 10**12  # 13 digits: unique, and no leading zero
    created = client.plugins.ml.create_memory_container(body=_body(prefix, chosen))
    assert created["memory_container_id"] == str(chosen)
    client.plugins.ml.delete_memory_container(
        memory_container_id=str(chosen), params={"delete_all_memories": "true"}
    )


@pytest.mark.parametrize(
    ("chosen", "reason"),
    [
        ("  ", "memory container id is invalid"),
        ("_x", "memory container id must not start with '_'"),
        ("-x", "memory container id must not start with '-'"),
        ("a" * 513, "memory container id is too long, max length is 512"),
        ("a.b", _RULES),
        ("a:b", _RULES),
        ("été", _RULES),
        ("a/b", _RULES),
    ],
)
def test_chosen_id_rules(client: OpenSearch, prefix: str, chosen: str, reason: str) -> None:
    assert_error(
        lambda: client.plugins.ml.create_memory_container(body=_body(prefix, chosen)),
        400,
        "illegal_argument_exception",
        reason,
    )
    found = call(client, "POST", f"{MC}/_search", {"query": {"match_phrase": {"name": prefix}}})
    assert found["hits"]["hits"] == []  # nothing stored


def test_an_object_is_a_parse_error(client: OpenSearch, prefix: str) -> None:
    assert_error(
        lambda: client.plugins.ml.create_memory_container(body=_body(prefix, {"id": "x"})),
        400,
        "parsing_exception",
        "Failed to parse object: expecting token of type [VALUE_STRING] but found [START_OBJECT]",
    )


def test_add_fails_when_its_session_cannot_be_written(
    client: OpenSearch, node: OpenSearch, prefix: str
) -> None:
    ml = client.plugins.ml
    cid = ml.create_memory_container(body=_body(prefix, None))["memory_container_id"]
    sessions = f"{prefix}-memory-sessions"
    node.indices.put_settings(index=sessions, body={"index.blocks.write": True})
    try:
        body = {"payload_type": "data", "structured_data": {"k": "v"}, "namespace": {"session_id": "s-new"}}
        # A write-blocked index is memproxy's retryable 503 (proxy/store/client.py), the node's error kept.
        info = assert_error(
            lambda: ml.add_agentic_memory(memory_container_id=cid, body=body),
            503,
            "cluster_block_exception",
            f"index [{sessions}] blocked by: [FORBIDDEN/8/index write (api)];",
        )
        assert info["status"] == 503
    finally:
        node.indices.put_settings(index=sessions, body={"index.blocks.write": False})
    assert container_doc_count(client, cid, "working") == 0  # no working memory without its session
    assert container_doc_count(client, cid, "sessions") == 0
    # Once the session can be written, the same add writes both.
    added = ml.add_agentic_memory(memory_container_id=cid, body=body)
    assert added["session_id"] == "s-new"
    session = ml.get_agentic_memory(memory_container_id=cid, doc_type="sessions", id="s-new")
    # The caller is authenticated (the root key): its name is the owner, as with ml-commons' security plugin.
    assert set(session) == {
        "owner_id",
        "memory_container_id",
        "namespace",
        "created_time",
        "last_updated_time",
    }
    assert session["namespace"] == {"session_id": "s-new"}
    ml.delete_memory_container(memory_container_id=cid, params={"delete_all_memories": "true"})
