"""Index families are owned and the path names the container, against the real proxy and node
(docs/security.md, "Index families and container scope").

Two non-admin tenants (alice, bob) and the root user. A container's indices are the names its prefix
resolves to; no spelling of a prefix reaches another family, nobody joins a family whose containers they may
not administer, and a delete drops an index only when its last user goes. A write goes to the container of
its path, never to one its body names; sessions, working memories and history in a shared index are found
only within their container, so one tenant can neither touch nor probe the other's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from proxy.core.goodmem.spaces import space_index_prefix
from tests.adversarial.tenants import Tenant, make_tenant
from tests.goodmem_helpers import root_api_key

pytestmark = pytest.mark.timeout(600)

MC = "/_plugins/_ml/memory_containers"


@dataclass
class World:
    url: str
    node: str
    root: httpx.Client
    alice: Tenant
    bob: Tenant
    embedder: str
    dimension: int

    def as_(self, who: Tenant) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=who.headers, timeout=120)

    @property
    def goodmem_prefix(self) -> str:
        """The family every GoodMem space on this one embedder shares."""
        return space_index_prefix([self.embedder])


@pytest.fixture(scope="module")
def world(proxy_url: str, opensearch_url: str) -> Iterator[World]:
    key = root_api_key(proxy_url, opensearch_url)
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": key}, timeout=120) as root:
        first = root.get("/v1/embedders").json()["embedders"][0]
        alice, bob = make_tenant(root, "alice"), make_tenant(root, "bob")
        yield World(
            proxy_url, opensearch_url, root, alice, bob, first["embedderId"], int(first["dimensionality"])
        )


def unique(label: str) -> str:
    return f"own-{label}-{uuid.uuid4().hex[:8]}"


def create(client: httpx.Client, configuration: dict[str, Any]) -> httpx.Response:
    return client.post(f"{MC}/_create", json={"name": unique("c"), "configuration": configuration})


def container(client: httpx.Client, configuration: dict[str, Any]) -> str:
    res = create(client, configuration)
    assert res.status_code == 200, res.text
    return str(res.json()["memory_container_id"])


def space(client: httpx.Client, w: World) -> str:
    res = client.post(
        "/v1/spaces", json={"name": unique("s"), "spaceEmbedders": [{"embedderId": w.embedder}]}
    )
    assert res.status_code in (200, 201), res.text
    return str(res.json()["spaceId"])


def embedding(w: World) -> dict[str, Any]:
    return {
        "embedding_model_type": "TEXT_EMBEDDING",
        "embedding_model_id": w.embedder,
        "embedding_dimension": w.dimension,
    }


def add_data(client: httpx.Client, cid: str, **extra: Any) -> httpx.Response:
    body = {"payload_type": "data", "structured_data": {"n": "1"}, "namespace": {"user_id": "u"}, **extra}
    return client.post(f"{MC}/{cid}/memories", json=body)


def working_id(client: httpx.Client, cid: str) -> str:
    res = add_data(client, cid)
    assert res.status_code == 200, res.text
    return str(res.json()["working_memory_id"])


def long_term_id(client: httpx.Client, cid: str, text: str) -> str:
    res = client.post(f"{MC}/{cid}/memories/long-term/_memproxy_add", json={"memory": text})
    assert res.status_code == 200, res.text
    return str(res.json()["long_term_memory_id"])


def node_count(w: World, index: str, container_id: str) -> int:
    res = httpx.post(
        f"{w.node}/{index}/_count",
        params={"expand_wildcards": "all", "ignore_unavailable": "true", "allow_no_indices": "true"},
        json={"query": {"term": {"memory_container_id": container_id}}},
        timeout=30,
    )
    assert res.status_code == 200, res.text
    return int(res.json()["count"])


def index_exists(w: World, index: str) -> bool:
    return httpx.head(f"{w.node}/{index}", timeout=30).status_code == 200


def delete_all(client: httpx.Client, cid: str) -> httpx.Response:
    return client.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})


# --- names: no spelling of a prefix reaches another family ------------------------------------------------


def _tricks(w: World, bob_system_prefix: str) -> list[str]:
    return [
        ".plugins-ml-am-default",  # ml-commons' default family: everyone's memories
        f".plugins-ml-am-{w.goodmem_prefix}",  # every GoodMem space on this embedder
        f".plugins-ml-am-{bob_system_prefix}",  # another tenant's own system family
        ".plugins-ml-am-Default",  # upper case
        ".plugins-ml-am-default-",  # trailing '-'
        "memproxy-goodmem",  # memproxy's private indices
        "memproxy-jobs",
        f".hidden-{uuid.uuid4().hex[:6]}",  # a hidden name
    ]


def test_prefixes_that_spell_other_families_are_refused(world: World) -> None:
    w = world
    with w.as_(w.alice) as alice, w.as_(w.bob) as bob:
        bob_prefix = unique("bobsys")
        container(bob, {"index_prefix": bob_prefix})
        for prefix in _tricks(w, bob_prefix):
            res = create(alice, {"index_prefix": prefix, "use_system_index": False})
            assert res.status_code == 400, (prefix, res.text)
            assert res.json()["error"]["type"] == "parse_exception", res.text
            assert f"invalid index prefix [{prefix}]" in res.json()["error"]["reason"]


def test_another_tenants_family_cannot_be_joined(world: World) -> None:
    w = world
    with w.as_(w.alice) as alice, w.as_(w.bob) as bob:
        system, plain, bare = unique("sys"), unique("plain"), unique("bare")
        container(bob, {"index_prefix": system})
        container(bob, {"index_prefix": plain, "use_system_index": False})
        space(bob, w)
        # Indices that exist with no container at all belong to nobody a tenant may speak for.
        assert httpx.put(f"{w.node}/{bare}-memory-working", timeout=30).status_code == 200
        refused = [
            {"index_prefix": system},
            {"index_prefix": plain, "use_system_index": False},
            {"index_prefix": w.goodmem_prefix, **embedding(w)},  # the GoodMem family bob's space is in
            {"index_prefix": bare, "use_system_index": False},
        ]
        for configuration in refused:
            res = create(alice, configuration)
            assert res.status_code == 403, (configuration, res.text)
            assert res.json()["error"]["type"] == "security_exception", res.text
        # The same refusal whether containers or bare indices hold the names: it tells nothing more.
        texts = {create(alice, c).json()["error"]["reason"].split("[", 1)[0] for c in refused}
        assert len(texts) == 1, texts
        # Controls: a neighbouring name is another family; ml-commons' default is everyone's; an
        # administrator may join any family.
        container(alice, {"index_prefix": plain + "-", "use_system_index": False})
        container(alice, {})
        container(w.root, {"index_prefix": plain, "use_system_index": False})
        httpx.delete(f"{w.node}/{bare}-memory-working", timeout=30)


# --- deletes: an index goes with its last user ---------------------------------------------------------


def test_delete_all_memories_spares_a_shared_family(world: World) -> None:
    w = world
    prefix = unique("shared")
    working = f"{prefix}-memory-working"
    with w.as_(w.bob) as bob:
        mine = container(bob, {"index_prefix": prefix, "use_system_index": False})
        theirs = container(w.root, {"index_prefix": prefix, "use_system_index": False})
        working_id(bob, mine)
        kept = working_id(w.root, theirs)

        res = delete_all(bob, mine)
        assert res.status_code == 200, res.text
        assert index_exists(w, working)
        assert node_count(w, working, mine) == 0
        assert w.root.get(f"{MC}/{theirs}/memories/working/{kept}").status_code == 200

        res = delete_all(w.root, theirs)
        assert res.status_code == 200, res.text
        assert not index_exists(w, working)
        assert not index_exists(w, f"{prefix}-memory-sessions")


def test_delete_all_memories_spares_a_goodmem_family(world: World) -> None:
    w = world
    long_term = f".plugins-ml-am-{w.goodmem_prefix}-memory-long-term"
    with w.as_(w.bob) as bob:
        bobs_space = space(bob, w)
        kept = long_term_id(bob, bobs_space, "bob likes green tea")
        cid = container(w.root, {"index_prefix": w.goodmem_prefix, **embedding(w)})
        long_term_id(w.root, cid, "root likes coffee")

        res = delete_all(w.root, cid)
        assert res.status_code == 200, res.text
        assert index_exists(w, long_term)
        assert node_count(w, long_term, cid) == 0
        assert bob.get(f"{MC}/{bobs_space}/memories/long-term/{kept}").status_code == 200
        assert bob.get(f"/v1/spaces/{bobs_space}").status_code == 200


# --- the path names the container ------------------------------------------------------------------------


def test_a_body_container_id_cannot_redirect_a_write(world: World) -> None:
    w = world
    with w.as_(w.alice) as alice, w.as_(w.bob) as bob:
        a, b = space(alice, w), space(bob, w)
        wid = working_id(alice, a)
        other = {"memory_container_id": b}
        writes = [
            ("POST", f"{MC}/{a}/memories", {"payload_type": "data", "structured_data": {"x": "1"}, **other}),
            ("POST", f"{MC}/{a}/memories/sessions", {"summary": "hijack", **other}),
            ("POST", f"{MC}/{a}/memories/long-term/_memproxy_add", {"memory": "hijack", **other}),
            ("POST", f"{MC}/{a}/memories/long-term/_memproxy_bulk", {"memories": [{"memory": "x", **other}]}),
            ("POST", f"{MC}/{a}/memories/long-term/_memproxy_bulk", {"memories": [{"memory": "x"}], **other}),
            ("PUT", f"{MC}/{a}/memories/working/{wid}", {"tags": {"t": "hijack"}, **other}),
        ]
        for method, path, body in writes:
            res = alice.request(method, path, json=body)
            assert res.status_code == 400, (path, res.text)
            assert res.json()["error"]["type"] == "illegal_argument_exception", res.text
            assert "memory_container_id" in res.json()["error"]["reason"]
        for kind in ("working", "sessions", "long-term"):
            index = f".plugins-ml-am-{w.goodmem_prefix}-memory-{kind}"
            assert node_count(w, index, b) == 0, kind
        # Control: the path's own id in the body is a plain write.
        assert add_data(alice, a, memory_container_id=a).status_code == 200


# --- sessions, working memories and history are found within their container -----------------------


def _session(client: httpx.Client, cid: str, sid: str) -> dict[str, Any]:
    res = client.get(f"{MC}/{cid}/memories/sessions/{sid}")
    assert res.status_code == 200, res.text
    return dict(res.json())


def _conversation(client: httpx.Client, cid: str, sid: str) -> httpx.Response:
    message = {"role": "user", "content": [{"type": "text", "text": "hello"}]}
    body = {"messages": [message], "namespace": {"user_id": "u", "session_id": sid}}
    return client.post(f"{MC}/{cid}/memories", json=body)


def test_a_session_id_of_another_container_is_a_new_one(world: World) -> None:
    w = world
    with w.as_(w.alice) as alice, w.as_(w.bob) as bob:
        a, b = space(alice, w), space(bob, w)
        chosen = unique("sid")
        res = bob.post(f"{MC}/{b}/memories/sessions", json={"session_id": chosen, "summary": "bob's"})
        assert res.json() == {"session_id": chosen, "status": "created"}, res.text
        auto = bob.post(f"{MC}/{b}/memories/sessions", json={"summary": "bob's auto"}).json()["session_id"]
        before = {sid: _session(bob, b, sid) for sid in (chosen, auto)}
        time.sleep(0.05)

        # create_session says what it says of a fresh id: nothing about bob's.
        for sid in (chosen, auto, unique("fresh")):
            res = alice.post(f"{MC}/{a}/memories/sessions", json={"session_id": sid, "summary": "alice's"})
            assert res.json() == {"session_id": sid, "status": "created"}, (sid, res.text)
        # Adds naming bob's ids write alice's own sessions and leave bob's documents as they were.
        for sid in (chosen, auto):
            res = _conversation(alice, a, sid)
            assert res.status_code == 200, res.text
            assert _session(alice, a, sid)["memory_container_id"] == a
            assert _session(alice, a, sid)["summary"] == "alice's"
            assert _session(bob, b, sid) == before[sid]
        # An add of a new caller-chosen id makes alice's session, not one bob could find.
        new = unique("new")
        assert _conversation(alice, a, new).status_code == 200
        assert _session(alice, a, new)["memory_container_id"] == a
        assert bob.get(f"{MC}/{b}/memories/sessions/{new}").status_code == 404


def _stored_session_ids(w: World, cid: str) -> list[str]:
    index = f".plugins-ml-am-{w.goodmem_prefix}-memory-sessions"
    res = httpx.post(
        f"{w.node}/{index}/_search",
        params={"expand_wildcards": "all"},
        json={"query": {"term": {"memory_container_id": cid}}, "size": 100},
        timeout=30,
    )
    assert res.status_code == 200, res.text
    return [h["_id"] for h in res.json()["hits"]["hits"]]


def test_another_containers_ids_answer_like_missing_ids(world: World) -> None:
    w = world
    history = f".plugins-ml-am-{w.goodmem_prefix}-memory-history"
    with w.as_(w.alice) as alice, w.as_(w.bob) as bob:
        a, b = space(alice, w), space(bob, w)
        chosen = unique("sid")
        bob.post(f"{MC}/{b}/memories/sessions", json={"session_id": chosen, "summary": "bob's"})
        bob.post(f"{MC}/{b}/memories/sessions", json={"summary": "bob's auto"})
        entry = {"memory_container_id": b, "action": "ADD", "created_time": int(time.time() * 1000)}
        hid = httpx.post(f"{w.node}/{history}/_doc", params={"refresh": "true"}, json=entry, timeout=30)
        assert hid.status_code == 201, hid.text
        bobs = {
            "sessions": [chosen, *_stored_session_ids(w, b)],
            "working": [working_id(bob, b)],
            "long-term": [long_term_id(bob, b, "bob's secret")],
            "history": [hid.json()["_id"]],
        }
        updates = {"sessions": {"summary": "x"}, "working": {"tags": {"t": "x"}},
                   "long-term": {"memory": "x"}, "history": {"tags": {"t": "x"}}}  # fmt: skip
        for kind, ids in bobs.items():
            base = f"{MC}/{a}/memories/{kind}"
            missing = unique("missing")
            for method, body in (("GET", None), ("PUT", updates[kind]), ("DELETE", None)):
                expected = alice.request(method, f"{base}/{missing}", json=body)
                assert expected.status_code == 404, expected.text
                for other in ids:
                    res = alice.request(method, f"{base}/{other}", json=body)
                    assert (res.status_code, res.json()) == (expected.status_code, expected.json()), (
                        kind,
                        other,
                    )
            for other in ids:
                assert bob.get(f"{MC}/{b}/memories/{kind}/{other}").status_code == 200, (kind, other)
