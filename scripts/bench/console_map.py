"""The console's pictures on a big container: how long the vector map's sample, its PCA and the
memories-over-time histogram take (docs/console.md quotes the figures).

One container's long-term index from memproxy's template, loaded with N embedding-like vectors
(scripts/bench/common; 2 % of them copies of 40 facts, so the map has near-duplicates to find) and
``created_time`` spread over 90 days. Then, through the very core functions the console's pages call:

* ``vector_sample`` (the node draws 2,000 at random: ``function_score`` / ``random_score`` on ``_seq_no``,
  only the vector and text fields come back) and ``build_map`` (PCA and the n x n cosines, in a worker thread
  as the page runs it);
* ``memories_over_time`` (two rounds of aggregations: the span, then the date histogram).

    .venv/bin/python -m scripts.bench.console_map --quick        # 10 k memories
    .venv/bin/python -m scripts.bench.console_map --n 100000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import numpy as np

from proxy.api.console.vector_map import build_map
from proxy.config import Settings
from proxy.core.container_record import Container
from proxy.core.inspection import memories_over_time, vector_sample
from proxy.core.services import Services
from proxy.store.client import Store
from proxy.store.templates import VectorField, render_index_body
from scripts.bench.common import (
    DEFAULT_OPENSEARCH_URL,
    Node,
    bulk_lines,
    format_table,
    machine_info,
    make_vectors,
    results_name,
    synthetic_texts,
    vector_json,
    write_results,
)
from scripts.bench.scale import DIM, FIELD, batches

T = TypeVar("T")
FACTS = 40
DAYS = 90


def corpus(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 1)
    copies = n // 50
    base = make_vectors("lowrank", n - copies, DIM, seed)
    facts = make_vectors("lowrank", FACTS, DIM, seed + 7)
    rows = np.concatenate([base, facts[rng.integers(0, FACTS, copies)]])
    return rows[rng.permutation(len(rows))]


async def load(node: Node, container: Container, vectors: np.ndarray, seed: int) -> str:
    index = cast(str, container.index_name("long-term"))
    await node.request(
        "PUT", f"/{index}", render_index_body("long_term", vector_fields=[VectorField(FIELD, DIM)])
    )
    texts = synthetic_texts(len(vectors), seed)
    now = int(time.time() * 1000)
    times = now - np.random.default_rng(seed + 2).integers(0, DAYS * 86_400_000, len(vectors))
    for block in batches(len(vectors), 1000):
        docs = (
            (
                f"d{i}",
                {
                    "memory": texts[i],
                    FIELD: vector_json(vectors[i]),
                    "namespace": {"user_id": f"u{i % 20}"},
                    "namespace_size": 1,
                    "memory_container_id": container.id,
                    "strategy_type": "SEMANTIC",
                    "created_time": int(times[i]),
                    "last_updated_time": int(times[i]),
                },
            )
            for i in block
        )
        await node.bulk(bulk_lines(index, docs))
    await node.request("POST", f"/{index}/_refresh")
    return index


async def timed(runs: int, call: Callable[[], Awaitable[T]]) -> tuple[list[float], T]:
    seconds, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = await call()
        seconds.append(time.perf_counter() - started)
    return seconds, cast(T, result)


def summary(name: str, seconds: list[float], **extra: Any) -> dict[str, Any]:
    return {
        "step": name,
        "median_ms": round(statistics.median(seconds) * 1000, 1),
        "min_ms": round(min(seconds) * 1000, 1),
        "max_ms": round(max(seconds) * 1000, 1),
        **extra,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    config = {
        "embedding_model_type": "TEXT_EMBEDDING",
        "embedding_model_id": "bench",
        "embedding_dimension": DIM,
        "index_prefix": f"bench-map-{uuid.uuid4().hex[:8]}",
        "use_system_index": False,
    }
    container = Container(str(uuid.uuid4()), "bench-map", None, 0, 0, config)
    svc = Services(Store(Settings(opensearch_url=args.url)), cast(Any, None))
    rows: list[dict[str, Any]] = []
    try:
        async with Node(args.url) as node:
            version = await node.version()
            started = time.perf_counter()
            index = await load(node, container, corpus(args.n, args.seed), args.seed)
            load_s = time.perf_counter() - started
            try:
                await vector_sample(svc, container)  # warm the node's caches once, as a second visit is
                sample_s, sample = await timed(args.runs, lambda: vector_sample(svc, container))
                assert sample is not None
                rows.append(
                    summary("vector_sample (node + transfer + parse)", sample_s, points=len(sample.ids))
                )
                pca_s, drawn = await timed(args.runs, lambda: asyncio.to_thread(build_map, sample))
                rows.append(
                    summary("build_map (PCA + cosines, worker thread)", pca_s, duplicates=drawn.duplicates)
                )
                total = [a + b for a, b in zip(sample_s, pca_s, strict=True)]
                rows.append(summary("the map page's work", total, points=len(drawn.points)))
                timeline_s, timeline = await timed(args.runs, lambda: memories_over_time(svc, container))
                assert timeline is not None
                rows.append(summary("memories_over_time", timeline_s, buckets=len(timeline.starts)))
            finally:
                if not args.keep:
                    await node.delete_index(index)
    finally:
        await svc.store.close()
    print(format_table(rows))
    return {
        "machine": machine_info(),
        "opensearch": version,
        "args": vars(args),
        "load_s": round(load_s, 1),
        "results": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default=DEFAULT_OPENSEARCH_URL)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="10 k memories, 3 runs")
    parser.add_argument("--keep", action="store_true", help="leave the index on the node")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    if args.quick:
        args.n, args.runs = 10_000, 3
    data = asyncio.run(run(args))
    print(write_results(results_name("console-map", args.tag, args.quick), data))


if __name__ == "__main__":
    main()
