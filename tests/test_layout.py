"""The index layout on a real node: memory indices with three primaries, routed by container; and the
migration of a legacy (unrouted, three-primary) index into that layout, interrupted and resumed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opensearchpy import OpenSearch
from opensearchpy.exceptions import TransportError

from proxy.config import Settings
from proxy.store.client import Store
from proxy.store.containers import render_memory_index
from proxy.store.layout import LAYOUT_META_KEY
from proxy.store.migrate import MigrationReport, migrate_layout
from proxy.store.templates import MemoryLayout
from tests.conftest import ProxyProcess
from tests.opensearch_memory_helpers import EMBEDDING, MC, call, make_client, new_prefix

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def sharded(opensearch_url: str) -> Iterator[ProxyProcess]:
    """memproxy whose memory indices get three primaries (``--auth none``: scope, not keys, is tested)."""
    p = ProxyProcess(opensearch_url, extra_args=["--auth", "none", "--memory-shards", "3"])
    yield p
    p.stop()


@pytest.fixture(scope="module")
def client(sharded: ProxyProcess) -> Iterator[OpenSearch]:
    c = make_client(sharded.url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def node(opensearch_url: str) -> Iterator[OpenSearch]:
    c = OpenSearch(hosts=[opensearch_url], timeout=60)
    yield c
    c.close()


def _container(client: OpenSearch, prefix: str, **config: Any) -> str:
    body = {"name": "layout", "configuration": {**EMBEDDING, "index_prefix": prefix, **config}}
    return str(client.plugins.ml.create_memory_container(body=body)["memory_container_id"])


def _write(client: OpenSearch, cid: str, texts: list[str]) -> list[str]:
    done = call(
        client,
        "POST",
        f"{MC}/{cid}/memories/long-term/_memproxy_bulk",
        {"memories": [{"memory": t, "namespace": {"user_id": "u"}} for t in texts]},
    )
    return [str(i) for i in done["long_term_memory_ids"]]


def _search(client: OpenSearch, cid: str) -> dict[str, Any]:
    body = {"query": {"match_all": {}}, "size": 100}
    found: dict[str, Any] = call(client, "POST", f"{MC}/{cid}/memories/long-term/_search", body)
    return found


def _drop(client: OpenSearch, *cids: str) -> None:
    for cid in cids:
        client.plugins.ml.delete_memory_container(
            memory_container_id=cid, params={"delete_all_memories": "true"}
        )


def test_a_containers_calls_touch_one_shard_of_a_three_primary_index(
    client: OpenSearch, node: OpenSearch
) -> None:
    prefix = new_prefix("routed")
    a, b = _container(client, prefix), _container(client, prefix)  # one shared set of indices
    index = f".plugins-ml-am-{prefix}-memory-long-term"
    try:
        ids_a = _write(client, a, ["alpha tea", "alpha coffee", "alpha water"])
        ids_b = _write(client, b, ["beta tea", "beta juice"])
        settings = node.indices.get_settings(index=index)[index]["settings"]["index"]
        assert (settings["number_of_shards"], settings["number_of_replicas"]) == ("3", "1")
        assert "auto_expand_replicas" not in settings
        meta = node.indices.get_mapping(index=index)[index]["mappings"]["_meta"]
        assert meta[LAYOUT_META_KEY] == {"routing": "container", "field": "memory_container_id"}
        # Every document is stored with its container's routing...
        stored = node.search(index=index, body={"size": 100, "query": {"match_all": {}}})["hits"]["hits"]
        assert {h["_id"]: h["_routing"] for h in stored} == {
            **dict.fromkeys(ids_a, a),
            **dict.fromkeys(ids_b, b),
        }
        # ... so a container's search visits one shard, finds its own memories only, and shows no _routing.
        found = _search(client, a)
        assert found["_shards"]["total"] == 1
        assert sorted(h["_id"] for h in found["hits"]["hits"]) == sorted(ids_a)
        assert all("_routing" not in h for h in found["hits"]["hits"])
        semantic = call(
            client, "POST", f"{MC}/{b}/memories/long-term/_semantic_search", {"query": "tea", "k": 10}
        )
        assert {h["_id"] for h in semantic["hits"]["hits"]} <= set(ids_b)
        # Gets and deletes by id are routed too; another container's id stays not found.
        got = client.plugins.ml.get_agentic_memory(memory_container_id=a, doc_type="long-term", id=ids_a[0])
        assert got["memory"] == "alpha tea" and "_routing" not in got
        with pytest.raises(TransportError) as err:
            client.plugins.ml.get_agentic_memory(memory_container_id=a, doc_type="long-term", id=ids_b[0])
        assert err.value.status_code == 404
        client.plugins.ml.delete_agentic_memory(memory_container_id=a, doc_type="long-term", id=ids_a[0])
        node.indices.refresh(index=index)
        assert sorted(h["_id"] for h in _search(client, a)["hits"]["hits"]) == sorted(ids_a[1:])
        assert len(_search(client, b)["hits"]["hits"]) == 2
    finally:
        _drop(client, a, b)


def _legacy_index(node: OpenSearch, index: str) -> None:
    """A long-term index as memproxy made it before routing, with three primaries: no marker."""
    body = render_memory_index(
        "long-term",
        index_settings={"number_of_shards": "3", "number_of_replicas": "0"},
        vector_fields=[{"name": "memory_embedding", "dimension": 384}],
        layout=MemoryLayout(),
    )
    del body["mappings"]["_meta"][LAYOUT_META_KEY]
    node.indices.create(index=index, body=body)


def test_migration_moves_a_legacy_index_without_losing_or_duplicating(
    client: OpenSearch, node: OpenSearch, opensearch_url: str
) -> None:
    prefix = new_prefix("legacy")
    index = f"{prefix}-memory-long-term"
    _legacy_index(node, index)
    a = _container(client, prefix, use_system_index=False)
    b = _container(client, prefix, use_system_index=False)

    def migrate(**kwargs: Any) -> MigrationReport:
        async def go() -> MigrationReport:
            store = Store(Settings(opensearch_url=opensearch_url, memory_shards=2, memory_replicas=0))
            try:
                return await migrate_layout(store, index, **kwargs)
            finally:
                await store.close()

        return asyncio.run(go())

    try:
        ids = {
            a: _write(client, a, [f"a fact {i}" for i in range(7)]),
            b: _write(client, b, ["b fact 1", "b fact 2"]),
        }
        stored = node.search(index=index, body={"size": 100})["hits"]["hits"]
        assert all("_routing" not in h for h in stored)  # a legacy index is not routed: ids decide the shard
        before = {c: _search(client, c)["hits"]["hits"] for c in (a, b)}
        assert before[a][0]["_index"] == index

        # Interrupted after 4 documents: the old index is blocked, nothing is switched or deleted.
        report = migrate(stop_after=4, batch=3, settle_s=0)
        assert (report.state, report.copied, report.source_count) == ("interrupted", 4, 9)
        assert node.indices.exists(index=index) and not node.indices.exists_alias(name=index)
        with pytest.raises(TransportError) as err:
            _write(client, a, ["written while blocked"])
        assert err.value.status_code == 503
        assert len(_search(client, a)["hits"]["hits"]) == 7  # reads go on

        # Resumed: everything copied once, then the name switches to the routed index.
        report = migrate(batch=3)
        assert (report.state, report.source_count, report.target_count) == ("migrated", 9, 9)
        target = f"{index}-routed"
        assert node.indices.get_alias(name=index) == {target: {"aliases": {index: {"is_write_index": True}}}}
        moved = node.search(index=target, body={"size": 100})["hits"]["hits"]
        assert sorted(h["_id"] for h in moved) == sorted(ids[a] + ids[b])  # none lost, none twice
        assert {h["_routing"] for h in moved} == {a, b}
        assert node.indices.get_settings(index=target)[target]["settings"]["index"]["number_of_shards"] == "2"
        again = migrate()
        assert again.state == "already migrated"

        # The API reads the migrated data unchanged, each container from one shard, and writes again.
        for c in (a, b):
            after = _search(client, c)
            assert after["_shards"]["total"] == 1
            assert sorted((h["_id"], h["_source"]["memory"]) for h in after["hits"]["hits"]) == sorted(
                (h["_id"], h["_source"]["memory"]) for h in before[c]
            )
        new = _write(client, a, ["after the move"])
        got = client.plugins.ml.get_agentic_memory(memory_container_id=a, doc_type="long-term", id=new[0])
        assert got["memory"] == "after the move"
    finally:
        _drop(client, a, b)
        for name in (f"{index}-routed", index):
            if node.indices.exists(index=name):
                node.indices.delete(index=f"{index}-routed" if node.indices.exists_alias(name=name) else name)
        for kind in ("working", "sessions", "history"):
            node.indices.delete(index=f"{prefix}-memory-{kind}", ignore_unavailable=True)
