"""Stored data that cannot be shadowed or resurrected, against the real proxy and node (docs/security.md,
"Stored data: ids, atomic writes, scripts and search deadlines").

Two tenants, each with a GoodMem space of their own. A client-chosen memory id is unique across every space
and container (a taken id is 409 wherever it is taken), so nothing one tenant writes can stand in for the
other's memory through GoodMem get, content, retrieve or list, or ml-commons get. Deleting a memory removes
its chunks; deleting a space removes its chunks, records, grants and what the caches hold; a space recreated
with the same caller-chosen id starts empty, even when a predecessor left documents behind. Counts are read
from the node directly, not only through the proxy.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.adversarial.tenants import Tenant, make_tenant
from tests.goodmem_helpers import root_api_key

pytestmark = pytest.mark.timeout(300)

MC = "/_plugins/_ml/memory_containers"
MEMORIES = "memproxy-goodmem-memories"
GRANTS = "memproxy-goodmem-grants"
MEMORY_INDICES = (
    ".plugins-ml-am-*-memory-*,*-memory-long-term,*-memory-working,*-memory-sessions,*-memory-history"
)
SMALL_CHUNKS = {"recursive": {"chunkSize": 40, "chunkOverlap": 0, "keepStrategy": "KEEP_END"}}
LONG_TEXT = "The first part is about tea. The second part is about coffee. The third part is about cocoa."


@dataclass
class World:
    url: str
    node: str
    root: httpx.Client
    alice: Tenant
    bob: Tenant
    embedder: str

    def as_(self, who: Tenant) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=who.headers, timeout=120)


@pytest.fixture(scope="module")
def world(proxy_url: str, opensearch_url: str) -> Iterator[World]:
    key = root_api_key(proxy_url, opensearch_url)
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": key}, timeout=120) as root:
        embedder = root.get("/v1/embedders").json()["embedders"][0]["embedderId"]
        yield World(
            proxy_url, opensearch_url, root, make_tenant(root, "alice"), make_tenant(root, "bob"), embedder
        )


def new_space(client: httpx.Client, w: World, space_id: str | None = None) -> str:
    body: dict[str, Any] = {
        "name": f"integrity-{uuid.uuid4().hex[:8]}",
        "spaceEmbedders": [{"embedderId": w.embedder}],
    }
    if space_id:
        body["spaceId"] = space_id
    res = client.post("/v1/spaces", json=body)
    assert res.status_code in (200, 201), res.text
    return str(res.json()["spaceId"])


def node_count(w: World, index: str, query: dict[str, Any]) -> int:
    res = httpx.post(
        f"{w.node}/{index}/_count",
        params={"expand_wildcards": "all", "ignore_unavailable": "true", "allow_no_indices": "true"},
        json={"query": query},
        timeout=30,
    )
    assert res.status_code == 200, res.text
    return int(res.json()["count"])


def retrieve(client: httpx.Client, space_id: str, message: str, size: int = 10) -> list[dict[str, Any]]:
    res = client.post(
        "/v1/memories:retrieve",
        json={
            "message": message,
            "spaceKeys": [{"spaceId": space_id}],
            "requestedSize": size,
            "fetchMemory": True,
        },
    )
    assert res.status_code == 200, res.text
    return [json.loads(line) for line in res.text.splitlines() if line.strip()]


def definitions(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        e["memoryDefinition"]["memoryId"]: e["memoryDefinition"] for e in events if "memoryDefinition" in e
    }


def statuses(events: list[dict[str, Any]]) -> list[str]:
    return [e["status"]["code"] for e in events if "status" in e]


# --- ids cannot cross tenants -------------------------------------------------------------------------


def test_a_taken_id_is_409_wherever_it_is_taken(world: World) -> None:
    w = world
    with w.as_(w.alice) as alice, w.as_(w.bob) as bob:
        space_a, space_b = new_space(alice, w), new_space(bob, w)
        mine = str(uuid.uuid4())
        created = alice.post(
            "/v1/memories",
            json={"spaceId": space_a, "memoryId": mine, "originalContent": "alice's tea notes"},
        )
        assert created.status_code == 201, created.text
        added = alice.post(
            f"{MC}/{space_a}/memories/long-term/_memproxy_add", json={"memory": "alice's coffee notes"}
        )
        assert added.status_code == 200, added.text
        os_id = added.json()["long_term_memory_id"]
        chunk_id = next(
            e["retrievedItem"]["chunk"]["chunk"]["chunkId"]
            for e in retrieve(alice, space_a, "tea")
            if "retrievedItem" in e and e["retrievedItem"]["chunk"]["chunk"]["memoryId"] == mine
        )

        # Bob names each of alice's ids (a record, an ml-commons memory, a chunk): 409, nothing written.
        for taken in (mine, os_id, chunk_id):
            res = bob.post(
                "/v1/memories", json={"spaceId": space_b, "memoryId": taken, "originalContent": "intruder"}
            )
            assert res.status_code == 409, res.text
            assert res.json()["status"] == 409
        fresh = str(uuid.uuid4())
        batch = bob.post(
            "/v1/memories:batchCreate",
            json={
                "requests": [
                    {"spaceId": space_b, "memoryId": mine, "originalContent": "intruder"},
                    {"spaceId": space_b, "memoryId": os_id, "originalContent": "intruder"},
                    {"spaceId": space_b, "memoryId": fresh, "originalContent": "bob's own"},
                    {"spaceId": space_b, "memoryId": fresh, "originalContent": "twice in one request"},
                ]
            },
        )
        assert batch.status_code == 207, batch.text
        codes = [r.get("error", {}).get("code") for r in batch.json()["results"]]
        assert codes == [409, 409, None, 409], batch.text
        assert node_count(w, MEMORIES, {"term": {"space_id": space_b}}) == 1
        assert node_count(w, MEMORY_INDICES, {"term": {"memory_container_id": space_b}}) == 1
        # Alice's own space cannot take an id twice either.
        again = alice.post(
            "/v1/memories", json={"spaceId": space_a, "memoryId": mine, "originalContent": "x"}
        )
        assert again.status_code == 409

        # Every read of alice's still shows alice's.
        got = alice.get(f"/v1/memories/{mine}", params={"includeContent": "true"}).json()
        assert got["spaceId"] == space_a and got["processingStatus"] == "COMPLETED"
        assert alice.get(f"/v1/memories/{mine}/content").text == "alice's tea notes"
        assert alice.get(f"/v1/memories/{os_id}").json()["spaceId"] == space_a
        assert alice.get(f"/v1/memories/{os_id}/content").text == "alice's coffee notes"
        listed = {
            m["memoryId"]: m["spaceId"]
            for m in alice.get(f"/v1/spaces/{space_a}/memories").json()["memories"]
        }
        assert listed == {mine: space_a, os_id: space_a}
        events = retrieve(alice, space_a, "notes")
        assert {k: v["spaceId"] for k, v in definitions(events).items()} == {mine: space_a, os_id: space_a}
        assert "MEMORY_LOAD_FAILED" not in statuses(events)
        own = alice.get(f"{MC}/{space_a}/memories/long-term/{os_id}")
        assert own.status_code == 200 and own.json()["memory"] == "alice's coffee notes"
        # And bob reaches none of it, through either API.
        assert bob.get(f"/v1/memories/{mine}").status_code == 403
        assert bob.get(f"{MC}/{space_b}/memories/long-term/{os_id}").status_code == 404
        assert {m["memoryId"] for m in bob.get(f"/v1/spaces/{space_b}/memories").json()["memories"]} == {
            fresh
        }
        for space_id, client in ((space_a, alice), (space_b, bob)):
            assert client.delete(f"/v1/spaces/{space_id}").status_code == 204


def test_a_record_written_around_memproxy_never_stands_in_for_another_space(world: World) -> None:
    """Defence in depth: even a record someone wrote into memproxy's index directly, with the id of
    alice's memory and bob's space, is not what alice's retrieve shows."""
    w = world
    with w.as_(w.alice) as alice, w.as_(w.bob) as bob:
        space_a, space_b = new_space(alice, w), new_space(bob, w)
        os_id = alice.post(
            f"{MC}/{space_a}/memories/long-term/_memproxy_add", json={"memory": "alice's cocoa notes"}
        ).json()["long_term_memory_id"]
        forged = {
            "memory_id": os_id,
            "space_id": space_b,
            "processing_status": "COMPLETED",
            "content_type": "text/plain",
        }
        httpx.put(f"{w.node}/{MEMORIES}/_doc/{os_id}", params={"refresh": "true"}, json=forged, timeout=30)
        try:
            events = retrieve(alice, space_a, "cocoa")
            assert definitions(events)[os_id]["spaceId"] == space_a
        finally:
            httpx.delete(f"{w.node}/{MEMORIES}/_doc/{os_id}", params={"refresh": "true"}, timeout=30)
            for space_id, client in ((space_a, alice), (space_b, bob)):
                client.delete(f"/v1/spaces/{space_id}")


