"""What ``infer: true`` costs beyond its LLM calls, with an LLM that answers at once.

One memproxy process (``--auth none``) with the tests' deterministic LLM as a start-up ``--llm``, a container
with one SEMANTIC strategy. Measured side by side, in rounds:

- ``plain``: an add without ``infer`` (the working-memory write alone);
- ``infer``: the same add with ``infer: true`` and ``wait_for_inference`` (the job enqueued, claimed, run:
  extraction, similar-memory search, decision step when something similar exists, embedding, writes,
  history), so its latency is the whole pipeline;
- ``llm_call``: one chat call straight to the LLM server (what one of the pipeline's LLM calls costs).

Added latency beyond the LLM = ``infer`` - ``plain`` - calls * ``llm_call``; conversations/s at concurrency
1 and 4. Every user has two conversations, so half the extractions consolidate (two LLM calls).

    .venv/bin/python -m scripts.bench.infer --embed-threads 1
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any

from scripts.bench.common import (
    DEFAULT_OPENSEARCH_URL,
    Proxy,
    add_embed_options,
    embed_args,
    format_table,
    latency_summary,
    machine_info,
    results_name,
    start_proxy,
    write_results,
)
from tests.support.fake_llm import FakeLLM

MC = "/_plugins/_ml/memory_containers"
FACTS = ["I only drink green tea", "I live in Lisbon", "I work as a nurse", "I have a dog called Rex"]


def _conversation(user: int, turn: int) -> list[dict[str, Any]]:
    facts = FACTS[:2] if turn == 0 else FACTS[1:]
    text = ". ".join(f"{f} (user {user})" for f in facts) + "."
    return [{"role": "user", "content": [{"type": "text", "text": text}]}]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with FakeLLM() as llm:
        proc = start_proxy(
            args.url,
            [
                "--auth",
                "none",
                "--llm",
                f"bench-llm={llm.url}#provider=openai,model=fake-llm",
                *embed_args(args),
            ],
        )
        proxy = Proxy(proc.url)
        try:
            prefix = f"memproxy-bench-infer-{uuid.uuid4().hex[:6]}"
            health = await proxy.json("GET", "/_memproxy/health")
            embedder = health["proxy"]["embedders"][0]
            created = await proxy.json(
                "POST",
                f"{MC}/_create",
                {
                    "name": prefix,
                    "configuration": {
                        "embedding_model_type": "TEXT_EMBEDDING",
                        "embedding_model_id": embedder["id"],
                        "embedding_dimension": embedder["dimension"],
                        "llm_id": "bench-llm",
                        "index_prefix": prefix,
                        "use_system_index": False,
                        "strategies": [{"type": "SEMANTIC", "namespace": ["user_id"]}],
                    },
                },
            )
            cid = created["memory_container_id"]
            series: dict[str, list[float]] = {"plain": [], "infer": [], "llm_call": []}
            chat = {"model": "fake-llm", "messages": [{"role": "user", "content": "Say OK."}]}
            calls_before = len(llm.prompts)
            user = 0
            for _ in range(args.rounds):
                for _ in range(args.users):
                    user += 1
                    for turn in (0, 1):
                        body = {"messages": _conversation(user, turn), "namespace": {"user_id": f"u{user}"}}
                        start = time.perf_counter()
                        await proxy.json("POST", f"{MC}/{cid}/memories", body)
                        series["plain"].append(time.perf_counter() - start)
                        start = time.perf_counter()
                        added = await proxy.json(
                            "POST", f"{MC}/{cid}/memories?wait_for_inference=true", {**body, "infer": True}
                        )
                        series["infer"].append(time.perf_counter() - start)
                        assert added["inference"]["state"] == "COMPLETED", added
                        start = time.perf_counter()
                        async with proxy.session.post(f"{llm.url}/v1/chat/completions", json=chat) as resp:
                            await resp.read()
                        series["llm_call"].append(time.perf_counter() - start)
            pipeline_calls = len(llm.prompts) - calls_before - len(series["llm_call"])
            per_conversation_calls = pipeline_calls / len(series["infer"])
            # Throughput: conversations through the whole pipeline at concurrency 1 and 4.
            throughput: dict[int, float] = {}
            for concurrency in (1, 4):
                bodies = [
                    {
                        "messages": _conversation(10_000 * concurrency + i, i % 2),
                        "namespace": {"user_id": f"t{concurrency}-{i // 2}"},
                        "infer": True,
                    }
                    for i in range(args.throughput_n)
                ]
                sem = asyncio.Semaphore(concurrency)

                async def one(body: dict[str, Any], sem: asyncio.Semaphore = sem) -> None:
                    async with sem:
                        await proxy.json("POST", f"{MC}/{cid}/memories?wait_for_inference=true", body)

                start = time.perf_counter()
                await asyncio.gather(*(one(b) for b in bodies))
                throughput[concurrency] = len(bodies) / (time.perf_counter() - start)
            await proxy.json("DELETE", f"{MC}/{cid}?delete_all_memories=true", ok=(200, 404))
        finally:
            await proxy.close()
            proc.stop()
    summary = {k: latency_summary(v) for k, v in series.items()}
    plain, infer, call = (summary[k]["p50_ms"] for k in ("plain", "infer", "llm_call"))
    beyond = infer - plain - per_conversation_calls * call
    rows = [
        {
            "add p50 ms": plain,
            "add+infer p50 ms": infer,
            "LLM calls / conversation": per_conversation_calls,
            "one LLM call p50 ms": call,
            "added beyond LLM p50 ms": beyond,
            "infer / add p50": infer / plain,
            "conv/s c=1": throughput[1],
            "conv/s c=4": throughput[4],
        }
    ]
    print(format_table(rows))
    return {
        "benchmark": "infer",
        "args": vars(args),
        "machine": machine_info(),
        "summary": summary,
        "table": rows,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=DEFAULT_OPENSEARCH_URL, help="OpenSearch node (default $OPENSEARCH_URL)")
    p.add_argument("--users", type=int, default=20, help="users per round (two conversations each)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--throughput-n", type=int, default=40, help="conversations per throughput run")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tag", default="")
    add_embed_options(p)
    args = p.parse_args(argv)
    if args.quick:
        args.users, args.rounds, args.throughput_n = 3, 1, 8
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    data = asyncio.run(run(args))
    print(f"wrote {write_results(results_name('infer', args.tag, args.quick), data)}")


if __name__ == "__main__":
    main()
