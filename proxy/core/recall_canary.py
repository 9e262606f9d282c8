"""The recall canary: a small share of real graph-walked vector searches, rerun exactly in the background.

An HNSW search can miss true neighbours (identical memories stored many times, a force-merged segment, a
small ``ef_search``) and nothing in its answer says so. The canary samples ``--recall-canary-rate`` of the
searches that walked the graph (exactly scored ones have recall 1.0 by construction), reruns each with exact
scoring of the same filtered set, and keeps recall@k per index: the share of the exact top k the graph's
answer held, ties at the k-th score counted as found (identical memories score alike, and either copy is a
right answer). ``/metrics`` reports it (``memproxy_recall_canary_*``), the console shows it;
docs/benchmarks.md says how to act on it.

Off the request path: a search only offers its sample (no wait: a full queue drops it, counted); one
background task, owned by the application (:func:`proxy.api.metrics.metrics_ctx` starts and cancels it),
reruns them one at a time, so the canary adds at most one exact search at a time to the node's load.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from proxy.errors import MemproxyError

__all__ = ["IndexRecall", "RecallCanary", "Sample", "recall_at_k"]

log = logging.getLogger(__name__)

# Scores of one node for one vector agree to float precision; a tie within this is a tie.
SCORE_TOLERANCE = 1e-6
# Samples waiting for their exact rerun; more are dropped (the canary must never build a backlog).
MAX_PENDING = 32
# Indices the canary keeps figures for (the least recently sampled go first): labels stay bounded.
MAX_INDICES = 256
# The recent samples behind an index's recall gauge.
WINDOW = 100


def recall_at_k(found: Sequence[float], exact: Sequence[float]) -> float | None:
    """Recall@k of an answer's scores against the exact answer's (both best first): the share of the exact
    top k the answer held, a hit scoring at least the exact k-th score counting as one of them; ``None``
    when the exact answer is empty (nothing to find)."""
    if not exact:
        return None
    kth = exact[-1] - SCORE_TOLERANCE
    return min(len(exact), sum(1 for s in found if s >= kth)) / len(exact)


@dataclass(frozen=True)
class Sample:
    """A graph-walked search's answer (its scores, best first) and how to get the exact one."""

    index: str
    k: int
    found: tuple[float, ...]
    exact: Callable[[], Awaitable[Sequence[float]]]


@dataclass
class IndexRecall:
    """One index's canary figures."""

    samples: int = 0
    recall_sum: float = 0.0
    misses: int = 0  # samples whose recall was below 1
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def add(self, value: float) -> None:
        self.samples += 1
        self.recall_sum += value
        self.misses += value < 1.0
        self.recent.append(value)

    @property
    def recall(self) -> float:
        """Mean recall@k of the last samples (up to :data:`WINDOW`)."""
        return sum(self.recent) / len(self.recent) if self.recent else 1.0


class RecallCanary:
    """Samples searches (:meth:`offer`) and measures them (:meth:`run`, the application's task)."""

    def __init__(self, rate: float, *, chance: Callable[[], float] = random.random) -> None:
        self.rate = rate
        self._chance = chance
        self._queue: asyncio.Queue[Sample] = asyncio.Queue(MAX_PENDING)
        self.indices: OrderedDict[str, IndexRecall] = OrderedDict()
        self.dropped = 0  # sampled, but the queue was full
        self.errors = 0  # exact reruns that failed (the node's error; logged)

    def wants(self) -> bool:
        """Whether to sample this search (decided before its sample is built)."""
        return self.rate > 0 and self._chance() < self.rate

    def offer(self, sample: Sample) -> None:
        try:
            self._queue.put_nowait(sample)
        except asyncio.QueueFull:
            self.dropped += 1

    async def measure(self, sample: Sample) -> float | None:
        """Rerun one sample exactly and record its recall (``None``: nothing to find, not recorded)."""
        value = recall_at_k(sample.found, await sample.exact())
        if value is not None:
            figures = self.indices.pop(sample.index, None) or IndexRecall()
            figures.add(value)
            self.indices[sample.index] = figures
            while len(self.indices) > MAX_INDICES:
                self.indices.popitem(last=False)
        return value

    async def run(self) -> None:
        """Measure samples as they come, until cancelled (at shutdown)."""
        while True:
            sample = await self._queue.get()
            try:
                await self.measure(sample)
            except MemproxyError as exc:  # the node refused or timed out: counted, logged, the canary goes on
                self.errors += 1
                log.info("recall canary: the exact rerun on %s failed: %s", sample.index, exc)