# --- deletion cleans up; recreation resurrects nothing --------------------------------------------------


def _grant(owner: httpx.Client, grantee: Tenant, space_id: str, operation: str) -> None:
    res = owner.post(
        "/v1/access-policy/grants",
        json={
            "audience": {"principalId": grantee.user_id},
            "rule": {
                "operation": operation,
                "selector": "EXACT",
                "assignedResource": {"kind": "SPACE", "resourceId": space_id},
            },
        },
    )
    assert res.status_code == 201, res.text


def test_deleting_a_memory_removes_its_chunks(world: World) -> None:
    w = world
    with w.as_(w.alice) as alice:
        space = new_space(alice, w)
        mid = alice.post(
            "/v1/memories",
            json={"spaceId": space, "originalContent": LONG_TEXT, "chunkingConfig": SMALL_CHUNKS},
        ).json()["memoryId"]
        assert node_count(w, MEMORY_INDICES, {"term": {"memory_id": mid}}) >= 3
        assert alice.delete(f"/v1/memories/{mid}").status_code == 204
        assert node_count(w, MEMORY_INDICES, {"term": {"memory_id": mid}}) == 0
        assert node_count(w, MEMORIES, {"ids": {"values": [mid]}}) == 0
        assert alice.get(f"/v1/memories/{mid}").status_code == 404
        assert not definitions(retrieve(alice, space, "coffee"))
        alice.delete(f"/v1/spaces/{space}")


