"""The secured cluster profile (``scripts/opensearch-secured``: OpenSearch 2.19.1, security plugin, TLS) and
memproxy running on it as its service user ``memproxy`` (role ``memproxy_service``).

What is proven here: the node answers over TLS to authenticated callers only; the profile's users have the
backend roles and permissions the docs state, both ways (allowed and refused); ``proxy.store.security``
names the caller the cluster sees, from the caller's own header and never memproxy's; memproxy works end to
end on the service user alone (GoodMem and ml-commons, with the cluster's TLS and a 2.19 node); pass-through
acts as the caller; and the service user has no security-admin rights and no access beyond its indices.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest
from opensearchpy import OpenSearch

from proxy.config import Settings
from proxy.errors import Unavailable
from proxy.store.client import NodeBadRequest, Store
from proxy.store.security import ClusterUser, authinfo, cluster_has_security
from tests.conftest import ProxyProcess, free_port
from tests.secured.conftest import SecuredCluster

AUTHINFO = "/_plugins/_security/authinfo"


@pytest.fixture(scope="module")
def public_index(secured_cluster: SecuredCluster) -> Iterator[str]:
    """A ``public-*`` index with one document, written as admin."""
    admin = secured_cluster.client("admin")
    name = f"public-{uuid.uuid4().hex[:8]}"
    admin.index(index=name, id="1", body={"text": "visible to every team"}, refresh=True)
    yield name
    admin.indices.delete(index=name, ignore=[404])


@pytest.fixture(scope="module")
def team_a_index(secured_cluster: SecuredCluster) -> Iterator[str]:
    name = f"team-a-{uuid.uuid4().hex[:8]}"
    yield name
    secured_cluster.client("admin").indices.delete(index=name, ignore=[404])


# --- the node --------------------------------------------------------------------------------------------


def test_node_answers_with_tls_and_auth_only(secured_cluster: SecuredCluster) -> None:
    assert secured_cluster.url.startswith("https://127.0.0.1:")
    with pytest.raises(httpx.TransportError):  # plain HTTP on the TLS port gets no HTTP answer
        httpx.get(secured_cluster.url.replace("https://", "http://"), timeout=10)
    with pytest.raises(httpx.ConnectError):  # the demo certificate is not trusted without the demo CA
        httpx.get(secured_cluster.url, timeout=10)
    with secured_cluster.http() as anonymous:
        assert anonymous.get("/").status_code == 401
        assert anonymous.get("/", auth=("alice", "not-her-password")).status_code == 401
    with secured_cluster.http(secured_cluster.service_user) as service:
        health = service.get("/_cluster/health")
        assert health.status_code == 200 and health.json()["cluster_name"] == "memproxy-secured"
    with secured_cluster.http("admin") as admin:
        assert admin.get("/").json()["version"]["number"] == "2.19.1"
        plugins = {row["component"] for row in admin.get("/_cat/plugins", params={"format": "json"}).json()}
        assert {"opensearch-security", "opensearch-knn"} <= plugins


def test_authinfo_names_the_users_backend_roles(secured_cluster: SecuredCluster) -> None:
    for user, backend_role in secured_cluster.backend_roles.items():
        with secured_cluster.http(user) as http:
            info = http.get(AUTHINFO).json()
        assert info["user_name"] == user
        assert info["backend_roles"] == [backend_role]
        team_role = backend_role.replace("-", "_") + "_writer"
        assert {"public_reader", team_role} <= set(info["roles"])
    with secured_cluster.http(secured_cluster.service_user) as http:
        info = http.get(AUTHINFO).json()
    assert info["user_name"] == "memproxy" and "memproxy_service" in info["roles"]


def test_test_users_permissions_both_ways(
    secured_cluster: SecuredCluster, public_index: str, team_a_index: str
) -> None:
    alice, bob = secured_cluster.client("alice"), secured_cluster.client("bob")
    for client in (alice, bob):  # everyone in a team reads public-*
        hits = client.search(index=public_index, body={"query": {"match_all": {}}})["hits"]["hits"]
        assert [h["_id"] for h in hits] == ["1"]
    alice.index(index=team_a_index, id="a", body={"text": "team a only"}, refresh=True)  # her team's
    assert alice.get(index=team_a_index, id="a")["found"]
    with secured_cluster.http("bob") as http:  # not his team's, either way
        assert http.get(f"/{team_a_index}/_doc/a").status_code == 403
        assert http.put(f"/{team_a_index}/_doc/b", json={"text": "x"}).status_code == 403
    with secured_cluster.http("alice") as http:  # public-* is read-only
        assert http.put(f"/{public_index}/_doc/2", json={"text": "x"}).status_code == 403


def test_service_user_has_no_security_admin_and_no_other_index(
    secured_cluster: SecuredCluster, public_index: str
) -> None:
    with secured_cluster.http(secured_cluster.service_user) as http:
        assert http.get("/_plugins/_security/api/internalusers").status_code == 403
        eve = {"password": "Ev3-Never-Created-xQ7z", "backend_roles": ["team-a"]}
        assert http.put("/_plugins/_security/api/internalusers/eve", json=eve).status_code == 403
        mapping = {"users": ["memproxy"]}
        assert http.put("/_plugins/_security/api/rolesmapping/all_access", json=mapping).status_code == 403
        assert http.get(f"/{public_index}/_search").status_code == 403
        assert http.put(f"/other-{uuid.uuid4().hex[:8]}").status_code == 403
        # its own patterns it does manage, whatever the prefix (use_system_index: false containers)
        own = f"anyprefix-{uuid.uuid4().hex[:8]}-memory-working"
        assert http.put(f"/{own}").status_code == 200
        assert http.delete(f"/{own}").status_code == 200
    with secured_cluster.http("admin") as http:
        assert http.get("/_plugins/_security/api/internalusers/eve").status_code == 404


# --- proxy.store.security -----------------------------------------------------------------------------


def _store(cluster: SecuredCluster) -> Store:
    """A store as memproxy builds it: its own credentials are the service user's."""
    return Store(
        Settings(
            opensearch_url=cluster.url,
            opensearch_username=cluster.service_user,
            opensearch_password=cluster.users[cluster.service_user],
            opensearch_ca_certs=cluster.ca_certs,
        )
    )


