"""Tenant scale: N memories in K containers of skewed sizes, all in one shared long-term index; does a
container's search cost follow the container or the cluster?

- K containers are created through memproxy's ml-commons API, all with one ``index_prefix`` (one shared
  long-term index, memproxy's own layout); a container is a GoodMem space too. Their sizes follow a seeded
  Zipf law between ``--min-size`` and ``--max-size`` summing to exactly N (``tenants_data.container_sizes``).
- The memories are written directly with ``_bulk`` (the documents memproxy writes, seeded embedding-like
  384-d vectors, ``routing`` by container when the index layout routes), the tenants' rows interleaved in a
  seeded random order, refresh off during the load: ingest rate, disk, vector files and heap per million.
- For the smallest, the median and the largest container, a reference container with its own prefix gets
  the same memories: an index holding only that container ("alone"). ``_semantic_search`` and GoodMem
  retrieve are timed through memproxy at each ``--concurrency``, shared and alone interleaved round by round;
  the report prints p50/p99 and the ratio shared / alone (the issue's target: semantic p50 <= 1.2 x).
- Correctness of those answers: recall@k against the exact top k of the container's vectors for the query's
  real embedding, the count rule, and no hit from another container.
- The node's recall@k for embedding-like query vectors (memproxy's query shape sent directly) on a sample
  of containers, in the shared index and in a quantized copy (``--quantized``: lucene ``sq`` encoder),
  with both copies' disk and vector-file sizes.

    .venv/bin/python -m scripts.bench.tenants --quick        # 20 k memories in 1 000 containers (smoke)
    .venv/bin/python -m scripts.bench.tenants --n 200000 --containers 10000 --max-size 20000 --tag=-200k
    .venv/bin/python -m scripts.bench.tenants                # the full run: 2 M in 10 000, 10..100 000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from functools import partial
from typing import Any

from proxy.store.containers import CONTAINER_INDEX
from proxy.store.layout import routed_by_layout
from scripts.bench.common import (
    DEFAULT_OPENSEARCH_URL,
    Node,
    Proxy,
    Stopwatch,
    bulk_lines,
    delete_indices,
    goodmem_key,
    make_vectors,
    results_name,
    run_concurrent,
    start_proxy,
    synthetic_texts,
    write_results,
)
from scripts.bench.mlcommons import embed_queries
from scripts.bench.tenants_data import (
    DIM,
    QUANTIZED,
    Tenancy,
    bulk_load,
    clone_quantized,
    footprint,
    heap_used_bytes,
)
from scripts.bench.tenants_measure import (
    Target,
    api_call,
    check_answers,
    latency,
    node_recall,
    recall_sample,
    warm_up,
)
from scripts.bench.tenants_report import report


def long_term(prefix: str) -> str:
    return f"{prefix}-memory-long-term"


async def routed_layout(node: Node, index: str) -> bool:
    """Whether memproxy routes this index's documents by container (``proxy.store.layout``: its layout
    marker, or one primary): the load then writes with ``routing``, and the node recall searches with it."""
    return routed_by_layout((await node.request("GET", f"/{index}"))[index])


async def create_containers(
    proxy: Proxy,
    node: Node,
    prefix: str,
    embedder: dict[str, Any],
    tenancy: Tenancy,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The containers, on one prefix: the first alone (it creates the shared indices), then the named
    ones and the first ``--api-creates`` through memproxy's API, ``--create-clients`` at a time; the rest
    are copies of the first one's stored document (new id and name) written with ``_bulk``.

    Why copies: a create through the API checks and creates four shared indices, extends the long-term
    mapping and refreshes the container index, and the index creations are cluster-manager tasks that run
    one at a time: 3 creates/s here under load, about an hour for 10 000. What the search path reads of a
    container is its stored document, and a copy is byte for byte the document memproxy stored.
    """
    count = len(tenancy.sizes)
    by_api = sorted({0, *range(min(args.api_creates, count)), *tenancy.classes().values()})

    def create(j: int) -> Any:
        return lambda: proxy.create_container(prefix, embedder["id"], embedder["dimension"], f"tenant {j}")

    ids = [""] * count
    ids[0] = await create(0)()
    start = time.perf_counter()
    _, _, rest = await run_concurrent([create(j) for j in by_api[1:]], args.create_clients, "create")
    api_s = time.perf_counter() - start
    for j, cid in zip(by_api[1:], rest, strict=True):
        ids[j] = cid
    first = await node.request("GET", f"/{CONTAINER_INDEX}/_doc/{ids[0]}")
    copies = [j for j in range(count) if not ids[j]]
    now = int(time.time() * 1000)
    for lo in range(0, len(copies), 1000):
        docs = []
        for j in copies[lo : lo + 1000]:
            ids[j] = str(uuid.uuid4())
            source = {
                **first["_source"],
                "name": f"tenant {j}",
                "created_time": now,
                "last_updated_time": now,
            }
            docs.append((ids[j], source))
        await node.bulk(bulk_lines(CONTAINER_INDEX, docs))
    await node.request("POST", f"/{CONTAINER_INDEX}/_refresh")
    tenancy.ids = ids
    return {
        "via_api": len(by_api),
        "api_creates_per_s": (len(by_api) - 1) / api_s if api_s else None,
        "copied": len(copies),
        "sample_ids": [ids[0], *(ids[j] for j in copies[:1])],
        "copied_ids": [ids[j] for j in copies],
        "api_ids": [ids[j] for j in by_api],
    }


