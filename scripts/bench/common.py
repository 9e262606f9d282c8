"""Shared helpers for the benchmarks: timing, percentiles, tables, JSON results, the machine, the node.

Every script prints a table and writes ``results/<name>.json`` (the latest run, read by ``plots.py``) plus a
time-stamped copy. Nothing here fakes or extrapolates a number: a phase that did not run is absent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
import numpy as np

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
DEFAULT_OPENSEARCH_URL = os.environ.get("OPENSEARCH_URL", "http://127.0.0.1:9250").rstrip("/")


# --------------------------------------------------------------------------------------------- timing


@dataclass
class Stopwatch:
    """Accumulates the wall time of named phases."""

    phases: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start


class HttpStatusError(RuntimeError):
    """An answer outside the statuses a call accepts; ``retryable`` for 429/503/504 (memproxy's "retry
    later": a busy or failing-over cluster, a search cancelled at its deadline)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status

    @property
    def retryable(self) -> bool:
        return self.status in (429, 503, 504)


def percentile_ms(latencies_s: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(latencies_s, dtype=np.float64), q) * 1000.0) if latencies_s else 0.0


def latency_summary(latencies_s: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/mean in milliseconds and the sample count."""
    if not latencies_s:
        return {"n": 0}
    arr = np.asarray(latencies_s, dtype=np.float64) * 1000.0
    return {
        "n": len(arr),
        "p50_ms": float(np.percentile(arr, 50)),
        "p90_ms": float(np.percentile(arr, 90)),
        "p99_ms": float(np.percentile(arr, 99)),
        "mean_ms": float(arr.mean()),
    }


async def run_concurrent(
    calls: Sequence[Callable[[], Awaitable[Any]]], concurrency: int, progress: str | None = None
) -> tuple[list[float], float, list[Any]]:
    """Run the calls, at most ``concurrency`` in flight; returns per-call latencies (s), wall (s), results."""
    from tqdm import tqdm

    latencies: list[float] = [0.0] * len(calls)
    results: list[Any] = [None] * len(calls)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(calls)):
        queue.put_nowait(i)
    bar = tqdm(total=len(calls), desc=progress, leave=False, disable=progress is None)

    async def worker() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            start = time.perf_counter()
            results[i] = await calls[i]()
            latencies[i] = time.perf_counter() - start
            bar.update(1)

    wall_start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(calls))))))
    wall = time.perf_counter() - wall_start
    bar.close()
    return latencies, wall, results


# --------------------------------------------------------------------------------------------- output


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        return f"{value:.4f}" if abs(value) < 1 else f"{value:.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    return "-" if value is None else str(value)


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A GitHub-markdown table (readable in a terminal too)."""
    if not rows:
        return "(no rows)"
    cols = list(columns or rows[0].keys())
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    line = "| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) + " |" for row in cells]
    return "\n".join([line, rule, *body])


def results_name(benchmark: str, tag: str, quick: bool) -> str:
    """The results file's name: ``<benchmark><tag>``, ``<benchmark>-quick`` for a smoke run without a tag."""
    return benchmark + (tag or ("-quick" if quick else ""))


def write_results(name: str, data: Mapping[str, Any]) -> Path:
    """``results/<name>.json`` (latest) and ``results/<name>-<UTC time>.json``; returns the latest path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    text = json.dumps({"benchmark": name, "utc": stamp, **data}, indent=2, default=_json_default)
    (RESULTS / f"{name}-{stamp}.json").write_text(text)
    latest = RESULTS / f"{name}.json"
    latest.write_text(text)
    return latest


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _sh(cmd: Sequence[str]) -> str:
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_info() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in _sh(["lscpu"]).splitlines()
            if line.startswith("Model name")
        ),
        platform.processor(),
    )
    return {
        "nproc": _sh(["nproc"]),
        "cpu_model": cpu,
        "free_h": _sh(["free", "-h"]),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_1_5_15_min": os.getloadavg(),  # when the results were written
    }


# --------------------------------------------------------------------------------------------- vectors


def random_unit_vectors(n: int, dim: int, seed: int, chunk: int = 100_000) -> np.ndarray:
    """``n`` seeded random unit vectors, rounded to 6 decimals (what the JSON carries), as float32.

    The oracle and the index see the same numbers: the rounded values are what ``vector_json`` writes.
    """
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, chunk):
        block = rng.standard_normal((min(chunk, n - start), dim))
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + len(block)] = np.round(block, 6)
    return out


def low_rank_unit_vectors(
    n: int,
    dim: int,
    seed: int,
    *,
    intrinsic_dim: int = 32,
    noise: float = 0.1,
    basis_seed: int = 0,
    chunk: int = 100_000,
) -> np.ndarray:
    """Embedding-like data: ``normalize(B z + noise * e)`` with ``z`` in ``intrinsic_dim`` dimensions.

    ``B`` (dim x intrinsic_dim) depends only on ``basis_seed``, so corpus and queries drawn with different
    ``seed`` share one distribution. Random unit vectors have no neighbourhood structure at all (the worst
    case for any graph index); real sentence embeddings have a low intrinsic dimension, which this models.
    Rounded to 6 decimals like ``random_unit_vectors``.
    """
    basis = np.random.default_rng(basis_seed).standard_normal((intrinsic_dim, dim)) / np.sqrt(intrinsic_dim)
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        block = rng.standard_normal((size, intrinsic_dim)) @ basis + noise * rng.standard_normal(
            (size, dim)
        ) / np.sqrt(dim)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + size] = np.round(block, 6)
    return out


def make_vectors(kind: str, n: int, dim: int, seed: int) -> np.ndarray:
    """``random`` (uniform on the sphere) or ``lowrank`` (see ``low_rank_unit_vectors``)."""
    if kind == "random":
        return random_unit_vectors(n, dim, seed)
    if kind == "lowrank":
        return low_rank_unit_vectors(n, dim, seed)
    raise ValueError(f"unknown vector kind {kind!r} (random | lowrank)")


def vector_json(vec: np.ndarray) -> list[float]:
    """A vector as JSON numbers, rounded to 6 decimals (short, and equal to what the oracle uses)."""
    return [round(x, 6) for x in vec.astype(np.float64).tolist()]


def normalized(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)


def exact_top_k(scores: np.ndarray, k: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Row indices of the ``k`` best ``scores`` (best first), among ``rows`` if given; fewer if fewer match.

    ``scores`` holds one query's cosine against every (unit) vector: the brute-force oracle.
    """
    candidates = np.arange(len(scores)) if rows is None else rows
    if len(candidates) == 0:
        return candidates
    s = scores if rows is None else scores[rows]
    take = min(k, len(candidates))
    part = np.argpartition(-s, take - 1)[:take]
    return candidates[part[np.argsort(-s[part], kind="stable")]]


def recall(found: Iterable[int], truth: np.ndarray) -> float:
    """|found ∩ truth| / |truth|; 1.0 when nothing matches and nothing was found."""
    truth_set = set(truth.tolist())
    if not truth_set:
        return 1.0
    return len(truth_set.intersection(found)) / len(truth_set)


# --------------------------------------------------------------------------------------------- OpenSearch


class Node:
    """A thin async JSON client for the node (aiohttp; no retries, errors raise)."""

    def __init__(self, url: str = DEFAULT_OPENSEARCH_URL, connections: int = 64):
        self.url = url.rstrip("/")
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections),
            timeout=aiohttp.ClientTimeout(total=3600),
        )

    async def __aenter__(self) -> Node:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        ok: Sequence[int] = (200, 201),
    ) -> Any:
        data: bytes | None = None
        headers = {"Content-Type": "application/json"}
        if isinstance(body, bytes):
            data, headers["Content-Type"] = body, "application/x-ndjson"
        elif body is not None:
            data = json.dumps(body).encode()
        async with self.session.request(
            method, self.url + path, data=data, headers=headers, params=params
        ) as resp:
            raw = await resp.read()
            if resp.status not in ok:
                raise HttpStatusError(resp.status, f"{method} {path} -> {resp.status}: {raw[:2000]!r}")
            return json.loads(raw) if raw else None

    async def delete_index(self, index: str) -> None:
        # A node still merging a million memories may time out the cluster-state update (503): the
        # clean-up of an hour's run waits for it rather than losing the run's results.
        for attempt in range(10):
            try:
                await self.request("DELETE", f"/{index}", ok=(200, 404))
                return
            except HttpStatusError as exc:
                if not exc.retryable or attempt == 9:
                    raise
                await asyncio.sleep(5.0)

    async def bulk(self, lines: bytes) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("POST", "/_bulk", lines)
        if result.get("errors"):
            first = next(i for i in result["items"] if next(iter(i.values())).get("error"))
            raise RuntimeError(f"bulk item failed: {first}")
        return result

    async def version(self) -> str:
        info = await self.request("GET", "/")
        return str(info["version"]["number"])

    async def heap_max_bytes(self) -> int:
        stats = await self.request("GET", "/_nodes/stats/jvm")
        return int(sum(n["jvm"]["mem"]["heap_max_in_bytes"] for n in stats["nodes"].values()))


