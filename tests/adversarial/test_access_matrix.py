"""The access matrix: every way into another tenant's memories, tried by every kind of caller, must fail.

Alice owns a GoodMem space and an ml-commons container, each holding a memory with a secret marker. Every
credential that is not Alice's (none, garbage, a revoked key, a deleted user's key, another tenant's key
sent three ways, a wrong basic password) tries every route of both APIs against both (a GoodMem space is a
container, so each API is tried on the other's too), then pass-through. Each attempt must be refused with
the right status (401 unauthenticated, 403/404 authenticated without the right), or, for the batch and
streaming routes that report per item, answer without the secret; and afterwards every record is intact.
Positive controls (Alice's own reads succeed, a grant opens exactly what it grants) show the routes are real.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.adversarial.matrix import MC, SECRET, Tally, Victim, send, victim_routes
from tests.adversarial.tenants import Tenant, basic, make_tenant
from tests.opensearch_memory_helpers import EMBEDDER, new_prefix

pytestmark = pytest.mark.timeout(600)

ATTACKER_KEY = "gm_attacker_chosen_" + uuid.uuid4().hex  # its sha256 must never become a key document


@dataclass
class World:
    admin: httpx.Client
    proxy_url: str
    alice: Tenant
    bob: Tenant
    revoked: Tenant
    deleted: Tenant
    victims: list[Victim]


@pytest.fixture(scope="module")
def world(proxy_url: str, admin_key: str) -> Iterator[World]:
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": admin_key}, timeout=120) as admin:
        alice, bob = make_tenant(admin, "alice"), make_tenant(admin, "bob")
        revoked, deleted = make_tenant(admin, "revoked"), make_tenant(admin, "deleted")
        assert admin.put(f"/v1/apikeys/{revoked.key_id}", json={"status": "INACTIVE"}).status_code == 200
        assert admin.delete(f"/v1/users/{deleted.user_id}").status_code in (200, 204)
        a = {"x-api-key": alice.key}
        space = admin.post(
            "/v1/spaces",
            headers=a,
            json={"name": f"alice-{uuid.uuid4().hex[:6]}", "spaceEmbedders": [{"embedderId": EMBEDDER}]},
        )
        assert space.status_code in (200, 201), space.text
        sid = space.json()["spaceId"]
        mem = admin.post(
            "/v1/memories", headers=a, json={"spaceId": sid, "originalContent": f"{SECRET} in a space"}
        )
        assert mem.status_code in (200, 201), mem.text
        made = admin.post(
            f"{MC}/_create",
            headers=a,
            json={
                "name": "alice-container",
                "configuration": {
                    "embedding_model_type": "TEXT_EMBEDDING",
                    "embedding_model_id": EMBEDDER,
                    "embedding_dimension": 384,
                    "index_prefix": new_prefix("alice"),
                },
            },
        )
        assert made.status_code == 200, made.text
        cid = made.json()["memory_container_id"]
        added = admin.post(
            f"{MC}/{cid}/memories/long-term/_memproxy_add",
            headers=a,
            json={"memory": f"{SECRET} in a container"},
        )
        assert added.status_code == 200, added.text
        got_space = admin.get(f"{MC}/{sid}", headers=a).json()
        got_container = admin.get(f"{MC}/{cid}", headers=a).json()
        victims = [
            Victim("space", sid, mem.json()["memoryId"], _long_term(got_space)),
            Victim("container", cid, added.json()["long_term_memory_id"], _long_term(got_container)),
        ]
        yield World(admin, proxy_url, alice, bob, revoked, deleted, victims)
        for v in victims:
            admin.delete(f"{MC}/{v.container_id}", params={"delete_all_memories": "true"})


def _long_term(container: dict[str, Any]) -> str:
    cfg = container["configuration"]
    base = ".plugins-ml-am-" if cfg.get("use_system_index", True) else ""
    return f"{base}{cfg['index_prefix']}-memory-long-term"


def _attackers(w: World) -> dict[str, tuple[dict[str, str], set[int]]]:
    """Credential → (headers, the statuses a refusal may have)."""
    denied = {403, 404}
    return {
        "anonymous": ({}, {401}),
        "garbage key": ({"x-api-key": "gm_" + "0" * 40}, {401}),
        "garbage bearer": ({"Authorization": "Bearer not-a-key"}, {401}),
        "revoked key": (w.revoked.headers, {401}),
        "deleted user's key": (w.deleted.headers, {401}),
        "wrong basic password": ({"Authorization": basic("admin", "admin")}, {401}),
        "bob x-api-key": (w.bob.headers, denied),
        "bob bearer": ({"Authorization": f"Bearer {w.bob.key}"}, denied),
        "bob basic": ({"Authorization": basic("bob", w.bob.key)}, denied),
    }


def _passthrough_routes(w: World) -> list[tuple[str, str, Any]]:
    """What an attacker does with memproxy's own indices (the privilege-escalation routes)."""
    fake = hashlib.sha256(ATTACKER_KEY.encode()).hexdigest()
    bulk = (
        "\n".join(
            json.dumps(x)
            for x in (
                {"index": {"_index": "memproxy-goodmem-apikeys", "_id": fake}},
                {"user_id": w.bob.user_id, "api_key_id": str(uuid.uuid4()), "status": "ACTIVE"},
            )
        )
        + "\n"
    )
    return [
        ("GET", "/memproxy-goodmem-apikeys/_search", None),
        ("GET", "/memproxy-goodmem-users/_search", None),
        ("GET", "/memproxy-goodmem-memories/_search", None),
        ("GET", "/.plugins-ml-am-memory-container/_search", None),
        ("GET", "/_search", None),
        ("GET", "/_cat/indices", None),
        ("PUT", f"/memproxy-goodmem-apikeys/_doc/{fake}", {"user_id": w.bob.user_id, "status": "ACTIVE"}),
        ("POST", f"/memproxy-goodmem-users/_update/{w.bob.user_id}", {"doc": {"roles": ["ROOT"]}}),
        ("DELETE", "/memproxy-goodmem-system/_doc/instance", None),
        ("POST", "/_bulk", bulk),
        ("POST", "/_msearch", '{"index": "memproxy-goodmem-apikeys"}\n{"query": {"match_all": {}}}\n'),
    ]


