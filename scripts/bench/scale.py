"""Scale: N random unit 384-d memories in one container-like long-term index; query time, recall, count rule.

The index body comes from memproxy's own template (``render_index_body("long_term", ...)``); every document
carries the container id and a flat_object ``namespace`` (``user_id`` with 50 %, 10 %, 1 %, 0.1 % shares and
tiny groups of 11, 10, 9, 5, 1 documents; ``agent_id`` with a 30 % share), as ml-commons writes them. The
queries are k-NN with every filter inside the knn clause, compiled by memproxy's ``proxy.store.query_dsl``.
Recall@k and the count rule (exactly min(k, matching) hits) are checked against a numpy brute-force oracle
that applies the filter exactly.

    .venv/bin/python -m scripts.bench.scale                 # 100 k memories, 200 queries per filter
    .venv/bin/python -m scripts.bench.scale --n 1000000 --url http://127.0.0.1:9260
    .venv/bin/python -m scripts.bench.scale --quick         # 10 k memories, 50 queries (smoke)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from proxy.store.query import Term, all_of
from proxy.store.query_dsl import DEFAULT_EF_SEARCH, compile_filter, vector_search_body
from proxy.store.templates import VectorField, render_index_body
from scripts.bench.common import (
    DEFAULT_OPENSEARCH_URL,
    Node,
    Stopwatch,
    bulk_lines,
    exact_top_k,
    format_table,
    hit_count_ok,
    latency_summary,
    machine_info,
    make_vectors,
    normalized,
    recall,
    results_name,
    vector_json,
    write_results,
)

DIM = 384
FIELD = "memory_embedding"
USER_SHARES = (("u50", 0.5), ("u10", 0.1), ("u1", 0.01), ("u0.1", 0.001))
TINY_USERS = (("t11", 11), ("t10", 10), ("t9", 9), ("t5", 5), ("t1", 1))
OTHER_USERS = 997
AGENT_SHARE = 0.3


# --------------------------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Corpus:
    vectors: np.ndarray  # (n, dim) float32, the values the JSON carries
    users: np.ndarray  # (n,) int32 code into user_names
    user_names: list[str]
    agent30: np.ndarray  # (n,) bool

    def head(self, rows: int) -> Corpus:
        """The first ``rows`` memories (what an interrupted load wrote)."""
        return Corpus(self.vectors[:rows], self.users[:rows], self.user_names, self.agent30[:rows])

    def source(self, i: int, container_id: str, now_ms: int) -> dict[str, Any]:
        return {
            "memory": f"synthetic memory {i}",
            FIELD: vector_json(self.vectors[i]),
            "namespace": {
                "user_id": self.user_names[self.users[i]],
                "agent_id": "a30" if self.agent30[i] else "a70",
            },
            "namespace_size": 2,
            "memory_container_id": container_id,
            "owner_id": "bench",
            "strategy_type": "SEMANTIC",
            "created_time": now_ms,
            "last_updated_time": now_ms,
        }


def make_corpus(n: int, seed: int, kind: str = "random") -> Corpus:
    rng = np.random.default_rng(seed + 1)
    perm = rng.permutation(n)
    names = [name for name, _ in USER_SHARES] + [name for name, _ in TINY_USERS]
    names += [f"o{j}" for j in range(OTHER_USERS)]
    users = np.empty(n, dtype=np.int32)
    sizes = [round(n * share) for _, share in USER_SHARES] + [size for _, size in TINY_USERS]
    start = 0
    for code, size in enumerate(sizes):
        users[perm[start : start + size]] = code
        start += size
    rest = perm[start:]
    users[rest] = len(sizes) + np.arange(len(rest)) % OTHER_USERS
    return Corpus(make_vectors(kind, n, DIM, seed), users, names, rng.random(n) < AGENT_SHARE)


# --------------------------------------------------------------------------------------------- filters


@dataclass(frozen=True)
class FilterCase:
    name: str
    terms: tuple[tuple[str, str], ...]  # (field, value) pairs, AND-ed; the container term is added on top
    rows: np.ndarray | None  # matching rows for the oracle; None = every row
    container: bool = True  # False: a bare knn query without any filter

    @property
    def matching(self) -> int:
        return -1 if self.rows is None else len(self.rows)


def filter_cases(corpus: Corpus) -> list[FilterCase]:
    n = len(corpus.users)
    code = {name: i for i, name in enumerate(corpus.user_names)}

    def user(name: str) -> np.ndarray:
        return np.flatnonzero(corpus.users == code[name]) if name in code else np.empty(0, dtype=np.int64)

    cases = [
        FilterCase("no filter (bare knn)", (), None, container=False),
        FilterCase("container only (100%)", (), np.arange(n)),
    ]
    for name, share in USER_SHARES:
        cases.append(FilterCase(f"user {share:.1%}", (("namespace.user_id", name),), user(name)))
    both = np.flatnonzero((corpus.users == code["u10"]) & corpus.agent30)
    cases.append(
        FilterCase(
            "user 10% AND agent 30%", (("namespace.user_id", "u10"), ("namespace.agent_id", "a30")), both
        )
    )
    for name, _ in TINY_USERS:
        rows = user(name)
        cases.append(FilterCase(f"{len(rows)} docs ({name})", (("namespace.user_id", name),), rows))
    cases.append(FilterCase("0 docs", (("namespace.user_id", "nobody"),), user("nobody")))
    return cases


# --------------------------------------------------------------------------------------------- queries


def cosine_scores(queries: np.ndarray, vectors: np.ndarray, chunk: int = 50_000) -> np.ndarray:
    """The brute-force oracle's input: (queries x memories) cosine, computed in chunks of memories."""
    q = normalized(queries)
    out = np.empty((len(q), len(vectors)), dtype=np.float32)
    for start in tqdm(range(0, len(vectors), chunk), desc="oracle (brute force)", leave=False):
        out[:, start : start + chunk] = q @ normalized(vectors[start : start + chunk]).T
    return out


