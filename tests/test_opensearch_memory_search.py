"""Semantic and hybrid search through the real proxy, checked against a numpy brute-force oracle over the
vectors memproxy stored (read back from the index directly).

The corpus is built so that post-filtering (ml-commons' ``bool`` with the filters beside the k-NN clause)
returns fewer than k: a crowd of memories close to the query in one namespace, a few far ones in another.
memproxy filters inside the knn clause and returns exactly min(k, matching).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from opensearchpy import OpenSearch

from tests.opensearch_memory_helpers import (
    EMBEDDING,
    MC,
    call,
    new_prefix,
)

QUERY = "What does the user like to drink in the morning?"
DRINKS = [
    "green tea",
    "black coffee",
    "espresso",
    "orange juice",
    "hot chocolate",
    "oolong tea",
    "matcha",
    "chai",
]
CROWD = [
    f"User {i} likes to drink {DRINKS[i % len(DRINKS)]} every morning, cup number {i}." for i in range(200)
]
RARE = [
    "The user repairs vintage motorcycles on weekends.",
    "The user's daughter studies marine biology in Bergen.",
    "The user is allergic to penicillin.",
    "The user drinks a glass of water after running.",
    "The user collects first editions of science fiction novels.",
    "The user prefers window seats on long flights.",
    "The user plays the cello in a community orchestra.",
    "The user's favourite season is late autumn.",
    "The user has a vegetable garden with tomatoes and beans.",
    "The user works night shifts as a nurse.",
    "The user is learning Japanese calligraphy.",
    "The user usually drinks herbal tea before bed.",
]


@dataclass
class Corpus:
    cid: str
    index: str
    query_vector: np.ndarray
    vectors: dict[str, np.ndarray]
    sources: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def corpus(client: OpenSearch, opensearch_url: str) -> Iterator[Corpus]:
    prefix = new_prefix("oracle")
    body = {
        "name": "oracle",
        "configuration": {**EMBEDDING, "index_prefix": prefix, "use_system_index": False},
    }
    cid = client.plugins.ml.create_memory_container(body=body)["memory_container_id"]
    memories = [{"memory": t, "namespace": {"user_id": "crowd"}} for t in CROWD]
    memories += [
        {"memory": t, "namespace": {"user_id": "rare"}, "tags": {"topic": "odd" if i % 3 == 0 else "even"}}
        for i, t in enumerate(RARE)
    ]
    # The query text itself, in a namespace no search below selects: its stored vector is the query's.
    memories.append({"memory": QUERY, "namespace": {"user_id": "probe"}})
    call(client, "POST", f"{MC}/{cid}/memories/long-term/_memproxy_bulk", {"memories": memories})
    index = f"{prefix}-memory-long-term"
    node = OpenSearch(hosts=[opensearch_url], timeout=60)
    stored = node.search(index=index, body={"size": 1000, "query": {"term": {"memory_container_id": cid}}})
    vectors, sources, query_vector = {}, {}, None
    for hit in stored["hits"]["hits"]:
        vec = np.asarray(hit["_source"]["memory_embedding"], dtype=np.float64)
        if hit["_source"]["namespace"]["user_id"] == "probe":
            query_vector = vec
            continue
        vectors[hit["_id"]] = vec
        sources[hit["_id"]] = hit["_source"]
    assert query_vector is not None and len(vectors) == len(CROWD) + len(RARE)
    node.close()
    yield Corpus(cid, index, query_vector, vectors, sources)
    client.plugins.ml.delete_memory_container(memory_container_id=cid, params={"delete_all_memories": "true"})


def oracle(corpus: Corpus, k: int, keep: Any = lambda s: True) -> list[tuple[str, float]]:
    """Exact top-k by cosine over the stored vectors, scored as ml-commons scores: (1 + cos) / 2."""
    q = corpus.query_vector / np.linalg.norm(corpus.query_vector)
    scored = []
    for doc_id, vec in corpus.vectors.items():
        if keep(corpus.sources[doc_id]):
            cos = float(vec @ q / np.linalg.norm(vec))
            scored.append((doc_id, (1.0 + cos) / 2.0))
    scored.sort(key=lambda t: -t[1])
    return scored[:k]


# The service embeds the query alone, the oracle's query vector was embedded in a batch: in reduced precision
# the two differ slightly, so rank ties closer than this may come out either way.
SCORE_TOLERANCE = 1e-3


def assert_ranked(hits: list[dict[str, Any]], ranked: list[tuple[str, float]], k: int, tol: float) -> None:
    """Same count, same scores position by position, and every id one ``ranked`` places within ``tol`` of the
    k-th score (near-ties may come out in either order)."""
    expected = ranked[:k]
    assert len(hits) == len(expected)
    floor = expected[-1][1] - tol if expected else 1.0
    eligible = {doc_id for doc_id, score in ranked if score >= floor}
    for hit, (doc_id, score) in zip(hits, expected, strict=True):
        assert hit["_score"] == pytest.approx(score, abs=tol)
        assert hit["_id"] == doc_id or hit["_id"] in eligible
    assert len({h["_id"] for h in hits}) == len(hits)


def assert_ranked_like(hits: list[dict[str, Any]], corpus: Corpus, k: int, keep: Any) -> None:
    assert_ranked(hits, oracle(corpus, len(corpus.vectors), keep), k, SCORE_TOLERANCE)


def semantic(client: OpenSearch, cid: str, **body: Any) -> list[dict[str, Any]]:
    found = call(client, "POST", f"{MC}/{cid}/memories/long-term/_semantic_search", {"query": QUERY, **body})
    return list(found["hits"]["hits"])


def rare(source: dict[str, Any]) -> bool:
    return bool(source["namespace"]["user_id"] == "rare")


@pytest.mark.parametrize("k", [1, 5, 12, 30])
def test_selective_namespace_returns_min_k_matching(client: OpenSearch, corpus: Corpus, k: int) -> None:
    hits = semantic(client, corpus.cid, k=k, namespace={"user_id": "rare"})
    assert len(hits) == min(k, len(RARE))
    assert_ranked_like(hits, corpus, k, rare)
    for hit in hits:
        assert hit["_index"] == corpus.index
        assert (
            "memory_embedding" not in hit["_source"] and hit["_source"]["memory_container_id"] == corpus.cid
        )


def test_post_filtering_would_return_fewer(corpus: Corpus, opensearch_url: str) -> None:
    """ml-commons' query shape (filters in ``bool.filter`` beside the vector clause), sent to the node."""
    node = OpenSearch(hosts=[opensearch_url], timeout=60)
    k = 5
    body = {
        "size": k,
        "query": {
            "bool": {
                "must": [{"knn": {"memory_embedding": {"vector": corpus.query_vector.tolist(), "k": k}}}],
                "filter": [
                    {"term": {"namespace.user_id": "rare"}},
                    {"term": {"memory_container_id": corpus.cid}},
                ],
            }
        },
    }
    post_filtered = node.search(index=corpus.index, body=body)["hits"]["hits"]
    node.close()
    assert len(post_filtered) < k  # what ml-commons would answer; memproxy answers k (test above)