async def test_store_authinfo_is_the_callers(secured_cluster: SecuredCluster) -> None:
    store = _store(secured_cluster)
    try:
        alice = await authinfo(store, secured_cluster.basic("alice"))
        assert isinstance(alice, ClusterUser)
        assert (alice.name, alice.backend_roles) == ("alice", ("team-a",))
        assert {"public_reader", "team_a_writer"} <= set(alice.roles)
        bob = await authinfo(store, secured_cluster.basic("bob"))
        assert bob is not None and (bob.name, bob.backend_roles) == ("bob", ("team-b",))
        # Refused credentials are None: never memproxy's own identity in their place.
        assert await authinfo(store, secured_cluster.basic("alice", "wrong-password")) is None
        assert await authinfo(store, "Bearer not-a-cluster-token") is None
        assert await cluster_has_security(store) is True
    finally:
        await store.close()


async def test_cluster_without_security_plugin(opensearch_url: str) -> None:
    store = Store(Settings(opensearch_url=opensearch_url))
    try:
        assert await cluster_has_security(store) is False
        with pytest.raises(NodeBadRequest):  # "no handler found": there is nobody to ask
            await authinfo(store, "Basic YWxpY2U6eA==")
    finally:
        await store.close()


async def test_authinfo_on_an_unreachable_node() -> None:
    store = Store(Settings(opensearch_url=f"https://127.0.0.1:{free_port()}"))
    try:
        with pytest.raises(Unavailable):
            await authinfo(store, "Basic YWxpY2U6eA==")
        with pytest.raises(Unavailable):
            await cluster_has_security(store)
    finally:
        await store.close()


# --- memproxy on the service user ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gm_http(secured_proxy: ProxyProcess, secured_root_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=secured_proxy.url, headers={"x-api-key": secured_root_key}, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def embedder_id(gm_http: httpx.Client) -> str:
    return str(gm_http.get("/v1/embedders").json()["embedders"][0]["embedderId"])


def test_goodmem_space_memory_retrieve(gm_http: httpx.Client, embedder_id: str) -> None:
    space = gm_http.post(
        "/v1/spaces",
        json={"name": f"secured-{uuid.uuid4().hex[:8]}", "spaceEmbedders": [{"embedderId": embedder_id}]},
    )
    assert space.status_code == 201, space.text
    space_id = space.json()["spaceId"]
    try:
        texts = ["The finance committee approves the budget.", "The cat sleeps on the warm windowsill."]
        ids = []
        for text in texts:
            made = gm_http.post("/v1/memories", json={"spaceId": space_id, "originalContent": text})
            assert made.status_code == 201, made.text
            assert made.json()["processingStatus"] == "COMPLETED"
            ids.append(made.json()["memoryId"])
        assert gm_http.get(f"/v1/memories/{ids[0]}").status_code == 200
        query = {"message": "Who approves the budget?", "spaceKeys": [{"spaceId": space_id}]}
        found = gm_http.post("/v1/memories:retrieve", json=query)
        assert found.status_code == 200, found.text
        events = [json.loads(line) for line in found.text.splitlines() if line.strip()]
        chunks = [e["retrievedItem"]["chunk"] for e in events if "retrievedItem" in e]
        assert [c["chunk"]["memoryId"] for c in chunks] == ids  # best first
        # a deletion goes through _delete_by_query (the reindex module the profile assembles)
        assert gm_http.delete(f"/v1/memories/{ids[1]}").status_code == 204
    finally:
        assert gm_http.delete(f"/v1/spaces/{space_id}").status_code == 204