def knn_body(
    vector: list[float], k: int, container_id: str, case: FilterCase, ef_search: int | None
) -> dict[str, Any]:
    """The request memproxy's compiler (``proxy.store.query_dsl``) builds: every filter inside the knn clause.

    ``_source`` is off: this measures the k-NN search itself, not the fetch of stored fields.
    """
    tree = all_of([Term("memory_container_id", container_id), *(Term(f, v) for f, v in case.terms)])
    body = vector_search_body(
        field=FIELD,
        vector=vector,
        k=k,
        filter_dsl=compile_filter(tree) if case.container else None,
        ef_search=ef_search,
    )
    body["_source"] = False
    return body


@dataclass
class CaseResult:
    case: FilterCase
    latencies: list[float]
    took_ms: list[int]
    recalls: list[float]
    count_ok: list[bool]
    hits: list[int]

    def row(self, k: int) -> dict[str, Any]:
        lat = latency_summary(self.latencies)
        took = latency_summary([t / 1000 for t in self.took_ms])
        return {
            "filter": self.case.name,
            "matching": "all" if self.case.rows is None else self.case.matching,
            "took p50 ms": took.get("p50_ms"),
            "took p99 ms": took.get("p99_ms"),
            "client p50 ms": lat.get("p50_ms"),
            "client p99 ms": lat.get("p99_ms"),
            f"recall@{k}": float(np.mean(self.recalls)),
            f"min recall@{k}": float(np.min(self.recalls)),
            "count rule": f"{sum(self.count_ok)}/{len(self.count_ok)}",
        }


