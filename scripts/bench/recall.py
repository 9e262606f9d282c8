"""Recall: R@1 / R@10 against exact, per ef_search, filtered and not: today's path (HNSW always) against
memproxy's (exact scoring of filtered sets up to ``--exact-search-threshold``), latency ratios in one run.

Corpora (issue 26; generated, nothing downloaded; embedding-like low-rank unit vectors, scripts/bench/common):

* ``diverse``: N distinct memories;
* ``namespaces``: the same in 20 namespaces (one namespace ≈ N / 20 memories: under the threshold at 10 k);
* ``duplicates``: N / 2 distinct memories plus 24 facts each stored many times (50 to 1,500 copies at 10 k,
  scaled with N): identical vectors, which trap Lucene's HNSW walk;
* ``duplicates-merged``: the same index force-merged to one segment (misses are worst there);
* the text corpora of :mod:`scripts.bench.recall_texts` (``templated``, ``one-template``,
  ``templated-duplicates`` and its ``-merged`` stage), embedded by memproxy's model in this process.

Each corpus is one container in a long-term index from memproxy's template; every search goes through
memproxy's own ``proxy.core.search.vector_search`` (query model, DSL compiler, store) by vector, so the
latencies are the node's plus memproxy's store path, not embedding. The oracle scores the vectors as written
(rounded to 6 decimals); a hit tied with the exact k-th score counts as found (identical memories are
interchangeable).

    .venv/bin/python -m scripts.bench.recall --quick          # 10 k memories, 50 queries per case
    .venv/bin/python -m scripts.bench.recall --n 10000 --queries 200 --ef 100,300,1000
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from proxy.config import Settings
from proxy.core.container_record import Container
from proxy.core.query import VectorSearch
from proxy.core.search import vector_search
from proxy.core.services import Services
from proxy.store.client import Store
from proxy.store.query import Term, all_of
from proxy.store.templates import VectorField, render_index_body
from scripts.bench.common import (
    DEFAULT_OPENSEARCH_URL,
    Node,
    bulk_lines,
    format_table,
    latency_summary,
    machine_info,
    make_vectors,
    results_name,
    start_embedders,
    vector_json,
    write_results,
)
from scripts.bench.recall_texts import TEXT_CORPORA, duplicate_copies, embed_texts, fresh_queries, text_corpus
from scripts.bench.scale import DIM, FIELD, batches, force_merge, index_stats

NAMESPACES = 20
FACTS = 24
TIE = 1e-6


def corpus_vectors(kind: str, n: int, seed: int) -> np.ndarray:
    if kind == "duplicates":
        rng = np.random.default_rng(seed + 3)
        base = make_vectors("lowrank", n // 2, DIM, seed)
        facts = make_vectors("lowrank", FACTS, DIM, seed + 11)
        # 50 to 1,500 copies per fact at n = 10 k (issue 26's corpus), scaled to n.
        rows = np.concatenate([base, np.repeat(facts, duplicate_copies(n), axis=0)])
        return rows[rng.permutation(len(rows))]
    return make_vectors("lowrank", n, DIM, seed)


def _container(prefix: str) -> Container:
    config = {
        "embedding_model_type": "TEXT_EMBEDDING",
        "embedding_model_id": "bench",
        "embedding_dimension": DIM,
        "index_prefix": prefix,
        "use_system_index": False,
    }
    return Container(str(uuid.uuid4()), "bench-recall", None, 0, 0, config)


async def load(
    node: Node, container: Container, vectors: np.ndarray, texts: Sequence[str] | None = None
) -> str:
    index = cast(str, container.index_name("long-term"))
    await node.request(
        "PUT", f"/{index}", render_index_body("long_term", vector_fields=[VectorField(FIELD, DIM)])
    )
    for block in batches(len(vectors), 500):
        docs = (
            (
                f"d{i}",
                {
                    "memory": texts[i] if texts is not None else f"memory {i}",
                    FIELD: vector_json(vectors[i]),
                    "namespace": {"user_id": f"u{i % NAMESPACES}"},
                    "namespace_size": 1,
                    "memory_container_id": container.id,
                    "strategy_type": "SEMANTIC",
                },
            )
            for i in block
        )
        await node.bulk(bulk_lines(index, docs))
    await node.request("POST", f"/{index}/_refresh")
    return index


def tie_recall(found: Sequence[str], scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[float, float]:
    """(R@1, R@k) of an answer against the exact top k of ``rows``."""
    s = np.sort(scores[rows])[::-1]
    if len(s) == 0:
        return 1.0, 1.0
    kth, best = s[min(k, len(s)) - 1], s[0]
    got = [scores[int(i[1:])] for i in found]
    r1 = float(bool(got) and got[0] >= best - TIE)
    rk = sum(1 for g in got[:k] if g >= kth - TIE) / min(k, len(s))
    return r1, rk


async def measure(
    paths: dict[str, Services], container: Container, vectors: np.ndarray, queries: np.ndarray, args: Any
) -> list[dict[str, Any]]:
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    rows_all = np.arange(len(vectors))
    cases = [("container", None, rows_all), ("1 namespace", "u0", rows_all[rows_all % NAMESPACES == 0])]
    out: list[dict[str, Any]] = []
    for case, user, rows in cases:
        flt = all_of([Term("namespace.user_id", user)] if user else [])
        for ef in args.ef:
            stats: dict[str, dict[str, list[float]]] = {p: {"r1": [], "rk": [], "lat": []} for p in paths}
            for q in queries:
                scores = unit @ (q / np.linalg.norm(q))
                for name, svc in paths.items():  # interleaved: both paths see the same load
                    search = VectorSearch(container, args.k, vector=vector_json(q), filter=flt, ef_search=ef)
                    began = time.perf_counter()
                    hits = (await vector_search(svc, search)).hits
                    stats[name]["lat"].append(time.perf_counter() - began)
                    r1, rk = tie_recall([h.id for h in hits], scores, rows, args.k)
                    stats[name]["r1"].append(r1)
                    stats[name]["rk"].append(rk)
            row: dict[str, Any] = {"filter": case, "matching": len(rows), "ef_search": ef}
            for name, st in stats.items():
                row[f"{name} R@1"] = float(np.mean(st["r1"]))
                row[f"{name} R@{args.k}"] = float(np.mean(st["rk"]))
                row[f"{name} p50 ms"] = latency_summary(st["lat"]).get("p50_ms")
            row["p50 ratio"] = row["memproxy p50 ms"] / row["today p50 ms"]
            out.append(row)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    paths = {
        "today": Services(
            Store(Settings(opensearch_url=args.url, exact_search_threshold=0)), cast(Any, None)
        ),
        "memproxy": Services(
            Store(Settings(opensearch_url=args.url, exact_search_threshold=args.threshold)), cast(Any, None)
        ),
    }
    results: dict[str, Any] = {"machine": machine_info(), "args": vars(args), "corpora": {}}
    registry = await start_embedders() if set(args.corpora) & set(TEXT_CORPORA) else None
    embedder = registry.default if registry is not None else None
    try:
        async with Node(args.url) as node:
            results["opensearch"] = await node.version()
            for kind in args.corpora:
                texts, vectors, queries = await _corpus(kind, args, embedder)
                container = _container(f"bench-recall-{kind}-{uuid.uuid4().hex[:6]}")
                index = await load(node, container, vectors, texts)
                try:
                    stages = [kind, f"{kind}-merged"] if kind.endswith("duplicates") else [kind]
                    for stage in stages:
                        if stage.endswith("-merged"):
                            await force_merge(node, index, 1)
                        rows = await measure(paths, container, vectors, queries, args)
                        info = await index_stats(node, index)
                        results["corpora"][stage] = {"index": info, "rows": rows}
                        print(f"\n{stage}: {info['docs']} memories, {info['segments']} segments")
                        print(format_table(rows))
                finally:
                    await node.delete_index(index)
    finally:
        for svc in paths.values():
            await svc.store.close()
        if registry is not None:
            await registry.close()
    return results


async def _corpus(
    kind: str, args: argparse.Namespace, embedder: Any
) -> tuple[list[str] | None, np.ndarray, np.ndarray]:
    """(texts or None, the corpus' vectors, the query vectors: half stored ones, half fresh)."""
    fresh = args.queries - args.queries // 2
    texts: list[str] | None = None
    if kind in TEXT_CORPORA:
        texts = text_corpus(kind, args.n, args.seed)
        vectors = await embed_texts(embedder, texts)
        fresh_vectors = await embed_texts(embedder, fresh_queries(kind, fresh, args.seed))
    else:
        vectors = corpus_vectors("duplicates" if kind == "duplicates" else "lowrank", args.n, args.seed)
        fresh_vectors = make_vectors("lowrank", fresh, DIM, args.seed + 99)
    picked = vectors[np.random.default_rng(1).choice(len(vectors), args.queries // 2, replace=False)]
    return texts, vectors, np.concatenate([picked, fresh_vectors])


CORPORA = ("diverse", "namespaces", "duplicates", *TEXT_CORPORA)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--url", default=DEFAULT_OPENSEARCH_URL, help="OpenSearch node (default $OPENSEARCH_URL or :9250)"
    )
    p.add_argument("--n", type=int, default=10_000, help="memories per corpus")
    p.add_argument(
        "--queries", type=int, default=200, help="queries per case (half stored vectors, half fresh)"
    )
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--ef", type=lambda t: [int(x) for x in t.split(",")], default=[100, 300, 1000])
    p.add_argument("--threshold", type=int, default=1000, help="memproxy's --exact-search-threshold")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--quick", action="store_true", help="smoke run: at most 10 k memories, 50 queries, ef 300"
    )
    p.add_argument(
        "--corpora",
        type=lambda t: t.split(","),
        default=list(CORPORA),
        help=f"comma-separated, of {','.join(CORPORA)} (default: all; *duplicates adds its -merged stage)",
    )
    p.add_argument("--tag", default="", help="suffix of the results file name (recall<tag>.json)")
    args = p.parse_args(argv)
    unknown = set(args.corpora) - set(CORPORA)
    if unknown:
        p.error(f"--corpora: unknown {sorted(unknown)}")
    if args.quick:
        args.n, args.queries, args.ef = min(args.n, 10_000), min(args.queries, 50), [300]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    data = asyncio.run(run(args))
    print(f"wrote {write_results(results_name('recall', args.tag, args.quick), data)}")


if __name__ == "__main__":
    main()