def test_unselective_filter_returns_exactly_k(client: OpenSearch, corpus: Corpus) -> None:
    hits = semantic(client, corpus.cid, k=10, namespace={"user_id": "crowd"})
    expected = {doc_id for doc_id, _ in oracle(corpus, 10, lambda s: s["namespace"]["user_id"] == "crowd")}
    assert len(hits) == 10
    assert len({h["_id"] for h in hits} & expected) >= 9  # HNSW is approximate on large candidate sets
    assert all(h["_source"]["namespace"]["user_id"] == "crowd" for h in hits)


def test_tags_and_dsl_filter_inside_knn(client: OpenSearch, corpus: Corpus) -> None:
    cutoff = min(s["created_time"] for s in corpus.sources.values())
    hits = semantic(
        client,
        corpus.cid,
        k=10,
        namespace={"user_id": "rare"},
        tags={"topic": "odd"},
        filter={"range": {"created_time": {"gte": cutoff}}},
    )
    assert_ranked_like(hits, corpus, 10, lambda s: rare(s) and s.get("tags", {}).get("topic") == "odd")
    assert len(hits) == len([i for i in range(len(RARE)) if i % 3 == 0])


def test_min_score_applies_to_ml_commons_score(client: OpenSearch, corpus: Corpus) -> None:
    expected = oracle(corpus, 12, rare)
    # the threshold goes into the widest gap between consecutive scores, far from any near-tie
    cut = max(range(1, len(expected)), key=lambda i: expected[i - 1][1] - expected[i][1])
    threshold = (expected[cut - 1][1] + expected[cut][1]) / 2
    hits = semantic(client, corpus.cid, k=12, namespace={"user_id": "rare"}, min_score=threshold)
    assert {h["_id"] for h in hits} == {doc_id for doc_id, _ in expected[:cut]}
    assert all(h["_score"] >= threshold for h in hits)


def test_ef_search_and_get_with_body(client: OpenSearch, corpus: Corpus) -> None:
    body = {"query": QUERY, "k": 3, "namespace": {"user_id": "rare"}, "ef_search": 200}
    found = call(client, "GET", f"{MC}/{corpus.cid}/memories/long-term/_semantic_search", body)
    assert_ranked_like(found["hits"]["hits"], corpus, 3, rare)
    assert found["hits"]["total"] == {"value": 3, "relation": "eq"}
    assert found["hits"]["max_score"] == found["hits"]["hits"][0]["_score"]


