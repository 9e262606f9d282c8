"""A tenant's Query DSL cannot read another tenant's memories (docs/security.md, "Caller Query DSL: the
allowlist").

Two non-admin GoodMem users, A and B, each own a GoodMem space and an ml-commons container in the shared
default indices, with a secret word in every memory, container name and space name. B sends, on B's own
container and space, every class of body that reads outside the scoped query: ``global`` aggregations
(nested too), ``min_doc_count: 0``, ``significant_*`` backgrounds, the three suggesters, and each lookup kind
(terms lookup, ``indexed_shape``, ``more_like_this`` documents, ``percolate`` by id) in ``_search``, in the
``_semantic_search`` filter, in container ``_search`` and in ``_delete_by_query``; also the ml-commons model
searches. Every one is a 400 naming what it refused, and nothing of A comes back. Legitimate bodies (bool,
term, match, terms + top_hits, sort, paging, ``_source``, neural, knn with a filter) still answer 200 with
B's documents only, and A's memories are all still there afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.adversarial.tenants import Tenant, make_tenant
from tests.opensearch_memory_helpers import EMBEDDER, EMBEDDING

pytestmark = pytest.mark.timeout(600)

MC = "/_plugins/_ml/memory_containers"
ML = "/_plugins/_ml"


@dataclass(frozen=True)
class Owner:
    tenant: Tenant
    secret: str
    container: str
    space: str
    memory_id: str  # A long-term memory of the container
    long_term_index: str

    def client(self, base: str) -> httpx.Client:
        return httpx.Client(base_url=base, headers=self.tenant.headers, timeout=120)


def _owner(admin: httpx.Client, name: str) -> Owner:
    tenant = make_tenant(admin, name)
    secret = f"dsl{name}secret{uuid.uuid4().hex[:10]}"
    h = tenant.headers
    made = admin.post(
        f"{MC}/_create", headers=h, json={"name": f"{secret} container", "configuration": dict(EMBEDDING)}
    )
    assert made.status_code == 200, made.text
    cid = made.json()["memory_container_id"]
    added = admin.post(
        f"{MC}/{cid}/memories/long-term/_memproxy_add", headers=h, json={"memory": f"{secret} long-term"}
    )
    assert added.status_code == 200, added.text
    message = {"role": "user", "content": [{"type": "text", "text": f"{secret} working"}]}
    working = admin.post(f"{MC}/{cid}/memories", headers=h, json={"messages": [message], "infer": False})
    assert working.status_code == 200, working.text
    space = admin.post(
        "/v1/spaces",
        headers=h,
        json={"name": f"{secret} space", "spaceEmbedders": [{"embedderId": EMBEDDER}]},
    )
    assert space.status_code in (200, 201), space.text
    sid = space.json()["spaceId"]
    memory = admin.post(
        "/v1/memories", headers=h, json={"spaceId": sid, "originalContent": f"{secret} chunk"}
    )
    assert memory.status_code in (200, 201), memory.text
    config = admin.get(f"{MC}/{cid}", headers=h).json()["configuration"]
    index = f".plugins-ml-am-{config['index_prefix']}-memory-long-term"
    return Owner(tenant, secret, cid, sid, added.json()["long_term_memory_id"], index)


@dataclass(frozen=True)
class World:
    url: str
    a: Owner
    b: Owner


@pytest.fixture(scope="module")
def world(proxy_url: str, admin_key: str) -> Iterator[World]:
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": admin_key}, timeout=120) as admin:
        a, b = _owner(admin, "alice"), _owner(admin, "bob")
        assert a.long_term_index == b.long_term_index  # the shared default indices: only the scope separates
        yield World(proxy_url, a, b)
        for owner in (a, b):
            for cid in (owner.container, owner.space):
                admin.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})


def _top_hits_under(agg: dict[str, Any]) -> dict[str, Any]:
    return {"size": 0, "aggs": {"outer": {**agg, "aggs": {"t": {"top_hits": {"size": 100}}}}}}


def _reads_outside(w: World) -> list[tuple[str, dict[str, Any]]]:
    """(the name the 400 must give, a body) for every class of body that reads outside the scope."""
    a, typo = w.a, w.a.secret[:-1] + ("x" if w.a.secret[-1] != "x" else "y")
    nested_global = {
        "filter": {"match_all": {}},
        "aggs": {"g": _top_hits_under({"global": {}})["aggs"]["outer"]},
    }
    return [
        ("global", _top_hits_under({"global": {}})),
        ("global", {"size": 0, "aggs": {"f": nested_global}}),
        ("global", {"size": 0, "aggs": {"t": {"terms": {"field": "memory_container_id"},
                                              "aggs": {"g": {"global": {}, "aggs": {"c": {"cardinality": {
                                                  "field": "memory_container_id"}}}}}}}}),
        ("min_doc_count", {"size": 0, "aggs": {"ids": {"terms": {"field": "memory_container_id",
                                                                 "min_doc_count": 0, "size": 1000}}}}),
        ("min_doc_count", {"size": 0, "aggs": {"ids": {"multi_terms": {
            "terms": [{"field": "memory_container_id"}, {"field": "owner_id"}], "min_doc_count": 0}}}}),
        ("significant_terms", {"size": 0, "aggs": {"s": {"significant_terms": {
            "field": "memory_container_id", "background_filter": {"match_all": {}}, "min_doc_count": 1}}}}),
        ("significant_text", {"size": 0, "aggs": {"s": {"significant_text": {"field": "memory"}}}}),
        ("suggest", {"suggest": {"s": {"text": typo, "term": {"field": "memory", "min_word_length": 3}}}}),
        ("suggest", {"suggest": {"s": {"text": typo, "phrase": {"field": "memory"}}}}),
        ("suggest", {"suggest": {"s": {"prefix": "dsl", "completion": {"field": "memory"}}}}),
        *(("lookup", {"query": lookup}) for lookup in _lookups(a)),
    ]  # fmt: skip


def _lookups(a: Owner) -> list[dict[str, Any]]:
    """Each lookup kind, aimed at A's long-term memory."""
    doc = {"index": a.long_term_index, "id": a.memory_id, "path": "memory"}
    return [
        {"terms": {"memory": doc}},
        {"geo_shape": {"memory": {"indexed_shape": doc}}},
        {"more_like_this": {"fields": ["memory"], "like": [{"_index": doc["index"], "_id": doc["id"]}],
                            "min_term_freq": 1, "min_doc_freq": 1}},
        {"more_like_this": {"fields": ["memory"], "like": [{"_id": doc["id"]}], "min_term_freq": 1,
                            "min_doc_freq": 1}},
        {"percolate": {"field": "memory", "index": doc["index"], "id": doc["id"]}},
        {"bool": {"filter": [{"terms": {"memory_container_id": {**doc, "path": "memory_container_id"}}}]}},
    ]  # fmt: skip


