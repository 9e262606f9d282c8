"""A 2-D map of a container's memory vectors: PCA of a sample, with near-duplicates marked.

:func:`build_map` is pure and CPU-bound (an eigendecomposition and an nxn cosine matrix); the page runs it in
a worker thread so the event loop keeps serving. ``templates/_pictures.html`` draws the result, each point a
link to its memory's page with its text, escaped, as the tooltip.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from proxy.core.inspection import VectorSample

__all__ = ["DUPLICATE_COSINE", "MapPoint", "VectorMap", "build_map", "near_duplicates", "pca_2d"]

# Two memories whose vectors' cosine is at least this are drawn as near-duplicates. With
# all-MiniLM-L6-v2, 0.98 is the same sentence re-worded slightly or re-cased; unrelated texts stay below 0.9.
DUPLICATE_COSINE = 0.98
# The pairs drawn as a joining line (every member is marked regardless): past this the lines hide the map.
MAX_PAIR_LINES = 500
EXCERPT = 160
SIZE = 520
PAD = 16

Matrix = npt.NDArray[np.float64]


def pca_2d(vectors: Matrix) -> tuple[Matrix, tuple[float, float]]:
    """Each row projected on the first two principal components, and the share of the variance each one
    explains. Through the dxd covariance (d, the vector size, is small next to a 2,000-row sample)."""
    n, d = vectors.shape
    if n == 0:
        return np.zeros((0, 2)), (0.0, 0.0)
    centred = vectors - vectors.mean(axis=0)
    covariance = centred.T @ centred / max(n - 1, 1)
    values, axes = np.linalg.eigh(covariance)  # ascending eigenvalues
    order = np.argsort(values)[::-1][:2]
    top = axes[:, order]
    if top.shape[1] < 2:  # 1-d vectors: the second coordinate is 0
        top = np.hstack([top, np.zeros((d, 2 - top.shape[1]))])
    # A component's sign is arbitrary: fix it (largest loading positive) so a reload draws the same map.
    signs = np.sign(top[np.abs(top).argmax(axis=0), range(2)])
    top = top * np.where(signs == 0, 1.0, signs)
    total = float(values.clip(min=0).sum())
    explained = [float(values[i]) / total if total > 0 else 0.0 for i in order]
    explained += [0.0] * (2 - len(explained))
    return centred @ top, (explained[0], explained[1])


def near_duplicates(vectors: Matrix, threshold: float = DUPLICATE_COSINE) -> list[tuple[int, int]]:
    """Every pair (i < j) of rows whose cosine is at least ``threshold``; a zero vector pairs with none."""
    norms = np.linalg.norm(vectors, axis=1)
    unit = np.divide(vectors, norms[:, None], out=np.zeros_like(vectors), where=norms[:, None] > 0)
    unit32 = unit.astype(np.float32)  # half the memory of the nxn matrix; cosines need no more digits
    cosines = unit32 @ unit32.T
    i, j = np.nonzero(np.triu(cosines >= np.float32(threshold), k=1))
    return list(zip(i.tolist(), j.tolist(), strict=True))


@dataclass(frozen=True)
class MapPoint:
    id: str
    x: float
    y: float
    title: str
    duplicate: bool


@dataclass(frozen=True)
class VectorMap:
    """The drawn map: points in a ``size``x``size`` user space, the duplicate pairs' segments, and how it was
    made (sample size, the index's total, the variance the two axes explain, the seconds PCA took)."""

    index: str
    field: str
    points: list[MapPoint]
    pairs: list[tuple[MapPoint, MapPoint]]
    duplicates: int
    total: int
    explained: tuple[float, float]
    seconds: float
    threshold: float = DUPLICATE_COSINE
    size: int = SIZE


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT else flat[: EXCERPT - 1] + "…"


def _fit(coords: Matrix, size: int) -> Matrix:
    """Coordinates scaled into the square (one factor for both axes, so distances keep their proportions);
    the y axis points up, as a plot's does."""
    if len(coords) == 0:
        return coords
    lo, hi = coords.min(axis=0), coords.max(axis=0)
    span = float((hi - lo).max())
    scale = (size - 2 * PAD) / span if span > 0 else 0.0
    centre = (lo + hi) / 2
    fitted = (coords - centre) * scale
    return np.column_stack([size / 2 + fitted[:, 0], size / 2 - fitted[:, 1]])


def build_map(sample: VectorSample, threshold: float = DUPLICATE_COSINE, size: int = SIZE) -> VectorMap:
    """PCA of the sample's vectors and its near-duplicate pairs, placed for drawing. Vectors of another
    length than the first one's (a container whose embedder changed) are left out."""
    started = time.perf_counter()
    dimension = len(sample.vectors[0]) if sample.vectors else 0
    keep = [k for k, v in enumerate(sample.vectors) if len(v) == dimension]
    vectors = np.asarray([sample.vectors[k] for k in keep], dtype=np.float64).reshape(len(keep), dimension)
    coords, explained = pca_2d(vectors)
    pairs = near_duplicates(vectors, threshold) if len(keep) > 1 else []
    placed = _fit(coords, size)
    in_pair = {k for pair in pairs for k in pair}
    points = [
        MapPoint(
            id=sample.ids[k],
            x=round(float(placed[row, 0]), 1),
            y=round(float(placed[row, 1]), 1),
            title=_excerpt(sample.texts[k]) or sample.ids[k],
            duplicate=row in in_pair,
        )
        for row, k in enumerate(keep)
    ]
    return VectorMap(
        index=sample.index,
        field=sample.field,
        points=points,
        pairs=[(points[i], points[j]) for i, j in pairs[:MAX_PAIR_LINES]],
        duplicates=len(in_pair),
        total=sample.total,
        explained=explained,
        seconds=time.perf_counter() - started,
        threshold=threshold,
        size=size,
    )