def _fill(w: World, alice: httpx.Client, space: str) -> list[str]:
    """Two GoodMem memories (one of several chunks), an ml-commons long-term and a working memory, and a
    read grant for bob; bob has read through it (so it is cached)."""
    ids = [
        alice.post(
            "/v1/memories",
            json={"spaceId": space, "originalContent": LONG_TEXT, "chunkingConfig": SMALL_CHUNKS},
        ).json()["memoryId"],
        alice.post("/v1/memories", json={"spaceId": space, "originalContent": "tea with milk"}).json()[
            "memoryId"
        ],
        alice.post(
            f"{MC}/{space}/memories/long-term/_memproxy_add", json={"memory": "tea in the morning"}
        ).json()["long_term_memory_id"],
    ]
    working = alice.post(
        f"{MC}/{space}/memories",
        json={"messages": [{"role": "user", "content": [{"type": "text", "text": "tea"}]}]},
    )
    assert working.status_code == 200, working.text
    for op in ("LIST_MEMORY", "READ_MEMORY"):
        _grant(alice, w.bob, space, op)
    with w.as_(w.bob) as bob:
        assert bob.get(f"/v1/memories/{ids[1]}").status_code == 200
    return ids


def _assert_nothing_of(w: World, space: str) -> None:
    assert node_count(w, MEMORY_INDICES, {"term": {"memory_container_id": space}}) == 0
    assert node_count(w, MEMORIES, {"term": {"space_id": space}}) == 0
    assert node_count(w, GRANTS, {"term": {"resource_id": space}}) == 0


def test_deleting_a_space_removes_everything_and_recreating_it_starts_empty(world: World) -> None:
    w = world
    space = str(uuid.uuid4())
    with w.as_(w.alice) as alice, w.as_(w.bob) as bob:
        new_space(alice, w, space)
        ids = _fill(w, alice, space)
        assert node_count(w, MEMORY_INDICES, {"term": {"memory_container_id": space}}) >= 5
        assert alice.delete(f"/v1/spaces/{space}").status_code == 204
        _assert_nothing_of(w, space)
        # No cache serves the deleted space: not its document, not bob's grant.
        assert bob.get(f"/v1/memories/{ids[1]}").status_code == 404
        assert (
            alice.post(
                "/v1/memories:retrieve", json={"message": "tea", "spaceKeys": [{"spaceId": space}]}
            ).status_code
            == 404
        )

        assert new_space(alice, w, space) == space  # the same caller-chosen id
        assert alice.get(f"/v1/spaces/{space}/memories").json()["memories"] == []
        assert not definitions(retrieve(alice, space, "tea"))
        for mid in ids:
            assert alice.get(f"/v1/memories/{mid}").status_code == 404
        for kind in ("long-term", "working"):
            hits = alice.post(
                f"{MC}/{space}/memories/{kind}/_search", json={"query": {"match_all": {}}}
            ).json()
            assert hits["hits"]["hits"] == [], hits
        assert bob.get(f"/v1/spaces/{space}").status_code == 403  # the old grants are gone
        assert bob.get(f"/v1/spaces/{space}/memories").status_code == 403
        alice.delete(f"/v1/spaces/{space}")


