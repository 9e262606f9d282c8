"""The access matrix on the secured cluster: identity delegated to the cluster, as ml-commons does with the
security plugin.

Alice, Carol (backend role ``team-a``) and Bob (``team-b``) are the cluster's own users; they call memproxy
with their cluster passwords, and memproxy asks the cluster who they are (``authinfo``, with their header).
Alice's container records her as owner with her backend roles; Carol shares a role and may use it but not
delete it; Bob, anonymous callers and wrong passwords are refused on every route of both APIs and through
pass-through (where the cluster itself refuses what memproxy forwards with the caller's own credentials),
and memproxy's own indices stay closed even to the cluster's admin.
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.adversarial.matrix import MC, SECRET, Tally, Victim, send, victim_routes
from tests.conftest import ProxyProcess
from tests.opensearch_memory_helpers import EMBEDDER, new_prefix
from tests.secured.conftest import SecuredCluster

pytestmark = pytest.mark.timeout(600)


@dataclass
class SecuredWorld:
    cluster: SecuredCluster
    proxy_url: str
    victims: list[Victim]

    def as_user(self, user: str) -> dict[str, str]:
        return {"Authorization": self.cluster.basic(user)}


@pytest.fixture(scope="module")
def world(secured_cluster: SecuredCluster, secured_proxy: ProxyProcess) -> Iterator[SecuredWorld]:
    cluster = secured_cluster
    alice = {"Authorization": cluster.basic("alice")}
    with httpx.Client(base_url=secured_proxy.url, headers=alice, timeout=120) as c:
        made = c.post(
            f"{MC}/_create",
            json={
                "name": "alice-secured",
                "configuration": {
                    "embedding_model_type": "TEXT_EMBEDDING",
                    "embedding_model_id": EMBEDDER,
                    "embedding_dimension": 384,
                    "index_prefix": new_prefix("sec"),
                },
            },
        )
        assert made.status_code == 200, made.text
        cid = made.json()["memory_container_id"]
        added = c.post(f"{MC}/{cid}/memories/long-term/_memproxy_add", json={"memory": f"{SECRET} secured"})
        assert added.status_code == 200, added.text
        space = c.post(
            "/v1/spaces",
            json={"name": f"alice-{uuid.uuid4().hex[:6]}", "spaceEmbedders": [{"embedderId": EMBEDDER}]},
        )
        assert space.status_code in (200, 201), space.text
        sid = space.json()["spaceId"]
        mem = c.post("/v1/memories", json={"spaceId": sid, "originalContent": f"{SECRET} in a space"})
        assert mem.status_code in (200, 201), mem.text
        cfg = c.get(f"{MC}/{cid}").json()["configuration"]
        lt_index = f".plugins-ml-am-{cfg['index_prefix']}-memory-long-term"
        space_cfg = c.get(f"{MC}/{sid}").json()["configuration"]
        space_lt = f".plugins-ml-am-{space_cfg['index_prefix']}-memory-long-term"
        victims = [
            Victim("container", cid, added.json()["long_term_memory_id"], lt_index),
            Victim("space", sid, mem.json()["memoryId"], space_lt),
        ]
        yield SecuredWorld(cluster, secured_proxy.url, victims)
        for v in victims:
            c.delete(f"{MC}/{v.container_id}", params={"delete_all_memories": "true"})


def test_the_owner_and_backend_roles_come_from_the_cluster(world: SecuredWorld) -> None:
    got = send(world.proxy_url, "GET", f"{MC}/{world.victims[0].container_id}", None, world.as_user("alice"))
    assert got.status_code == 200, got.text
    owner = got.json()["owner"]
    assert owner["name"] == "alice" and owner["backend_roles"] == ["team-a"]


def test_a_shared_backend_role_reads_but_does_not_delete(world: SecuredWorld) -> None:
    v = world.victims[0]
    carol = world.as_user("carol")
    found = send(
        world.proxy_url,
        "POST",
        f"{MC}/{v.container_id}/memories/long-term/_semantic_search",
        {"query": SECRET},
        carol,
    )
    assert found.status_code == 200 and SECRET in found.text, found.text
    refused = send(world.proxy_url, "DELETE", f"{MC}/{v.container_id}", None, carol)
    assert refused.status_code == 403 and "Only container owner" in refused.text


def test_every_cross_tenant_attempt_is_refused_on_the_secured_cluster(world: SecuredWorld) -> None:
    w, tally = world, Tally()
    attackers = {
        "anonymous": ({}, {401}),
        "wrong password": ({"Authorization": w.cluster.basic("bob", "not-his-password")}, {401}),
        "unknown user": ({"Authorization": w.cluster.basic("alice", "x")}, {401}),
        "bob (team-b)": (w.as_user("bob"), {403, 404}),
    }
    for name, (headers, refusals) in attackers.items():
        for victim in w.victims:
            for method, path, body, per_item in victim_routes(victim):
                resp = send(w.proxy_url, method, path, body, headers)
                tally.check(f"{name}: {method} {path}", resp, refusals, per_item)
    # The cluster's own admin, passing through with its credentials, still cannot reach memproxy's indices.
    admin = w.as_user("admin")
    for path in (
        "/memproxy-goodmem-apikeys/_search",
        "/memproxy-goodmem-*/_search",
        "/.plugins-ml-am-memory-container/_search",
        "/_search",
    ):
        tally.check(f"cluster admin: GET {path}", send(w.proxy_url, "GET", path, None, admin), {403}, False)
    print(
        f"\nsecured access matrix: {tally.attempts} attempts, {len(tally.failures)} not refused, "
        f"{tally.leaks} leaks, {tally.server_errors} 5xx"
    )
    assert tally.failures == [] and tally.leaks == 0 and tally.server_errors == 0
    assert tally.attempts >= 200
    alice = w.as_user("alice")
    for v in w.victims:
        listed = send(w.proxy_url, "GET", f"/v1/spaces/{v.container_id}/memories", None, alice)
        assert listed.status_code == 200 and [m["memoryId"] for m in listed.json()["memories"]] == [
            v.memory_id
        ]


def test_pass_through_goes_with_the_callers_own_identity(world: SecuredWorld) -> None:
    """Forwarded requests carry the caller's credentials and the cluster decides: the cluster's admin may
    read the cluster's health through memproxy, Bob is refused by the cluster itself on an index he may not
    read, and memproxy never answers with its service user's rights."""
    ok = send(world.proxy_url, "GET", "/_cluster/health", None, world.as_user("admin"), verify=True)
    assert ok.status_code == 200, ok.text
    lt = world.victims[0].long_term_index
    refused = send(world.proxy_url, "GET", f"/{lt}/_search", None, world.as_user("bob"))
    assert refused.status_code == 403 and SECRET not in refused.text
    assert "security_exception" in refused.text  # the cluster's own refusal, relayed
    context = ssl.create_default_context(cafile=world.cluster.ca_certs)
    with httpx.Client(base_url=world.cluster.url, verify=context, timeout=60) as direct:
        assert direct.get(f"/{lt}/_search", auth=world.cluster.auth("bob")).status_code == 403  # same answer
