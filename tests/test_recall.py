"""Filtered recall@10 and the count rule on a 10 k-memory container, against a numpy brute-force oracle.

The memories (seeded embedding-like unit vectors of 384 dimensions, ml-commons' flat_object ``namespace``)
are bulk-written straight into a long-term index rendered from memproxy's template; every search goes
through memproxy's own code path (``proxy.core.search.semantic_search``: the query model, the DSL compiler
with every filter inside the knn clause, the store). A second container's documents share the index, as
containers with one ``index_prefix`` do, and are exact copies of the queries: a search that leaked across
containers would rank them first.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pytest
from opensearchpy import OpenSearch, helpers

from proxy.config import Settings
from proxy.core.container_record import Container
from proxy.core.query import VectorSearch
from proxy.core.search import semantic_search
from proxy.core.services import Services
from proxy.store.client import Store
from proxy.store.query import all_of, term_map
from proxy.store.templates import VectorField, render_index_body
from tests.support.recall_corpus import container as recall_container
from tests.support.recall_corpus import embedding_like

N, DIM, K, QUERIES = 10_000, 384, 10, 30
# namespace.user_id groups: (value, documents); every other document belongs to one of 97 "other" users.
GROUPS = (("u50", N // 2), ("u10", N // 10), ("u1", N // 100), ("u01", N // 1000))
TINY = (("t11", 11), ("t10", 10), ("t9", 9), ("t5", 5), ("t1", 1))
# (case, namespace filter); None = the container's own filter only.
CASES: list[tuple[str, dict[str, str] | None]] = [
    ("container only", None),
    ("user 50%", {"user_id": "u50"}),
    ("user 10%", {"user_id": "u10"}),
    ("user 1%", {"user_id": "u1"}),
    ("user 0.1%", {"user_id": "u01"}),
    ("user 10% and agent 30%", {"user_id": "u10", "agent_id": "a30"}),
    *((f"{size} docs", {"user_id": name}) for name, size in TINY),
    ("no docs", {"user_id": "nobody"}),
]


@dataclass(frozen=True)
class Corpus:
    container: Container
    index: str
    vectors: np.ndarray  # unit-normalised float64, row i = document "d{i}"
    namespaces: list[dict[str, str]]
    queries: np.ndarray

    def matching(self, ns: dict[str, str] | None) -> np.ndarray:
        if ns is None:
            return np.arange(len(self.namespaces))
        return np.array(
            [i for i, d in enumerate(self.namespaces) if all(d.get(k) == v for k, v in ns.items())]
        )

    def oracle(self, query: np.ndarray, rows: np.ndarray) -> list[str]:
        """Exact cosine top-k among ``rows``."""
        if len(rows) == 0:
            return []
        scores = self.vectors[rows] @ (query / np.linalg.norm(query))
        best = np.argsort(-scores, kind="stable")[:K]
        return [f"d{rows[i]}" for i in best]


def _namespaces(seed: int) -> list[dict[str, str]]:
    rng = np.random.default_rng(seed)
    users = np.array([f"o{i % 97}" for i in range(N)], dtype=object)
    order, start = rng.permutation(N), 0
    for name, size in (*GROUPS, *TINY):
        users[order[start : start + size]] = name
        start += size
    agents = np.where(rng.random(N) < 0.3, "a30", "a70")
    return [{"user_id": str(u), "agent_id": str(a)} for u, a in zip(users, agents, strict=True)]


def _actions(
    index: str, container_id: str, vectors: np.ndarray, namespaces: list[dict[str, str]], tag: str
) -> Iterator[dict[str, Any]]:
    for i, (vec, ns) in enumerate(zip(vectors.tolist(), namespaces, strict=True)):
        yield {
            "_index": index,
            "_id": f"{tag}{i}",
            "_source": {
                "memory": f"memory {tag}{i}",
                "memory_embedding": vec,
                "namespace": ns,
                "namespace_size": len(ns),
                "memory_container_id": container_id,
                "strategy_type": "SEMANTIC",
                "created_time": 0,
                "last_updated_time": 0,
            },
        }


@pytest.fixture(scope="module")
def corpus(opensearch_url: str) -> Iterator[Corpus]:
    container = recall_container(f"memproxy-recall-{uuid.uuid4().hex[:8]}", "recall")
    index = cast(str, container.index_name("long-term"))
    client = OpenSearch(hosts=[opensearch_url], timeout=120)
    client.indices.create(
        index=index, body=render_index_body("long_term", vector_fields=[VectorField("memory_embedding", DIM)])
    )
    try:
        vectors, namespaces, queries = embedding_like(N, 1), _namespaces(2), embedding_like(QUERIES, 3)
        helpers.bulk(client, _actions(index, container.id, vectors, namespaces, "d"), chunk_size=500)
        # Another container in the same index holding exact copies of the queries, in every namespace.
        decoy_ns = [{"user_id": name, "agent_id": "a30"} for name, _ in (*GROUPS, *TINY)]
        decoys = np.repeat(queries, len(decoy_ns), axis=0)
        helpers.bulk(
            client, _actions(index, str(uuid.uuid4()), decoys, decoy_ns * QUERIES, "x"), chunk_size=500
        )
        client.indices.refresh(index=index)
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        yield Corpus(container, index, unit, namespaces, queries)
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)


@pytest.fixture(scope="module")
async def services(opensearch_url: str) -> AsyncIterator[Services]:
    store = Store(Settings(opensearch_url=opensearch_url))
    # Searches by vector never embed, so no embedding model is loaded.
    yield Services(store, cast(Any, None))
    await store.close()


@dataclass
class Outcome:
    recalls: list[float]
    count_errors: list[str]


async def _run_case(svc: Services, corpus: Corpus, ns: dict[str, str] | None) -> Outcome:
    rows = corpus.matching(ns)
    out = Outcome([], [])
    for qi, query in enumerate(corpus.queries):
        search = VectorSearch(
            corpus.container, K, vector=query.tolist(), filter=all_of(term_map("namespace", ns))
        )
        hits = await semantic_search(svc, search)
        ids = [h.id for h in hits]
        truth = corpus.oracle(query, rows)
        if (
            len(ids) != min(K, len(rows))
            or len(set(ids)) != len(ids)
            or any(not i.startswith("d") for i in ids)
        ):
            out.count_errors.append(f"query {qi}: {len(ids)} hits for {len(rows)} matching: {ids}")
        out.recalls.append(len(set(ids) & set(truth)) / len(truth) if truth else 1.0)
        scores = [h.score or 0.0 for h in hits]
        assert scores == sorted(scores, reverse=True)
        if truth:
            cos = float(corpus.vectors[int(truth[0][1:])] @ (query / np.linalg.norm(query)))
            assert scores[0] == pytest.approx((1 + cos) / 2, abs=1e-4)  # ml-commons' (1 + cos) / 2
    return out


@pytest.mark.parametrize(("case", "ns"), CASES, ids=[c for c, _ in CASES])
async def test_filtered_recall_and_count_rule(
    services: Services, corpus: Corpus, case: str, ns: dict[str, str] | None
) -> None:
    outcome = await _run_case(services, corpus, ns)
    assert not outcome.count_errors, f"{case}: count rule broken: {outcome.count_errors[:3]}"
    mean = float(np.mean(outcome.recalls))
    assert mean >= 0.99, f"{case}: recall@{K} {mean:.4f} < 0.99 (per query: {outcome.recalls})"


def test_the_oracle_sees_the_groups(corpus: Corpus) -> None:
    sizes = {case: len(corpus.matching(ns)) for case, ns in CASES}
    assert sizes["container only"] == N
    assert (sizes["user 50%"], sizes["user 0.1%"], sizes["1 docs"], sizes["no docs"]) == (
        N // 2,
        N // 1000,
        1,
        0,
    )
    assert 0 < sizes["user 10% and agent 30%"] < N // 10