@pytest.mark.parametrize("use_system_index", [True, False])
def test_ml_commons_container_and_semantic_search(
    gm_http: httpx.Client, embedder_id: str, use_system_index: bool
) -> None:
    prefix = f"secured-{uuid.uuid4().hex[:8]}"
    made = gm_http.post(
        "/_plugins/_ml/memory_containers/_create",
        json={
            "name": prefix,
            "configuration": {
                "embedding_model_type": "TEXT_EMBEDDING",
                "embedding_model_id": embedder_id,
                "embedding_dimension": 384,
                "index_prefix": prefix,
                "use_system_index": use_system_index,
            },
        },
    )
    assert made.status_code == 200, made.text
    cid = made.json()["memory_container_id"]
    base = f"/_plugins/_ml/memory_containers/{cid}/memories"
    try:
        added = gm_http.post(
            base + "/long-term/_memproxy_add",
            json={"memory": "Alice drinks green tea every morning.", "namespace": {"user_id": "alice"}},
        )
        assert added.status_code == 200, added.text
        memory_id = added.json()["long_term_memory_id"]
        working = gm_http.post(
            base,
            json={
                "messages": [{"role": "user", "content": [{"type": "text", "text": "I like hiking."}]}],
                "namespace": {"user_id": "alice"},
                "infer": False,
            },
        )
        assert working.status_code == 200, working.text
        hits = gm_http.post(
            base + "/long-term/_semantic_search",
            json={"query": "What does Alice drink?", "k": 3, "namespace": {"user_id": "alice"}},
        )
        assert hits.status_code == 200, hits.text
        found = hits.json()["hits"]["hits"]
        assert [h["_id"] for h in found] == [memory_id]
        expected_index = (".plugins-ml-am-" if use_system_index else "") + f"{prefix}-memory-long-term"
        assert found[0]["_index"] == expected_index
    finally:
        deleted = gm_http.delete(
            f"/_plugins/_ml/memory_containers/{cid}", params={"delete_all_memories": "true"}
        )
        assert deleted.status_code == 200, deleted.text


def test_pass_through_acts_as_the_caller(
    secured_proxy: ProxyProcess, secured_cluster: SecuredCluster, public_index: str, team_a_index: str
) -> None:
    def as_user(user: str) -> httpx.Client:
        return httpx.Client(base_url=secured_proxy.url, auth=secured_cluster.auth(user), timeout=60)

    with as_user("alice") as alice, as_user("bob") as bob:
        assert alice.get(f"/{public_index}/_doc/1").status_code == 200
        doc = {"text": "through memproxy"}
        put = alice.put(f"/{team_a_index}/_doc/p", params={"refresh": "true"}, json=doc)
        assert put.status_code in (200, 201), put.text
        assert bob.get(f"/{public_index}/_doc/1").status_code == 200
        # bob may not, although memproxy's own service user could not either: the cluster refuses *him*
        assert bob.get(f"/{team_a_index}/_doc/p").status_code == 403
        # and what memproxy's service user may do, a caller may not do through memproxy
        assert alice.get("/memproxy-goodmem-system/_search").status_code == 403
        who = alice.get(AUTHINFO)
        assert who.status_code == 200 and who.json()["user_name"] == "alice"
    assert httpx.get(f"{secured_proxy.url}/{public_index}/_doc/1", timeout=60).status_code == 401


def test_opensearch_py_with_the_profiles_settings(secured_cluster: SecuredCluster) -> None:
    """opensearch-py as the docs say to use it against this profile: HTTPS, the demo CA, basic auth."""
    cluster = secured_cluster
    client = OpenSearch(hosts=[cluster.url], http_auth=cluster.auth("carol"), ca_certs=cluster.ca_certs)
    assert client.transport.perform_request("GET", AUTHINFO)["backend_roles"] == ["team-a"]
