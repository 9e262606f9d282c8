"""Side by side with the real ml-commons 3.6: the same memories and queries through memproxy and through the
plugin itself, in one run, interleaved in rounds, reported as ratios memproxy ÷ ml-commons.

- memproxy: started here (``python -m proxy``) against ``--url`` (a node with only the k-NN plugin);
- ml-commons: the reference node (``--reference-url``, ``scripts/opensearch-reference start``: OpenSearch 3.6
  with ml-commons and neural-search 3.6). Its embedding model is a remote model whose connector points at this
  memproxy's OpenAI endpoint (``/openai/v1/embeddings``), so both sides embed with the very same
  all-MiniLM-L6-v2 in the very same process; the reference reaches it over HTTP. Its LLM is a connector to
  a dead loopback port: a container with strategies needs one, and nothing here calls it.

Both sides get a container with ``use_system_index: false``, the same ``index_prefix`` (each on its own
node) and a SEMANTIC strategy over ``user_id``, then the same generated memories (``synthetic_texts``) in
namespaces of mixed sizes: a few users with many memories, many users with few. Measured:

1. ingest (memories/s) of the same batches: memproxy ``_memproxy_bulk`` (it embeds, then one ``_bulk`` with
   ``refresh=true``) against ``_bulk`` into the reference's long-term index, whose default ingest pipeline
   embeds every document by calling memproxy's OpenAI endpoint (``refresh=true`` too); each side refreshes
   its index at the end of its turn;
2. ``_semantic_search`` latency at concurrency 1 and 8, namespace-filtered, k=10: per round and pooled;
3. recall@10 of every query against a numpy brute-force oracle over that side's stored vectors of the
   memories in the query's namespace (exact cosine, the filter applied exactly);
4. the mean number of hits for k=10: ml-commons post-filters the top k of the whole index, memproxy filters
   inside the knn query, so the answers differ in size where a namespace is small.

    .venv/bin/python -m scripts.bench.mlcommons --embed-threads 1          # 2 000 memories, ~2 min here
    .venv/bin/python -m scripts.bench.mlcommons --quick                    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from opensearchpy import OpenSearch
from tqdm import tqdm

from scripts.bench.common import (
    DEFAULT_OPENSEARCH_URL,
    Node,
    Proxy,
    add_embed_options,
    add_load_option,
    competing_load,
    delete_indices,
    embed_args,
    exact_top_k,
    format_table,
    latency_summary,
    machine_info,
    normalized,
    recall,
    results_name,
    run_concurrent,
    start_proxy,
    synthetic_texts,
    write_results,
)

MC = "/_plugins/_ml/memory_containers"
ML = "/_plugins/_ml"
FIELD = "memory_embedding"
SIDES = ("memproxy", "ml-commons")
CLASSES = ("large", "medium", "small")
DEFAULT_REFERENCE_URL = "http://127.0.0.1:9270"


# --------------------------------------------------------------------------------------------- the data


@dataclass
class Corpus:
    texts: list[str]
    users: list[str]  # the namespace user_id of each memory
    user_class: dict[str, str]  # user -> size class
    queries: list[tuple[str, str]]  # (text, user) pairs

    def rows_of(self, user: str) -> np.ndarray:
        return np.array([i for i, u in enumerate(self.users) if u == user], dtype=np.int64)


SMALL_SIZES = (1, 2, 3, 5, 8, 12)  # memories per "small" user, cycled


def make_corpus(n: int, n_queries: int, seed: int) -> Corpus:
    """``n`` memories: 3 large users (25 %, 12 %, 6 % of the memories), 8 medium ones (1.5 % each) and the
    rest in small users of 1-12 memories; users drawn at random over the texts. Queries: new sentences of the
    same kind, each for one user, the classes in turn (a random user of the class)."""
    rng = np.random.default_rng(seed)
    sizes: list[tuple[str, str, int]] = [
        (f"big{i}", "large", round(n * s)) for i, s in enumerate((0.25, 0.12, 0.06))
    ]
    sizes += [(f"mid{i}", "medium", round(n * 0.015)) for i in range(8)]
    left, i = n - sum(s for *_, s in sizes), 0
    while left > 0:
        size = min(SMALL_SIZES[i % len(SMALL_SIZES)], left)
        sizes.append((f"small{i}", "small", size))
        left, i = left - size, i + 1
    users = [u for u, _, size in sizes for _ in range(size)][:n]
    order = rng.permutation(n)
    by_memory = [""] * n
    for slot, memory in enumerate(order):
        by_memory[memory] = users[slot]
    user_class = {u: c for u, c, _ in sizes}
    members = {c: sorted({u for u, cc, s in sizes if cc == c and s > 0}) for c in CLASSES}
    query_texts = [t.rsplit(" (note", 1)[0] for t in synthetic_texts(n_queries, seed=seed + 1)]
    queries = []
    for q, text in enumerate(query_texts):
        pool = members[CLASSES[q % len(CLASSES)]] or members["large"]
        queries.append((text, str(rng.choice(pool))))
    return Corpus(synthetic_texts(n, seed=seed), by_memory, user_class, queries)


# --------------------------------------------------------------------------------------------- the sides


@dataclass
class Side:
    name: str
    api: Proxy  # where the ml-commons API is served (memproxy, or the reference node itself)
    node: Node  # the node that holds the side's index
    index: str
    container_id: str = ""
    ingest_took_ms: int = 0  # the reference's ingest pipeline time, summed over its _bulk answers

    @property
    def long_term(self) -> str:
        return f"{MC}/{self.container_id}/memories/long-term"


def _ndjson(lines: Sequence[Any]) -> bytes:
    return "".join(json.dumps(x) + "\n" for x in lines).encode()


def writer(side: Side, corpus: Corpus, rows: range, strategy_id: str) -> Callable[[], Awaitable[int]]:
    """One write request of ``side`` for the memories ``rows``; returns how many it wrote."""
    docs = [
        {
            "memory": corpus.texts[i],
            "namespace": {"user_id": corpus.users[i]},
            "namespace_size": 1,
            "strategy_type": "SEMANTIC",
            "strategy_id": strategy_id,
        }
        for i in rows
    ]

    async def memproxy() -> int:
        answer = await side.api.json("POST", side.long_term + "/_memproxy_bulk", {"memories": docs})
        return len(answer["long_term_memory_ids"])

    async def ml_commons() -> int:
        # What ml-commons' own extraction writes, straight into the long-term index; the index's default
        # pipeline embeds every document through the remote model, i.e. memproxy's OpenAI endpoint.
        now = int(time.time() * 1000)
        extra = {"memory_container_id": side.container_id, "created_time": now, "last_updated_time": now}
        lines: list[Any] = []
        for doc in docs:
            lines += [{"index": {}}, {**doc, **extra}]
        answer = await side.node.request(
            "POST", f"/{side.index}/_bulk", _ndjson(lines), params={"refresh": "true"}
        )
        if answer.get("errors"):
            first = next(i for i in answer["items"] if next(iter(i.values())).get("error"))
            raise RuntimeError(f"ml-commons bulk item failed: {first}")
        side.ingest_took_ms += int(answer.get("ingest_took", 0))
        return len(answer["items"])

    return memproxy if side.name == "memproxy" else ml_commons


def _query(corpus: Corpus, i: int) -> tuple[str, str]:
    """The i-th query (text, user), cycling."""
    text, user = corpus.queries[i % len(corpus.queries)]
    return text, user


def searcher(side: Side, text: str, user: str, k: int) -> Callable[[], Awaitable[list[str]]]:
    """One ``_semantic_search`` of ``side``; returns the texts of the hits, best first."""
    body = {"query": text, "k": k, "namespace": {"user_id": user}}

    async def call() -> list[str]:
        answer = await side.api.json("POST", side.long_term + "/_semantic_search", body)
        return [h["_source"]["memory"] for h in answer["hits"]["hits"]]

    return call


def _order(r: int) -> tuple[str, str]:
    """ABAB…: memproxy first in rounds 1, 3, 5… (r = 0, 2, 4…), ml-commons first in the others."""
    return SIDES if r % 2 == 0 else (SIDES[1], SIDES[0])


# --------------------------------------------------------------------------------------------- setup


def register_reference_models(reference_url: str, memproxy_url: str, tag: str) -> dict[str, Any]:
    """The embedding model (connector to memproxy's OpenAI endpoint) and an LLM nobody calls."""
    from tests.support.reference import embedding_connector, llm_connector, register_remote_model

    client = OpenSearch(hosts=[reference_url], timeout=120)
    try:
        emb, emb_calls = register_remote_model(
            client, f"memproxy-bench-embedder-{tag}", embedding_connector(memproxy_url)
        )
        llm, llm_calls = register_remote_model(
            client, f"memproxy-bench-llm-{tag}", llm_connector("http://127.0.0.1:9")
        )
    finally:
        client.close()
    return {
        "embedding_model_id": emb,
        "llm_id": llm,
        "connectors": [emb_calls["connector"]["connector_id"], llm_calls["connector"]["connector_id"]],
        "model_groups": [c["get"].get("model_group_id") for c in (emb_calls, llm_calls)],
    }


async def delete_reference_models(node: Node, models: dict[str, Any]) -> None:
    for model_id in (models.get("embedding_model_id"), models.get("llm_id")):
        if model_id:
            await node.request("POST", f"{ML}/models/{model_id}/_undeploy", ok=(200, 404))
            await node.request("DELETE", f"{ML}/models/{model_id}", ok=(200, 404))
    for connector_id in models.get("connectors", []):
        await node.request("DELETE", f"{ML}/connectors/{connector_id}", ok=(200, 404))
    for group_id in models.get("model_groups", []):
        if group_id:
            await node.request("DELETE", f"{ML}/model_groups/{group_id}", ok=(200, 404))


async def predict_calls(node: Node, model_id: str) -> int:
    """Predict calls the reference node made to ``model_id`` so far (``_plugins/_ml/stats``): for this remote
    model each is one HTTP request to memproxy's OpenAI endpoint."""
    stats = await node.request("GET", f"{ML}/stats")
    return sum(
        int(n.get("models", {}).get(model_id, {}).get("predict", {}).get("ml_action_request_count", 0))
        for n in stats["nodes"].values()
    )


async def delete_pipelines(node: Node, prefix: str) -> None:
    """The ingest pipelines ml-commons created for the container (deleting the container leaves them)."""
    pipelines = await node.request("GET", "/_ingest/pipeline", ok=(200, 404)) or {}
    for name in pipelines:
        if name.startswith(prefix):
            await node.request("DELETE", f"/_ingest/pipeline/{name}", ok=(200, 404))


async def create_container(side: Side, prefix: str, embedding: dict[str, Any], llm_id: str) -> str:
    body = {
        "name": prefix,
        "configuration": {
            **embedding,
            "llm_id": llm_id,
            "index_prefix": prefix,
            "use_system_index": False,
            "strategies": [{"type": "SEMANTIC", "namespace": ["user_id"]}],
        },
    }
    created = await side.api.json("POST", f"{MC}/_create", body)
    side.container_id = str(created["memory_container_id"])
    got = await side.api.json("GET", f"{MC}/{side.container_id}")
    return str(got["configuration"]["strategies"][0]["id"])


async def stored_vectors(side: Side, corpus: Corpus) -> np.ndarray:
    """The vectors the side's index holds, in corpus order (scrolled from ``_source``), unit length."""
    position = {t: i for i, t in enumerate(corpus.texts)}
    out = np.full((len(corpus.texts), 0), np.nan, dtype=np.float32)
    body = {"size": 1000, "_source": ["memory", FIELD], "query": {"match_all": {}}, "sort": ["_doc"]}
    page = await side.node.request("POST", f"/{side.index}/_search", body, params={"scroll": "1m"})
    seen = 0
    while page["hits"]["hits"]:
        for hit in page["hits"]["hits"]:
            vec = hit["_source"].get(FIELD)
            if vec is None:
                raise RuntimeError(f"{side.name}: {FIELD} is not in _source of {side.index}")
            if out.shape[1] == 0:
                out = np.full((len(corpus.texts), len(vec)), np.nan, dtype=np.float32)
            out[position[hit["_source"]["memory"]]] = vec
            seen += 1
        page = await side.node.request(
            "POST", "/_search/scroll", {"scroll": "1m", "scroll_id": page["_scroll_id"]}
        )
    await side.node.request("DELETE", "/_search/scroll", {"scroll_id": page["_scroll_id"]}, ok=(200, 404))
    if seen != len(corpus.texts) or np.isnan(out).any():
        raise RuntimeError(f"{side.name}: {seen} stored memories, expected {len(corpus.texts)}")
    return normalized(out)


async def embed_queries(proxy: Proxy, model: str, texts: Sequence[str]) -> np.ndarray:
    """The query vectors, one text per request as both sides' searches embed them."""
    out = []
    for text in texts:
        answer = await proxy.json("POST", "/openai/v1/embeddings", {"input": [text], "model": model})
        out.append(answer["data"][0]["embedding"])
    return normalized(np.asarray(out, dtype=np.float32))


# --------------------------------------------------------------------------------------------- measuring


@dataclass
class IngestTally:
    memories: int = 0
    seconds: float = 0.0
    rounds: list[float] = field(default_factory=list)  # memories/s per round
    pipeline_s: float | None = None  # the reference's ingest pipeline time (embedding), summed per request

    @property
    def rate(self) -> float:
        return self.memories / self.seconds if self.seconds else 0.0


async def ingest(
    sides: dict[str, Side], corpus: Corpus, strategy_ids: dict[str, str], args: argparse.Namespace
) -> dict[str, IngestTally]:
    """Round r: both sides write the same slice of the corpus, in batches of ``--batch`` with
    ``--clients`` requests in flight, then refresh; who goes first alternates."""
    tallies = {s: IngestTally() for s in SIDES}
    n = len(corpus.texts)
    bounds = np.linspace(0, n, args.ingest_rounds + 1).astype(int)
    for r in tqdm(range(args.ingest_rounds), desc="ingest rounds"):
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        for name in _order(r):
            side = sides[name]
            calls = [
                writer(side, corpus, range(s, min(s + args.batch, hi)), strategy_ids[name])
                for s in range(lo, hi, args.batch)
            ]
            start = time.perf_counter()
            _, _, written = await run_concurrent(calls, args.clients)
            await side.node.request("POST", f"/{side.index}/_refresh")
            elapsed = time.perf_counter() - start
            t = tallies[name]
            t.memories, t.seconds = t.memories + sum(written), t.seconds + elapsed
            t.rounds.append(sum(written) / elapsed)
    tallies["ml-commons"].pipeline_s = sides["ml-commons"].ingest_took_ms / 1000
    return tallies


@dataclass
class LatencySeries:
    latencies: list[float] = field(default_factory=list)
    rounds: list[list[float]] = field(default_factory=list)
    wall_s: float = 0.0


async def latency(
    sides: dict[str, Side], corpus: Corpus, args: argparse.Namespace
) -> dict[int, dict[str, LatencySeries]]:
    """Per concurrency level: ``--rounds`` rounds of ``--requests`` queries on each side, ABAB…"""
    out: dict[int, dict[str, LatencySeries]] = {}
    for concurrency in args.concurrency:
        series = {s: LatencySeries() for s in SIDES}
        for r in tqdm(range(args.rounds), desc=f"latency, concurrency {concurrency}"):
            offset = r * args.requests
            for name in _order(r):
                calls = [
                    searcher(sides[name], *_query(corpus, offset + j), args.k) for j in range(args.requests)
                ]
                lat, wall, _ = await run_concurrent(calls, concurrency)
                s = series[name]
                s.latencies += lat
                s.rounds.append(lat)
                s.wall_s += wall
        out[concurrency] = series
    return out


async def answers(sides: dict[str, Side], corpus: Corpus, k: int) -> dict[str, list[list[str]]]:
    """Every query once on each side (4 in flight, untimed), for recall and hit counts."""
    out = {}
    for name in SIDES:
        calls = [searcher(sides[name], text, user, k) for text, user in corpus.queries]
        _, _, out[name] = await run_concurrent(calls, 4, progress=f"recall pass, {name}")
    return out


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def quality(
    corpus: Corpus,
    vectors: dict[str, np.ndarray],
    qvecs: np.ndarray,
    found: dict[str, list[list[str]]],
    k: int,
) -> dict[str, Any]:
    """recall@k against each side's own exact oracle and the hit counts, overall and per size class.

    "hits if post-filtered": how many of the exact top k of the *whole* index lie in the query's namespace,
    i.e. what a post-filter of a perfect k-NN would return (ml-commons' query shape).
    """
    position = {t: i for i, t in enumerate(corpus.texts)}
    rows_of = {u: corpus.rows_of(u) for u in {u for _, u in corpus.queries}}
    keys = ("recall", "hits", "expected", "post")
    per: dict[str, dict[str, dict[str, list[float]]]] = {
        s: {c: {key: [] for key in keys} for c in (*CLASSES, "all")} for s in SIDES
    }
    for name in SIDES:
        scores = qvecs @ vectors[name].T
        for qi, (_, user) in enumerate(corpus.queries):
            truth = exact_top_k(scores[qi], k, rows_of[user])
            hits = [position[t] for t in found[name][qi]]
            if any(corpus.users[h] != user for h in hits):
                raise RuntimeError(f"{name}: query {qi} returned a memory outside namespace {user}")
            post = int(np.isin(exact_top_k(scores[qi], k), rows_of[user]).sum())
            for c in (corpus.user_class[user], "all"):
                got: dict[str, list[float]] = per[name][c]
                got["recall"].append(recall(hits, truth))
                got["hits"].append(len(hits))
                got["expected"].append(len(truth))  # min(k, matching)
                got["post"].append(post)
    return {
        name: {
            c: {
                "queries": len(v["recall"]),
                f"recall@{k}": _mean(v["recall"]),
                "mean hits": _mean(v["hits"]),
                "mean min(k, matching)": _mean(v["expected"]),
                "mean hits if post-filtered": _mean(v["post"]),
                "short answers": int(sum(h < e for h, e in zip(v["hits"], v["expected"], strict=True))),
            }
            for c, v in classes.items()
        }
        for name, classes in per.items()
    }


# --------------------------------------------------------------------------------------------- report


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def report(
    ingested: dict[str, IngestTally],
    lat: dict[int, dict[str, LatencySeries]],
    qual: dict[str, Any],
    k: int,
) -> dict[str, list[dict[str, Any]]]:
    mp, ref = SIDES
    ingest_rows = [
        {
            "side": name,
            "memories": t.memories,
            "seconds": t.seconds,
            "memories/s": t.rate,
            "per-round memories/s": ", ".join(f"{x:.0f}" for x in t.rounds),
            "ingest pipeline s": t.pipeline_s,
        }
        for name, t in ingested.items()
    ]
    latency_rows, round_rows = [], []
    for concurrency, series in lat.items():
        for name, s in series.items():
            summary = latency_summary(s.latencies)
            latency_rows.append(
                {
                    "concurrency": concurrency,
                    "side": name,
                    "n": summary["n"],
                    "p50 ms": summary["p50_ms"],
                    "p90 ms": summary["p90_ms"],
                    "p99 ms": summary["p99_ms"],
                    "mean ms": summary["mean_ms"],
                    "req/s": summary["n"] / s.wall_s if s.wall_s else 0.0,
                }
            )
        for r, (a, b) in enumerate(zip(series[mp].rounds, series[ref].rounds, strict=True)):
            sa, sb = latency_summary(a), latency_summary(b)
            round_rows.append(
                {
                    "concurrency": concurrency,
                    "round": r + 1,
                    "first": _order(r)[0],
                    "memproxy p50": sa["p50_ms"],
                    "ml-commons p50": sb["p50_ms"],
                    "p50 ratio": _ratio(sa["p50_ms"], sb["p50_ms"]),
                    "memproxy p99": sa["p99_ms"],
                    "ml-commons p99": sb["p99_ms"],
                    "p99 ratio": _ratio(sa["p99_ms"], sb["p99_ms"]),
                }
            )
    quality_rows = [
        {
            "side": name,
            "namespaces": c,
            "queries": v["queries"],
            f"recall@{k}": v[f"recall@{k}"],
            "mean hits": v["mean hits"],
            "mean min(k, matching)": v["mean min(k, matching)"],
            "mean hits if post-filtered": v["mean hits if post-filtered"],
            "short answers": v["short answers"],
        }
        for name in SIDES
        for c, v in qual[name].items()
    ]
    ratios = []
    for concurrency, series in lat.items():
        pa, pb = latency_summary(series[mp].latencies), latency_summary(series[ref].latencies)
        per_round = [r["p50 ratio"] for r in round_rows if r["concurrency"] == concurrency]
        ratios += [
            {
                "metric": f"_semantic_search p50, concurrency {concurrency}",
                "memproxy": pa["p50_ms"],
                "ml-commons": pb["p50_ms"],
                "ratio": _ratio(pa["p50_ms"], pb["p50_ms"]),
                "per-round ratios": ", ".join(f"{x:.2f}" for x in per_round),
            },
            {
                "metric": f"_semantic_search p99, concurrency {concurrency}",
                "memproxy": pa["p99_ms"],
                "ml-commons": pb["p99_ms"],
                "ratio": _ratio(pa["p99_ms"], pb["p99_ms"]),
                "per-round ratios": ", ".join(
                    f"{r['p99 ratio']:.2f}" for r in round_rows if r["concurrency"] == concurrency
                ),
            },
        ]
    ratios.append(
        {
            "metric": "ingest memories/s",
            "memproxy": ingested[mp].rate,
            "ml-commons": ingested[ref].rate,
            "ratio": _ratio(ingested[mp].rate, ingested[ref].rate),
            "per-round ratios": ", ".join(
                f"{_ratio(a, b):.2f}" for a, b in zip(ingested[mp].rounds, ingested[ref].rounds, strict=True)
            ),
        }
    )
    for c in ("all", *CLASSES):
        for key, label in ((f"recall@{k}", f"recall@{k}"), ("mean hits", f"mean hits for k={k}")):
            a, b = qual[mp][c][key], qual[ref][c][key]
            ratios.append(
                {
                    "metric": f"{label}, {c} namespaces",
                    "memproxy": a,
                    "ml-commons": b,
                    "ratio": _ratio(a, b),
                    "per-round ratios": "",
                }
            )
    return {
        "ingest": ingest_rows,
        "latency": latency_rows,
        "latency_rounds": round_rows,
        "quality": quality_rows,
        "ratios": ratios,
    }


# --------------------------------------------------------------------------------------------- main


async def setup_and_run(args: argparse.Namespace) -> dict[str, Any]:
    load_at_start = os.getloadavg()
    tag = uuid.uuid4().hex[:8]
    prefix = f"bench-mlc-{tag}"
    corpus = make_corpus(args.n, args.queries, args.seed)
    # The reference runs ml-commons without the security plugin; memproxy runs the same way (--auth none),
    # so neither side pays for authentication and the reference's connector reaches memproxy's embeddings.
    # Its container names the LLM "memproxy-bench-llm", which must exist (as ml-commons checks llm_id); like
    # the reference's, nobody calls it (port 9 is discard).
    bench_llm = ["--llm", "memproxy-bench-llm=http://127.0.0.1:9#provider=openai,model=bench-llm"]
    proxy_process = start_proxy(args.url, [*embed_args(args), "--auth", "none", *bench_llm])
    mp_api, ref_api = Proxy(proxy_process.url), Proxy(args.reference_url)
    models: dict[str, Any] = {}
    try:
        async with Node(args.url) as mp_node, Node(args.reference_url) as ref_node:
            embedder = await mp_api.default_embedder()
            sides = {
                "memproxy": Side("memproxy", mp_api, mp_node, f"{prefix}-memory-long-term"),
                "ml-commons": Side("ml-commons", ref_api, ref_node, f"{prefix}-memory-long-term"),
            }
            try:
                models = await asyncio.to_thread(
                    register_reference_models, args.reference_url, mp_api.url, tag
                )
                strategy_ids = {
                    name: await create_container(
                        side,
                        prefix,
                        {
                            "embedding_model_type": "TEXT_EMBEDDING",
                            "embedding_model_id": embedder["id"]
                            if name == "memproxy"
                            else models["embedding_model_id"],
                            "embedding_dimension": embedder["dimension"],
                        },
                        "memproxy-bench-llm" if name == "memproxy" else models["llm_id"],
                    )
                    for name, side in sides.items()
                }
                pipeline = await ref_node.request("GET", f"/_ingest/pipeline/{prefix}-*", ok=(200, 404))
                # memproxy's model loaded, the connector's first call made: nothing of that is timed
                await embed_queries(mp_api, embedder["id"], ["warm-up"])
                predict = {"parameters": {"input": ["warm-up"]}}
                await ref_node.request(
                    "POST", f"{ML}/models/{models['embedding_model_id']}/_predict", predict
                )
                predicts = [await predict_calls(ref_node, models["embedding_model_id"])]
                ingested = await ingest(sides, corpus, strategy_ids, args)
                predicts.append(await predict_calls(ref_node, models["embedding_model_id"]))
                vectors = {name: await stored_vectors(side, corpus) for name, side in sides.items()}
                qvecs = await embed_queries(mp_api, embedder["id"], [t for t, _ in corpus.queries])
                for name in SIDES:
                    warm = [searcher(sides[name], *_query(corpus, i), args.k) for i in range(args.warm_up)]
                    await run_concurrent(warm, 4, progress=f"warm-up, {name}")
                lat = await latency(sides, corpus, args)
                predicts.append(await predict_calls(ref_node, models["embedding_model_id"]))
                found = await answers(sides, corpus, args.k)
                qual = quality(corpus, vectors, qvecs, found, args.k)
                agreement = np.sum(vectors["memproxy"] * vectors["ml-commons"], axis=1)
                versions = {
                    "memproxy node": await mp_node.version(),
                    "reference node": await ref_node.version(),
                }
                heaps = {
                    "memproxy node": await mp_node.heap_max_bytes(),
                    "reference node": await ref_node.heap_max_bytes(),
                }
            finally:
                if sides["ml-commons"].container_id:
                    await ref_api.json(
                        "DELETE",
                        f"{MC}/{sides['ml-commons'].container_id}?delete_all_memories=true",
                        ok=(200, 404),
                    )
                if sides["memproxy"].container_id:
                    await mp_api.delete_container(sides["memproxy"].container_id)
                await delete_indices(mp_node, f"{prefix}-*")
                await delete_indices(ref_node, f"{prefix}-*")
                await delete_pipelines(ref_node, prefix)
                await delete_reference_models(ref_node, models)
    finally:
        await mp_api.close()
        await ref_api.close()
        proxy_process.stop()
    tables = report(ingested, lat, qual, args.k)
    sizes = {c: sum(1 for u in corpus.users if corpus.user_class[u] == c) for c in CLASSES}
    users = {c: sum(1 for u, cc in corpus.user_class.items() if cc == c) for c in CLASSES}
    print(
        f"\nmemproxy vs ml-commons {versions['reference node']}: {args.n} memories "
        f"({', '.join(f'{c}: {users[c]} users, {sizes[c]} memories' for c in CLASSES)}), k={args.k}, "
        f"{args.rounds} rounds x {args.requests} requests per side and level; embedder {embedder['id']}"
    )
    print(
        "\ningest (the reference's ingest pipeline embeds by calling memproxy's OpenAI endpoint over HTTP):"
    )
    print(format_table(tables["ingest"]))
    print("\n_semantic_search latency, pooled:")
    print(format_table(tables["latency"]))
    print("\nper round:")
    print(format_table(tables["latency_rounds"]))
    print(f"\nrecall@{args.k} against each side's exact oracle, hits per answer:")
    print(format_table(tables["quality"]))
    print("\nratios memproxy ÷ ml-commons (latency: < 1 is faster; the rest: > 1 is more):")
    print(format_table(tables["ratios"]))
    searches = args.warm_up + args.rounds * args.requests * len(args.concurrency)
    calls = {
        "ingest": predicts[1] - predicts[0],
        "ingested memories": args.n,
        "searches": predicts[2] - predicts[1],
        "search requests": searches,
    }
    print(
        f"reference predict calls (HTTP requests to memproxy's embeddings endpoint): {calls['ingest']} while "
        f"ingesting {args.n} memories, {calls['searches']} for {searches} searches"
    )
    print(
        "stored vectors, memproxy vs ml-commons: cosine "
        f"min {agreement.min():.6f}, mean {agreement.mean():.6f}"
    )
    return {
        "params": vars(args),
        "machine": {**machine_info(), "load_avg_at_start": load_at_start},
        "versions": versions,
        "heap_max_bytes": heaps,
        "embedder": embedder,
        "corpus": {"memories": sizes, "users": users, "queries": len(corpus.queries)},
        "reference_pipeline": pipeline,
        "reference_predict_calls": calls,
        "stored_vector_cosine": {"min": float(agreement.min()), "mean": float(agreement.mean())},
        **tables,
        "latencies_s": {
            str(c): {name: {"pooled": s.latencies, "rounds": s.rounds} for name, s in series.items()}
            for c, series in lat.items()
        },
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=DEFAULT_OPENSEARCH_URL, help="memproxy's node (default $OPENSEARCH_URL)")
    p.add_argument(
        "--reference-url",
        default=DEFAULT_REFERENCE_URL,
        help="the node with ml-commons 3.6 (scripts/opensearch-reference start)",
    )
    p.add_argument("--n", type=int, default=2000, help="memories written on each side")
    p.add_argument("--queries", type=int, default=300, help="distinct (query, namespace) pairs")
    p.add_argument("--requests", type=int, default=100, help="requests per side, round and concurrency level")
    p.add_argument("--rounds", type=int, default=10, help="interleaved latency rounds per concurrency level")
    p.add_argument("--concurrency", type=lambda t: [int(x) for x in t.split(",")], default=[1, 8])
    p.add_argument("--ingest-rounds", type=int, default=4, help="interleaved ingest rounds")
    p.add_argument("--batch", type=int, default=100, help="memories per write request")
    p.add_argument("--clients", type=int, default=2, help="write requests in flight")
    p.add_argument("--warm-up", type=int, default=20, help="searches per side before measuring")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--seed", type=int, default=31)
    add_embed_options(p)
    add_load_option(p)
    p.add_argument("--tag", default="", help="suffix of the results file name (mlcommons<tag>.json)")
    p.add_argument("--quick", action="store_true", help="smoke run: 300 memories, 2 rounds of 20 requests")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.queries, args.requests, args.rounds, args.ingest_rounds, args.warm_up = (
            300,
            60,
            20,
            2,
            2,
            4,
        )
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with competing_load(args.competing_load):
        data = asyncio.run(setup_and_run(args))
    data["competing_load"] = args.competing_load
    print(f"wrote {write_results(results_name('mlcommons', args.tag, args.quick), data)}")


if __name__ == "__main__":
    main()
