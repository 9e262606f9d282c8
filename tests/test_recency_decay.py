"""Opt-in recency decay (memproxy extension): the DSL the store builds, the half-life's validation, and on the
node, through the real proxy, ml-commons semantic/hybrid search and GoodMem retrieve.

The node tests write three copies of one memory and one close paraphrase, then age two copies directly on the
node (``last_updated_time`` 60 days back, one of them ``pinned``). With a 30-day half-life the aged,
unpinned copy scores a quarter of its similarity, the pinned one keeps all of it, and the paraphrase (fresh,
a little less similar) overtakes the aged copy, which it cannot without the decay.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from goodmem import Goodmem
from opensearchpy import OpenSearch, TransportError

from proxy.core.clock import now_ms
from proxy.core.recency import parse_half_life
from proxy.errors import BadRequest
from proxy.store.query import And, Not, Recency, Term
from proxy.store.query_dsl import (
    RECENCY_CANDIDATE_FACTOR,
    bm25_search_body,
    compile_filter,
    exact_vector_search_body,
    vector_search_body,
)
from tests.goodmem_helpers import root_api_key
from tests.opensearch_memory_helpers import EMBEDDING, MC, call, error_body, new_prefix

pytest_plugins = ["tests.opensearch_memory_fixtures"]

DAY_MS = 86_400_000
QUERY = "The user drinks green tea every morning before work."
PARAPHRASE = "Every morning before work the user drinks a cup of green tea."
AGE_DAYS = 60  # two half-lives of 30 days: factor 0.25
HALF_LIFE = "30d"
LONG_TERM_INDICES = ".plugins-ml-am-*-memory-long-term"

# --- the DSL (no node) ------------------------------------------------------------------------------------

RECENCY = Recency(half_life_ms=30 * DAY_MS, now_ms=1_700_000_000_000)
FILTER = compile_filter(Term("namespace.user_id", "a"))


def _decay_of(function_score: dict[str, Any]) -> dict[str, Any]:
    (function,) = function_score["functions"]
    assert function["filter"] == {"bool": {"must_not": [{"term": {"pinned": True}}]}}
    assert function_score["score_mode"] == "multiply" and function_score["boost_mode"] == "multiply"
    return dict(function["exp"])


def test_knn_body_decays_k_times_factor_candidates_with_filter_inside_knn() -> None:
    body = vector_search_body(
        field="memory_embedding", vector=[0.1, 0.2], k=5, filter_dsl=FILTER, recency=RECENCY
    )
    assert body["size"] == 5
    function_score = body["query"]["function_score"]
    knn = function_score["query"]["knn"]["memory_embedding"]
    assert knn["k"] == 5 * RECENCY_CANDIDATE_FACTOR
    assert knn["filter"] == FILTER
    assert _decay_of(function_score) == {
        "last_updated_time": {
            "origin": RECENCY.now_ms,
            "scale": f"{30 * DAY_MS}ms",
            "offset": "0ms",
            "decay": 0.5,
        }
    }


def test_knn_candidates_capped_at_the_knn_maximum() -> None:
    body = vector_search_body(field="f", vector=[1.0], k=9_000, filter_dsl=None, recency=RECENCY)
    assert body["query"]["function_score"]["query"]["knn"]["f"]["k"] == 10_000


def test_no_recency_leaves_the_bodies_as_they_were() -> None:
    plain = vector_search_body(field="f", vector=[1.0], k=3, filter_dsl=FILTER)
    assert list(plain["query"]) == ["knn"] and plain["query"]["knn"]["f"]["k"] == 3
    exact = exact_vector_search_body(field="f", vector=[1.0], k=3, filter_dsl=FILTER)
    assert list(exact["query"]) == ["script_score"]
    lexical = bm25_search_body(text_field="memory", text="tea", size=3, filter_dsl=FILTER)
    assert list(lexical["query"]) == ["bool"]


def test_exact_and_lexical_bodies_decay_with_the_filter_kept_inside() -> None:
    exact = exact_vector_search_body(field="f", vector=[1.0], k=3, filter_dsl=FILTER, recency=RECENCY)
    inner = exact["query"]["function_score"]["query"]["script_score"]
    assert inner["query"] == {"bool": {"filter": [FILTER]}}
    assert "last_updated_time" in _decay_of(exact["query"]["function_score"])
    lexical = bm25_search_body(text_field="memory", text="tea", size=3, filter_dsl=FILTER, recency=RECENCY)
    assert lexical["query"]["function_score"]["query"]["bool"]["filter"] == [FILTER]


@pytest.mark.parametrize(
    ("value", "millis"),
    [("30d", 30 * DAY_MS), ("12h", 12 * 3_600_000), ("90m", 5_400_000), ("1.5s", 1_500), ("2w", 14 * DAY_MS)],
)
def test_half_life_parses(value: Any, millis: int) -> None:
    assert parse_half_life(value, "half_life") == millis


@pytest.mark.parametrize("value", ["0d", "-3d", "3 days", "abc", "", 0, -5, True, None, [1], "1000y"])
def test_half_life_rejects(value: Any) -> None:
    with pytest.raises(BadRequest, match="half_life must be a positive duration"):
        parse_half_life(value, "half_life")


# --- on the node ------------------------------------------------------------------------------------------


def _backdating(pinned: bool) -> dict[str, Any]:
    old = now_ms() - AGE_DAYS * DAY_MS
    pin = "true" if pinned else "false"
    return {
        "source": f"ctx._source.last_updated_time = {old}L; ctx._source.pinned = {pin};",
        "lang": "painless",
    }


def _age(node: OpenSearch, index: str, container_id: str, label: str, *, pinned: bool) -> None:
    """Backdate one memory (by its ``label`` tag) on the node, as a memory last written 60 days ago."""
    answer = node.update_by_query(
        index=index,
        body={
            "query": {
                "bool": {
                    "filter": [
                        {"term": {"memory_container_id": container_id}},
                        {"term": {"tags.label": label}},
                    ]
                }
            },
            "script": _backdating(pinned),
        },
        params={"refresh": "true"},
    )
    assert answer["updated"] == 1


@dataclass
class Aged:
    cid: str
    index: str


@pytest.fixture(scope="module")
def aged(client: OpenSearch, opensearch_url: str) -> Iterator[Aged]:
    prefix = new_prefix("recency")
    body = {
        "name": "recency",
        "configuration": {**EMBEDDING, "index_prefix": prefix, "use_system_index": False},
    }
    cid = client.plugins.ml.create_memory_container(body=body)["memory_container_id"]
    memories = [
        {"memory": QUERY, "namespace": {"user_id": "a"}, "tags": {"label": "old"}},
        {"memory": QUERY, "namespace": {"user_id": "a"}, "tags": {"label": "pinned"}},
        {"memory": PARAPHRASE, "namespace": {"user_id": "a"}, "tags": {"label": "fresh"}},
        # Fresh and identical to the query, but another user's: a namespace filter must keep it out.
        {"memory": QUERY, "namespace": {"user_id": "b"}, "tags": {"label": "other"}},
    ]
    call(client, "POST", f"{MC}/{cid}/memories/long-term/_memproxy_bulk", {"memories": memories})
    node = OpenSearch(hosts=[opensearch_url], timeout=60)
    index = f"{prefix}-memory-long-term"
    _age(node, index, cid, "old", pinned=False)
    _age(node, index, cid, "pinned", pinned=True)
    node.close()
    yield Aged(cid, index)
    client.plugins.ml.delete_memory_container(memory_container_id=cid, params={"delete_all_memories": "true"})


def _search(client: OpenSearch, cid: str, route: str, **extra: Any) -> list[tuple[str, float]]:
    body = {"query": QUERY, "k": 10, "namespace": {"user_id": "a"}, **extra}
    found = call(client, "POST", f"{MC}/{cid}/memories/long-term/{route}", body)
    return [(h["_source"]["tags"]["label"], float(h["_score"])) for h in found["hits"]["hits"]]


def test_semantic_decay_reranks_and_spares_pinned(client: OpenSearch, aged: Aged) -> None:
    plain = dict(_search(client, aged.cid, "_semantic_search"))
    assert set(plain) == {"old", "pinned", "fresh"}
    assert plain["old"] == pytest.approx(plain["pinned"], abs=1e-6)
    assert plain["old"] > plain["fresh"]  # by similarity alone the aged copy outranks the paraphrase
    ranked = _search(client, aged.cid, "_semantic_search", recency={"half_life": HALF_LIFE})
    labels = [label for label, _ in ranked]
    decayed = dict(ranked)
    assert labels.index("fresh") < labels.index("old") and labels[-1] == "old"
    assert decayed["pinned"] == pytest.approx(plain["pinned"], abs=1e-6)  # factor 1
    # 0.5 ** (60 / 30), the age measured from the request's time (seconds apart: a relative 1e-4 at most)
    assert decayed["old"] == pytest.approx(plain["old"] * 0.25, rel=1e-4)
    assert decayed["fresh"] == pytest.approx(plain["fresh"], rel=1e-4)
    assert "other" not in labels  # the namespace filter still applies


def test_graph_walked_knn_body_decays_on_the_node(aged: Aged, opensearch_url: str) -> None:
    """The proxy scores this small container exactly; the knn body (the graph walk bigger sets get) runs here
    straight on the node, with the same decay."""
    node = OpenSearch(hosts=[opensearch_url], timeout=60)
    try:
        stored = node.search(
            index=aged.index, body={"size": 10, "query": {"term": {"memory_container_id": aged.cid}}}
        )
        by_label = {h["_source"]["tags"]["label"]: h["_source"] for h in stored["hits"]["hits"]}
        selection = compile_filter(
            And((Term("memory_container_id", aged.cid), Term("namespace.user_id", "a")))
        )

        def scores(recency: Recency | None, k: int = 3, selection: Any = selection) -> dict[str, float]:
            body = vector_search_body(
                field="memory_embedding",
                vector=by_label["old"]["memory_embedding"],
                k=k,
                filter_dsl=selection,
                recency=recency,
                source_includes=("tags",),
            )
            answer = node.search(index=aged.index, body=body, params={"routing": aged.cid})
            return {h["_source"]["tags"]["label"]: float(h["_score"]) for h in answer["hits"]["hits"]}

        recency = Recency(half_life_ms=30 * DAY_MS, now_ms=now_ms())
        plain, decayed = scores(None), scores(recency)
        # k = 1 without the pinned copy: by similarity the aged copy is the only candidate a k = 1 knn would
        # keep; the k * RECENCY_CANDIDATE_FACTOR candidates let the fresh paraphrase in, and it wins.
        unpinned = compile_filter(
            And(
                (
                    Term("memory_container_id", aged.cid),
                    Term("namespace.user_id", "a"),
                    Not(Term("tags.label", "pinned")),
                )
            )
        )
        top_plain = scores(None, k=1, selection=unpinned)
        top_decayed = scores(recency, k=1, selection=unpinned)
    finally:
        node.close()
    assert set(plain) == set(decayed) == {"old", "pinned", "fresh"}
    assert decayed["pinned"] == pytest.approx(plain["pinned"], abs=1e-6)
    assert decayed["old"] == pytest.approx(plain["old"] * 0.25, rel=1e-4)
    assert decayed["fresh"] > decayed["old"]
    assert list(top_plain) == ["old"] and list(top_decayed) == ["fresh"]


def test_semantic_min_score_applies_to_the_decayed_score(client: OpenSearch, aged: Aged) -> None:
    plain = dict(_search(client, aged.cid, "_semantic_search"))
    floor = plain["old"] * 0.5
    ranked = _search(client, aged.cid, "_semantic_search", recency={"half_life": HALF_LIFE}, min_score=floor)
    assert {label for label, _ in ranked} == {"pinned", "fresh"}


def test_hybrid_decay_reranks_both_legs(client: OpenSearch, aged: Aged) -> None:
    plain = [label for label, _ in _search(client, aged.cid, "_hybrid_search")]
    assert set(plain) == {"old", "pinned", "fresh"} and plain[-1] == "fresh"
    decayed = [
        label for label, _ in _search(client, aged.cid, "_hybrid_search", recency={"half_life": "30d"})
    ]
    assert set(decayed) == {"old", "pinned", "fresh"} and decayed[-1] == "old"


@pytest.mark.parametrize(
    ("recency", "reason"),
    [
        ({"half_life": "-1d"}, "recency.half_life must be a positive duration"),
        ({"half_life": "soon"}, "recency.half_life must be a positive duration"),
        ({"half_life": 0}, "recency.half_life must be a positive duration"),
        ({}, "recency.half_life is required"),
        ({"half_life": "1d", "floor": 0.2}, "recency has unknown field [floor]"),
        ("30d", "recency must be an object"),
    ],
)
@pytest.mark.parametrize("route", ["_semantic_search", "_hybrid_search"])
def test_bad_recency_is_a_400(client: OpenSearch, aged: Aged, route: str, recency: Any, reason: str) -> None:
    with pytest.raises(TransportError) as err:
        _search(client, aged.cid, route, recency=recency)
    info = error_body(err.value)
    assert err.value.status_code == 400 and info["status"] == 400, info
    assert info["error"]["type"] == "illegal_argument_exception", info
    assert info["error"]["reason"].startswith(reason), info


# --- GoodMem retrieve -------------------------------------------------------------------------------------


@dataclass
class Space:
    url: str
    key: str
    space_id: str
    other_space_id: str
    labels: dict[str, str]  # memory id -> label


def _backdate_memory(node: OpenSearch, memory_id: str, *, pinned: bool) -> None:
    answer = node.update_by_query(
        index=LONG_TERM_INDICES,
        body={"query": {"term": {"memory_id": memory_id}}, "script": _backdating(pinned)},
        params={"refresh": "true", "expand_wildcards": "all"},
    )
    assert answer["updated"] >= 1, answer


@pytest.fixture(scope="module")
def space(proxy_url: str, opensearch_url: str) -> Iterator[Space]:
    key = root_api_key(proxy_url, opensearch_url)
    gm = Goodmem(base_url=proxy_url, api_key=key)
    embedder = gm.embedders.list()[0].embedder_id
    tag = uuid.uuid4().hex[:8]
    space_id, other = (
        gm.spaces.create(name=f"{name}-{tag}", space_embedders=[{"embedder_id": embedder}]).space_id
        for name in ("recency", "recency-other")
    )
    labels = {
        gm.memories.create(space_id=space_id, original_content=text).memory_id: label
        for label, text in (("old", QUERY), ("pinned", QUERY), ("fresh", PARAPHRASE))
    }
    gm.memories.create(space_id=other, original_content=QUERY)
    node = OpenSearch(hosts=[opensearch_url], timeout=60)
    for memory_id, label in labels.items():
        if label != "fresh":
            _backdate_memory(node, memory_id, pinned=label == "pinned")
    node.close()
    yield Space(proxy_url, key, space_id, other, labels)
    for sid in (space_id, other):
        gm.spaces.delete(id=sid)
    gm.close()


def _retrieve(s: Space, **extra: Any) -> httpx.Response:
    body = {"message": QUERY, "spaceKeys": [{"spaceId": s.space_id}], "requestedSize": 10, **extra}
    return httpx.post(s.url + "/v1/memories:retrieve", json=body, headers={"x-api-key": s.key}, timeout=60)


def _ranked(s: Space, **extra: Any) -> list[tuple[str, float]]:
    resp = _retrieve(s, **extra)
    assert resp.status_code == 200, resp.text
    out = []
    for line in resp.text.splitlines():
        item = json.loads(line).get("retrievedItem") if line.strip() else None
        if item:
            chunk = item["chunk"]
            out.append((s.labels.get(chunk["chunk"]["memoryId"], "?"), float(chunk["relevanceScore"])))
    return out


def test_goodmem_retrieve_decay(space: Space) -> None:
    plain = _ranked(space)
    assert {label for label, _ in plain} == {"old", "pinned", "fresh"}
    assert plain[-1][0] == "fresh"
    decayed = _ranked(space, memproxyRecency={"halfLife": HALF_LIFE})
    labels = [label for label, _ in decayed]
    assert set(labels) == {"old", "pinned", "fresh"} and labels[-1] == "old"  # the other space never appears
    assert dict(decayed)["pinned"] == pytest.approx(dict(plain)["pinned"], abs=1e-6)


@pytest.mark.parametrize("recency", [{"halfLife": "-2h"}, {"halfLife": "x"}, {}, "30d"])
def test_goodmem_bad_half_life_is_a_400(space: Space, recency: Any) -> None:
    resp = _retrieve(space, memproxyRecency=recency)
    assert resp.status_code == 400, resp.text
    assert "memproxyRecency" in resp.json()["error"]
