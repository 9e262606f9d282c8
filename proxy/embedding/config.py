"""Plain data: how an embedder is configured, how the engine runs, and what a loaded embedder is."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass

__all__ = [
    "DEFAULT_EMBEDDER_ALIAS",
    "DEFAULT_EMBEDDER_ID",
    "DEFAULT_EMBEDDER_NAME",
    "EmbedderInfo",
    "EmbedderSpec",
    "EngineOptions",
    "embedder_id_for",
]


def embedder_id_for(name: str) -> str:
    """A stable UUID for a model name, so every proxy instance derives the same id without state."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"memproxy/embedders/{name}"))


DEFAULT_EMBEDDER_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_EMBEDDER_ID = embedder_id_for(DEFAULT_EMBEDDER_NAME)
DEFAULT_EMBEDDER_ALIAS = "all-minilm-l6-v2"
CPU_MAX_BATCH_SIZE = 32
ACCELERATOR_MAX_BATCH_SIZE = 256


@dataclass(frozen=True)
class EmbedderInfo:
    """What a loaded embedder is; safe to show to clients."""

    id: str
    name: str
    dimension: int
    max_tokens: int
    model_path: str
    pooling: str
    normalize: bool
    device: str
    dtype: str


@dataclass(frozen=True)
class EmbedderSpec:
    """A configured local model: a directory in sentence-transformers (or plain transformers) layout."""

    id: str
    path: str
    name: str | None = None


@dataclass(frozen=True)
class EngineOptions:
    """How every embedder of a registry runs.

    ``device``: ``auto`` (CUDA when present, else CPU), ``cpu``, ``cuda``, ``cuda:N``.
    ``dtype``: ``auto`` (bfloat16 on CPUs with native bf16, float16 on CUDA, float32 otherwise),
    ``float32`` (the reference), ``bfloat16``, ``float16``.
    ``threads``: torch intra-op threads for model work; ``None``: half the CPUs the process may use
    (``proxy.embedding.cpu.default_threads``: affinity and cgroup quota), at least one.
    ``max_batch_tokens``: padded-token budget of one batch (texts x longest text).
    ``max_batch_size``: most texts in one batch, whatever their length; ``None`` picks by device (see
    ``batch_size_for``).
    ``max_queue``: most texts waiting per embedder; more are refused at once with EmbedderOverloaded.
    ``caller_share``: the share of ``max_queue`` one caller (``proxy.embedding.fairness``) may hold, at least
    one text: ``max(1, floor(max_queue * caller_share))``; more of its texts are refused with
    CallerShareFull while other callers still queue.
    ``pad_to_multiple``: round each forward's sequence length up to this, so the kernels see few shapes.
    ``warmup``: run a few batches at start-up so the first callers do not pay for kernel set-up.
    """

    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    max_batch_tokens: int = 16384
    max_batch_size: int | None = None
    max_queue: int = 1024
    caller_share: float = 0.5
    pad_to_multiple: int = 8
    warmup: bool = True

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise ValueError("threads must be >= 1")
        if not 0 < self.caller_share <= 1:
            raise ValueError("caller_share must be in (0, 1]")
        for name in ("max_batch_tokens", "max_batch_size", "max_queue", "pad_to_multiple"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")

    def batch_size_for(self, device: object) -> int:
        """``max_batch_size``, or the device's default: 32 texts on a CPU, 256 on an accelerator.

        On a CPU (one thread) a forward of 256 short texts holds the compute thread ~0.7 s, 32 texts ~0.1 s,
        at about the same throughput (within the run-to-run spread of the ingest benchmark, which measured
        0.79-0.93 x the ceiling with 32 and 0.85 x with 256). Smaller batches also let the first of two
        writers that queued together get its vectors first, so its ``_bulk`` overlaps the other's
        embedding instead of both indexing at once. A GPU wants big batches.
        """
        if self.max_batch_size is not None:
            return self.max_batch_size
        return CPU_MAX_BATCH_SIZE if str(device).startswith("cpu") else ACCELERATOR_MAX_BATCH_SIZE

    @property
    def caller_limit(self) -> int:
        """The most texts one caller may hold in an embedder's queue."""
        return max(1, math.floor(self.max_queue * self.caller_share))