def bulk_lines(index: str, docs: Iterable[tuple[str, Mapping[str, Any]]]) -> bytes:
    """NDJSON ``_bulk`` body: one ``index`` action per ``(id, source)``."""
    parts: list[str] = []
    for doc_id, source in docs:
        parts.append(json.dumps({"index": {"_index": index, "_id": doc_id}}))
        parts.append(json.dumps(source))
    return ("\n".join(parts) + "\n").encode()


def hit_count_ok(hits: int, k: int, matching: int) -> bool:
    """The count rule: a filtered k-NN answer holds exactly min(k, matching) hits."""
    return hits == min(k, matching)


# --------------------------------------------------------------------------------------------- texts

_WHO = [
    "The user",
    "Alice",
    "Bob",
    "The customer",
    "My manager",
    "Our team",
    "The agent",
    "Dr. Chen",
    "Maria",
]
_DO = [
    "prefers",
    "asked about",
    "is allergic to",
    "wants to learn",
    "booked",
    "complained about",
    "recommended",
    "forgot",
    "is planning",
    "bought",
    "cancelled",
    "enjoys",
    "needs help with",
    "reviewed",
    "mentioned",
]
_WHAT = [
    "dark roast coffee",
    "a flight to Lisbon",
    "peanuts",
    "the quarterly report",
    "Rust programming",
    "a vegetarian restaurant",
    "the database migration",
    "hiking boots",
    "a dentist appointment",
    "jazz concerts",
    "the OpenSearch cluster",
    "a birthday gift for Sam",
    "noise-cancelling headphones",
    "the onboarding checklist",
    "Italian lessons",
    "a standing desk",
    "the invoice from March",
    "sourdough baking",
    "the team offsite",
    "a new laptop",
    "marathon training",
    "the API rate limits",
]
_WHEN = [
    "last Tuesday",
    "every morning",
    "before the deadline",
    "in the spring",
    "after the meeting",
    "on weekends",
    "since 2019",
    "during the trip",
    "next month",
    "twice a week",
    "yesterday",
    "",
]
_WHY = [
    "because it is cheaper",
    "for the kids",
    "to save time",
    "after a bad experience",
    "as a surprise",
    "for work",
    "on a friend's advice",
    "",
    "",
    "",
]