async def delete_containers(
    proxy: Proxy, node: Node, api_ids: Sequence[str], copied_ids: Sequence[str], clients: int
) -> None:
    """Through the API what was created through it; the copies as they were written, by id."""
    calls = [lambda cid=cid: proxy.delete_container(cid) for cid in api_ids]
    await run_concurrent(calls, clients, "delete containers")
    for lo in range(0, len(copied_ids), 1000):
        lines = [
            json.dumps({"delete": {"_index": CONTAINER_INDEX, "_id": cid}})
            for cid in copied_ids[lo : lo + 1000]
        ]
        await node.bulk(("\n".join(lines) + "\n").encode())
    if copied_ids:
        await node.request("POST", f"/{CONTAINER_INDEX}/_refresh")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    watch = Stopwatch()
    with watch.phase("generate vectors"):
        tenancy = Tenancy.make(args.n, args.containers, args.min_size, args.max_size, args.seed)
    prefix = f"bench-tenants-{uuid.uuid4().hex[:8]}"
    # One benchmark caller stands in for every tenant's clients: its retrieves must not hit the per-caller
    # cap (--retrieve-max-per-caller, 8 by default: 429 at 32 clients).
    flags = ["--retrieve-max-per-caller", str(max(8, *args.concurrency)), *args.proxy_arg]
    process = None if args.proxy_url else start_proxy(args.url, flags)
    proxy = Proxy(args.proxy_url if process is None else process.url)
    created: dict[str, list[str]] = {"api_ids": [], "copied_ids": []}
    try:
        async with Node(args.url) as node:
            proxy.auth_headers = {"x-api-key": args.api_key or await goodmem_key(proxy.url, args.url)}
            try:
                return await _measure(node, proxy, tenancy, prefix, created, watch, args)
            finally:
                if not args.keep:
                    await delete_indices(node, f"{prefix}-*")
                    await delete_containers(proxy, node, **created, clients=args.create_clients)
    finally:
        await proxy.close()
        if process is not None:
            process.stop()


