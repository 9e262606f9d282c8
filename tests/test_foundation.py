"""The foundation: index templates on the real node, health, and the transparent pass-through."""

from __future__ import annotations

import gzip
import json
import urllib.request
import uuid

import pytest
from opensearchpy import NotFoundError, OpenSearch

from proxy.embedding.cpu import ThreadGovernor, default_threads
from proxy.store.templates import VectorField, render_index_body
from tests.conftest import ProxyProcess, free_port


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


@pytest.fixture()
def index_name() -> str:
    return f"memproxy-test-{uuid.uuid4().hex[:12]}"


def test_long_term_template_is_accepted_and_answers_knn(opensearch_url: str, index_name: str) -> None:
    client = OpenSearch(hosts=[opensearch_url])
    body = render_index_body("long_term", vector_fields=[VectorField("memory_embedding", 3)])
    client.indices.create(index=index_name, body=body)
    try:
        mapping = client.indices.get_mapping(index=index_name)[index_name]["mappings"]["properties"]
        method = mapping["memory_embedding"]["method"]
        assert (method["engine"], method["space_type"], method["name"]) == ("lucene", "cosinesimil", "hnsw")
        assert method["parameters"] == {"m": 16, "ef_construction": 100}
        assert mapping["namespace"]["type"] == "flat_object"
        settings = client.indices.get_settings(index=index_name)[index_name]["settings"]["index"]
        assert settings["knn"] == "true"
        docs = [("a", [1.0, 0.0, 0.0], "ns1"), ("b", [0.0, 1.0, 0.0], "ns2"), ("c", [0.9, 0.1, 0.0], "ns2")]
        for doc_id, vec, ns in docs:
            client.index(
                index=index_name,
                id=doc_id,
                body={"memory": doc_id, "memory_embedding": vec, "namespace": {"user_id": ns}},
            )
        client.indices.refresh(index=index_name)
        knn = {"vector": [1.0, 0.0, 0.0], "k": 3, "filter": {"term": {"namespace.user_id": "ns2"}}}
        hits = client.search(index=index_name, body={"query": {"knn": {"memory_embedding": knn}}})["hits"][
            "hits"
        ]
        assert [h["_id"] for h in hits] == ["c", "b"]
        # Lucene's cosinesimil score is ml-commons' (1 + cos) / 2.
        assert hits[1]["_score"] == pytest.approx(0.5, abs=1e-6)
    finally:
        client.indices.delete(index=index_name)


@pytest.mark.parametrize("kind", ["working", "sessions", "history", "containers"])
def test_other_templates_are_accepted(opensearch_url: str, index_name: str, kind: str) -> None:
    client = OpenSearch(hosts=[opensearch_url])
    client.indices.create(index=index_name, body=render_index_body(kind))
    client.indices.delete(index=index_name)


def test_health_reports_proxy_and_cluster(proxy_url: str) -> None:
    status, _, raw = _get(proxy_url + "/_memproxy/health")
    body = json.loads(raw)
    assert status == 200
    assert body["status"] == "ok"
    assert body["cluster"]["status"] in {"green", "yellow"}
    assert body["proxy"]["embedders"][0]["dimension"] == 384
    # The names a container's embedding_model_id may use for it, the docs' short one among them.
    assert "all-minilm-l6-v2" in body["proxy"]["embedders"][0]["aliases"]
    # No --embed-threads: the count follows the free cores where the kernel's counters show them (a
    # multi-CPU machine without a CPU quota, as here), and the warm-up forwards were counted.
    threads = body["proxy"]["embed_threads"]
    if ThreadGovernor.for_this_process() is None:
        assert threads == {"mode": "fixed", "threads": default_threads()}
    else:
        assert threads["mode"] == "auto" and threads["least"] <= threads["threads"] <= threads["most"]
        assert sum(threads["forwards_by_threads"].values()) >= 1
    # the settings are shown, secrets masked (a configured password is checked in the cluster-down test)
    assert body["settings"]["opensearch_url"] == body["cluster"]["url"]
    assert body["settings"]["opensearch_password"] in (None, "***")