def synthetic_texts(n: int, seed: int) -> list[str]:
    """``n`` memory-like sentences (seeded), e.g. "Alice is allergic to peanuts since 2019. (note 42)"."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        parts = [str(rng.choice(p)) for p in (_WHO, _DO, _WHAT, _WHEN, _WHY)]
        out.append(" ".join(p for p in parts if p) + f". (note {i})")
    return out


# --------------------------------------------------------------------------------------------- memproxy


def start_proxy(opensearch_url: str, extra_args: Sequence[str] = (), source: str | None = None) -> Any:
    """The real memproxy as a subprocess on a free port (``tests.conftest.ProxyProcess``); ``.stop()`` it.
    ``source``: the checkout whose code it runs (another commit, for a before/after comparison)."""
    from tests.conftest import REPO, ProxyProcess

    return ProxyProcess(opensearch_url, list(extra_args), source=Path(source) if source else REPO)


async def goodmem_key(proxy_url: str, opensearch_url: str) -> str:
    """A GoodMem root key: ``/v1/system/init``'s, or on a node initialised earlier a fresh key for its root
    user, minted with memproxy's own key code (as tests/test_goodmem_retrieve.py does)."""
    async with aiohttp.ClientSession() as session:
        async with session.post(proxy_url + "/v1/system/init", json={}) as resp:
            body = await resp.json()
        if body.get("rootApiKey"):
            return str(body["rootApiKey"])
        async with session.get(opensearch_url + "/memproxy-goodmem-system/_doc/instance") as resp:
            root = (await resp.json())["_source"]["root_user_id"]
    from proxy.config import Settings
    from proxy.core.goodmem.apikeys import issue_key
    from proxy.core.goodmem.context import GoodMem
    from proxy.core.services import Services
    from proxy.store.client import Store

    store = Store(Settings(opensearch_url=opensearch_url))
    try:
        gm = GoodMem.create(Services(store=store, embedders=cast(Any, None)))  # a key embeds nothing
        issued = await issue_key(gm, user_id=root, actor_id=root, labels={"purpose": "benchmark"})
        return str(issued.raw_key)
    finally:
        await store.close()