async def _measure(
    node: Node,
    proxy: Proxy,
    tenancy: Tenancy,
    prefix: str,
    created: dict[str, list[str]],
    watch: Stopwatch,
    args: argparse.Namespace,
) -> dict[str, Any]:
    embedder = await proxy.default_embedder()
    tenancy.owner_id = str((await proxy.json("GET", "/v1/users/me"))["userId"])
    stats = await node.request("GET", "/_nodes/stats/jvm")
    info: dict[str, Any] = {
        "opensearch": await node.version(),
        "nodes": len(stats["nodes"]),
        "heap_max_bytes": await node.heap_max_bytes(),
        "heap_used_before_bytes": await heap_used_bytes(node),
        "embedder": embedder,
        "prefix": prefix,
    }
    with watch.phase("create containers"):
        made = await create_containers(proxy, node, prefix, embedder, tenancy, args)
    for key in created:
        created[key] += made.pop(key)
    info["containers"] = made
    index = long_term(prefix)
    routed = info["routed"] = await routed_layout(node, index)
    load = {"routed": routed, "batch": args.batch, "clients": args.clients}
    owners = [tenancy.ids[j] for j in tenancy.owner(tenancy.write_order).tolist()]
    with watch.phase("bulk load (shared)"):
        info["ingest_s"] = await bulk_load(
            node, index, tenancy, tenancy.write_order, owners, desc="bulk load", **load
        )
    info["shared"] = await footprint(node, index)
    info["heap_used_after_bytes"] = await heap_used_bytes(node)

    classes: dict[str, dict[str, Target]] = {}
    with watch.phase("reference containers (alone)"):
        for cls, j in tenancy.classes().items():
            alone = f"{prefix}-alone-{cls}"
            cid = await proxy.create_container(alone, embedder["id"], embedder["dimension"], f"alone {cls}")
            created["api_ids"].append(cid)
            rows = tenancy.rows(j)
            await bulk_load(node, long_term(alone), tenancy, rows, [cid] * len(rows), desc=cls, **load)
            classes[cls] = {
                "shared": Target("shared", tenancy.ids[j], index, rows),
                "alone": Target("alone", cid, long_term(alone), rows),
            }
    quantized = {}
    for variant in args.quantized:
        copy = f"{prefix}-quantized-{variant}"
        await clone_quantized(node, index, copy, variant)
        with watch.phase(f"bulk load ({variant})"):
            seconds = await bulk_load(node, copy, tenancy, tenancy.write_order, owners, desc=variant, **load)
        quantized[variant] = {"index": copy, "ingest_s": seconds, **await footprint(node, copy)}
    info["quantized"] = quantized

    texts = [t.rsplit(" (note", 1)[0] for t in synthetic_texts(args.queries, seed=args.seed + 11)]
    qvecs = await embed_queries(proxy, embedder["id"], texts)
    with watch.phase("warm-up"):
        for targets in classes.values():
            for target in targets.values():
                for api in ("semantic_search", "goodmem_retrieve"):
                    await warm_up(api_call(proxy, api, target, texts[0], args.k))
                    calls = [api_call(proxy, api, target, t, args.k) for t in texts[: args.warm_up]]
                    await run_concurrent([partial(warm_up, c) for c in calls], 4)
    with watch.phase("latency"):
        series = await latency(proxy, classes, texts, args)
    with watch.phase("answer checks"):
        answers = await check_answers(proxy, classes, tenancy, texts, qvecs, args.k)
    rq = make_vectors("lowrank", args.recall_queries, DIM, args.seed + 7)
    sample = recall_sample(tenancy, args.recall_containers, args.seed, args.k)
    with watch.phase("node recall"):
        recalls = {"float32": await node_recall(node, index, tenancy, sample, rq, args.k, routed)}
        for variant, q in quantized.items():
            recalls[variant] = await node_recall(node, q["index"], tenancy, sample, rq, args.k, routed)
    return report(tenancy, info, watch, series, answers, recalls, args)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=DEFAULT_OPENSEARCH_URL, help="OpenSearch (default $OPENSEARCH_URL)")
    p.add_argument("--proxy-url", default="", help="a running memproxy on --url (default: start one)")
    p.add_argument("--api-key", default="", help="its GoodMem root key (default: init or mint one)")
    p.add_argument(
        "--proxy-arg",
        action="append",
        default=[],
        help="a flag for the memproxy started here, repeatable: --proxy-arg=--memory-shards --proxy-arg=3",
    )
    p.add_argument("--n", type=int, default=2_000_000, help="memories in all")
    p.add_argument("--containers", type=int, default=10_000)
    p.add_argument("--min-size", type=int, default=10, help="memories in the smallest container")
    p.add_argument("--max-size", type=int, default=100_000, help="memories in the largest container")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--batch", type=int, default=1000, help="documents per _bulk request")
    p.add_argument("--clients", type=int, default=2, help="concurrent _bulk requests")
    p.add_argument("--create-clients", type=int, default=8, help="concurrent container creates/deletes")
    p.add_argument(
        "--api-creates",
        type=int,
        default=200,
        help="containers created through the API (the named ones too); the rest are copies of the first's "
        "stored document (see create_containers)",
    )
    p.add_argument("--queries", type=int, default=100, help="distinct query texts")
    p.add_argument("--requests", type=int, default=200, help="requests per (class, level, api, target)")
    p.add_argument("--rounds", type=int, default=4, help="interleaved rounds the requests are split into")
    p.add_argument("--concurrency", type=_ints, default=[1, 8, 32])
    p.add_argument("--warm-up", type=int, default=20, help="requests per (class, api, target) first")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--recall-containers", type=int, default=40, help="sampled containers for node recall")
    p.add_argument("--recall-queries", type=int, default=50, help="query vectors per sampled container")
    p.add_argument(
        "--quantized",
        type=lambda t: [v for v in t.split(",") if v and v != "none"],
        default=["sq7"],
        help=f"quantized copies to measure, of {','.join(QUANTIZED)} (or none); default sq7",
    )
    p.add_argument("--keep", action="store_true", help="leave indices and containers (a throwaway node)")
    p.add_argument("--quick", action="store_true", help="smoke run: 20 k memories in 1 000 containers")
    p.add_argument("--tag", default="", help="suffix of the results file name (tenants<tag>.json)")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.containers, args.max_size = min(args.n, 20_000), min(args.containers, 1000), 2000
        args.requests, args.rounds, args.queries, args.warm_up = 40, 2, 40, 5
        args.recall_containers, args.recall_queries, args.api_creates = 10, 20, 50
    unknown = set(args.quantized) - set(QUANTIZED)
    if unknown:
        p.error(f"--quantized: unknown {sorted(unknown)} (choose from {sorted(QUANTIZED)})")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    data = asyncio.run(run(args))
    print(json.dumps(data["summary"]))
    print(f"wrote {write_results(results_name('tenants', args.tag, args.quick), data)}")
    return data


if __name__ == "__main__":
    main()