def _min_max(scores: dict[str, float]) -> dict[str, float]:
    low, high = min(scores.values()), max(scores.values())
    if high == low:
        return dict.fromkeys(scores, 1.0)
    return {d: ((s - low) / (high - low)) or 0.001 for d, s in scores.items()}


def test_hybrid_fuses_bm25_and_vector_legs(client: OpenSearch, corpus: Corpus, opensearch_url: str) -> None:
    k, bm25_w, neural_w = 6, 0.3, 0.7
    found = call(
        client,
        "POST",
        f"{MC}/{corpus.cid}/memories/long-term/_hybrid_search",
        {
            "query": QUERY,
            "k": k,
            "namespace": {"user_id": "rare"},
            "bm25_weight": bm25_w,
            "neural_weight": neural_w,
        },
    )
    hits = found["hits"]["hits"]
    assert 0 < len(hits) <= k and all(rare(h["_source"]) for h in hits)
    assert all("memory_embedding" not in h["_source"] for h in hits)
    # The oracle: the BM25 leg as the node scores it, the vector leg by brute force, fused by hand
    # (min-max per leg, the lowest mapped to 0.001; weighted mean; a leg that misses a doc gives it 0).
    node = OpenSearch(hosts=[opensearch_url], timeout=60)
    flt = [{"term": {"namespace.user_id": "rare"}}, {"term": {"memory_container_id": corpus.cid}}]
    query = {"bool": {"must": [{"match": {"memory": QUERY}}], "filter": flt}}
    lexical = node.search(index=corpus.index, body={"size": k, "query": query})["hits"]["hits"]
    node.close()
    assert lexical  # the memory field is analysed text: BM25 works on this node
    lex = _min_max({h["_id"]: h["_score"] for h in lexical})
    vec = _min_max(dict(oracle(corpus, k, rare)))
    fused = {d: bm25_w * lex.get(d, 0.0) + neural_w * vec.get(d, 0.0) for d in set(lex) | set(vec)}
    ranked = sorted(fused.items(), key=lambda t: (-t[1], t[0]))
    assert_ranked(hits, ranked, k, 10 * SCORE_TOLERANCE)  # min-max stretches the vector leg's noise
    assert found["hits"]["total"]["value"] == len(fused)


def test_hybrid_min_score_and_pure_weights(client: OpenSearch, corpus: Corpus) -> None:
    path = f"{MC}/{corpus.cid}/memories/long-term/_hybrid_search"
    pure_vector = call(
        client,
        path=path,
        method="POST",
        body={
            "query": QUERY,
            "k": 4,
            "namespace": {"user_id": "rare"},
            "bm25_weight": 0.0,
            "neural_weight": 1.0,
        },
    )["hits"]["hits"]
    assert {h["_id"] for h in pure_vector} == {d for d, _ in oracle(corpus, 4, rare)}
    assert pure_vector[0]["_score"] == pytest.approx(1.0)
    strict = call(
        client,
        path=path,
        method="POST",
        body={"query": QUERY, "k": 4, "namespace": {"user_id": "rare"}, "min_score": 0.99},
    )["hits"]["hits"]
    assert all(h["_score"] >= 0.99 for h in strict)


def test_neural_query_in_long_term_search(client: OpenSearch, corpus: Corpus) -> None:
    """gnosisllm-style recall: ``_search`` with a ``neural`` clause works without the neural-search plugin.

    memproxy embeds ``query_text`` and runs the equivalent ``knn`` clause with the caller's DSL unchanged, so
    a ``filter`` inside the clause filters efficiently and a ``bool.filter`` beside it post-filters, exactly
    as on a cluster with neural-search."""
    neural = {"query_text": QUERY, "model_id": EMBEDDING["embedding_model_id"], "k": 3}
    inside = {
        "query": {
            "neural": {"memory_embedding": {**neural, "filter": {"term": {"namespace.user_id": "rare"}}}}
        },
        "_source": ["memory", "namespace"],
    }
    found = client.plugins.ml.search_agentic_memory(
        memory_container_id=corpus.cid, doc_type="long-term", body=inside
    )
    hits = found["hits"]["hits"]
    assert {h["_id"] for h in hits} == {d for d, _ in oracle(corpus, 3, rare)}
    assert set(hits[0]["_source"]) <= {"memory", "namespace"}
    beside = {
        "query": {
            "bool": {
                "must": [{"neural": {"memory_embedding": neural}}],
                "filter": [{"term": {"namespace.user_id": "rare"}}],
            }
        }
    }
    post = client.plugins.ml.search_agentic_memory(
        memory_container_id=corpus.cid, doc_type="long-term", body=beside
    )
    assert len(post["hits"]["hits"]) < 3
