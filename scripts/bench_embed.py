"""Benchmark: memproxy's embedding engine against sentence-transformers, same model, same texts, one run.

    .venv/bin/python scripts/bench_embed.py            # about 3 minutes on 2 cores (more when busy)
    .venv/bin/python scripts/bench_embed.py --quick    # about 30-45 s

Two corpora, generated deterministically: short memories (8-40 words) and passages (~150 tokens).
Baseline: ``SentenceTransformer.encode`` over the whole corpus at several batch sizes (its best one counts)
and one text at a time (its single-query latency). memproxy: the engine with 1, 8 and 32 concurrent
callers, each submitting one text at a time in a loop. Prints a table and writes JSON under ``results/``.
This is a benchmark, not a test: it asserts nothing and reports targets as PASS/MISS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402  (after the environment above)

from proxy.embedding import Embedder, EmbedderRegistry, EngineOptions, default_model_path  # noqa: E402

_SUBJECTS = ["The user", "Dana", "My manager", "The customer", "Our team", "Alex", "The agent", "Priya"]
_VERBS = ["prefers", "mentioned", "asked about", "scheduled", "cancelled", "remembered", "booked", "dislikes"]
_OBJECTS = [
    "green tea in the morning",
    "the quarterly sales report",
    "a flight to Lisbon",
    "the Kubernetes migration",
    "vegetarian restaurants near the office",
    "the dentist appointment",
    "a birthday gift for Sam",
    "the latency regression in search",
    "jazz concerts on Fridays",
    "the budget spreadsheet",
    "a hotel with a pool",
    "the database backup policy",
    "running shoes in size 42",
    "the novel by Ishiguro",
]
_TAILS = [
    "next Tuesday",
    "before the deadline",
    "after the standup",
    "every other week",
    "when it rains",
    "for the offsite",
    "because of the outage",
    "with two colleagues",
    "on the shared calendar",
    "until further notice",
]
_FILLER = ["and", "also", "however", "meanwhile", "notably", "so", "then", "because", "although", "therefore"]


def _sentence(rng: random.Random) -> list[str]:
    words = (
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}".split()
    )
    return words


def short_memory(rng: random.Random) -> str:
    """One memory of 8-40 words, as an agent would store it."""
    target = rng.randint(8, 40)
    words: list[str] = []
    while len(words) < target:
        if words:
            words.append(rng.choice(_FILLER))
        words += _sentence(rng)
    return " ".join(words[:target]).rstrip(",") + "."


def passage(rng: random.Random) -> str:
    """A document chunk of roughly 150 tokens (about 120 words of this vocabulary)."""
    words: list[str] = []
    while len(words) < 118:
        words += [*_sentence(rng), rng.choice(_FILLER)]
    return " ".join(words[:118]) + "."


def corpora(n_short: int, n_passages: int) -> dict[str, list[str]]:
    rng = random.Random(20261130)
    return {
        "short": [short_memory(rng) for _ in range(n_short)],
        "passage": [passage(rng) for _ in range(n_passages)],
    }


@dataclass
class Row:
    corpus: str
    system: str
    texts: int
    seconds: float
    texts_per_s: float
    p50_ms: float
    p99_ms: float
    vs_st_best: float = 0.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000.0


def _row(corpus: str, system: str, n: int, seconds: float, latencies: list[float]) -> Row:
    return Row(
        corpus, system, n, seconds, n / seconds, _percentile(latencies, 0.5), _percentile(latencies, 0.99)
    )


def bench_st_batch(model: Any, corpus: str, texts: list[str], batch_size: int) -> Row:
    model.encode(texts[: batch_size * 2], batch_size=batch_size)  # allocator and kernels for this size
    latencies: list[float] = []
    began = time.perf_counter()
    for start in range(0, len(texts), batch_size):
        t0 = time.perf_counter()
        model.encode(texts[start : start + batch_size], batch_size=batch_size)
        latencies.append(time.perf_counter() - t0)
    return _row(corpus, f"ST encode bs={batch_size}", len(texts), time.perf_counter() - began, latencies)


def bench_st_single(model: Any, corpus: str, texts: list[str]) -> Row:
    for text in texts[:5]:
        model.encode([text])
    latencies: list[float] = []
    began = time.perf_counter()
    for text in texts:
        t0 = time.perf_counter()
        model.encode([text])
        latencies.append(time.perf_counter() - t0)
    return _row(corpus, "ST encode 1 text", len(texts), time.perf_counter() - began, latencies)


async def bench_engine(embedder: Embedder, corpus: str, texts: list[str], callers: int, label: str) -> Row:
    """``callers`` concurrent loops, each embedding one text at a time until the corpus is used up."""
    cursor = iter(range(len(texts)))
    latencies: list[float] = []

    async def caller() -> None:
        for i in cursor:
            t0 = time.perf_counter()
            await embedder.embed([texts[i]])
            latencies.append(time.perf_counter() - t0)

    cursor = iter(range(min(len(texts), 4 * callers + 8)))
    await asyncio.gather(*(caller() for _ in range(callers)))  # warm this concurrency's batch shapes
    cursor = iter(range(len(texts)))
    latencies.clear()
    began = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    name = f"memproxy{label} {callers} caller{'s' if callers > 1 else ''}"
    return _row(corpus, name, len(texts), time.perf_counter() - began, latencies)


def machine() -> dict[str, Any]:
    flags = ""
    model_name = platform.processor()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        flags = next(line for line in cpuinfo.splitlines() if line.startswith("flags"))
        model_name = next(line for line in cpuinfo.splitlines() if line.startswith("model name")).split(":")[
            1
        ]
    except (OSError, StopIteration):
        pass
    return {
        "cpu": model_name.strip(),
        "logical_cpus": os.cpu_count(),
        "avx512_bf16": "avx512_bf16" in flags,
        "amx_bf16": "amx_bf16" in flags,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
        "python": platform.python_version(),
        "loadavg_at_start": os.getloadavg(),
    }


def print_table(rows: list[Row]) -> None:
    head = f"{'texts':>6} {'texts/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs ST best':>10}"
    print(f"\n{'corpus':8} {'system':34} {head}")
    for r in rows:
        ratio = f"{r.vs_st_best:.2f}x" if r.vs_st_best else ""
        print(
            f"{r.corpus:8} {r.system:34} {r.texts:6d} {r.texts_per_s:9.1f} {r.p50_ms:8.1f} {r.p99_ms:8.1f} "
            f"{ratio:>10}"
        )


def verdicts(rows: list[Row]) -> list[str]:
    lines = []
    for corpus in ("short", "passage"):
        mine = [r for r in rows if r.corpus == corpus and r.system == "memproxy 32 callers"]
        if mine:
            ok = "PASS" if mine[0].vs_st_best >= 2.0 else "MISS"
            lines.append(
                f"{corpus}: 32-caller throughput = {mine[0].vs_st_best:.2f}x ST best batch (target 2x): {ok}"
            )
    st_single = next((r for r in rows if r.corpus == "short" and r.system == "ST encode 1 text"), None)
    one = next((r for r in rows if r.corpus == "short" and r.system == "memproxy 1 caller"), None)
    if st_single and one:
        ok = "PASS" if one.p50_ms <= st_single.p50_ms else "MISS"
        lines.append(
            f"short: single-query p50 latency {one.p50_ms:.1f} ms vs ST {st_single.p50_ms:.1f} ms "
            f"(target <=): {ok}"
        )
    return lines


def best_of(rounds: list[list[Row]]) -> list[Row]:
    """Per (corpus, system), the round with the highest throughput: on a shared machine, the least disturbed
    one."""
    best: dict[tuple[str, str], Row] = {}
    for row in (r for rows in rounds for r in rows):
        key = (row.corpus, row.system)
        if key not in best or row.texts_per_s > best[key].texts_per_s:
            best[key] = row
    return list(best.values())


def mark_ratios(rows: list[Row], corpus_names: list[str]) -> None:
    for corpus in corpus_names:
        st_rows = [r for r in rows if r.corpus == corpus and r.system.startswith("ST encode bs=")]
        best = max(st_rows, key=lambda r: r.texts_per_s)
        best.system += " (best)"
        for r in rows:
            if r.corpus == corpus:
                r.vs_st_best = r.texts_per_s / best.texts_per_s
    rows.sort(key=lambda r: (corpus_names.index(r.corpus), not r.system.startswith("ST")))


async def one_round(
    st: Any, engines: dict[str, Embedder], texts: dict[str, list[str]], batch_sizes: list[int]
) -> list[Row]:
    """Every measurement once, baseline and engine interleaved per corpus so both see similar load.

    The engine's event loop is idle while sentence-transformers runs, so blocking it here is harmless.
    """
    rows: list[Row] = []

    def show(row: Row) -> None:
        rows.append(row)
        print(f"  {row.corpus:8} {row.system:34} {row.texts_per_s:8.1f}/s", flush=True)

    for corpus, corpus_texts in texts.items():
        singles = corpus_texts[: min(len(corpus_texts), 64)]
        for bs in batch_sizes:
            show(bench_st_batch(st, corpus, corpus_texts, bs))
        show(bench_st_single(st, corpus, singles))
        for label, embedder in engines.items():
            for callers in [1, 8, 32] if not label else [32]:
                show(
                    await bench_engine(
                        embedder, corpus, singles if callers == 1 else corpus_texts, callers, label
                    )
                )
    return rows


async def run(args: argparse.Namespace) -> dict[str, Any]:
    n_short, n_passages = (160, 40) if args.quick else (384, 96)
    batch_sizes = [16, 32, 64] if args.quick else [8, 16, 32, 64]
    rounds = args.rounds or (1 if args.quick else 3)
    texts = corpora(n_short, n_passages)
    host = machine()

    from sentence_transformers import SentenceTransformer

    path = default_model_path()
    st = SentenceTransformer(path, device="cpu")
    tokens = {k: statistics.mean(len(st.tokenizer(t)["input_ids"]) for t in v) for k, v in texts.items()}
    print(f"model {path}")
    print("corpora: " + ", ".join(f"{len(v)} {k} (mean {tokens[k]:.0f} tokens)" for k, v in texts.items()))
    began = time.perf_counter()
    options = EngineOptions(dtype=args.dtype, threads=args.threads, max_batch_tokens=args.max_batch_tokens)
    registries = {"": EmbedderRegistry.from_specs([], options)}
    if args.also_fp32:
        fp32 = EngineOptions(dtype="float32", threads=args.threads, max_batch_tokens=args.max_batch_tokens)
        registries[" fp32"] = EmbedderRegistry.from_specs([], fp32)
    start_s = {}
    try:
        for label, registry in registries.items():
            t0 = time.perf_counter()
            await registry.start()
            start_s[label] = round(time.perf_counter() - t0, 2)
        engines = {label: registry.get(registry.default_id) for label, registry in registries.items()}
        all_rounds = []
        for n in range(rounds):
            print(f"round {n + 1}/{rounds}", flush=True)
            all_rounds.append(await one_round(st, engines, texts, batch_sizes))
    finally:
        for registry in registries.values():
            await registry.close()

    rows = best_of(all_rounds)
    mark_ratios(rows, list(texts))
    print_table(rows)
    lines = verdicts(rows)
    print("\n" + "\n".join(lines))
    return {
        "quick": args.quick,
        "rounds": rounds,
        "seconds": round(time.perf_counter() - began, 1),
        "machine": {**host, "loadavg_at_end": os.getloadavg()},
        "engine": {
            "options": asdict(options),
            "embedder": asdict(engines[""].info),
            "start_seconds": start_s,
        },
        "corpora": {k: {"texts": len(v), "mean_tokens": round(tokens[k], 1)} for k, v in texts.items()},
        "rows": [asdict(r) for r in rows],
        "all_rounds": [[asdict(r) for r in rows] for rows in all_rounds],
        "verdicts": lines,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small corpora, one round (~30 s)")
    parser.add_argument("--rounds", type=int, default=0, help="interleaved rounds; best of each is kept (3)")
    parser.add_argument("--dtype", default="auto", help="engine dtype (auto, float32, bfloat16)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both systems")
    parser.add_argument("--max-batch-tokens", type=int, default=EngineOptions.max_batch_tokens)
    parser.add_argument("--also-fp32", action="store_true", help="also the engine in float32, 32 callers")
    parser.add_argument("--out", default=str(REPO / "results"), help="folder for the JSON result")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    result = asyncio.run(run(args))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = out / f"bench_embed-{stamp}{'-quick' if args.quick else ''}.json"
    target.write_text(json.dumps({"when": stamp, **result}, indent=2))
    print(f"\nwrote {target} ({result['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
