"""Embedding engines side by side (issue 28, item 1): the same model, texts and batches, interleaved rounds.

Engines, each at 1 and 2 intra-op threads:

* ``torch-fp32`` / ``torch-bf16``: memproxy's own path (:class:`proxy.embedding.model.LoadedModel`: length
  sorting, padding-free sub-batches, SDPA), in float32 and in bfloat16 weights;
* ``ort-fp32`` (``onnxruntime``, ``onnx`` and ``onnxscript``, in the bench extras; ``--no-onnx`` leaves it
  out): ONNX Runtime's CPU provider on an export of the same weights made here (``torch.onnx``, into
  ``.cache/onnx/``; nothing is downloaded), with its thread pool's spinning turned off, and the same
  tokenizer, pooling and normalisation as memproxy;
* ``torch-bf16 auto``: bf16 with memproxy's default thread count, :class:`proxy.embedding.cpu.ThreadGovernor`
  (the cores the rest of the machine left free over the last 0.2 s, re-read before each forward);
* the baseline, ``st-fp32``: sentence-transformers' ``encode`` at torch's default threads, best batch size.

Each engine embeds the corpus in batches of 32 (memproxy's CPU batch) for throughput, and single texts for
latency (p50 / p99), in rounds that alternate the engines, on a quiet machine and then with one core kept
busy by a spinning process (``--busy``). Parity: each engine's minimum cosine to sentence-transformers fp32
over the corpus. Prints a table and writes ``results/engines<tag>.json``.

    .venv/bin/python -m scripts.bench.engines            # about 6 minutes on 2 cores
    .venv/bin/python -m scripts.bench.engines --quick
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from proxy.embedding.config import EngineOptions
from proxy.embedding.cpu import ThreadGovernor
from proxy.embedding.model import LoadedModel, load_model
from proxy.embedding.registry import default_model_path
from scripts.bench.common import format_table, machine_info, results_name, write_results

REPO = Path(__file__).resolve().parents[2]
ONNX_DIR = REPO / ".cache" / "onnx"
BATCH = 32
SENTENCE = (
    "the user prefers green tea in the morning and meets the team on mondays to discuss the budget roadmap "
    "items while travelling to lisbon for the quarterly offsite with two colleagues after the standup"
)
WORDS = SENTENCE.split()

Embed = Callable[[Sequence[str]], np.ndarray]


def corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40))) for _ in range(n)]


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


class Busy:
    """One core kept busy by a spinning process while the block runs."""

    def __enter__(self) -> Busy:
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._proc = ctx.Process(target=_spin, args=(self._stop,), daemon=True)
        self._proc.start()
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._proc.join(5)


def torch_engine(dtype: str) -> tuple[LoadedModel, Embed]:
    model = load_model(default_model_path(), EngineOptions(dtype=dtype, device="cpu"))

    def embed(texts: Sequence[str]) -> np.ndarray:
        return np.asarray(model.embed_tokens(model.tokenize(texts)), dtype=np.float32)

    return model, embed


def onnx_export(model: LoadedModel) -> Path:
    """The float32 transformer as ONNX (dynamic batch and length), made once from the shipped weights."""
    target = ONNX_DIR / "all-minilm-l6-v2-fp32.onnx"
    if target.is_file():
        return target
    ONNX_DIR.mkdir(parents=True, exist_ok=True)

    class Hidden(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    from transformers import AutoModel

    eager = AutoModel.from_pretrained(
        str(model.layout.transformer_dir), attn_implementation="eager", local_files_only=True
    ).eval()
    ids = torch.ones((2, 8), dtype=torch.long)
    torch.onnx.export(
        Hidden(eager),
        (ids, ids),
        str(target),
        input_names=["input_ids", "attention_mask"],
        output_names=["hidden"],
        dynamic_axes={name: {0: "batch", 1: "length"} for name in ("input_ids", "attention_mask", "hidden")},
        opset_version=17,
        dynamo=False,
    )
    return target


def ort_engine(model: LoadedModel, threads: int) -> Embed:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Spinning threads burn a core while they wait; with a core taken they make the barrier collapse worse.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(onnx_export(model)), options, providers=["CPUExecutionProvider"])
    pad = model.pad_id

    def embed(texts: Sequence[str]) -> np.ndarray:
        seqs = model.tokenize(texts)
        width = max(len(s) for s in seqs)
        ids = np.full((len(seqs), width), pad, dtype=np.int64)
        mask = np.zeros((len(seqs), width), dtype=np.int64)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        weights = mask[..., None].astype(np.float32)
        vectors = (hidden * weights).sum(1) / np.clip(weights.sum(1), 1e-9, None)
        return np.asarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), dtype=np.float32)

    return embed


def measure(embed: Embed, texts: list[str], singles: int) -> dict[str, float]:
    started = time.perf_counter()
    for i in range(0, len(texts), BATCH):
        embed(texts[i : i + BATCH])
    rate = len(texts) / (time.perf_counter() - started)
    latencies = []
    for text in texts[:singles]:
        t0 = time.perf_counter()
        embed([text])
        latencies.append((time.perf_counter() - t0) * 1000)
    latencies.sort()
    return {
        "texts_per_s": rate,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    texts = corpus(args.n, args.seed)
    from sentence_transformers import SentenceTransformer

    default_threads = torch.get_num_threads()
    st = SentenceTransformer(default_model_path(), device="cpu")
    reference = st.encode(texts, batch_size=BATCH, normalize_embeddings=True)
    fp32, fp32_embed = torch_engine("float32")
    _, bf16_embed = torch_engine("bfloat16")
    engines: dict[str, tuple[int, Embed]] = {}
    for threads in (1, 2):
        engines[f"torch-fp32 x{threads}"] = (threads, fp32_embed)
        engines[f"torch-bf16 x{threads}"] = (threads, bf16_embed)
        if not args.no_onnx:
            engines[f"ort-fp32 x{threads}"] = (threads, ort_engine(fp32, threads))

    governor = ThreadGovernor.for_this_process()
    if governor is not None:  # memproxy's default: the count follows the cores the rest leaves free

        def bf16_auto(batch: Sequence[str]) -> np.ndarray:
            torch.set_num_threads(governor.threads())
            return bf16_embed(batch)

        engines["torch-bf16 auto (memproxy default)"] = (governor.least, bf16_auto)

    def st_best(batch: Sequence[str]) -> np.ndarray:
        return np.asarray(st.encode(list(batch), batch_size=BATCH, normalize_embeddings=True))

    engines[f"st-fp32 (torch default, x{default_threads})"] = (default_threads, st_best)
    parity = {}
    for name, (threads, embed) in engines.items():
        torch.set_num_threads(threads)
        parity[name] = float(np.min(np.sum(embed(texts) * reference, axis=1)))
    rows: list[dict[str, Any]] = []
    for condition in ("quiet", "one busy core"):
        best: dict[str, dict[str, float]] = {}
        with Busy() if condition != "quiet" else _Quiet():
            for _ in range(args.rounds):  # engines alternate within each round
                for name, (threads, embed) in engines.items():
                    torch.set_num_threads(threads)
                    figures = measure(embed, texts, args.singles)
                    old = best.get(name)
                    best[name] = {
                        "texts_per_s": max(figures["texts_per_s"], old["texts_per_s"] if old else 0.0),
                        "p50_ms": min(figures["p50_ms"], old["p50_ms"] if old else float("inf")),
                        "p99_ms": min(figures["p99_ms"], old["p99_ms"] if old else float("inf")),
                    }
        baseline = next(v for k, v in best.items() if k.startswith("st-"))["texts_per_s"]
        for name, figures in best.items():
            rows.append(
                {
                    "condition": condition,
                    "engine": name,
                    **{k: round(v, 1) for k, v in figures.items()},
                    "p99/p50": round(figures["p99_ms"] / figures["p50_ms"], 2),
                    "vs st": round(figures["texts_per_s"] / baseline, 2),
                    "min cos": round(parity[name], 6),
                }
            )
    print(format_table(rows))
    return {"machine": machine_info(), "n": args.n, "rounds": args.rounds, "rows": rows}


class _Quiet:
    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=512, help="texts per throughput pass")
    p.add_argument("--singles", type=int, default=100, help="single-text calls per latency pass")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per condition (best counts)")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--no-onnx", action="store_true", help="leave ONNX Runtime out")
    p.add_argument("--tag", default="", help="suffix of the results file name (engines<tag>.json)")
    p.add_argument("--quick", action="store_true", help="smoke run: 128 texts, 30 singles, 1 round")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.singles, args.rounds = 128, 30, 1
    return args


def main(argv: Sequence[str] | None = None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    data = run(args)
    print(f"wrote {write_results(results_name('engines', args.tag, args.quick), data)}")


if __name__ == "__main__":
    main()
