"""Charts for docs/benchmarks.md from the latest ``results/*.json``: PNGs under ``docs/img/``.

- ``latency-vs-concurrency.png`` (overhead.json): p50 / p99 of both APIs and the embed + knn baseline;
- ``ingest-throughput.png`` (ingest.json): memories/s of every path against the embedding-bound ceiling;
- ``recall-vs-selectivity.png`` (scale*.json): recall@10 and the count rule by the share of matching memories;
- ``recall-vs-ef-search.png`` (scale*.json with ``--ef-sweep``): recall and latency of the broad filters;
- ``mlcommons-side-by-side.png`` (mlcommons.json): memproxy next to the real ml-commons 3.6: latency,
  ingest, recall@10 and hits per answer by namespace size.

A chart whose results are missing is skipped with a note; nothing is invented.

    .venv/bin/python -m scripts.bench.plots
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from scripts.bench.common import REPO, RESULTS

IMG = REPO / "docs" / "img"
LABELS = {
    "opensearch_api": "memproxy _semantic_search",
    "goodmem_api": "memproxy GoodMem retrieve",
    "baseline": "embed + direct knn (baseline)",
    "embed_only": "embedder alone",
    "knn_only": "direct knn alone",
    "doc_get": "document GET (direct)",
    "doc_get_via_proxy": "document GET via proxy",
    "direct_bulk": "direct _bulk (refresh=true)",
    "direct_bulk_norefresh": "direct _bulk (no refresh)",
}
INGEST_LABELS = {
    **LABELS,
    "opensearch_api": "memproxy _memproxy_bulk (OpenSearch API)",
    "goodmem_api": "memproxy GoodMem batchCreate",
}


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        print(f"skip: {path} is missing")
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def save(fig: Any, name: str) -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(IMG / name, dpi=110)
    plt.close(fig)
    print(f"wrote {IMG / name}")


def latency_chart(data: dict[str, Any]) -> None:
    rows = data["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key in zip(axes, ("p50 ms", "p99 ms"), strict=True):
        for variant in ("opensearch_api", "goodmem_api", "baseline", "embed_only", "knn_only"):
            pts = sorted((r["concurrency"], r[key]) for r in rows if r["variant"] == variant)
            if pts:
                style = "--" if variant in ("embed_only", "knn_only") else "-"
                ax.plot(*zip(*pts, strict=True), style, marker="o", label=LABELS[variant])
        ax.set_xscale("log", base=2)
        ax.set_xticks(
            sorted({r["concurrency"] for r in rows}),
            labels=[str(c) for c in sorted({r["concurrency"] for r in rows})],
        )
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel(f"{key.split()[0]} latency (ms)")
        ax.set_title(f"retrieval latency, {key.split()[0]}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    save(fig, "latency-vs-concurrency.png")


def ingest_chart(data: dict[str, Any]) -> None:
    rows = data["rows"]
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    names = [INGEST_LABELS.get(r["variant"], r["variant"]) for r in rows]
    rates = [r["memories/s"] for r in rows]
    bars = ax.barh(names, rates, color=["#888" if r["variant"] == "embed_only" else "#4a7ab5" for r in rows])
    ceiling = data["bounds"]["ceiling"]
    ax.axvline(ceiling, color="k", ls=":", label=f"embedding-bound ceiling ({ceiling:.0f}/s)")
    ax.axvline(0.9 * ceiling, color="r", ls="--", label="target: 0.9 x ceiling")
    serial = data["bounds"].get("embed_then_bulk_bound")
    if serial:
        ax.axvline(serial, color="g", ls="-.", label=f"embed, then direct _bulk ({serial:.0f}/s)")
    for bar, rate in zip(bars, rates, strict=True):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {rate:.0f}", va="center", fontsize=8)
    ax.set_xlabel("memories per second")
    ax.set_title(f"ingest, batches of {data['params']['batch']}, {data['params']['clients']} clients")
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="lower right")
    save(fig, "ingest-throughput.png")


def _share(case: dict[str, Any], n: int) -> float | None:
    matching = case["matching"]
    if matching == "all":
        return None
    return max(int(matching), 1) / n


def recall_chart(runs: list[tuple[str, dict[str, Any]]]) -> None:
    fig, ax = plt.subplots(figsize=(8.5, 4.4))
    for label, data in runs:
        n = data["summary"]["n"]
        pts = sorted(
            (s, c[f"recall@{data['params']['k']}"])
            for c in data["cases"]
            if (s := _share(c, n)) is not None and c["matching"] > 0
        )
        summary = data["summary"]
        rule = f"count rule {summary['count_rule_ok']}/{summary['count_rule_checked']}"
        # runs from before the default was recorded used the index's ef_search, 100
        ef = data["params"].get("default_ef_search", 100)
        ax.plot(*zip(*pts, strict=True), marker="o", label=f"{label}, ef_search {ef} ({rule})")
    ax.axhline(0.99, color="r", ls="--", label="target 0.99")
    ax.set_xscale("log")
    ax.set_xlabel("share of the container's memories that match the filter")
    ax.set_ylabel("mean recall@10 vs exact oracle")
    ax.set_title("filtered k-NN recall@10 against the exact oracle (memproxy's default ef_search)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, "recall-vs-selectivity.png")


def ef_chart(runs: list[tuple[str, dict[str, Any]]]) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, data in runs:
        sweep = [r for r in data.get("ef_sweep", []) if r["matching"] == data["summary"]["n"]]
        if not sweep:
            continue
        pts = sorted((r["ef_search"], r[f"recall@{data['params']['k']}"], r["client p50 ms"]) for r in sweep)
        ef, rec, took = zip(*pts, strict=True)
        axes[0].plot(ef, rec, marker="o", label=label)
        axes[1].plot(ef, took, marker="o", label=label)
    for ax, title, ylabel in (
        (axes[0], "recall@10, container filter only", "mean recall@10"),
        (axes[1], "query latency at the client, p50", "ms"),
    ):
        ax.set_xscale("log")
        ax.set_xlabel("method_parameters.ef_search")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].axhline(0.99, color="r", ls="--", label="target 0.99")
    axes[0].legend(fontsize=8)
    save(fig, "recall-vs-ef-search.png")


SIDE_COLORS = {"memproxy": "#4a7ab5", "ml-commons": "#d08a3a"}


def _bars(ax: Any, groups: Sequence[str], values: dict[str, Sequence[float]], fmt: str = "{:.0f}") -> None:
    """Bars of both sides next to each other for every group, each labelled with its value."""
    width = 0.38
    for j, (side, vals) in enumerate(values.items()):
        xs = [i + (j - 0.5) * width for i in range(len(groups))]
        bars = ax.bar(xs, vals, width, label=side, color=SIDE_COLORS.get(side))
        for bar, v in zip(bars, vals, strict=True):
            ax.text(
                bar.get_x() + width / 2, bar.get_height(), fmt.format(v), ha="center", va="bottom", fontsize=7
            )
    ax.set_xticks(range(len(groups)), labels=list(groups), fontsize=8)
    ax.grid(alpha=0.3, axis="y")


def mlcommons_chart(data: dict[str, Any]) -> None:
    sides = ("memproxy", "ml-commons")
    k = data["params"]["k"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.6))
    lat = {(r["concurrency"], r["side"]): r for r in data["latency"]}
    levels = sorted({c for c, _ in lat})
    groups = [f"{p} @ {c}" for c in levels for p in ("p50", "p99")]
    values = {s: [lat[(c, s)][f"{p} ms"] for c in levels for p in ("p50", "p99")] for s in sides}
    _bars(axes[0][0], groups, values)
    ratios = ", ".join(
        f"{g} {a / b:.2f}" for g, a, b in zip(groups, values["memproxy"], values["ml-commons"], strict=True)
    )
    axes[0][0].set_title(
        f"_semantic_search latency (ms) at concurrency {', '.join(map(str, levels))}\n"
        f"memproxy ÷ ml-commons: {ratios}",
        fontsize=9,
    )
    axes[0][0].set_ylabel("ms")
    axes[0][0].legend(fontsize=8)

    rates = {r["side"]: r["memories/s"] for r in data["ingest"]}
    ax = axes[0][1]
    bars = ax.bar(list(sides), [rates[s] for s in sides], color=[SIDE_COLORS[s] for s in sides], width=0.5)
    for bar, s in zip(bars, sides, strict=True):
        ax.text(bar.get_x() + 0.25, bar.get_height(), f"{rates[s]:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(
        range(2),
        labels=[
            "memproxy _memproxy_bulk",
            "ml-commons _bulk + ingest pipeline\n(embeds via memproxy over HTTP)",
        ],
    )
    ax.set_ylabel("memories per second")
    ratio = rates["memproxy"] / rates["ml-commons"]
    ax.set_title(
        f"ingest of the same {data['params']['n']:,} memories\nmemproxy ÷ ml-commons: {ratio:.2f}", fontsize=9
    )
    ax.grid(alpha=0.3, axis="y")

    quality = {(r["side"], r["namespaces"]): r for r in data["quality"]}
    classes = ["large", "medium", "small", "all"]
    memories = data["corpus"]["memories"]
    users = data["corpus"]["users"]
    labels = [f"{c}\n{users[c]} users\n{memories[c]} memories" if c in users else c for c in classes]
    _bars(axes[1][0], labels, {s: [quality[(s, c)][f"recall@{k}"] for c in classes] for s in sides}, "{:.2f}")
    axes[1][0].set_ylim(0, 1.4)
    axes[1][0].set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    axes[1][0].set_ylabel(f"mean recall@{k}")
    axes[1][0].set_title(f"recall@{k} vs exact oracle within the namespace, by namespace size", fontsize=9)
    axes[1][0].legend(fontsize=8, loc="upper center", ncol=2)

    ax = axes[1][1]
    _bars(ax, labels, {s: [quality[(s, c)]["mean hits"] for c in classes] for s in sides}, "{:.1f}")
    expected = [quality[("memproxy", c)]["mean min(k, matching)"] for c in classes]
    post = [quality[("ml-commons", c)]["mean hits if post-filtered"] for c in classes]
    ax.scatter(
        [i - 0.19 for i in range(len(classes))],
        expected,
        marker="_",
        s=350,
        color="k",
        zorder=3,
        label="min(k, matching)",
    )
    ax.scatter(
        [i + 0.19 for i in range(len(classes))],
        post,
        marker="x",
        color="r",
        zorder=3,
        label="exact top k, then post-filter",
    )
    ax.set_ylabel(f"hits per answer (k={k})")
    ax.set_title(f"hits per answer for k={k}, by namespace size", fontsize=9)
    ax.set_ylim(0, k * 1.4)
    ax.legend(fontsize=7, loc="upper center", ncol=2)
    save(fig, "mlcommons-side-by-side.png")


def scale_runs(names: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    runs = []
    for name in names:
        data = load(name)
        if data is not None:
            p = data["params"]
            runs.append((f"{data['summary']['n']:,} {p.get('data', 'random')} vectors", data))
    return runs


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--scale",
        default="scale,scale-lowrank,scale-300k,scale-1m-lowrank",
        help="comma-separated results/<name>.json of scale runs to draw",
    )
    p.add_argument(
        "--ef-sweep",
        default="scale,scale-lowrank,scale-300k,scale-1m-lowrank-ef",
        help="comma-separated results/<name>.json of scale runs with --ef-sweep",
    )
    p.add_argument("--mlcommons", default="mlcommons", help="results/<name>.json of the side-by-side run")
    args = p.parse_args(argv)
    if (overhead := load("overhead")) is not None:
        latency_chart(overhead)
    if (ingest := load("ingest")) is not None:
        ingest_chart(ingest)
    if (side_by_side := load(args.mlcommons)) is not None:
        mlcommons_chart(side_by_side)
    runs = scale_runs([n for n in args.scale.split(",") if n])
    if runs:
        recall_chart(runs)
    sweeps = scale_runs([n for n in args.ef_sweep.split(",") if n])
    if sweeps:
        ef_chart(sweeps)


if __name__ == "__main__":
    main()
