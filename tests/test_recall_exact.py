"""Recall you can trust (issue 26), on a duplicate-heavy index force-merged to one segment
(tests/support/recall_corpus.py): exact scoring of small filtered sets (what it returns, that its scores are
the knn query's, when it is chosen) and the recall canary (what it records, and that /metrics shows it).

Every search goes through memproxy's own path (``proxy.core.search``) on a real node; the oracle scores the
vectors read back from that node with numpy.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any, cast

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.config import Settings, parse_settings
from proxy.core.cache import Caches
from proxy.core.metrics import Metrics
from proxy.core.query import VectorSearch
from proxy.core.recall_canary import RecallCanary, Sample
from proxy.core.search import hybrid_search_result, vector_search
from proxy.core.services import Services
from proxy.store.client import Store
from proxy.store.query import RawDsl, Term, all_of
from tests.conftest import ProxyProcess
from tests.support.recall_corpus import DupCorpus, build_dup_corpus, oracle_scores

pytestmark = pytest.mark.timeout(300)
K = 10
_NONE = SimpleNamespace(samples=[])


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


async def _services(url: str, threshold: int, canary: RecallCanary | None = None) -> Services:
    store = RecordingStore(Settings(opensearch_url=url, exact_search_threshold=threshold))
    # Searches by vector never embed, so no embedding model is loaded.
    return Services(store, cast(Any, None), canary=canary)


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


class QueuedCanary(RecallCanary):
    """The real canary sampling every search, its samples kept for the test to measure (the app's
    background task is :meth:`RecallCanary.run`, which measures them the same way)."""

    def __init__(self) -> None:
        super().__init__(1.0)
        self.taken: list[Sample] = []

    def offer(self, sample: Sample) -> None:
        self.taken.append(sample)


async def _canary_recall(
    opensearch_url: str, corpus: DupCorpus, ef_search: int
) -> tuple[RecallCanary, float]:
    canary = QueuedCanary()
    svc = await _services(opensearch_url, 0, canary)  # threshold 0: every search walks the graph
    try:
        for q in corpus.queries:
            await _search(svc, corpus, q, ef_search=ef_search)
        assert len(canary.taken) == len(corpus.queries)
        for sample in canary.taken:
            await canary.measure(sample)
    finally:
        await svc.store.close()
    return canary, canary.indices[corpus.index].recall


async def test_the_canary_sees_the_misses_and_metrics_show_them(
    opensearch_url: str, corpus: DupCorpus
) -> None:
    canary, recall = await _canary_recall(opensearch_url, corpus, ef_search=10)
    figures = canary.indices[corpus.index]
    assert recall < 1.0 and figures.misses > 0 and figures.samples == len(corpus.queries)
    metrics = Metrics()
    store = Store(Settings(opensearch_url=opensearch_url))
    metrics.watch(
        store=store, embedders=cast(Any, None), caches=Caches.with_ttl(0), jobs=cast(Any, None), canary=canary
    )
    try:
        families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    finally:
        await store.close()
    (gauge,) = [
        s for s in families["memproxy_recall_canary_recall"].samples if s.labels["index"] == corpus.index
    ]
    assert gauge.value == pytest.approx(recall)
    (count,) = [
        s for s in families["memproxy_recall_canary_samples"].samples if s.labels["index"] == corpus.index
    ]
    assert count.value == len(corpus.queries)


async def test_the_canary_records_full_recall_where_the_walk_is_exact(
    opensearch_url: str, corpus: DupCorpus
) -> None:
    """A candidate list as big as the set finds everything: recall 1.0, no misses."""
    canary, recall = await _canary_recall(opensearch_url, corpus, ef_search=2000)
    assert recall == 1.0 and canary.indices[corpus.index].misses == 0


async def test_exactly_scored_searches_are_not_sampled(opensearch_url: str, corpus: DupCorpus) -> None:
    canary = QueuedCanary()
    svc = await _services(opensearch_url, 1000, canary)
    try:
        await _search(svc, corpus, corpus.queries[0])
    finally:
        await svc.store.close()
    assert canary.taken == []


async def test_the_canary_drops_samples_past_its_queue_and_runs_until_cancelled() -> None:
    canary = RecallCanary(1.0)
    measured: list[int] = []

    async def exact() -> list[float]:
        measured.append(1)
        return [0.9, 0.8]

    for _ in range(40):
        canary.offer(Sample(index="i", k=2, found=(0.9, 0.7), exact=exact))
    assert canary.dropped == 40 - 32
    task = asyncio.create_task(canary.run())
    for _ in range(100):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(measured) == 32 and canary.indices["i"].recall == 0.5


def test_the_flags() -> None:
    settings = parse_settings(["--exact-search-threshold", "300", "--recall-canary-rate", "0.5"], {})
    assert (settings.exact_search_threshold, settings.recall_canary_rate) == (300, 0.5)
    assert (parse_settings([], {}).exact_search_threshold, parse_settings([], {}).recall_canary_rate) == (
        1000,
        0.01,
    )
    for bad in (["--recall-canary-rate", "1.5"], ["--exact-search-threshold", "-1"]):
        with pytest.raises(SystemExit):
            parse_settings(bad, {})


def test_the_app_runs_the_canary_and_serves_its_figures(opensearch_url: str) -> None:
    """End to end: a proxy sampling every graph-walked search shows recall@k of its index in /metrics (a
    handful of memories: the walk finds them all) and on the console's containers page."""
    proxy = ProxyProcess(
        opensearch_url,
        extra_args=[
            "--auth",
            "none",
            "--metrics-public",
            "--recall-canary-rate",
            "1",
            "--exact-search-threshold",
            "0",
        ],
    )
    mc = "/_plugins/_ml/memory_containers"
    try:
        api = httpx.Client(base_url=proxy.url, timeout=120)
        prefix = f"recall-canary-{uuid.uuid4().hex[:8]}"
        config = {
            "embedding_model_type": "TEXT_EMBEDDING",
            "embedding_model_id": "all-MiniLM-L6-v2",
            "embedding_dimension": 384,
            "index_prefix": prefix,
            "use_system_index": False,
        }
        created = api.post(f"{mc}/_create", json={"name": "canary", "configuration": config})
        assert created.status_code == 200, created.text
        cid = created.json()["memory_container_id"]
        try:
            texts = ["The user drinks green tea.", "The user lives in Porto.", "The user owns a cat."]
            api.post(
                f"{mc}/{cid}/memories/long-term/_memproxy_bulk",
                json={"memories": [{"memory": t} for t in texts]},
            )
            found = api.post(f"{mc}/{cid}/memories/long-term/_semantic_search", json={"query": "tea", "k": 2})
            assert found.status_code == 200 and len(found.json()["hits"]["hits"]) == 2
            index = found.json()["hits"]["hits"][0]["_index"]
            deadline = time.monotonic() + 30
            while True:
                families = {f.name: f for f in text_string_to_metric_families(api.get("/metrics").text)}
                recall = [
                    s.value
                    for s in families.get("memproxy_recall_canary_recall", _NONE).samples
                    if s.labels.get("index") == index
                ]
                if recall or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert recall == [1.0]
        finally:
            api.delete(f"{mc}/{cid}", params={"delete_all_memories": "true"})
    finally:
        proxy.stop()


