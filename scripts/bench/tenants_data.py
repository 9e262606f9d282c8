"""The tenant-scale corpus: skewed container sizes, memproxy's long-term documents, the direct bulk load, and
what an index costs on the node (docs, disk, vector files, heap).

Used by ``scripts/bench/tenants.py``; see its docstring for the benchmark itself.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from tqdm import tqdm

from scripts.bench.common import Node, make_vectors

DIM = 384
FIELD = "memory_embedding"
# Row ids are UUIDs (memproxy's own ids are UUIDs, and GoodMem shows a long-term memory's id as its memory
# and chunk id) whose low 64 bits are the corpus row: the oracle reads the row back from any hit.
_ID_BASE = uuid.UUID("6d656d70-726f-7879-0000-000000000000").int
# Vector files of a Lucene segment (``include_segment_file_sizes``): raw float vectors (vec), the HNSW graph
# (vex), their metadata (vem, vemf), and the quantized vectors of the sq encoder (veq, vemq) or BBQ (veb).
VECTOR_FILES = ("vec", "vex", "vem", "vemf", "veq", "vemq", "veb", "vemb")


def row_id(row: int) -> str:
    return str(uuid.UUID(int=_ID_BASE | row))


def id_row(doc_id: str) -> int:
    return uuid.UUID(doc_id).int & 0xFFFF_FFFF_FFFF_FFFF


# --------------------------------------------------------------------------------------------- sizes


def container_sizes(total: int, containers: int, smallest: int, largest: int, seed: int) -> np.ndarray:
    """``containers`` sizes summing to exactly ``total``, each in [smallest, largest], heavily skewed.

    A Zipf law with seeded log-normal jitter: rank r gets ``largest * jitter_r * r**-alpha`` clipped to the
    bounds, ``alpha`` found by bisection so that the sum hits ``total`` (rank 1 is exactly ``largest``).
    Returned in a seeded random order: container creation order says nothing about size.
    """
    if largest + (containers - 1) * smallest > total or containers * largest < total:
        raise ValueError(
            f"{total:,} memories cannot fill {containers:,} containers of {smallest:,}..{largest:,} "
            "with one of the largest size"
        )
    rng = np.random.default_rng(seed)
    jitter = rng.lognormal(0.0, 0.25, containers)
    jitter[0] = 1.0
    ranks = np.arange(1, containers + 1, dtype=np.float64)

    def sizes(alpha: float) -> np.ndarray:
        return np.clip(largest * jitter * ranks**-alpha, smallest, largest)

    lo, hi = 0.0, 16.0  # the sum falls as alpha grows
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sizes(mid).sum() > total else (lo, mid)
    out = np.floor(sizes(hi)).astype(np.int64)
    out[0] = largest
    while (missing := total - int(out.sum())) > 0:  # floor() lost < 1 per container: top up the big ones
        room = np.flatnonzero(out < largest)
        room = room[np.argsort(-out[room], kind="stable")][:missing]
        out[room] += 1
    while (extra := int(out.sum()) - total) > 0:
        room = np.flatnonzero(out > smallest)[1:]
        out[room[:extra]] -= 1
    return rng.permutation(out)


@dataclass
class Tenancy:
    """Which corpus rows belong to which container: container j holds rows offsets[j] .. offsets[j+1]-1."""

    sizes: np.ndarray
    offsets: np.ndarray  # len(sizes) + 1
    vectors: np.ndarray  # (total, DIM) float32, the values the JSON carries
    write_order: np.ndarray  # a seeded permutation of the rows: tenants write interleaved
    ids: list[str]  # the container ids, once created through memproxy
    owner_id: str = ""  # who writes the memories (memproxy records the caller's user id)

    @classmethod
    def make(cls, total: int, containers: int, smallest: int, largest: int, seed: int) -> Tenancy:
        sizes = container_sizes(total, containers, smallest, largest, seed)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        order = np.random.default_rng(seed + 3).permutation(total)
        return cls(sizes, offsets, make_vectors("lowrank", total, DIM, seed), order, [])

    def rows(self, j: int) -> np.ndarray:
        return np.arange(self.offsets[j], self.offsets[j + 1])

    def owner(self, rows: np.ndarray) -> np.ndarray:
        """The container index of each row."""
        return np.searchsorted(self.offsets, rows, side="right") - 1

    def classes(self) -> dict[str, int]:
        """The containers measured by name: the smallest, the median and the largest (by size)."""
        order = np.argsort(self.sizes, kind="stable")
        return {"small": int(order[0]), "median": int(order[len(order) // 2]), "large": int(order[-1])}


# --------------------------------------------------------------------------------------------- documents


def memory_source(container_id: str, row: int, now_ms: int, owner_id: str) -> dict[str, Any]:
    """The long-term document memproxy writes for ``_memproxy_bulk`` (``proxy.core.longterm._document``: its
    keys, in its order), without the vector; tests/test_bench_tenants.py compares the keys with a real write.
    GoodMem retrieve shows such a document as a memory of one chunk (proxy.core.goodmem.records)."""
    return {
        "memory": f"synthetic memory {row}",
        "strategy_type": "SEMANTIC",
        "namespace": {"user_id": f"u{row % 3}"},
        "namespace_size": 1,
        "owner_id": owner_id,
        "memory_container_id": container_id,
        "created_time": now_ms,
        "last_updated_time": now_ms,
    }


def bulk_body(
    index: str, tenancy: Tenancy, rows: np.ndarray, container_ids: Sequence[str], routed: bool, now_ms: int
) -> bytes:
    """NDJSON ``_bulk`` of ``rows`` (``container_ids``: each row's container); orjson encodes the vectors
    (18 x faster than json + ``vector_json`` here: at 2 M memories that is ~40 CPU-minutes on 2 cores)."""
    parts: list[bytes] = []
    for row, container_id in zip(rows.tolist(), container_ids, strict=True):
        action: dict[str, Any] = {"_index": index, "_id": row_id(row)}
        if routed:
            action["routing"] = container_id
        source = memory_source(container_id, row, now_ms, tenancy.owner_id)
        source[FIELD] = tenancy.vectors[row]
        parts.append(orjson.dumps({"create": action}))
        parts.append(orjson.dumps(source, option=orjson.OPT_SERIALIZE_NUMPY))
    return b"\n".join(parts) + b"\n"


async def bulk_load(
    node: Node,
    index: str,
    tenancy: Tenancy,
    rows: np.ndarray,
    container_ids: Sequence[str],
    *,
    routed: bool,
    batch: int,
    clients: int,
    desc: str,
) -> float:
    """Write ``rows`` (in that order) into ``index`` with refresh off, then refresh; returns the seconds the
    writes took (the refresh excluded). ``container_ids[i]`` is the container of ``rows[i]``."""
    import time

    now = int(time.time() * 1000)
    blocks = [(s, min(s + batch, len(rows))) for s in range(0, len(rows), batch)]
    bar = tqdm(total=len(rows), desc=desc, unit="doc", smoothing=0.05, leave=False)

    async def worker() -> None:
        while blocks:
            lo, hi = blocks.pop(0)
            body = await asyncio.to_thread(
                bulk_body, index, tenancy, rows[lo:hi], container_ids[lo:hi], routed, now
            )
            await node.bulk(body)
            bar.update(hi - lo)

    await node.request("PUT", f"/{index}/_settings", {"index": {"refresh_interval": "-1"}})
    start = time.perf_counter()
    try:
        await asyncio.gather(*(worker() for _ in range(clients)))
    finally:
        elapsed = time.perf_counter() - start
        bar.close()
        await node.request("PUT", f"/{index}/_settings", {"index": {"refresh_interval": None}})
    await node.request("POST", f"/{index}/_refresh")
    return elapsed


# --------------------------------------------------------------------------------------------- footprint


async def footprint(node: Node, index: str) -> dict[str, Any]:
    """Docs, shards, on-disk size (primaries and all copies, as ``_cat/indices`` shows them), segments, and
    the vector files by kind (primaries): what the k-NN search needs in the page cache."""
    cat = await node.request("GET", f"/_cat/indices/{index}", params={"format": "json", "bytes": "b"})
    stats = await node.request(
        "GET",
        f"/{index}/_stats/docs,store,segments",
        params={"include_segment_file_sizes": "true"},
    )
    primaries = stats["indices"][index]["primaries"]
    files = primaries["segments"].get("file_sizes", {})
    vector_files = {ext: int(files[ext]["size_in_bytes"]) for ext in VECTOR_FILES if ext in files}
    return {
        "docs": int(cat[0]["docs.count"]),
        "primaries": int(cat[0]["pri"]),
        "replicas": int(cat[0]["rep"]),
        "store_bytes": int(cat[0]["store.size"]),
        "primary_store_bytes": int(cat[0]["pri.store.size"]),
        "segments": int(primaries["segments"]["count"]),
        "vector_file_bytes": vector_files,
    }


async def heap_used_bytes(node: Node) -> int:
    """Heap in use over all nodes (``_nodes/stats/jvm``): a sample, GC timing included."""
    stats = await node.request("GET", "/_nodes/stats/jvm")
    return int(sum(n["jvm"]["mem"]["heap_used_in_bytes"] for n in stats["nodes"].values()))


# The quantized variants of the lucene engine that k-NN 3.6 accepts (probed on the node: sq with bits 7 and 1;
# bits 4 is refused with "Unsupported bits value: 4"; ``mode: on_disk`` is accepted with engine lucene).
QUANTIZED = {
    "sq7": {"parameters": {"encoder": {"name": "sq", "parameters": {"bits": 7}}}},
    "sq1": {"parameters": {"encoder": {"name": "sq", "parameters": {"bits": 1}}}},
}


async def clone_quantized(node: Node, source: str, target: str, variant: str) -> None:
    """``target``: ``source``'s settings (shards, replicas) and mapping (``_meta`` included), with the
    ``memory_embedding`` method given the ``variant``'s encoder."""
    mapping = (await node.request("GET", f"/{source}/_mapping"))[source]["mappings"]
    flat = await node.request("GET", f"/{source}/_settings", params={"flat_settings": "true"})
    keep = ("index.number_of_shards", "index.number_of_replicas", "index.auto_expand_replicas", "index.knn")
    settings = {k: v for k, v in flat[source]["settings"].items() if k.startswith(keep)}
    method = mapping["properties"][FIELD]["method"]
    method["parameters"] = {**method.get("parameters", {}), **QUANTIZED[variant]["parameters"]}
    await node.request("PUT", f"/{target}", {"settings": settings, "mappings": mapping})
