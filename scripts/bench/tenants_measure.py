"""The tenant-scale measurements: per-container search latency through memproxy's two APIs (the shared index
against a reference index holding only that container, interleaved), the answers' correctness, and the node's
recall@k against an exact numpy oracle. Used by ``scripts/bench/tenants.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from proxy.store.query import Term
from proxy.store.query_dsl import compile_filter, vector_search_body
from scripts.bench.common import (
    HttpStatusError,
    Node,
    Proxy,
    exact_top_k,
    hit_count_ok,
    normalized,
    recall,
    run_concurrent,
    vector_json,
)
from scripts.bench.tenants_data import FIELD, Tenancy, id_row

MC = "/_plugins/_ml/memory_containers"
APIS = ("semantic_search", "goodmem_retrieve")
TARGETS = ("shared", "alone")  # the container in the shared index / in an index holding only it


@dataclass(frozen=True)
class Target:
    """One container as memproxy serves it: ``rows`` are its corpus rows (the same in both targets)."""

    name: str  # shared | alone
    container_id: str
    index: str
    rows: np.ndarray


Hits = list[tuple[str, str]]  # (document id, the hit's container id) per hit, best first


def api_call(proxy: Proxy, api: str, target: Target, text: str, k: int) -> Callable[[], Awaitable[Hits]]:
    """One search of ``api`` for ``text`` in ``target``'s container; the hits it answered."""

    async def semantic_search() -> Hits:
        path = f"{MC}/{target.container_id}/memories/long-term/_semantic_search"
        answer = await proxy.json("POST", path, {"query": text, "k": k})
        return [(h["_id"], h["_source"]["memory_container_id"]) for h in answer["hits"]["hits"]]

    async def goodmem_retrieve() -> Hits:
        body = {
            "message": text,
            "spaceKeys": [{"spaceId": target.container_id}],
            "requestedSize": k,
            "fetchMemory": False,
        }
        events = await proxy.ndjson("/v1/memories:retrieve", body)
        # A chunk answered for a space key belongs to that space (the retrieve searches only its spaces).
        chunks = [e["retrievedItem"]["chunk"]["chunk"] for e in events if "retrievedItem" in e]
        return [(c["chunkId"], target.container_id) for c in chunks]

    return semantic_search if api == "semantic_search" else goodmem_retrieve


@dataclass
class Series:
    latencies: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    # Answers 429/503/504 by status: counted and reported, not a crash of an hour's run (their latency
    # is in ``latencies`` too: a client waited that long for its "retry later").
    errors: dict[int, int] = field(default_factory=dict)


def counted(call: Callable[[], Awaitable[Hits]], series: Series) -> Callable[[], Awaitable[Hits]]:
    async def run() -> Hits:
        try:
            return await call()
        except HttpStatusError as exc:
            if not exc.retryable:
                raise
            series.errors[exc.status] = series.errors.get(exc.status, 0) + 1
            return []

    return run