def test_passthrough_with_opensearch_py(proxy_url: str, index_name: str, admin_key: str) -> None:
    client = OpenSearch(hosts=[proxy_url], http_auth=("root", admin_key))
    assert client.info()["version"]["number"] == "3.6.0"
    client.indices.create(index=index_name, body={"settings": {"number_of_replicas": 0}})
    try:
        lines = []
        for i in range(20):
            lines.append(json.dumps({"index": {"_index": index_name, "_id": str(i)}}))
            lines.append(json.dumps({"text": f"memory number {i}", "n": i}))
        result = client.bulk(body="\n".join(lines) + "\n", refresh=True)
        assert result["errors"] is False and len(result["items"]) == 20
        hits = client.search(index=index_name, body={"query": {"range": {"n": {"gte": 15}}}, "size": 50})
        assert sorted(int(h["_id"]) for h in hits["hits"]["hits"]) == [15, 16, 17, 18, 19]
        assert client.indices.exists(index=index_name) is True
        with pytest.raises(NotFoundError):
            client.get(index=index_name, id="missing")
    finally:
        client.indices.delete(index=index_name)
    assert client.indices.exists(index=index_name) is False


def test_passthrough_cat_plugins_lists_knn(proxy_url: str, admin_headers: dict[str, str]) -> None:
    status, headers, raw = _get(proxy_url + "/_cat/plugins?v", admin_headers)
    assert status == 200
    assert "opensearch-knn" in raw.decode()
    assert headers["Content-Type"].startswith("text/plain")


def test_passthrough_relays_bytes_exactly(
    proxy_url: str, opensearch_url: str, admin_headers: dict[str, str]
) -> None:
    # Not /_cluster/settings: memproxy answers that one itself (it merges in the retention settings).
    path = "/?pretty"
    direct = _get(opensearch_url + path, {"Accept-Encoding": "gzip"})
    proxied = _get(proxy_url + path, {"Accept-Encoding": "gzip", **admin_headers})
    assert proxied[0] == direct[0] == 200
    assert proxied[2] == direct[2]
    encodings = [
        {k.lower(): v for k, v in headers.items()}.get("content-encoding")
        for headers in (direct[1], proxied[1])
    ]
    assert encodings == ["gzip", "gzip"]  # the node compresses when asked; the proxy relays it as it is
    json.loads(gzip.decompress(proxied[2]))


def test_passthrough_keeps_node_errors(proxy_url: str, admin_headers: dict[str, str]) -> None:
    status, _, raw = _get(proxy_url + "/no-such-index-memproxy/_search", admin_headers)
    body = json.loads(raw)
    assert status == 404
    assert body["error"]["type"] == "index_not_found_exception"


def test_cluster_down_is_503_in_opensearch_shape() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    proxy = ProxyProcess(
        dead, extra_args=["--opensearch-username", "u", "--opensearch-password", "s3cr3t-pw"]
    )
    try:
        # Any key: looking it up is the first thing that needs the cluster.
        status, _, raw = _get(proxy.url + "/_cat/indices", {"x-api-key": "gm_any"})
        body = json.loads(raw)
        assert status == 503
        assert body["status"] == 503
        assert "unreachable" in body["error"]["reason"]
        assert body["error"]["root_cause"][0]["type"] == body["error"]["type"]
        status, _, raw = _get(proxy.url + "/_memproxy/health")
        health = json.loads(raw)
        assert status == 200
        assert health["status"] == "degraded" and health["cluster"]["status"] == "unavailable"
        assert health["settings"]["opensearch_password"] == "***" and "s3cr3t-pw" not in raw.decode()
        assert "Traceback" not in proxy.log()
    finally:
        proxy.stop()


def test_readme_lists_every_setting_and_no_other() -> None:
    """The README's configuration table cannot drift from the parser: same flags, same env vars."""
    import re

    from proxy.config import build_parser
    from tests.conftest import REPO

    readme = (REPO / "README.md").read_text()
    table = readme.split("## Configuration", 1)[1].split("\n\n", 2)[1]
    documented_flags = set(re.findall(r"`(--[a-z0-9-]+)", table))
    documented_envs = set(re.findall(r"`((?:OPENSEARCH|MEMPROXY)_[A-Z0-9_]+)`", table))
    flags: set[str] = set()
    envs: set[str] = set()
    for action in build_parser()._actions:
        flags.update(o for o in action.option_strings if o.startswith("--") and o != "--help")
        envs.update(re.findall(r"env ([A-Z][A-Z0-9_]+)", action.help or ""))
    assert documented_flags == flags
    assert documented_envs == envs