async def test_the_set_size_is_counted_once_per_filter_within_the_cache_ttl(
    opensearch_url: str, corpus: DupCorpus
) -> None:
    """The count that picks exact or graph is a second round trip per search: it is cached for --cache-ttl-s
    per container and filter (proxy.core.cache), and a new filter, or an expired entry, counts again."""
    store = RecordingStore(Settings(opensearch_url=opensearch_url, exact_search_threshold=1000))
    now = [0.0]
    caches = Caches.with_ttl(2.0)
    caches.set_sizes._clock = lambda: now[0]
    svc = Services(store, cast(Any, None), caches=caches)

    def counts() -> int:
        return sum(1 for body in store.bodies if body.get("size") == 0 and "track_total_hits" in body)

    try:
        alice = Term("namespace.user_id", "alice")
        for _ in range(3):
            await _search(svc, corpus, corpus.queries[0], container=corpus.big)
        assert counts() == 1 and "knn" in store.bodies[-1]["query"]
        await _search(svc, corpus, corpus.queries[0], container=corpus.big, filter=alice)
        await _search(svc, corpus, corpus.queries[1], container=corpus.big, filter=alice)
        assert counts() == 2 and "script_score" in store.bodies[-1]["query"]  # its own size: exact
        now[0] += 2.5
        await _search(svc, corpus, corpus.queries[0], container=corpus.big)
        assert counts() == 3 and "knn" in store.bodies[-1]["query"]
    finally:
        await store.close()
