"""A duplicate-heavy long-term index for the recall tests: what traps Lucene's HNSW walk (issue 26).

Agents store the same memory again and again; identical vectors stored many times make the graph walk
miss true neighbours. One index holds two containers: ``small`` (a few hundred distinct memories and a few
facts each stored tens of times, under the exact-search threshold) and ``big`` (over it). The index is
force-merged to one segment, where the misses are worst. Vectors are read back from the node for the oracle,
so it scores the numbers the node holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from opensearchpy import OpenSearch, helpers

from proxy.core.container_record import Container
from proxy.store.templates import VectorField, render_index_body

__all__ = ["DIM", "DupCorpus", "build_dup_corpus", "container", "embedding_like", "oracle_scores"]

DIM = 384


def embedding_like(n: int, seed: int) -> np.ndarray:
    """Unit vectors of intrinsic dimension 32 (real sentence embeddings are low-dimensional too), rounded
    to the 6 decimals the JSON carries so that the oracle sees the node's numbers."""
    basis = np.random.default_rng(0).standard_normal((32, DIM)) / np.sqrt(32)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 32)) @ basis + 0.1 * rng.standard_normal((n, DIM)) / np.sqrt(DIM)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return np.round(x, 6)


def container(prefix: str, name: str) -> Container:
    config = {
        "embedding_model_type": "TEXT_EMBEDDING",
        "embedding_model_id": "recall-test",
        "embedding_dimension": DIM,
        "index_prefix": prefix,
        "use_system_index": False,
    }
    return Container(str(uuid.uuid4()), name, None, 0, 0, config)


@dataclass(frozen=True)
class DupCorpus:
    index: str
    small: Container  # under the threshold
    big: Container  # over it
    ids: dict[str, list[str]]  # container id -> document ids, row order of vectors[...]
    vectors: dict[str, np.ndarray]  # container id -> unit vectors read back from the node
    users: dict[str, list[str]]  # container id -> namespace.user_id per row
    queries: np.ndarray  # the stored vectors of distinct memories of ``small``, and fresh ones


def _docs(cid: str, vectors: np.ndarray, users: list[str], index: str) -> Iterator[dict[str, Any]]:
    for i, (vec, user) in enumerate(zip(vectors.tolist(), users, strict=True)):
        yield {
            "_index": index,
            "_id": f"{cid[:8]}-{i}",
            "_source": {
                "memory": f"memory {i}",
                "memory_embedding": vec,
                "namespace": {"user_id": user},
                "namespace_size": 1,
                "memory_container_id": cid,
                "strategy_type": "SEMANTIC",
                "created_time": 0,
                "last_updated_time": 0,
            },
        }


def _corpus(distinct: int, facts: int, copies: tuple[int, int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = embedding_like(distinct, seed)
    fact_vectors = embedding_like(facts, seed + 100)
    dup = np.repeat(fact_vectors, rng.integers(*copies, facts), axis=0)
    rows = np.concatenate([base, dup])
    return rows[rng.permutation(len(rows))]


def _read_back(client: OpenSearch, index: str, cid: str) -> tuple[list[str], np.ndarray, list[str]]:
    answer = client.search(
        index=index,
        body={
            "size": 10_000,
            "query": {"term": {"memory_container_id": cid}},
            "_source": ["memory_embedding", "namespace"],
            "sort": ["_doc"],
        },
    )
    hits = answer["hits"]["hits"]
    vectors = np.array([h["_source"]["memory_embedding"] for h in hits], dtype=np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [h["_id"] for h in hits], vectors, [h["_source"]["namespace"]["user_id"] for h in hits]


def build_dup_corpus(opensearch_url: str) -> Iterator[DupCorpus]:
    """The corpus (a generator for a fixture: the index is deleted after)."""
    prefix = f"memproxy-recall-dup-{uuid.uuid4().hex[:8]}"
    small, big = container(prefix, "small"), container(prefix, "big")
    index = cast(str, small.index_name("long-term"))
    client = OpenSearch(hosts=[opensearch_url], timeout=300)
    client.indices.create(
        index=index, body=render_index_body("long_term", vector_fields=[VectorField("memory_embedding", DIM)])
    )
    try:
        # small: 250 distinct memories + 8 facts stored 40-90 times (≈ 770 memories); big: ≈ 1,900.
        small_rows, big_rows = _corpus(250, 8, (40, 90), 1), _corpus(900, 16, (30, 100), 2)
        for cid, rows in ((small.id, small_rows), (big.id, big_rows)):
            users = ["alice" if i % 3 == 0 else "bob" for i in range(len(rows))]
            helpers.bulk(client, _docs(cid, rows, users, index), chunk_size=500)
        client.indices.refresh(index=index)
        client.indices.forcemerge(index=index, max_num_segments=1, request_timeout=300)
        client.indices.refresh(index=index)
        ids: dict[str, list[str]] = {}
        vectors: dict[str, np.ndarray] = {}
        users_of: dict[str, list[str]] = {}
        for cid in (small.id, big.id):
            ids[cid], vectors[cid], users_of[cid] = _read_back(client, index, cid)
        queries = np.concatenate([vectors[small.id][:20], embedding_like(10, 7)])
        yield DupCorpus(index, small, big, ids, vectors, users_of, queries)
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)


def oracle_scores(
    corpus: DupCorpus, cid: str, query: np.ndarray, user: str | None = None
) -> dict[str, float]:
    """Exact (1 + cos) / 2 of every memory of ``cid`` (of ``user`` when given), by document id."""
    q = np.asarray(query, dtype=np.float64)
    q = q / np.linalg.norm(q)
    scores = (1 + corpus.vectors[cid] @ q) / 2
    return {
        doc_id: float(s)
        for doc_id, s, u in zip(corpus.ids[cid], scores, corpus.users[cid], strict=True)
        if user is None or u == user
    }