# Every form in which an administrator might reach memproxy's private indices through pass-through.
PRIVATE_FORMS: list[tuple[str, str, Any, dict[str, str]]] = [
    ("GET", "/memproxy-goodmem-apikeys/_search", None, {}),
    ("GET", "/memproxy-goodmem-apikeys/_doc/x", None, {}),
    ("GET", "/%6demproxy-goodmem-apikeys/_search", None, {}),
    ("GET", "//memproxy-goodmem-apikeys/_search", None, {}),
    ("GET", "/memproxy-goodmem-*/_search", None, {}),
    ("GET", "/memproxy-*/_search", None, {}),
    ("GET", "/*/_search", None, {}),
    ("GET", "/_all/_search", None, {}),
    ("GET", "/_search", None, {}),
    ("GET", "/_count", None, {}),
    ("GET", "/mp-nothing,memproxy-goodmem-users/_search", None, {}),
    ("GET", "/memproxy-goodmem-user?/_search", None, {}),
    ("GET", "/.plugins-ml-am-memory-container/_search", None, {}),
    ("GET", "/.plugins-ml-am-memory-*/_search", None, {}),
    ("DELETE", "/memproxy-goodmem-system", None, {}),
    ("DELETE", "/memproxy-goodmem-system/_doc/instance", None, {}),
    ("POST", "/memproxy-goodmem-grants/_delete_by_query", {"query": {"match_all": {}}}, {}),
    ("POST", "/_mget", {"docs": [{"_index": "memproxy-goodmem-users", "_id": "x"}]}, {}),
    ("POST", "/memproxy-goodmem-users/_mget", {"ids": ["x"]}, {}),
    ("POST", "/mp-nothing/_mget", {"docs": [{"_index": "memproxy-goodmem-users", "_id": "x"}]}, {}),
    (
        "POST",
        "/_msearch",
        '{"index": "memproxy-goodmem-users"}\n{}\n',
        {"Content-Type": "application/x-ndjson"},
    ),
    ("POST", "/_msearch", "{}\n{}\n", {"Content-Type": "application/x-ndjson"}),
    (
        "POST",
        "/_bulk",
        '{"delete": {"_index": "memproxy-goodmem-apikeys", "_id": "x"}}\n',
        {"Content-Type": "application/x-ndjson"},
    ),
    (
        "POST",
        "/mp-nothing/_bulk",
        '{"index": {"_index": "memproxy-goodmem-users", "_id": "x"}}\n{}\n',
        {"Content-Type": "application/x-ndjson"},
    ),
    (
        "POST",
        "/_reindex",
        {"source": {"index": "memproxy-goodmem-apikeys"}, "dest": {"index": "mp-stolen"}},
        {},
    ),
    (
        "POST",
        "/_reindex",
        {"source": {"index": "mp-nothing"}, "dest": {"index": "memproxy-goodmem-users"}},
        {},
    ),
    (
        "POST",
        "/_aliases",
        {"actions": [{"add": {"index": "memproxy-goodmem-apikeys", "alias": "innocent"}}]},
        {},
    ),
    ("PUT", "/memproxy-goodmem-apikeys/_alias/innocent", None, {}),
    ("POST", "/_plugins/_sql", {"query": "SELECT * FROM memproxy-goodmem-apikeys"}, {}),
    ("POST", "/_plugins/_ppl", {"query": "source=memproxy-goodmem-apikeys"}, {}),
    ("POST", "/_snapshot/repo/snap/_restore", {"indices": "memproxy-goodmem-apikeys"}, {}),
    ("GET", "/_mget?source=%7B%22docs%22%3A%5B%5D%7D", None, {}),
    ("POST", "/_mget", b"\x1f\x8b\x08\x00", {"Content-Encoding": "gzip"}),
    ("POST", "/_mget", b"\xbf\xff", {"Content-Type": "application/cbor"}),
]