def _refused(res: httpx.Response, a: Owner, name: str | None = None) -> None:
    assert a.secret not in res.text, res.text[:500]
    assert res.status_code == 400, res.text[:500]
    error = res.json()["error"]
    assert error["type"] == "illegal_argument_exception", error
    assert "is not allowed in a memory search" in error["reason"], error["reason"]
    if name is not None and name != "lookup":
        assert f"[{name}]" in error["reason"], error["reason"]


MEMBERS = [
    "global", "global-under-filter", "global-under-terms", "terms-min-doc-count-0",
    "multi-terms-min-doc-count-0",
    "significant-terms-background", "significant-text", "term-suggester", "phrase-suggester",
    "completion-suggester", "terms-lookup", "indexed-shape", "more-like-this-index-doc",
    "more-like-this-same-index-doc", "percolate-by-id", "terms-lookup-in-bool-filter",
]  # fmt: skip
LOOKUP_KINDS = MEMBERS[-6:]


@pytest.mark.parametrize("member", range(len(MEMBERS)), ids=MEMBERS)
def test_reads_outside_the_scope_are_refused_on_every_search_route(world: World, member: int) -> None:
    b = world.b
    name, body = _reads_outside(world)[member]
    with b.client(world.url) as client:
        for route in (
            f"{MC}/{b.container}/memories/long-term/_search",
            f"{MC}/{b.container}/memories/working/_search",
            f"{MC}/{b.space}/memories/long-term/_search",
            f"{MC}/_search",
        ):
            _refused(client.post(route, json=body), world.a, name)