async def warm_up(call: Callable[[], Awaitable[Hits]], within_s: float = 600.0) -> Hits:
    """One call answered, retrying "retry later" answers: the first searches after a big load read the
    vector files into the page cache, and may outlast the search deadline (504)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return await call()
        except HttpStatusError as exc:
            if not exc.retryable or time.monotonic() > deadline:
                raise
            await asyncio.sleep(2.0)


SeriesKey = tuple[str, int, str, str]  # (size class, concurrency, api, target)


async def latency(
    proxy: Proxy, classes: dict[str, dict[str, Target]], texts: Sequence[str], args: argparse.Namespace
) -> dict[SeriesKey, Series]:
    """Per class and concurrency: ``--rounds`` rounds, each running every (target, api) series on the same
    query texts, the targets' order alternating round by round, so drift hits both alike."""
    out: dict[SeriesKey, Series] = {}
    per_round = max(1, args.requests // args.rounds)
    steps = len(classes) * len(args.concurrency) * args.rounds
    bar = tqdm(total=steps, desc="latency rounds", leave=False)
    for cls, targets in classes.items():
        for concurrency in args.concurrency:
            for r in range(args.rounds):
                order = TARGETS if r % 2 == 0 else TARGETS[::-1]
                for name in order:
                    for api in APIS:
                        s = out.setdefault((cls, concurrency, api, name), Series())
                        calls = [
                            counted(
                                api_call(
                                    proxy, api, targets[name], texts[(r * per_round + j) % len(texts)], args.k
                                ),
                                s,
                            )
                            for j in range(per_round)
                        ]
                        lat, wall, _ = await run_concurrent(calls, concurrency)
                        s.latencies += lat
                        s.wall_s += wall
                bar.update(1)
    bar.close()
    return out


@dataclass
class AnswerCheck:
    recalls: list[float] = field(default_factory=list)
    count_ok: int = 0
    foreign_hits: int = 0  # hits outside the container asked: must stay 0 (tenant isolation)
    queries: int = 0


async def check_answers(
    proxy: Proxy,
    classes: dict[str, dict[str, Target]],
    tenancy: Tenancy,
    texts: Sequence[str],
    qvecs: np.ndarray,
    k: int,
) -> dict[tuple[str, str, str], AnswerCheck]:
    """Every query once per (class, api, target): recall@k of memproxy's answer against the exact top k of
    the container's vectors for the query's real embedding, the count rule, and that no hit is foreign."""
    out: dict[tuple[str, str, str], AnswerCheck] = {}
    for cls, targets in classes.items():
        for name, target in targets.items():
            rows = target.rows
            own = {int(x) for x in rows.tolist()}
            scores = normalized(qvecs) @ normalized(tenancy.vectors[rows]).T
            for api in APIS:
                calls = [api_call(proxy, api, target, t, k) for t in texts]
                _, _, answers = await run_concurrent(calls, 4)
                check = out.setdefault((cls, api, name), AnswerCheck())
                for qi, hits in enumerate(answers):
                    found = [id_row(doc_id) for doc_id, _ in hits]
                    check.foreign_hits += sum(
                        1
                        for (_, cid), row in zip(hits, found, strict=True)
                        if cid != target.container_id or row not in own
                    )
                    truth = rows[exact_top_k(scores[qi], k)]
                    check.recalls.append(recall(found, truth))
                    check.count_ok += hit_count_ok(len(set(found)), k, len(rows)) and len(found) == len(
                        set(found)
                    )
                    check.queries += 1
    return out


# --------------------------------------------------------------------------------------------- node recall


def knn_body(vector: np.ndarray, k: int, container_id: str) -> dict[str, Any]:
    """The request memproxy's compiler builds for a container's search (filter inside the knn clause);
    ``_source`` off: the ids are all the oracle needs."""
    body = vector_search_body(
        field=FIELD,
        vector=vector_json(vector),
        k=k,
        filter_dsl=compile_filter(Term("memory_container_id", container_id)),
    )
    body["_source"] = False
    return body


@dataclass
class RecallSample:
    size: int
    recalls: list[float]
    took_ms: list[int]


async def node_recall(
    node: Node,
    index: str,
    tenancy: Tenancy,
    containers: Sequence[int],
    qvecs: np.ndarray,
    k: int,
    routed: bool,
) -> list[RecallSample]:
    """recall@k of the node's k-NN answer (memproxy's query shape, embedding-like query vectors) against the
    exact top k of each container's vectors, for each of ``containers``."""
    out = []
    for j in tqdm(containers, desc=f"recall {index}", leave=False):
        rows = tenancy.rows(j)
        scores = normalized(qvecs) @ normalized(tenancy.vectors[rows]).T
        cid = tenancy.ids[j]
        params = {"routing": cid} if routed else None
        sample = RecallSample(len(rows), [], [])
        for qi, q in enumerate(qvecs):
            answer = await node.request("POST", f"/{index}/_search", knn_body(q, k, cid), params=params)
            found = [id_row(h["_id"]) for h in answer["hits"]["hits"]]
            sample.recalls.append(recall(found, rows[exact_top_k(scores[qi], k)]))
            sample.took_ms.append(int(answer["took"]))
        out.append(sample)
    return out


def recall_sample(tenancy: Tenancy, count: int, seed: int, k: int) -> list[int]:
    """The containers whose node recall is measured: the three named ones, then ``count`` more drawn with
    probability proportional to size among those with more than 10 x k memories, largest first. (A small
    container's filter matches fewer documents than the graph search would visit, so Lucene scores them
    exactly: recall 1 by construction.)"""
    named = list(dict.fromkeys(tenancy.classes().values()))
    pool = np.flatnonzero(tenancy.sizes > 10 * k)
    pool = pool[~np.isin(pool, named)]
    if len(pool):
        weights = tenancy.sizes[pool] / tenancy.sizes[pool].sum()
        picked = np.random.default_rng(seed).choice(pool, min(count, len(pool)), replace=False, p=weights)
        named += [int(j) for j in picked]
    return sorted(named, key=lambda j: -int(tenancy.sizes[j]))