def test_every_cross_tenant_attempt_is_refused(world: World) -> None:
    w, tally = world, Tally()
    for name, (headers, refusals) in _attackers(w).items():
        for victim in w.victims:
            for method, path, body, per_item in victim_routes(victim):
                tally.check(
                    f"{name}: {method} {path}",
                    send(w.proxy_url, method, path, body, headers),
                    refusals,
                    per_item,
                )
        for method, path, body in _passthrough_routes(w):
            # Not an administrator: no pass-through at all (403), or no identity (401).
            tally.check(
                f"{name}: {method} {path}",
                send(w.proxy_url, method, path, body, headers),
                refusals - {404},
                False,
            )
    admin_headers = dict(w.admin.headers)
    for method, path, body, extra in PRIVATE_FORMS:
        resp = send(w.proxy_url, method, path, body, {**admin_headers, **extra})
        tally.check(f"admin: {method} {path}", resp, {400, 403}, False)
    print(
        f"\naccess matrix: {tally.attempts} attempts, {len(tally.failures)} not refused, "
        f"{tally.leaks} leaks, {tally.server_errors} 5xx"
    )
    assert tally.attempts >= 500
    assert tally.failures == []
    assert tally.leaks == 0 and tally.server_errors == 0
    _assert_intact(w)


def _assert_intact(w: World) -> None:
    a = {"x-api-key": w.alice.key}
    for v in w.victims:
        assert w.admin.get(f"{MC}/{v.container_id}", headers=a).json()["name"] != "pwned"
        assert SECRET in w.admin.get(f"/v1/memories/{v.memory_id}/content", headers=a).text
        listed = w.admin.get(f"/v1/spaces/{v.container_id}/memories", headers=a).json()["memories"]
        assert [m["memoryId"] for m in listed] == [v.memory_id]  # nothing written by an intruder
    assert send(w.proxy_url, "GET", "/v1/spaces", None, {"x-api-key": ATTACKER_KEY}).status_code == 401
    me = w.admin.get("/v1/users/me", headers=w.bob.headers)
    assert me.status_code == 200 and "ROOT" not in json.dumps(me.json())
    assert w.admin.post("/v1/system/init").json()["alreadyInitialized"] is True


