"""What a remote embedder adds: one text (and one batch) embedded in-process versus through the registry's
remote path to an OpenAI-compatible server running the same model.

Both sides run the same model with the same settings: ``local`` is memproxy's embedding engine in this
process, reached through the model registry as a container's local embedder is; ``remote`` is a start-up
remote embedder (``--embedder ID=URL#provider=openai,...``) whose server is a second memproxy process's
OpenAI endpoint (``/openai/v1/embeddings``) on loopback. The difference is what going remote costs: HTTP,
JSON both ways, the other process's event loop. Calls alternate local/remote (order flipped every round), so
drift on the machine hits both alike.

    .venv/bin/python -m scripts.bench.remote_embedder --embed-threads 1
    .venv/bin/python -m scripts.bench.remote_embedder --quick
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Any, cast

from proxy.core.models import ModelRegistry, ProviderCall, StartupModel
from proxy.store.models import ModelDocs
from scripts.bench.common import (
    DEFAULT_OPENSEARCH_URL,
    add_embed_options,
    embed_args,
    embed_settings,
    format_table,
    latency_summary,
    machine_info,
    results_name,
    start_embedders,
    start_proxy,
    synthetic_texts,
    write_results,
)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    proxy = start_proxy(args.url, ["--auth", "none", *embed_args(args)])
    embedders = await start_embedders(embed_settings(args))
    try:
        info = embedders.infos()[0]
        remote_call = ProviderCall(
            wire="openai",
            endpoint_url=f"{proxy.url}/openai/v1",
            api_path="/embeddings",
            model=str(info.name),
            dimension=int(info.dimension),
        )
        registry = ModelRegistry(
            ModelDocs(cast(Any, None)),  # start-up and local models only: no registry documents are read
            embedders,
            startup=[StartupModel("remote", "embedder", remote_call)],
        )
        local = await registry.embedding_model(str(info.id))
        remote = await registry.embedding_model("remote")
        texts = synthetic_texts(args.texts, seed=7)
        batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
        for model in (local, remote):  # warm both paths (connections, kernels)
            await model.embed(texts[:8])
        names = ("local_1", "remote_1", "local_batch", "remote_batch")
        series: dict[str, list[float]] = {k: [] for k in names}
        for round_no in range(args.rounds):
            order = [("local", local), ("remote", remote)]
            if round_no % 2:
                order.reverse()
            for text in texts:
                for name, model in order:
                    start = time.perf_counter()
                    vectors = await model.embed([text])
                    series[f"{name}_1"].append(time.perf_counter() - start)
                    assert len(vectors[0]) == info.dimension
            for batch in batches:
                for name, model in order:
                    start = time.perf_counter()
                    await model.embed(batch)
                    series[f"{name}_batch"].append(time.perf_counter() - start)
        # The two paths give the same vectors (same model, same settings): the comparison is like for like.
        a, b = (await local.embed(texts[:4])), (await remote.embed(texts[:4]))
        max_diff = max(abs(x - y) for va, vb in zip(a, b, strict=True) for x, y in zip(va, vb, strict=True))
        await registry.close()
    finally:
        await embedders.close()
        proxy.stop()
    summary = {k: latency_summary(v) for k, v in series.items()}
    rows = []
    for size in ("1", "batch"):
        lo, re_ = summary[f"local_{size}"], summary[f"remote_{size}"]
        rows.append(
            {
                "texts per call": 1 if size == "1" else args.batch,
                "local p50 ms": lo["p50_ms"],
                "remote p50 ms": re_["p50_ms"],
                "added p50 ms": re_["p50_ms"] - lo["p50_ms"],
                "remote/local p50": re_["p50_ms"] / lo["p50_ms"],
                "local p90 ms": lo["p90_ms"],
                "remote p90 ms": re_["p90_ms"],
                "remote/local p90": re_["p90_ms"] / lo["p90_ms"],
            }
        )
    print(format_table(rows))
    print(f"largest difference between the two paths' vectors: {max_diff:.2e}")
    return {
        "benchmark": "remote_embedder",
        "args": vars(args),
        "machine": machine_info(),
        "summary": summary,
        "table": rows,
        "max_vector_difference": max_diff,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=DEFAULT_OPENSEARCH_URL, help="OpenSearch node (default $OPENSEARCH_URL)")
    p.add_argument("--texts", type=int, default=200, help="texts embedded one by one per round")
    p.add_argument("--batch", type=int, default=32, help="texts per batch call")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="smoke run")
    p.add_argument("--tag", default="")
    add_embed_options(p)
    args = p.parse_args(argv)
    if args.quick:
        args.texts, args.rounds = 32, 1
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    data = asyncio.run(run(args))
    print(f"wrote {write_results(results_name('remote_embedder', args.tag, args.quick), data)}")


if __name__ == "__main__":
    main()