async def run_case(
    node: Node,
    index: str,
    case: FilterCase,
    queries: np.ndarray,
    oracle_scores: np.ndarray,
    args: argparse.Namespace,
    container_id: str,
) -> CaseResult:
    result = CaseResult(case, [], [], [], [], [])
    matching = oracle_scores.shape[1] if case.rows is None else len(case.rows)
    for qi in tqdm(range(len(queries)), desc=case.name, leave=False):
        body = knn_body(vector_json(queries[qi]), args.k, container_id, case, args.ef_search)
        start = time.perf_counter()
        answer = await node.request("POST", f"/{index}/_search", body)
        result.latencies.append(time.perf_counter() - start)
        result.took_ms.append(int(answer["took"]))
        ids = [int(h["_id"].removeprefix("d")) for h in answer["hits"]["hits"]]
        truth = exact_top_k(oracle_scores[qi], args.k, case.rows)
        result.recalls.append(recall(ids, truth))
        result.hits.append(len(ids))
        result.count_ok.append(hit_count_ok(len(ids), args.k, matching) and len(set(ids)) == len(ids))
    return result


# --------------------------------------------------------------------------------------------- loading


def batches(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


async def load(node: Node, index: str, corpus: Corpus, container_id: str, args: argparse.Namespace) -> None:
    now_ms = int(time.time() * 1000)
    pending = list(batches(len(corpus.vectors), args.batch))
    bar = tqdm(total=len(corpus.vectors), desc="bulk load", unit="doc", smoothing=0.05)

    def encode(block: range) -> bytes:
        return bulk_lines(index, ((f"d{i}", corpus.source(i, container_id, now_ms)) for i in block))

    async def worker() -> None:
        while pending:
            block = pending.pop(0)
            await node.bulk(await asyncio.to_thread(encode, block))
            bar.update(len(block))

    await asyncio.gather(*(worker() for _ in range(args.clients)))
    bar.close()


async def index_stats(node: Node, index: str) -> dict[str, Any]:
    stats = await node.request("GET", f"/{index}/_stats/docs,store,segments")
    total = stats["indices"][index]["primaries"]
    return {
        "docs": total["docs"]["count"],
        "store_bytes": total["store"]["size_in_bytes"],
        "segments": total["segments"]["count"],
    }


async def force_merge(node: Node, index: str, segments: int) -> None:
    """``_forcemerge`` can outlast an HTTP timeout; poll the segment count while it runs."""
    task = asyncio.create_task(
        node.request("POST", f"/{index}/_forcemerge", params={"max_num_segments": str(segments)})
    )
    with tqdm(desc=f"force-merge to {segments}", unit="poll") as bar:
        while not task.done():
            await asyncio.sleep(5)
            bar.set_postfix(segments=(await index_stats(node, index))["segments"])
            bar.update(1)
    await task


# --------------------------------------------------------------------------------------------- main


async def run(args: argparse.Namespace) -> dict[str, Any]:
    watch = Stopwatch()
    with watch.phase("generate vectors"):
        corpus = make_corpus(args.n, args.seed, args.data)
        queries = make_vectors(args.data, args.queries, DIM, args.seed + 7)
    async with Node(args.url) as node:
        info: dict[str, Any] = {
            "opensearch": await node.version(),
            "heap_max_bytes": await node.heap_max_bytes(),
        }
        if args.index:
            index, container_id, corpus = await _reuse(node, args.index, corpus, info)
            return await _measure(
                node, index, container_id, corpus, queries, watch, info, args, load_first=False
            )
        index = f"memproxy-bench-scale-{uuid.uuid4().hex[:8]}"
        body = render_index_body("long_term", vector_fields=[VectorField(FIELD, DIM)])
        await node.request("PUT", f"/{index}", body)
        try:
            return await _measure(node, index, str(uuid.uuid4()), corpus, queries, watch, info, args)
        finally:
            if not args.keep:
                await node.delete_index(index)


async def _reuse(node: Node, index: str, corpus: Corpus, info: dict[str, Any]) -> tuple[str, str, Corpus]:
    """An index an earlier (possibly interrupted) run of the same --n/--seed/--data loaded: documents
    d0..d(m-1) are the corpus' first m rows, which the bulk load writes in order."""
    await node.request("PUT", f"/{index}/_settings", {"index": {"refresh_interval": None}})
    await node.request("POST", f"/{index}/_refresh")
    loaded = (await index_stats(node, index))["docs"]
    last = await node.request(
        "GET", f"/{index}/_doc/d{loaded - 1}", params={"_source": "memory_container_id"}
    )
    gap = await node.request("GET", f"/{index}/_doc/d{loaded}", ok=(404,))
    if not last.get("found") or (gap or {}).get("found"):
        raise SystemExit(f"{index}: documents are not d0..d{loaded - 1}; cannot rebuild the oracle")
    info["reused_index"] = {"index": index, "loaded": loaded, "of": len(corpus.vectors)}
    return index, str(last["_source"]["memory_container_id"]), corpus.head(loaded)


async def _measure(
    node: Node,
    index: str,
    container_id: str,
    corpus: Corpus,
    queries: np.ndarray,
    watch: Stopwatch,
    info: dict[str, Any],
    args: argparse.Namespace,
    *,
    load_first: bool = True,
) -> dict[str, Any]:
    if load_first:
        await _load_and_refresh(node, index, container_id, corpus, watch, args)
    info["after_load"] = await index_stats(node, index)
    cases = filter_cases(corpus)
    if args.force_merge:
        with watch.phase("force-merge"):
            await force_merge(node, index, args.force_merge)
        info["after_merge"] = await index_stats(node, index)
    with watch.phase("oracle scores"):
        oracle_scores = cosine_scores(queries, corpus.vectors)
    del corpus
    await _warm_up(node, index, queries, container_id, args)
    results = []
    with watch.phase("queries"):
        for case in tqdm(cases, desc="filters"):
            results.append(await run_case(node, index, case, queries, oracle_scores, args, container_id))
    sweep = await _ef_sweep(node, index, cases, queries, oracle_scores, args, container_id, watch)
    return _report(results, sweep, watch, info, args, oracle_scores.shape[1])


async def _ef_sweep(
    node: Node,
    index: str,
    cases: list[FilterCase],
    queries: np.ndarray,
    oracle_scores: np.ndarray,
    args: argparse.Namespace,
    container_id: str,
    watch: Stopwatch,
) -> list[dict[str, Any]]:
    """Recall and latency of the broad filters at each ``method_parameters.ef_search`` of ``--ef-sweep``."""
    rows: list[dict[str, Any]] = []
    broad = [
        c for c in cases if c.container and (c.rows is None or c.matching >= len(oracle_scores[0]) // 10)
    ]
    with watch.phase("ef sweep"):
        for ef in args.ef_sweep:
            swept = argparse.Namespace(**{**vars(args), "ef_search": ef})
            for case in broad:
                res = await run_case(node, index, case, queries, oracle_scores, swept, container_id)
                rows.append({"ef_search": ef, **res.row(args.k), "latencies_s": res.latencies})
    return rows


async def _load_and_refresh(
    node: Node, index: str, container_id: str, corpus: Corpus, watch: Stopwatch, args: argparse.Namespace
) -> None:
    await node.request("PUT", f"/{index}/_settings", {"index": {"refresh_interval": "-1"}})
    with watch.phase("bulk load"):
        await load(node, index, corpus, container_id, args)
    with watch.phase("refresh"):
        await node.request("PUT", f"/{index}/_settings", {"index": {"refresh_interval": None}})
        await node.request("POST", f"/{index}/_refresh")


async def _warm_up(
    node: Node, index: str, queries: np.ndarray, container_id: str, args: argparse.Namespace
) -> None:
    case = FilterCase("warm-up", (), None, container=False)
    for q in tqdm(queries, desc="warm-up (page the graphs and vectors in)", leave=False):
        await node.request(
            "POST", f"/{index}/_search", knn_body(vector_json(q), args.k, container_id, case, None)
        )


def _report(
    results: Sequence[CaseResult],
    sweep: list[dict[str, Any]],
    watch: Stopwatch,
    info: dict[str, Any],
    args: argparse.Namespace,
    n: int,
) -> dict[str, Any]:
    rows = [r.row(args.k) for r in results]
    filtered = [r for r in results if r.case.container]
    summary = {
        "n": n,
        "filtered_recall_mean": float(np.mean([np.mean(r.recalls) for r in filtered])),
        "filtered_recall_min_case": float(min(np.mean(r.recalls) for r in filtered)),
        "count_rule_ok": int(sum(sum(r.count_ok) for r in results)),
        "count_rule_checked": int(sum(len(r.count_ok) for r in results)),
        "ingest_docs_per_s": n / watch.phases["bulk load"] if "bulk load" in watch.phases else None,
    }
    print(
        f"\nscale: n={n:,} data={args.data} dim={DIM} k={args.k} queries/filter={args.queries}"
        f" OpenSearch {info['opensearch']} heap={info['heap_max_bytes'] / 2**30:.1f} GiB"
    )
    print(format_table([{"phase": k, "seconds": v} for k, v in watch.phases.items()]))
    print(
        f"ingest: {summary['ingest_docs_per_s'] or 0:,.0f} docs/s; index after load: {info['after_load']}"
        + (f"; after merge: {info['after_merge']}" if "after_merge" in info else "")
    )
    print(format_table(rows))
    if sweep:
        print("recall vs method_parameters.ef_search (broad filters):")
        print(format_table([{k: v for k, v in r.items() if k != "latencies_s"} for r in sweep]))
    print(json.dumps(summary))
    return {
        "params": {**vars(args), "default_ef_search": DEFAULT_EF_SEARCH},
        "machine": machine_info(),
        "node": info,
        "phases_s": watch.phases,
        "summary": summary,
        "ef_sweep": sweep,
        "cases": [
            {**row, "latencies_s": r.latencies, "took_ms": r.took_ms, "recalls": r.recalls, "hits": r.hits}
            for row, r in zip(rows, results, strict=True)
        ],
    }


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--url", default=DEFAULT_OPENSEARCH_URL, help="OpenSearch node (default $OPENSEARCH_URL or :9250)"
    )
    p.add_argument("--n", type=int, default=100_000, help="memories in the container")
    p.add_argument("--queries", type=int, default=200, help="queries per filter case")
    p.add_argument("--k", type=int, default=10)
    p.add_argument(
        "--data",
        choices=("random", "lowrank"),
        default="random",
        help="random unit vectors (worst case) or embedding-like low-rank vectors",
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--batch", type=int, default=500, help="documents per _bulk request")
    p.add_argument("--clients", type=int, default=2, help="concurrent _bulk requests")
    p.add_argument(
        "--ef-search", type=int, default=None, help="send method_parameters.ef_search (default: none)"
    )
    p.add_argument(
        "--force-merge", type=int, default=0, metavar="SEGMENTS", help="force-merge before querying"
    )
    p.add_argument(
        "--ef-sweep",
        type=_ints,
        default=[],
        metavar="EF,EF,...",
        help="also run the broad filters at each method_parameters.ef_search (recall vs ef)",
    )
    p.add_argument(
        "--index",
        default=None,
        help="measure an index an earlier run of the same --n/--seed/--data loaded (kept or cut short)",
    )
    p.add_argument("--keep", action="store_true", help="keep the index afterwards")
    p.add_argument("--quick", action="store_true", help="smoke run: 10 k memories, 50 queries")
    p.add_argument("--tag", default="", help="suffix of the results file name (scale<tag>.json)")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.queries = min(args.n, 10_000), min(args.queries, 50)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    data = asyncio.run(run(args))
    path = write_results(results_name("scale", args.tag, args.quick), data)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