def test_positive_controls(world: World) -> None:
    """Alice's own reads succeed on every read route, and a grant opens what it grants, then closes."""
    w, a = world, {"x-api-key": world.alice.key}
    for v in w.victims:
        for method, path, body, _ in victim_routes(v):
            if method == "GET" or path.endswith(("_search", ":retrieve", ":batchGet")):
                if path.startswith(f"/{v.long_term_index}") or path == "/_mget":
                    continue  # pass-through: Alice is no administrator
                if v.label == "space" and path.endswith(f"long-term/{v.memory_id}"):
                    continue  # a GoodMem memory's id names its record, not a long-term document
                resp = send(w.proxy_url, method, path, body, a)
                assert resp.status_code < 300, (method, path, resp.status_code, resp.text[:300])
    # ml-commons records the writer of every memory document as its owner_id (the security plugin's name).
    container = w.victims[1]
    got = send(
        w.proxy_url, "GET", f"{MC}/{container.container_id}/memories/long-term/{container.memory_id}", None, a
    )
    assert got.json()["owner_id"] == w.alice.user_id, got.text
    v = w.victims[0]
    grant = w.admin.post(
        "/v1/access-policy/grants",
        headers=a,
        json={
            "audience": {"principalId": w.bob.user_id},
            "rule": {
                "operation": "READ_MEMORY",
                "selector": "EXACT",
                "assignedResource": {"kind": "SPACE", "resourceId": v.container_id},
            },
        },
    )
    assert grant.status_code == 201, grant.text
    readable = send(w.proxy_url, "GET", f"/v1/memories/{v.memory_id}/content", None, w.bob.headers)
    assert readable.status_code == 200 and SECRET in readable.text
    via_opensearch = send(
        w.proxy_url, "GET", f"{MC}/{v.container_id}/memories/long-term/{v.memory_id}", None, w.bob.headers
    )
    assert via_opensearch.status_code in (200, 404)  # a GoodMem memory is not a long-term document id
    assert send(w.proxy_url, "DELETE", f"/v1/memories/{v.memory_id}", None, w.bob.headers).status_code == 403
    revoked = w.admin.delete(f"/v1/access-policy/grants/{grant.json()['grantId']}", headers=a)
    assert revoked.status_code == 200
    assert (
        send(w.proxy_url, "GET", f"/v1/memories/{v.memory_id}/content", None, w.bob.headers).status_code
        == 403
    )


def test_container_search_shows_only_what_the_caller_may_see(world: World) -> None:
    w = world
    ids = {v.container_id for v in w.victims}

    def seen(headers: dict[str, str]) -> set[str]:
        resp = send(w.proxy_url, "POST", f"{MC}/_search", {"query": {"match_all": {}}, "size": 1000}, headers)
        assert resp.status_code == 200, resp.text
        return {h["_id"] for h in resp.json()["hits"]["hits"]}

    assert ids <= seen({"x-api-key": w.alice.key})
    assert ids <= seen(dict(w.admin.headers))
    assert not ids & seen(w.bob.headers)
    listed = send(w.proxy_url, "GET", "/v1/spaces", None, w.bob.headers).json()["spaces"]
    assert not ids & {s["spaceId"] for s in listed}