def test_deleting_a_space_through_the_opensearch_api_removes_its_chunks(world: World) -> None:
    w = world
    with w.as_(w.alice) as alice:
        space = new_space(alice, w)
        _fill(w, alice, space)
        assert alice.delete(f"{MC}/{space}").status_code == 200
        _assert_nothing_of(w, space)


def test_what_an_interrupted_delete_left_behind_is_not_resurrected(world: World) -> None:
    """A delete that died half-way (or one that kept its memories) left documents naming the space id;
    a space created with that id purges them before it exists."""
    w = world
    with w.as_(w.alice) as alice, w.as_(w.bob) as bob:
        template = new_space(alice, w)  # a live space on the same embedder: its index is the one to use
        chunk = alice.post("/v1/memories", json={"spaceId": template, "originalContent": "template"}).json()[
            "memoryId"
        ]
        index = httpx.post(
            f"{w.node}/{MEMORY_INDICES}/_search",
            params={"expand_wildcards": "all"},
            json={"query": {"term": {"memory_id": chunk}}, "size": 1},
            timeout=30,
        ).json()["hits"]["hits"][0]["_index"]
        space, leftover = str(uuid.uuid4()), str(uuid.uuid4())
        ghost = {"memory": "ghost tea", "memory_id": leftover, "memory_container_id": space, "namespace": {}}
        httpx.put(f"{w.node}/{index}/_doc/{uuid.uuid4()}", params={"refresh": "true"}, json=ghost, timeout=30)
        os_ghost = {"memory": "ghost coffee", "memory_container_id": space, "namespace": {}}
        httpx.put(
            f"{w.node}/{index}/_doc/{uuid.uuid4()}", params={"refresh": "true"}, json=os_ghost, timeout=30
        )
        httpx.put(
            f"{w.node}/{MEMORIES}/_doc/{leftover}",
            params={"refresh": "true"},
            json={"memory_id": leftover, "space_id": space, "processing_status": "COMPLETED"},
            timeout=30,
        )
        grant = {"principal_id": w.bob.user_id, "operation": "READ_MEMORY", "resource_kind": "SPACE",
                 "resource_id": space, "selector": "EXACT"}  # fmt: skip
        httpx.put(
            f"{w.node}/{GRANTS}/_doc/{uuid.uuid4()}", params={"refresh": "true"}, json=grant, timeout=30
        )

        assert new_space(alice, w, space) == space
        _assert_nothing_of(w, space)
        assert alice.get(f"/v1/spaces/{space}/memories").json()["memories"] == []
        assert alice.get(f"/v1/memories/{leftover}").status_code == 404
        assert not definitions(retrieve(alice, space, "ghost tea"))
        assert bob.get(f"/v1/spaces/{space}/memories").status_code == 403
        for space_id in (space, template):
            alice.delete(f"/v1/spaces/{space_id}")


def test_deleting_a_plain_container_keeps_its_memories_but_not_goodmem_chunks(world: World) -> None:
    """A container made through the OpenSearch API keeps ml-commons' rule (its memories stay in the index
    unless asked otherwise), but GoodMem chunks written into it go with their records."""
    w = world
    body = {
        "name": f"integrity-{uuid.uuid4().hex[:8]}",
        "configuration": {
            "embedding_model_type": "TEXT_EMBEDDING",
            "embedding_model_id": "all-minilm-l6-v2",
            "embedding_dimension": 384,
        },
    }
    cid = w.root.post(f"{MC}/_create", json=body).json()["memory_container_id"]
    kept = w.root.post(
        f"{MC}/{cid}/memories/long-term/_memproxy_add", json={"memory": "ml-commons tea"}
    ).json()
    mid = w.root.post(
        "/v1/memories", json={"spaceId": cid, "originalContent": LONG_TEXT, "chunkingConfig": SMALL_CHUNKS}
    ).json()["memoryId"]
    assert node_count(w, MEMORY_INDICES, {"term": {"memory_id": mid}}) >= 3
    assert w.root.delete(f"{MC}/{cid}").status_code == 200
    assert node_count(w, MEMORY_INDICES, {"term": {"memory_id": mid}}) == 0
    assert node_count(w, MEMORIES, {"term": {"space_id": cid}}) == 0
    assert node_count(w, MEMORY_INDICES, {"ids": {"values": [kept["long_term_memory_id"]]}}) == 1
