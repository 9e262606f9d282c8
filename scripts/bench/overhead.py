"""Retrieval overhead: memproxy's two search APIs versus the embedder alone plus a direct k-NN query.

One run, one machine, the same query texts for every variant, interleaved in rounds (so drift and other
load on the machine hit every variant alike), at concurrency 1, 8 and 32:

- ``opensearch_api``: ``POST …/memories/long-term/_semantic_search`` through memproxy (text in, hits out);
- ``goodmem_api``: ``POST /v1/memories:retrieve`` through memproxy (NDJSON, ``fetchMemory: false``);
- ``baseline``: memproxy's embedding engine in this process (same model, same settings) embeds the text,
  then the request memproxy's compiler builds goes straight to OpenSearch: the strongest baseline;
- ``embed_only`` and ``knn_only`` (precomputed vector): the baseline's two parts;
- ``doc_get`` (a realtime GET of one stored memory, the size of the container document every API request
  reads first) and ``doc_get_via_proxy`` (the same read through memproxy's pass-through, as an admin): where
  the overhead goes. (memproxy's own indices, the container index among them, are never reachable through
  pass-through, so the hop is measured on a memory document.)

The proxy is started here (``python -m proxy``) against the node, with a container it creates and fills.

    .venv/bin/python -m scripts.bench.overhead            # 2 000 memories, 300 requests per variant and level
    .venv/bin/python -m scripts.bench.overhead --quick    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from proxy.store.query import Term
from proxy.store.query_dsl import compile_filter, vector_search_body
from scripts.bench.common import (
    DEFAULT_OPENSEARCH_URL,
    Node,
    Proxy,
    add_embed_options,
    add_load_option,
    competing_load,
    delete_indices,
    embed_args,
    embed_settings,
    format_table,
    goodmem_key,
    latency_summary,
    machine_info,
    results_name,
    run_concurrent,
    start_embedders,
    start_proxy,
    synthetic_texts,
    write_results,
)

VARIANTS = (
    "opensearch_api",
    "goodmem_api",
    "baseline",
    "embed_only",
    "knn_only",
    "doc_get",
    "doc_get_via_proxy",
)
FIELD = "memory_embedding"
EXCLUDES = [FIELD, "metadata_index"]  # what memproxy's semantic search leaves out of _source


# With --compare-tree: the two API calls once more, through a proxy running that checkout's code.
BEFORE_VARIANTS = ("opensearch_api_before", "goodmem_api_before")


@dataclass
class World:
    proxy: Proxy
    node: Node
    embedder: Any
    container_id: str
    index: str
    queries: list[str]
    vectors: list[list[float]]  # the queries' embeddings, for knn_only
    k: int
    before: Proxy | None = None  # the --compare-tree proxy
    sample_id: str = ""  # one stored memory (doc_get)
    variants: tuple[str, ...] = VARIANTS

    def knn_body(self, vector: list[float]) -> dict[str, Any]:
        return vector_search_body(
            field=FIELD,
            vector=vector,
            k=self.k,
            filter_dsl=compile_filter(Term("memory_container_id", self.container_id)),
            source_excludes=EXCLUDES,
        )


Call = Callable[[], Awaitable[int]]


def make_call(world: World, variant: str, qi: int) -> Call:
    """One request of ``variant`` for query ``qi``; it returns the number of hits."""
    text, k = world.queries[qi], world.k
    lt = f"/_plugins/_ml/memory_containers/{world.container_id}/memories/long-term"

    async def opensearch_api(proxy: Proxy = world.proxy) -> int:
        answer = await proxy.json("POST", lt + "/_semantic_search", {"query": text, "k": k})
        return len(answer["hits"]["hits"])

    async def goodmem_api(proxy: Proxy = world.proxy) -> int:
        body = {
            "message": text,
            "spaceKeys": [{"spaceId": world.container_id}],
            "requestedSize": k,
            "fetchMemory": False,
        }
        events = await proxy.ndjson("/v1/memories:retrieve", body)
        return sum(1 for e in events if "retrievedItem" in e)

    async def embed_only() -> int:
        return len(await world.embedder.embed([text]))

    async def knn(vector: list[float]) -> int:
        answer = await world.node.request("POST", f"/{world.index}/_search", world.knn_body(vector))
        return len(answer["hits"]["hits"])

    async def baseline() -> int:
        vector = (await world.embedder.embed([text]))[0]
        return await knn([float(x) for x in vector])

    async def knn_only() -> int:
        return await knn(world.vectors[qi])

    async def doc_get() -> int:  # a read of the size of the container read each API request makes first
        found = await world.node.request("GET", f"/{world.index}/_doc/{world.sample_id}")
        return k if found["found"] else 0

    async def doc_get_via_proxy() -> int:  # the same read through the proxy's pass-through: its hop
        found = await world.proxy.json("GET", f"/{world.index}/_doc/{world.sample_id}")
        return k if found["found"] else 0

    calls: dict[str, Call] = {
        "opensearch_api": opensearch_api,
        "goodmem_api": goodmem_api,
        "baseline": baseline,
        "embed_only": embed_only,
        "knn_only": knn_only,
        "doc_get": doc_get,
        "doc_get_via_proxy": doc_get_via_proxy,
    }
    if world.before is not None:
        before = world.before
        calls["opensearch_api_before"] = lambda: opensearch_api(before)
        calls["goodmem_api_before"] = lambda: goodmem_api(before)
    return calls[variant]


@dataclass
class Series:
    latencies: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    short_answers: int = 0


async def measure(world: World, args: argparse.Namespace) -> dict[int, dict[str, Series]]:
    """Rounds of every variant in rotating order at each concurrency; the same query texts for all."""
    out: dict[int, dict[str, Series]] = {}
    per_round = max(1, args.requests // args.rounds)
    for concurrency in args.concurrency:
        variants = world.variants
        series = {v: Series() for v in variants}
        bar = tqdm(total=args.rounds * len(variants), desc=f"concurrency {concurrency}")
        for r in range(args.rounds):
            offset = r * per_round
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for variant in order:
                calls = [
                    make_call(world, variant, (offset + j) % len(world.queries)) for j in range(per_round)
                ]
                lat, wall, hits = await run_concurrent(calls, concurrency)
                s = series[variant]
                s.latencies += lat
                s.wall_s += wall
                s.short_answers += sum(1 for h in hits if variant != "embed_only" and h != world.k)
                bar.update(1)
        bar.close()
        out[concurrency] = series
    return out


async def warm_up(world: World, n: int) -> None:
    for variant in tqdm(world.variants, desc="warm-up"):
        await run_concurrent([make_call(world, variant, i % len(world.queries)) for i in range(n)], 4)


async def fill(world: World, memories: int, batch: int) -> None:
    texts = synthetic_texts(memories, seed=11)
    path = f"/_plugins/_ml/memory_containers/{world.container_id}/memories/long-term/_memproxy_bulk"
    for start in tqdm(range(0, memories, batch), desc="fill container", unit="batch"):
        items = [
            {"memory": t, "strategy_type": "SEMANTIC", "namespace": {"user_id": f"u{i % 10}"}}
            for i, t in enumerate(texts[start : start + batch], start)
        ]
        await world.proxy.json("POST", path, {"memories": items})


def _ratio(concurrency: int, label: str, s: Series, base: Series, target: bool = False) -> dict[str, Any]:
    """``s`` against ``base``; ``target``: the overhead goal (p50 within 5 % and under 1 ms of ``base``)."""
    lat, ref = latency_summary(s.latencies), latency_summary(base.latencies)
    row: dict[str, Any] = {
        "concurrency": concurrency,
        "api": label,
        "p50 ratio": lat["p50_ms"] / ref["p50_ms"],
        "p99 ratio": lat["p99_ms"] / ref["p99_ms"],
        "p50 delta ms": lat["p50_ms"] - ref["p50_ms"],
        "p99 delta ms": lat["p99_ms"] - ref["p99_ms"],
        "throughput ratio": (len(s.latencies) / s.wall_s) / (len(base.latencies) / base.wall_s),
    }
    if target:
        row["target met"] = lat["p50_ms"] <= 1.05 * ref["p50_ms"] and lat["p50_ms"] - ref["p50_ms"] < 1.0
    return row


def report(results: dict[int, dict[str, Series]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, ratios = [], []
    for concurrency, series in results.items():
        for variant, s in series.items():
            lat = latency_summary(s.latencies)
            rows.append(
                {
                    "concurrency": concurrency,
                    "variant": variant,
                    "n": lat["n"],
                    "p50 ms": lat["p50_ms"],
                    "p90 ms": lat["p90_ms"],
                    "p99 ms": lat["p99_ms"],
                    "mean ms": lat["mean_ms"],
                    "req/s": lat["n"] / s.wall_s if s.wall_s else 0.0,
                    "short answers": s.short_answers,
                }
            )
        for api in ("opensearch_api", "goodmem_api"):
            ratios.append(_ratio(concurrency, api, series[api], series["baseline"], target=True))
            if f"{api}_before" in series:  # this checkout's code ÷ the --compare-tree code, same run
                ratios.append(
                    _ratio(concurrency, f"{api} now / before", series[api], series[f"{api}_before"])
                )
    return rows, ratios


async def setup_and_run(args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"bench-overhead-{uuid.uuid4().hex[:8]}"
    proxy_process = start_proxy(args.url, embed_args(args))
    before_process = start_proxy(args.url, embed_args(args), args.compare_tree) if args.compare_tree else None
    proxy, embedders = Proxy(proxy_process.url), None
    before = Proxy(before_process.url) if before_process else None
    try:
        async with Node(args.url) as node:
            embedders = await start_embedders(embed_settings(args))
            info = embedders.infos()[0]
            proxy.auth_headers = {"x-api-key": await goodmem_key(proxy.url, args.url)}
            container_id = await proxy.create_container(prefix, info.id, info.dimension)
            try:
                world = World(
                    proxy,
                    node,
                    embedders.get(info.id),
                    container_id,
                    f"{prefix}-memory-long-term",
                    synthetic_texts(args.queries, seed=23),
                    [],
                    args.k,
                    before=before,
                    variants=VARIANTS + (BEFORE_VARIANTS if before else ()),
                )
                if before is not None:
                    before.auth_headers = proxy.auth_headers
                await fill(world, args.memories, args.batch)
                sample = await node.request("POST", f"/{world.index}/_search", {"size": 1, "_source": False})
                world.sample_id = sample["hits"]["hits"][0]["_id"]
                world.vectors = [[float(x) for x in v] for v in await world.embedder.embed(world.queries)]
                await warm_up(world, args.warm_up)
                results = await measure(world, args)
            finally:
                await proxy.delete_container(container_id)
                await delete_indices(node, f"{prefix}-*")
            opensearch = await node.version()
    finally:
        await proxy.close()
        if before is not None:
            await before.close()
            before_process.stop()
        if embedders is not None:
            await embedders.close()
        proxy_process.stop()
    rows, ratios = report(results)
    print(
        f"\noverhead: {args.memories} memories, k={args.k}, {args.requests} requests per variant and level, "
        f"OpenSearch {opensearch}, embedder {info.name} on {info.device}/{info.dtype}"
    )
    print(format_table(rows))
    print(format_table(ratios))
    return {
        "params": vars(args),
        "machine": machine_info(),
        "embedder": {"id": info.id, "name": info.name, "device": info.device, "dtype": info.dtype},
        "rows": rows,
        "ratios": ratios,
        "latencies_s": {str(c): {v: s.latencies for v, s in series.items()} for c, series in results.items()},
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=DEFAULT_OPENSEARCH_URL, help="OpenSearch node (default $OPENSEARCH_URL)")
    p.add_argument("--memories", type=int, default=2000, help="memories in the container")
    p.add_argument("--batch", type=int, default=250, help="memories per _memproxy_bulk request while filling")
    p.add_argument("--queries", type=int, default=200, help="distinct query texts")
    p.add_argument("--requests", type=int, default=300, help="requests per variant and concurrency level")
    p.add_argument("--rounds", type=int, default=6, help="interleaved rounds the requests are split into")
    p.add_argument("--concurrency", type=lambda t: [int(x) for x in t.split(",")], default=[1, 8, 32])
    p.add_argument("--warm-up", type=int, default=20, help="requests per variant before measuring")
    p.add_argument("--k", type=int, default=10)
    add_embed_options(p)
    add_load_option(p)
    p.add_argument("--tag", default="", help="suffix of the results file name (overhead<tag>.json)")
    p.add_argument(
        "--compare-tree",
        default="",
        help="a checkout of another commit (git worktree add DIR COMMIT): its proxy answers the two API "
        "variants too, in the same rounds, and the report adds now ÷ before ratios",
    )
    p.add_argument("--quick", action="store_true", help="smoke run: 300 memories, 30 requests")
    args = p.parse_args(argv)
    if args.quick:
        args.memories, args.requests, args.rounds, args.warm_up = 300, 30, 2, 4
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with competing_load(args.competing_load):
        data = asyncio.run(setup_and_run(args))
    data["competing_load"] = args.competing_load
    print(f"wrote {write_results(results_name('overhead', args.tag, args.quick), data)}")


if __name__ == "__main__":
    main()
