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
from collections.abc import Callable, Iterator
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


TRICKS: dict[str, Callable[[dict[str, str]], str]] = {
    "system-default": lambda f: ".plugins-ml-am-default",  # ml-commons' default family: everyone's memories
    "system-goodmem": lambda f: f".plugins-ml-am-{f['goodmem']}",  # every GoodMem space on this embedder
    "system-other-tenant": lambda f: f".plugins-ml-am-{f['system']}",  # another tenant's own system family
    "upper-case": lambda f: ".plugins-ml-am-Default",
    "trailing-dash": lambda f: ".plugins-ml-am-default-",
    "memproxy-goodmem": lambda f: "memproxy-goodmem",  # memproxy's private indices
    "memproxy-jobs": lambda f: "memproxy-jobs",
    "hidden": lambda f: f".hidden-{f['system']}",
}


@pytest.fixture(scope="module")
def bobs_families(world: World) -> Iterator[dict[str, str]]:
    """Families bob's containers hold: a system prefix, a plain prefix, the GoodMem one (his space), and a
    prefix whose indices exist with no container at all."""
    w = world
    families = {"system": unique("sys"), "plain": unique("plain"), "bare": unique("bare")}
    families["goodmem"] = w.goodmem_prefix
    with w.as_(w.bob) as bob:
        container(bob, {"index_prefix": families["system"]})
        container(bob, {"index_prefix": families["plain"], "use_system_index": False})
        space(bob, w)
    assert httpx.put(f"{w.node}/{families['bare']}-memory-working", timeout=30).status_code == 200
    yield families
    httpx.delete(f"{w.node}/{families['bare']}-memory-working", timeout=30)


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_prefixes_that_spell_other_families_are_refused(
    world: World, bobs_families: dict[str, str], trick: str
) -> None:
    prefix = TRICKS[trick](bobs_families)
    with world.as_(world.alice) as alice:
        res = create(alice, {"index_prefix": prefix, "use_system_index": False})
    assert res.status_code == 400, (prefix, res.text)
    assert res.json()["error"]["type"] == "parse_exception", res.text
    assert f"invalid index prefix [{prefix}]" in res.json()["error"]["reason"]


JOINS: dict[str, Callable[[dict[str, str], World], dict[str, Any]]] = {
    "system": lambda f, w: {"index_prefix": f["system"]},
    "plain": lambda f, w: {"index_prefix": f["plain"], "use_system_index": False},
    "goodmem": lambda f, w: {"index_prefix": f["goodmem"], **embedding(w)},  # bob's space is in it
    "bare-indices": lambda f, w: {"index_prefix": f["bare"], "use_system_index": False},
}


@pytest.mark.parametrize("family", sorted(JOINS))
def test_another_tenants_family_cannot_be_joined(
    world: World, bobs_families: dict[str, str], family: str
) -> None:
    with world.as_(world.alice) as alice:
        res = create(alice, JOINS[family](bobs_families, world))
    assert res.status_code == 403, res.text
    assert res.json()["error"]["type"] == "security_exception", res.text
    # One text whether containers or bare indices hold the names: the refusal tells nothing more.
    assert "are in use and not yours to share" in res.json()["error"]["reason"]


def test_open_and_neighbouring_families_can_be_used(world: World, bobs_families: dict[str, str]) -> None:
    """Controls: a neighbouring name is another family; ml-commons' default is everyone's; an administrator
    may join any family."""
    w = world
    with w.as_(w.alice) as alice:
        container(alice, {"index_prefix": bobs_families["plain"] + "-", "use_system_index": False})
        container(alice, {})
    container(w.root, {"index_prefix": bobs_families["plain"], "use_system_index": False})


# --- deletes: an index goes with its last user ---------------------------------------------------------


@pytest.mark.parametrize("params", [{"delete_all_memories": "true"}, {"delete_memories": "working,sessions"}])
def test_deleting_memories_spares_a_shared_family(world: World, params: dict[str, str]) -> None:
    w = world
    prefix = unique("shared")
    working = f"{prefix}-memory-working"
    with w.as_(w.bob) as bob:
        mine = container(bob, {"index_prefix": prefix, "use_system_index": False})
        theirs = container(w.root, {"index_prefix": prefix, "use_system_index": False})
        working_id(bob, mine)
        kept = working_id(w.root, theirs)

        res = bob.delete(f"{MC}/{mine}", params=params)
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


# route → (method, path under …/memories, body); the body's container id goes at the top, or with "item"
# into each memory of a bulk.
WRITES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "add": ("POST", "", {"payload_type": "data", "structured_data": {"x": "1"}}),
    "session": ("POST", "/sessions", {"summary": "hijack"}),
    "memproxy-add": ("POST", "/long-term/_memproxy_add", {"memory": "hijack"}),
    "memproxy-bulk": ("POST", "/long-term/_memproxy_bulk", {"memories": [{"memory": "hijack"}]}),
    "memproxy-bulk-item": ("POST", "/long-term/_memproxy_bulk", {"memories": [{"memory": "hijack"}]}),
    "update": ("PUT", "/working/{wid}", {"tags": {"t": "hijack"}}),
}


