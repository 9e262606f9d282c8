"""The process's Prometheus metrics: one registry per application (docs/observability.md).

Per application, not prometheus-client's global default registry: tests and benchmarks start several
applications in one process, and each must count only its own requests.

Two kinds of sources. Events are observed as they happen: HTTP requests (by the API layer's middleware) and
OpenSearch calls (the store's :data:`~proxy.store.client.CallObserver`). State is read at scrape time by a
custom collector from plain attributes of the objects that own it, so the embedding engine, the caches and
the store import no metrics library: the embedders' queues and counters, the read caches' hits and misses,
and the job queue (whose counts need a node call, so the ``/metrics`` handler refreshes them first, under a
short timeout, with :meth:`Metrics.refresh_jobs`).

No label ever holds a request body, a key, a query string or an id: routes are labelled by their pattern,
OpenSearch calls by their endpoint (``_search``, ``_doc``, ...), embedders by their configured id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from dataclasses import fields
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from proxy.core.cache import Caches, TtlCache
from proxy.core.jobs import STATES, JobRunner
from proxy.core.recall_canary import RecallCanary
from proxy.errors import MemproxyError
from proxy.store.client import Store

if TYPE_CHECKING:  # proxy.embedding imports torch; the metrics only read attributes
    from proxy.embedding import EmbedderRegistry

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS", "Metrics"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds: from a cached key look-up to a long bulk write or a slow model (the model timeout is 30 s).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Texts per forward: powers of two up to the GPU default (256) and beyond.
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    """The registry and the event metrics of one application; :meth:`watch` adds the state it reads."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.http_requests = Counter(
            "memproxy_http_requests",
            "HTTP requests answered, by route pattern ('passthrough' for forwarded ones), method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.http_duration = Histogram(
            "memproxy_http_request_duration_seconds",
            "Time to answer a request (a streamed answer: until its last byte), by API and operation",
            ["api", "operation"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.opensearch_duration = Histogram(
            "memproxy_opensearch_request_duration_seconds",
            "Time of memproxy's own calls to OpenSearch (failed ones included), by method and endpoint",
            ["method", "endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.opensearch_errors = Counter(
            "memproxy_opensearch_errors",
            "memproxy's own OpenSearch calls that failed, by method, endpoint and error "
            "(status class such as 4xx/5xx, or the exception type when the node did not answer)",
            ["method", "endpoint", "error"],
            registry=self.registry,
        )
        self._state = _StateCollector()
        self.registry.register(self._state)

    def observe_request(
        self, *, route: str, method: str, status: int, api: str, operation: str, seconds: float
    ) -> None:
        self.http_requests.labels(route, method, str(status)).inc()
        self.http_duration.labels(api, operation).observe(seconds)

    def observe_store_call(self, method: str, endpoint: str, seconds: float, error: str | None) -> None:
        """A :data:`proxy.store.client.CallObserver`."""
        self.opensearch_duration.labels(method, endpoint).observe(seconds)
        if error is not None:
            self.opensearch_errors.labels(method, endpoint, error).inc()

    def watch(
        self,
        *,
        store: Store,
        embedders: EmbedderRegistry,
        caches: Caches,
        jobs: JobRunner,
        canary: RecallCanary | None = None,
    ) -> None:
        """Start reporting on the application's objects (once they exist)."""
        store.observer = self.observe_store_call
        self._state.embedders = embedders
        self._state.caches = caches
        self._state.jobs = jobs
        self._state.canary = canary

    def unwatch(self, store: Store) -> None:
        """Stop before those objects close (a scrape must not read a closed registry)."""
        if store.observer == self.observe_store_call:
            store.observer = None
        self._state.embedders = None
        self._state.caches = None
        self._state.jobs = None
        self._state.canary = None

    async def refresh_jobs(self, timeout_s: float) -> None:
        """Read the job counts by state (one aggregation on the node) for the next scrape. When the node
        cannot answer in time the counts are left out of the scrape and ``memproxy_jobs_counts_ok`` is 0,
        so a dashboard shows a gap rather than stale numbers."""
        runner = self._state.jobs
        if runner is None:
            return
        try:
            self._state.job_counts = await asyncio.wait_for(runner.queue.counts(), timeout_s)
        except (MemproxyError, TimeoutError) as exc:
            log.info("job counts left out of this scrape: %s", getattr(exc, "message", None) or exc)
            self._state.job_counts = None

    def render(self) -> bytes:
        """The Prometheus text exposition of everything."""
        return generate_latest(self.registry)


class _StateCollector(Collector):
    """Reads the state of the watched objects at scrape time."""

    def __init__(self) -> None:
        self.embedders: EmbedderRegistry | None = None
        self.caches: Caches | None = None
        self.jobs: JobRunner | None = None
        self.job_counts: dict[str, int] | None = None
        self.canary: RecallCanary | None = None

    def describe(self) -> Iterable[Metric]:
        return []  # the families are known only at scrape time; registering must not read anything

    def collect(self) -> Iterator[Metric]:
        if self.embedders is not None:
            yield from self._embedding(self.embedders)
        if self.caches is not None:
            yield from self._caches(self.caches)
        if self.jobs is not None:
            yield from self._jobs(self.jobs)
        if self.canary is not None:
            yield from self._canary(self.canary)

    @staticmethod
    def _canary(canary: RecallCanary) -> Iterator[Metric]:
        # Labelled by index name: one per long-term index sampled, at most recall_canary.MAX_INDICES.
        labels = ["index"]
        recall = GaugeMetricFamily(
            "memproxy_recall_canary_recall",
            "Mean recall@k of the index's last sampled HNSW searches against exact scoring (1: none missed)",
            labels=labels,
        )
        samples = CounterMetricFamily(
            "memproxy_recall_canary_samples", "HNSW searches the canary reran exactly", labels=labels
        )
        recall_sum = CounterMetricFamily(
            "memproxy_recall_canary_recall_sum",
            "Sum of the samples' recall@k (rate() of it over rate() of the samples: mean recall)",
            labels=labels,
        )
        misses = CounterMetricFamily(
            "memproxy_recall_canary_misses", "Samples that missed part of the exact top k", labels=labels
        )
        for index, figures in canary.indices.items():
            recall.add_metric([index], figures.recall)
            samples.add_metric([index], figures.samples)
            recall_sum.add_metric([index], figures.recall_sum)
            misses.add_metric([index], figures.misses)
        dropped = CounterMetricFamily(
            "memproxy_recall_canary_dropped", "Samples dropped because the canary's queue was full"
        )
        dropped.add_metric([], canary.dropped)
        errors = CounterMetricFamily(
            "memproxy_recall_canary_errors", "Exact reruns of the canary that the node failed"
        )
        errors.add_metric([], canary.errors)
        yield from (recall, samples, recall_sum, misses, dropped, errors)

    @staticmethod
    def _embedding(registry: EmbedderRegistry) -> Iterator[Metric]:
        labels = ["embedder"]
        queued = GaugeMetricFamily(
            "memproxy_embed_queue_texts", "Texts waiting for a batch of the local embedder", labels=labels
        )
        limit = GaugeMetricFamily(
            "memproxy_embed_queue_limit", "Texts the embedder queues before refusing (429)", labels=labels
        )
        batches = CounterMetricFamily(
            "memproxy_embed_batches", "Forwards the local embedder ran", labels=labels
        )
        texts = CounterMetricFamily(
            "memproxy_embed_texts", "Texts the local embedder embedded", labels=labels
        )
        tokens = CounterMetricFamily(
            "memproxy_embed_tokens",
            "Tokens the local embedder read (rate() of it is tokens per second)",
            labels=labels,
        )
        sizes = HistogramMetricFamily(
            "memproxy_embed_batch_size", "Texts per forward of the local embedder", labels=labels
        )
        for info in registry.infos():
            embedder = registry.get(info.id)
            queued.add_metric([info.id], embedder.queued)
            limit.add_metric([info.id], embedder.max_queue)
            batches.add_metric([info.id], embedder.batches_run)
            texts.add_metric([info.id], embedder.texts_computed)
            tokens.add_metric([info.id], embedder.tokens_computed)
            counts = dict(embedder.batch_sizes)
            buckets: list[tuple[str, float]] = []
            for bound in BATCH_SIZE_BUCKETS:
                buckets.append((str(bound), sum(n for size, n in counts.items() if size <= bound)))
            buckets.append(("+Inf", sum(counts.values())))
            sizes.add_metric([info.id], buckets, sum_value=sum(size * n for size, n in counts.items()))
        yield from (queued, limit, batches, texts, tokens, sizes)

    @staticmethod
    def _caches(caches: Caches) -> Iterator[Metric]:
        hits = CounterMetricFamily(
            "memproxy_cache_hits", "Look-ups answered from a read cache", labels=["cache"]
        )
        misses = CounterMetricFamily(
            "memproxy_cache_misses", "Look-ups a read cache had to load", labels=["cache"]
        )
        entries = GaugeMetricFamily("memproxy_cache_entries", "Entries a read cache holds", labels=["cache"])
        for f in fields(caches):
            cache = getattr(caches, f.name)
            if isinstance(cache, TtlCache):
                hits.add_metric([f.name], cache.hits)
                misses.add_metric([f.name], cache.misses)
                entries.add_metric([f.name], len(cache))
        yield from (hits, misses, entries)

    def _jobs(self, runner: JobRunner) -> Iterator[Metric]:
        ok = GaugeMetricFamily(
            "memproxy_jobs_counts_ok", "1 when this scrape could read the job counts from the cluster"
        )
        ok.add_metric([], 1 if self.job_counts is not None else 0)
        yield ok
        if self.job_counts is not None:
            by_state = GaugeMetricFamily(
                "memproxy_jobs", "Durable jobs in the cluster by state", labels=["state"]
            )
            for state in STATES:
                by_state.add_metric([state], self.job_counts.get(state, 0))
            yield by_state
        running = GaugeMetricFamily("memproxy_jobs_running_here", "Jobs this process is running now")
        running.add_metric([], len(runner.running))
        yield running