@pytest.mark.parametrize("kind", ["models", "connectors", "model_groups"])
def test_ml_commons_document_searches_cannot_leave_their_kind(world: World, kind: str) -> None:
    """``{type}/_search`` reads one shared index filtered by kind: a global aggregation would read every kind
    (and memproxy's own documents) there."""
    with world.b.client(world.url) as client:
        res = client.post(f"{ML}/{kind}/_search", json=_top_hits_under({"global": {}}))
    if res.status_code != 403:  # a caller who may not search this kind at all is refused before
        _refused(res, world.a, "global")


@pytest.mark.parametrize("kind", range(len(LOOKUP_KINDS)), ids=LOOKUP_KINDS)
def test_lookups_are_refused_in_filters_and_deletes(world: World, kind: int) -> None:
    b, a = world.b, world.a
    lt = f"{MC}/{b.container}/memories/long-term"
    with b.client(world.url) as client:
        for lookup in _lookups(a)[kind : kind + 1]:
            _refused(client.post(f"{lt}/_semantic_search", json={"query": "long-term", "filter": lookup}), a)
            _refused(client.post(f"{lt}/_hybrid_search", json={"query": "long-term", "filter": lookup}), a)
            _refused(client.post(f"{MC}/_search", json={"query": lookup}), a)
            for memory_type in ("long-term", "working"):
                dbq = f"{MC}/{b.container}/memories/{memory_type}/_delete_by_query"
                _refused(client.post(dbq, json={"query": {"bool": {"must_not": [lookup]}}}), a)
    with a.client(world.url) as owner:
        found = owner.post(
            f"{MC}/{a.container}/memories/long-term/_search", json={"query": {"match_all": {}}}
        )
        assert found.status_code == 200 and a.secret in found.text, found.text[:300]


def _hits(res: httpx.Response) -> list[dict[str, Any]]:
    assert res.status_code == 200, res.text[:500]
    hits: list[dict[str, Any]] = res.json()["hits"]["hits"]
    return hits


def test_legitimate_bodies_still_work_and_see_only_b(world: World) -> None:
    b, a = world.b, world.a
    lt = f"{MC}/{b.container}/memories/long-term"
    vector = [0.05] * 384
    mine = {"term": {"memory_container_id": b.container}}  # k-NN filters inside the clause (efficient)
    bodies = [
        {"query": {"bool": {"must": [{"match": {"memory": b.secret}}],
                            "filter": [{"term": {"memory_container_id": b.container}}]}},
         "size": 10, "from": 0, "sort": [{"created_time": "desc"}],
         "_source": ["memory", "memory_container_id"]},
        {"query": {"match_all": {}}, "aggs": {"c": {"terms": {"field": "memory_container_id"},
                                                     "aggs": {"t": {"top_hits": {"size": 10}}}}}},
        {"query": {"neural": {"memory_embedding": {"query_text": "long-term", "k": 5, "filter": mine}}}},
        {"query": {"knn": {"memory_embedding": {"vector": vector, "k": 5,
                                                 "filter": {"bool": {"filter": [mine]}}}}}},
        {"query": {"match_all": {}}, "post_filter": {"exists": {"field": "memory"}},
         "aggs": {"h": {"date_histogram": {"field": "created_time", "calendar_interval": "day",
                                            "min_doc_count": 0}}}},
    ]  # fmt: skip
    with b.client(world.url) as client:
        for body in bodies:
            res = client.post(f"{lt}/_search", json=body)
            hits = _hits(res)
            assert hits and a.secret not in res.text, res.text[:500]
            assert {h["_source"].get("memory_container_id", b.container) for h in hits} == {b.container}
            assert any(b.secret in str(h["_source"].get("memory", "")) for h in hits)
            buckets = res.json().get("aggregations", {}).get("c", {}).get("buckets", [])
            assert [x["key"] for x in buckets] in ([], [b.container])
        working = client.post(
            f"{MC}/{b.container}/memories/working/_search", json={"query": {"match_all": {}}}
        )
        assert _hits(working) and a.secret not in working.text
        containers = client.post(f"{MC}/_search", json={"query": {"match_all": {}}, "size": 100})
        assert {h["_id"] for h in _hits(containers)} >= {b.container} and a.secret not in containers.text
