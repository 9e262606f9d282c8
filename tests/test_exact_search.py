"""Exact scoring of small filtered sets (issue 26): what it returns, that its scores are the knn query's, when
it is chosen, on a duplicate-heavy index force-merged to one segment (tests/support/recall_corpus.py).

Every search goes through memproxy's own path (``proxy.core.search``) on a real node; the oracle scores the
vectors read back from that node with numpy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import numpy as np
import pytest

from proxy.config import Settings
from proxy.core.query import VectorSearch
from proxy.core.search import hybrid_search_result, vector_search
from proxy.core.services import Services
from proxy.store.client import Store
from proxy.store.query import RawDsl, Term, all_of
from tests.support.recall_corpus import DupCorpus, build_dup_corpus, oracle_scores

pytestmark = pytest.mark.timeout(300)
K = 10


@pytest.fixture(scope="module")
def corpus(opensearch_url: str) -> Iterator[DupCorpus]:
    yield from build_dup_corpus(opensearch_url)


class RecordingStore(Store):
    """The real store, remembering the body of every search it sent (which path a search took)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.bodies: list[dict[str, Any]] = []

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if path.endswith("/_search") and isinstance(kwargs.get("body"), dict):
            self.bodies.append(kwargs["body"])
        return await super().request(method, path, **kwargs)


async def _services(url: str, threshold: int) -> Services:
    store = RecordingStore(Settings(opensearch_url=url, exact_search_threshold=threshold))
    # Searches by vector never embed, so no embedding model is loaded.
    return Services(store, cast(Any, None))


@pytest.fixture(scope="module")
async def exact_svc(opensearch_url: str) -> AsyncIterator[Services]:
    svc = await _services(opensearch_url, 1000)
    yield svc
    await svc.store.close()


@pytest.fixture(scope="module")
async def graph_svc(opensearch_url: str) -> AsyncIterator[Services]:
    svc = await _services(opensearch_url, 0)
    yield svc
    await svc.store.close()


def _recall(got: list[tuple[str, float]], truth: dict[str, float]) -> float:
    """Share of the hits that belong to the exact top k (ties at the k-th score count as in it)."""
    if not truth:
        return 1.0
    kth = sorted(truth.values(), reverse=True)[: len(got) or K][-1]
    return float(np.mean([truth[i] >= kth - 1e-6 for i, _ in got])) if got else 0.0


async def _search(svc: Services, corpus: DupCorpus, q: np.ndarray, **kw: Any) -> list[tuple[str, float]]:
    search = VectorSearch(kw.pop("container", corpus.small), K, vector=q.tolist(), **kw)
    return [(h.id, float(h.score or 0.0)) for h in (await vector_search(svc, search)).hits]


@pytest.mark.parametrize("user", [None, "alice"])
async def test_a_small_filtered_set_answers_exactly_the_exact_top_k(
    exact_svc: Services, corpus: DupCorpus, user: str | None
) -> None:
    """Even with ef_search 10 (a graph walk that misses, below) the answer is the oracle's top k."""
    flt = all_of([Term("namespace.user_id", user)] if user else [])
    for q in corpus.queries:
        got = await _search(exact_svc, corpus, q, filter=flt, ef_search=10)
        truth = oracle_scores(corpus, corpus.small.id, q, user)
        assert len(got) == min(K, len(truth))
        assert [s for _, s in got] == pytest.approx(sorted(truth.values(), reverse=True)[:K], abs=1e-6)
        for doc_id, score in got:
            assert score == pytest.approx(truth[doc_id], abs=1e-6)
    assert "script_score" in exact_svc.store.bodies[-1]["query"]  # type: ignore[attr-defined]


async def test_the_graph_walk_misses_on_that_corpus(graph_svc: Services, corpus: DupCorpus) -> None:
    """Why it matters: the same searches walking the graph (threshold 0) miss true neighbours."""
    recalls = [
        _recall(await _search(graph_svc, corpus, q, ef_search=10), oracle_scores(corpus, corpus.small.id, q))
        for q in corpus.queries
    ]
    assert float(np.mean(recalls)) < 1.0
    assert "knn" in graph_svc.store.bodies[-1]["query"]  # type: ignore[attr-defined]


async def test_exact_scores_are_the_knn_querys(
    exact_svc: Services, graph_svc: Services, corpus: DupCorpus
) -> None:
    """Same space, same score translation: with a candidate list as big as the set, both paths agree."""
    for q in corpus.queries[:10]:
        exact = await _search(exact_svc, corpus, q)
        walked = await _search(graph_svc, corpus, q, ef_search=2000)
        assert [s for _, s in exact] == pytest.approx([s for _, s in walked], abs=1e-6)


async def test_min_score_and_a_caller_filter_apply_as_on_the_graph(
    exact_svc: Services, graph_svc: Services, corpus: DupCorpus
) -> None:
    q = corpus.queries[-1]  # a fresh vector: few ties
    truth = oracle_scores(corpus, corpus.small.id, q, "bob")
    best = sorted(truth.values(), reverse=True)
    # A cut between two clearly distinct scores: some hits pass, fewer than k.
    gap = next(i for i in range(1, K - 1) if best[i] - best[i + 1] > 1e-5)
    cut = (best[gap] + best[gap + 1]) / 2
    flt = RawDsl({"term": {"namespace.user_id": "bob"}})
    exact = await _search(exact_svc, corpus, q, filter=flt, min_score=cut)
    walked = await _search(graph_svc, corpus, q, filter=flt, min_score=cut, ef_search=2000)
    assert [s for _, s in exact] == pytest.approx([s for _, s in walked], abs=1e-6)
    assert len(exact) == gap + 1 and all(s >= cut for _, s in exact)
    result = await vector_search(exact_svc, VectorSearch(corpus.small, K, vector=q.tolist(), min_score=cut))
    assert result.total == len(result.hits)  # the knn query's total: the hits it kept


async def test_a_set_over_the_threshold_walks_the_graph(exact_svc: Services, corpus: DupCorpus) -> None:
    assert len(corpus.ids[corpus.big.id]) > 1000
    store = cast(RecordingStore, exact_svc.store)
    got = await _search(exact_svc, corpus, corpus.queries[0], container=corpus.big)
    assert len(got) == K and "knn" in store.bodies[-1]["query"]
    # ... and the same container narrowed to a namespace under it is exact again.
    await _search(
        exact_svc, corpus, corpus.queries[0], container=corpus.big, filter=Term("namespace.user_id", "alice")
    )
    assert "script_score" in store.bodies[-1]["query"]


async def test_hybrid_search_uses_the_same_choice(exact_svc: Services, corpus: DupCorpus) -> None:
    q = corpus.queries[1]
    search = VectorSearch(corpus.small, K, vector=q.tolist(), query_text="memory")
    result = await hybrid_search_result(exact_svc, search)
    assert len(result.hits) == K
    assert any("script_score" in b["query"] for b in exact_svc.store.bodies[-2:])  # type: ignore[attr-defined]