def add_embed_options(parser: argparse.ArgumentParser) -> None:
    """Embedding settings given alike to the proxy and to the in-process baseline."""
    parser.add_argument(
        "--embed-threads",
        type=int,
        default=None,
        help="torch threads of the proxy's and the baseline's embedder alike (default: memproxy's, auto: the "
        "cores the rest of the machine leaves free)",
    )
    parser.add_argument(
        "--embed-max-batch-size",
        type=int,
        default=None,
        help="texts per model batch, proxy and baseline alike (default: memproxy's, by device)",
    )


def add_load_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--competing-load",
        type=int,
        default=0,
        metavar="N",
        help="run N busy-loop processes at normal priority beside the benchmark (a CPU-heavy neighbour on "
        "the same machine); default 0",
    )


@contextmanager
def competing_load(processes: int) -> Iterator[None]:
    """``processes`` busy loops beside the benchmark, as a neighbour that wants every core it can get would
    be; stopped when the block ends."""
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def embed_settings(args: argparse.Namespace) -> Any:
    """The in-process baseline's settings (``proxy.config.Settings``)."""
    from proxy.config import Settings

    return Settings(embed_threads=args.embed_threads, embed_max_batch_size=args.embed_max_batch_size)


def embed_args(args: argparse.Namespace) -> list[str]:
    """Proxy flags that give its embedder the settings the in-process baseline gets."""
    flags = [] if args.embed_threads is None else ["--embed-threads", str(args.embed_threads)]
    if args.embed_max_batch_size is not None:
        flags += ["--embed-max-batch-size", str(args.embed_max_batch_size)]
    return flags


class Proxy:
    """A JSON/NDJSON client for memproxy's two APIs."""

    def __init__(self, url: str, connections: int = 64):
        self.url = url.rstrip("/")
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections), timeout=aiohttp.ClientTimeout(total=3600)
        )
        # The key every route needs (memproxy authenticates the ml-commons routes too).
        self.auth_headers: dict[str, str] = {}

    async def close(self) -> None:
        await self.session.close()

    async def json(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        ok: Sequence[int] = (200, 201),
    ) -> Any:
        headers = self.auth_headers if headers is None else headers
        async with self.session.request(method, self.url + path, json=body, headers=headers) as resp:
            raw = await resp.read()
            if resp.status not in ok:
                raise HttpStatusError(resp.status, f"{method} {path} -> {resp.status}: {raw[:2000]!r}")
            return json.loads(raw) if raw else None

    async def ndjson(self, path: str, body: Any) -> list[dict[str, Any]]:
        async with self.session.post(self.url + path, json=body, headers=self.auth_headers) as resp:
            raw = await resp.read()
            if resp.status != 200:
                raise HttpStatusError(resp.status, f"POST {path} -> {resp.status}: {raw[:2000]!r}")
        return [json.loads(line) for line in raw.splitlines() if line.strip()]

    async def default_embedder(self) -> dict[str, Any]:
        health = await self.json("GET", "/_memproxy/health")
        first: dict[str, Any] = health["proxy"]["embedders"][0]
        return first

    async def create_container(
        self, index_prefix: str, embedder_id: str, dimension: int, name: str | None = None
    ) -> str:
        body = {
            "name": name or f"bench {index_prefix}",
            "configuration": {
                "embedding_model_type": "TEXT_EMBEDDING",
                "embedding_model_id": embedder_id,
                "embedding_dimension": dimension,
                "index_prefix": index_prefix,
                "use_system_index": False,
            },
        }
        created = await self.json("POST", "/_plugins/_ml/memory_containers/_create", body)
        return str(created["memory_container_id"])

    async def delete_container(self, container_id: str) -> None:
        await self.json("DELETE", f"/_plugins/_ml/memory_containers/{container_id}", ok=(200, 404))

    async def delete_space(self, space_id: str) -> None:
        """GoodMem's delete: it also removes the space's GoodMem memory records, which the ml-commons
        container delete leaves behind."""
        await self.json("DELETE", f"/v1/spaces/{space_id}", headers=self.auth_headers, ok=(200, 204, 404))


async def delete_indices(node: Node, pattern: str) -> None:
    """Delete every index matching ``pattern`` (a ``bench-*`` name, wildcards allowed)."""
    found = await node.request("GET", f"/_cat/indices/{pattern}", params={"format": "json"}, ok=(200, 404))
    for entry in found or []:
        await node.delete_index(entry["index"])


async def start_embedders(settings: Any = None) -> Any:
    """memproxy's embedding engine in this process, built from the same settings as the proxy's
    (``proxy.app``'s defaults): the "embedder alone" baseline. ``await registry.close()`` when done."""
    from proxy.config import Settings
    from proxy.embedding import EmbedderRegistry

    registry = EmbedderRegistry.from_specs([], (settings or Settings()).engine_options())
    await registry.start()
    return registry