def _naming(route: str, body: dict[str, Any], container_id: str) -> dict[str, Any]:
    if route.endswith("-item"):
        return {"memories": [{**m, "memory_container_id": container_id} for m in body["memories"]]}
    return {**body, "memory_container_id": container_id}


@pytest.fixture(scope="module")
def two_spaces(world: World) -> tuple[str, str]:
    """alice's space and bob's, in the same GoodMem family (their memories share indices)."""
    with world.as_(world.alice) as alice, world.as_(world.bob) as bob:
        return space(alice, world), space(bob, world)


@pytest.mark.parametrize("route", sorted(WRITES))
def test_a_body_container_id_cannot_redirect_a_write(
    world: World, two_spaces: tuple[str, str], route: str
) -> None:
    w = world
    a, b = two_spaces
    with w.as_(w.alice) as alice:
        counts = {kind: node_count(w, f".plugins-ml-am-{w.goodmem_prefix}-memory-{kind}", b)
                  for kind in ("working", "sessions", "long-term")}  # fmt: skip
        method, suffix, body = WRITES[route]
        path = f"{MC}/{a}/memories" + suffix.format(wid=working_id(alice, a))
        res = alice.request(method, path, json=_naming(route, body, b))
        assert res.status_code == 400, (path, res.text)
        assert res.json()["error"]["type"] == "illegal_argument_exception", res.text
        assert "memory_container_id" in res.json()["error"]["reason"]
        for kind, before in counts.items():
            index = f".plugins-ml-am-{w.goodmem_prefix}-memory-{kind}"
            assert node_count(w, index, b) == before, kind
        # Control: the path's own id in the body is a plain write.
        assert alice.request(method, path, json=_naming(route, body, a)).status_code == 200


# --- sessions, working memories and history are found within their container -----------------------


def _session(client: httpx.Client, cid: str, sid: str) -> dict[str, Any]:
    res = client.get(f"{MC}/{cid}/memories/sessions/{sid}")
    assert res.status_code == 200, res.text
    return dict(res.json())


def _conversation(client: httpx.Client, cid: str, sid: str) -> httpx.Response:
    message = {"role": "user", "content": [{"type": "text", "text": "hello"}]}
    body = {"messages": [message], "namespace": {"user_id": "u", "session_id": sid}}
    return client.post(f"{MC}/{cid}/memories", json=body)


@pytest.fixture
def bobs_sessions(world: World, two_spaces: tuple[str, str]) -> dict[str, dict[str, Any]]:
    """Two sessions of bob's space: one of a chosen id, one the node named; each as bob reads it."""
    _, b = two_spaces
    with world.as_(world.bob) as bob:
        chosen = unique("sid")
        res = bob.post(f"{MC}/{b}/memories/sessions", json={"session_id": chosen, "summary": "bob's"})
        assert res.json() == {"session_id": chosen, "status": "created"}, res.text
        auto = bob.post(f"{MC}/{b}/memories/sessions", json={"summary": "bob's auto"}).json()["session_id"]
        return {sid: _session(bob, b, sid) for sid in (chosen, auto)}


@pytest.mark.parametrize("which", ["chosen", "node-made", "fresh"])
def test_create_session_says_nothing_of_another_containers_id(
    world: World, two_spaces: tuple[str, str], bobs_sessions: dict[str, dict[str, Any]], which: str
) -> None:
    a, b = two_spaces
    sid = {"chosen": 0, "node-made": 1}.get(which)
    session_id = list(bobs_sessions)[sid] if sid is not None else unique("fresh")
    with world.as_(world.alice) as alice, world.as_(world.bob) as bob:
        res = alice.post(f"{MC}/{a}/memories/sessions", json={"session_id": session_id, "summary": "alice's"})
        # The answer to a fresh id, whoever else uses this one.
        assert res.json() == {"session_id": session_id, "status": "created"}, res.text
        assert _session(alice, a, session_id)["summary"] == "alice's"
        if session_id in bobs_sessions:
            assert _session(bob, b, session_id) == bobs_sessions[session_id]


@pytest.mark.parametrize("which", ["chosen", "node-made"])
def test_an_add_never_touches_another_containers_session(
    world: World, two_spaces: tuple[str, str], bobs_sessions: dict[str, dict[str, Any]], which: str
) -> None:
    a, b = two_spaces
    session_id = list(bobs_sessions)[0 if which == "chosen" else 1]
    time.sleep(0.05)  # a bump of bob's session would show in its last_updated_time
    with world.as_(world.alice) as alice, world.as_(world.bob) as bob:
        res = _conversation(alice, a, session_id)
        assert res.status_code == 200, res.text
        # alice's add made alice's session of that id; bob's document is as it was.
        assert _session(alice, a, session_id)["memory_container_id"] == a
        assert _session(bob, b, session_id) == bobs_sessions[session_id]
        # And a new chosen id is alice's session, not one bob can find.
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
