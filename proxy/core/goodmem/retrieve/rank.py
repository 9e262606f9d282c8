"""Ranking: cosines from Lucene scores, fused across the embedders of a space, merged across spaces."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "RankedChunk",
    "VectorScore",
    "WeightedHits",
    "cosine_from_os_score",
    "fuse_space",
    "merge_spaces",
    "single",
    "vector_score",
]

# How the vector stage's relevanceScore is sent (--goodmem-vector-score); ranking never depends on it.
VectorScore = Literal["live", "cosine"]


def cosine_from_os_score(score: float | None) -> float:
    """Lucene cosinesimil ``_score`` = ``(1 + cos) / 2`` → ``cos``."""
    return 2.0 * float(score or 0.0) - 1.0


@dataclass(frozen=True)
class RankedChunk:
    """One retrieved chunk: its long-term document, the memory it belongs to, and its fused cosine."""

    chunk_id: str
    memory_id: str
    space_id: str
    score: float
    source: Mapping[str, Any]


@dataclass(frozen=True)
class WeightedHits:
    """One embedder's contribution to a space: its weight and the cosine of every chunk it scored."""

    weight: float
    scores: Mapping[str, float]


def fuse_space(contributions: Sequence[WeightedHits]) -> dict[str, float]:
    """Weighted mean of the embedders' cosines: ``Σ w·cos / Σ |w|`` over the non-zero weights.

    Candidates are the chunks found by a positively weighted embedder (a negative weight only penalises).
    The caller fills in each candidate's score under every embedder first (an exact second search), so no
    score is guessed; a chunk still missing from some embedder counts 0 there. With one embedder of weight
    w > 0 the fused score is that embedder's cosine.
    """
    active = [c for c in contributions if c.weight != 0]
    norm = sum(abs(c.weight) for c in active)
    if not active or norm == 0:
        return {}
    candidates: set[str] = set()
    for c in active:
        if c.weight > 0:
            candidates.update(c.scores)
    return {cid: sum(c.weight * c.scores.get(cid, 0.0) for c in active) / norm for cid in candidates}


def merge_spaces(per_space: Iterable[Sequence[RankedChunk]], size: int) -> list[RankedChunk]:
    """Best first across spaces (all scores are cosines, so they compare directly), at most ``size`` items.

    A chunk reached twice (the same space listed twice with different filters) keeps its best score.
    Ties keep request order (stable sort), so the answer is deterministic.
    """
    best: dict[str, RankedChunk] = {}
    order: list[str] = []
    for ranked in per_space:
        for item in ranked:
            seen = best.get(item.chunk_id)
            if seen is None:
                order.append(item.chunk_id)
                best[item.chunk_id] = item
            elif item.score > seen.score:
                best[item.chunk_id] = item
    merged = sorted((best[cid] for cid in order), key=lambda item: -item.score)
    return merged[:size]


def single(value: float) -> float:
    """``value`` rounded to single precision, as live servers send scores (Java floats): ``0.1`` is sent as
    ``0.10000000149011612``, never with digits the computation does not have."""
    return float(struct.unpack("f", struct.pack("f", value))[0]) + 0.0  # + 0.0: never -0.0


def vector_score(cosine: float, convention: VectorScore) -> float:
    """The wire ``relevanceScore`` of a (fused) cosine. ``live``: ``-cos``, what live GoodMem servers send
    (pgvector's negative inner product, which is ``-cos`` for normalised embeddings; more negative is
    better, still streamed best first); ``cosine``: ``cos``. Fusion and merging work on cosines, so a fused
    or merged score is the same function of the fused cosine under both conventions."""
    return single(-cosine if convention == "live" else cosine)
