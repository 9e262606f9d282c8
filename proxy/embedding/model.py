"""One loaded model: tokenizer, transformer, pooling. Synchronous; the batcher runs it off the event loop."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from proxy.embedding.config import EngineOptions
from proxy.embedding.errors import ModelLoadError
from proxy.embedding.layout import ModelLayout, read_layout
from proxy.embedding.pooling import pool

__all__ = [
    "CHARS_PER_TOKEN",
    "LoadedModel",
    "cpu_has_native_bf16",
    "load_model",
    "partition_by_length",
    "resolve_device",
    "resolve_dtype",
]

log = logging.getLogger(__name__)

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}

# Cost model for splitting a length-sorted batch into several forwards, in units of "one padded token".
# On this class of CPU a forward has a fixed cost of roughly 160 tokens' worth of work (weights streamed
# from memory, Python dispatch); on a GPU, launch overhead dwarfs per-token work, so splitting rarely pays.
_SPLIT_OVERHEAD_TOKENS = {"cpu": 160.0, "other": 4096.0}
# Attention grows with length squared; this is the length at which it doubles a token's cost.
_ATTENTION_SCALE = 1024.0

# A text is cut to max_tokens x CHARS_PER_TOKEN characters before it is tokenized: the model reads at most
# max_tokens tokens of it anyway, and the Rust tokenizer would otherwise tokenize the whole text (and keep
# offsets for every token) before truncating: seconds and hundreds of MB for a 10 MB text, all of it holding
# the GIL. English averages 4-5 characters per token, code and base64 2-3, CJK 1-2; a word of more than 100
# characters is one [UNK] for WordPiece. Only a text averaging more than 64 characters per token over its
# head (whitespace runs, endless "words") is embedded from a shorter head than the model would have read.
CHARS_PER_TOKEN = 64

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """True when the CPU computes bf16 natively (AVX512-BF16 or AMX); otherwise bf16 is emulated and slow."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            flags = cpuinfo.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        if device.type == "cuda":
            return torch.float16
        if device.type == "cpu" and cpu_has_native_bf16():
            return torch.bfloat16
        return torch.float32
    try:
        return _DTYPES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; use auto, float32, bfloat16 or float16") from None


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def partition_by_length(lengths: Sequence[int], overhead: float) -> list[tuple[int, int]]:
    """Split ascending ``lengths`` into contiguous groups minimising the modelled cost of padded forwards.

    Each group costs ``overhead + size * longest * (1 + longest / _ATTENTION_SCALE)``; an O(n^2) dynamic
    programme over cut points, vectorised per end point.
    """
    n = len(lengths)
    if n <= 1:
        return [(0, n)]
    longest = np.asarray(lengths, dtype=np.float64)
    per_text = longest * (1.0 + longest / _ATTENTION_SCALE)
    best = np.zeros(n + 1)
    cut = np.zeros(n + 1, dtype=np.int64)
    starts = np.arange(n, dtype=np.float64)
    for end in range(1, n + 1):
        costs = best[:end] + overhead + (end - starts[:end]) * per_text[end - 1]
        start = int(np.argmin(costs))
        best[end] = costs[start]
        cut[end] = start
    groups: list[tuple[int, int]] = []
    end = n
    while end > 0:
        start = int(cut[end])
        groups.append((start, end))
        end = start
    groups.reverse()
    return groups


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class LoadedModel:
    """A transformer plus the sentence-transformers head its directory declares."""

    def __init__(
        self,
        *,
        path: str,
        layout: ModelLayout,
        tokenizer: Any,
        model: torch.nn.Module,
        device: torch.device,
        dtype: torch.dtype,
        max_tokens: int,
        dimension: int,
        pad_to_multiple: int,
    ):
        self.path = path
        self.layout = layout
        self.model = model
        self.device = device
        self.dtype = dtype
        self.max_tokens = max_tokens
        self.dimension = dimension
        self.pad_to_multiple = pad_to_multiple
        self.pad_id = int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else 0
        self._tokenizer = tokenizer
        self._split_overhead = _SPLIT_OVERHEAD_TOKENS["cpu" if device.type == "cpu" else "other"]
        self._backend = self._fast_backend(tokenizer, max_tokens)

    @staticmethod
    def _fast_backend(tokenizer: Any, max_tokens: int) -> Any:
        # The Rust tokenizer used directly costs about half the transformers wrapper per text. A copy is
        # configured, since tokenizer.json may carry its own padding/truncation (this model's pads to 128).
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            return None
        from tokenizers import Tokenizer

        copy = Tokenizer.from_str(backend.to_str())
        copy.no_padding()
        copy.enable_truncation(
            max_length=max_tokens, strategy="longest_first", direction=tokenizer.truncation_side
        )
        return copy

    @property
    def max_chars(self) -> int:
        """The longest head of a text that is tokenized (see ``CHARS_PER_TOKEN``)."""
        return self.max_tokens * CHARS_PER_TOKEN

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with special tokens, truncated to ``max_tokens``; cheap for short inputs, and bounded for
        long ones (each text is cut to ``max_chars`` first)."""
        limit = self.max_chars
        texts = [text[:limit] if len(text) > limit else text for text in texts]
        if self.layout.do_lower_case:
            texts = [text.lower() for text in texts]
        if self._backend is None:
            encoded = self._tokenizer(list(texts), truncation=True, max_length=self.max_tokens)
            return [list(ids) for ids in encoded["input_ids"]]
        if len(texts) == 1:
            return [self._backend.encode(texts[0]).ids]
        return [encoding.ids for encoding in self._backend.encode_batch(list(texts))]

    @property
    def output_width(self) -> int:
        """Floats per input that :meth:`_forward` answers (a vector here; one score for a cross-encoder)."""
        return self.dimension

    def embed_tokens(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        """Vectors for tokenized texts, in input order. Blocks: call it from a worker thread."""
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        lengths = [len(sequences[i]) for i in order]
        out = torch.empty((len(sequences), self.output_width), dtype=torch.float32)
        with torch.inference_mode():
            for start, end in partition_by_length(lengths, self._split_overhead):
                rows = order[start:end]
                out[rows] = self._forward([sequences[i] for i in rows], lengths[end - 1])
        return out.tolist()

    def _forward(self, group: Sequence[Sequence[int]], longest: int) -> torch.Tensor:
        width = max(longest, min(_round_up(longest, self.pad_to_multiple), self.max_tokens))
        padded = [list(ids) + [self.pad_id] * (width - len(ids)) for ids in group]
        input_ids = torch.tensor(padded, dtype=torch.long)
        mask = torch.tensor(
            [[1] * len(ids) + [0] * (width - len(ids)) for ids in group], dtype=torch.long, device=self.device
        )
        full = all(len(ids) == width for ids in group)
        hidden = self.model(
            input_ids=input_ids.to(self.device),
            # No mask at all lets SDPA take its unmasked (faster) kernel; the result is the same.
            attention_mask=None if full else mask,
        ).last_hidden_state
        return pool(hidden, mask, self.layout.pooling, self.layout.normalize).cpu()


def _model_dir(path: str) -> Path:
    local = Path(path).expanduser()
    if local.is_dir():
        return local.resolve()
    if local.exists():
        raise ModelLoadError(path, "not a directory")
    if not _HUB_ID.match(path):
        raise ModelLoadError(path, "no such directory")
    # An "org/name" that is not a local directory may be a hub id; honoured only when a hub is reachable
    # (HF_HUB_OFFLINE=1 makes this fail fast).
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path))
    except Exception as exc:
        raise ModelLoadError(path, f"no such directory, and no hub download: {exc}") from exc


def _max_tokens(layout: ModelLayout, tokenizer: Any, config: Any) -> int:
    limits = [int(getattr(config, "max_position_embeddings", 0) or 0)]
    tokenizer_limit = int(getattr(tokenizer, "model_max_length", 0) or 0)
    if 0 < tokenizer_limit < 1_000_000:  # transformers uses a huge sentinel for "unset"
        limits.append(tokenizer_limit)
    ceiling = min(limit for limit in limits if limit > 0) if any(limits) else 512
    return min(layout.max_seq_length, ceiling) if layout.max_seq_length else ceiling


def load_model(path: str, options: EngineOptions) -> LoadedModel:
    """Loads and validates a model directory; every failure becomes a ModelLoadError naming ``path``."""
    model_dir = _model_dir(path)
    layout = read_layout(model_dir)
    try:
        device = resolve_device(options.device)
        dtype = resolve_dtype(options.dtype, device)
    except (ValueError, RuntimeError) as exc:
        raise ModelLoadError(path, str(exc)) from exc
    if not (layout.transformer_dir / "config.json").is_file():
        raise ModelLoadError(path, f"no config.json in {layout.transformer_dir}")
    try:
        from transformers import AutoModel, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(layout.transformer_dir), local_files_only=True)
        model = _load_transformer(AutoModel, layout.transformer_dir, dtype).to(device).eval()
    except Exception as exc:
        raise ModelLoadError(path, f"{type(exc).__name__}: {exc}") from exc
    hidden = int(getattr(model.config, "hidden_size", 0) or 0)
    if hidden <= 0:
        raise ModelLoadError(path, "model config has no hidden_size")
    return LoadedModel(
        path=str(model_dir),
        layout=layout,
        tokenizer=tokenizer,
        model=model,
        device=device,
        dtype=dtype,
        max_tokens=_max_tokens(layout, tokenizer, model.config),
        dimension=hidden * len(layout.pooling),
        pad_to_multiple=options.pad_to_multiple,
    )


def _load_transformer(auto_model: Any, model_dir: Path, dtype: torch.dtype) -> torch.nn.Module:
    try:
        return auto_model.from_pretrained(  # type: ignore[no-any-return]
            str(model_dir), dtype=dtype, attn_implementation="sdpa", local_files_only=True
        )
    except ValueError as exc:
        # Architectures without an SDPA path still work with the reference ("eager") attention.
        if "sdpa" not in str(exc).lower():
            raise
        log.info("model at %s has no SDPA attention; using eager attention", model_dir)
        return auto_model.from_pretrained(  # type: ignore[no-any-return]
            str(model_dir), dtype=dtype, attn_implementation="eager", local_files_only=True
        )
