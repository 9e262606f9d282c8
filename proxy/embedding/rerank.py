"""Local cross-encoder rerankers: a transformers sequence classifier scoring (query, document) pairs.

A reranker reuses the embedder's machinery whole: device/dtype selection and the SDPA fallback
(``proxy.embedding.model``), and the batching queue (``proxy.embedding.batching.Embedder``) with its token
budget, 429-when-full, per-caller fair share, cancellation and shutdown. The queue never looks inside what
it batches: an item is a list of token ids, and the model turns a batch of them into one row of floats per
item. Here an item is one tokenized (query, document) pair and its row is ``[score]``; the query of a call
reaches the tokenizer through a context variable set by ``score()`` for the duration of that call.

Scores: ``sigmoid(logit)`` of the single-logit head, in float32, so each lies in [0, 1] (what
sentence-transformers' ``CrossEncoder.predict`` returns for a one-label model by default). Models with more
than one label are refused at load time. See docs/embedding.md, "Local rerankers".
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from proxy.embedding.batching import Embedder
from proxy.embedding.config import EmbedderInfo, EngineOptions
from proxy.embedding.cpu import set_compute_threads
from proxy.embedding.errors import ModelLoadError
from proxy.embedding.layout import ModelLayout
from proxy.embedding.model import (
    LoadedModel,
    _load_transformer,
    _max_tokens,
    _model_dir,
    _round_up,
    dtype_name,
    resolve_device,
    resolve_dtype,
)
from proxy.errors import BadRequest

__all__ = ["LoadedCrossEncoder", "LocalReranker", "RerankerInfo", "load_cross_encoder"]

# Inputs at most this big (query + documents, in characters) are tokenized on the event loop.
_INLINE_TOKENIZE_PAIRS = 8
_INLINE_TOKENIZE_CHARS = 4096

# The query of the score() call being tokenized (see the module docstring).
_query: ContextVar[str | None] = ContextVar("memproxy_rerank_query", default=None)


@dataclass(frozen=True)
class RerankerInfo:
    """What a loaded reranker is; safe to show to clients."""

    id: str
    name: str
    model_path: str
    architecture: str
    max_tokens: int
    device: str
    dtype: str
    activation: str = "sigmoid"


class _PairIds(list[int]):
    """The token ids of one (query, document) pair, plus its segment (token type) ids."""

    __slots__ = ("type_ids",)

    def __init__(self, ids: Sequence[int], type_ids: Sequence[int]):
        super().__init__(ids)
        self.type_ids = list(type_ids)


class LoadedCrossEncoder(LoadedModel):
    """A sequence classifier with one logit; ``embed_tokens`` of tokenized pairs gives ``[[score], ...]``."""

    def __init__(self, *, architecture: str, tokenizer: Any, **kwargs: Any):
        super().__init__(tokenizer=tokenizer, **kwargs)
        self.architecture = architecture
        names = getattr(tokenizer, "model_input_names", None) or ["input_ids", "token_type_ids"]
        self.uses_token_types = "token_type_ids" in names

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        raise TypeError("a cross-encoder tokenizes (query, document) pairs: use tokenize_pairs()")

    def tokenize_pairs(self, query: str, documents: Sequence[str]) -> list[list[int]]:
        """Token ids of each (query, document) pair with special tokens, truncated to ``max_tokens`` by
        cutting the longer side first (transformers' ``truncation=True``); each text is first cut to
        ``max_chars``, as for embeddings."""
        limit = self.max_chars
        query = query[:limit]
        docs = [doc[:limit] if len(doc) > limit else doc for doc in documents]
        if self._backend is None:
            encoded = self._tokenizer([query] * len(docs), docs, truncation=True, max_length=self.max_tokens)
            types = encoded.get("token_type_ids") or [[0] * len(ids) for ids in encoded["input_ids"]]
            return [_PairIds(ids, t) for ids, t in zip(encoded["input_ids"], types, strict=True)]
        encodings = self._backend.encode_batch([(query, doc) for doc in docs])
        return [_PairIds(e.ids, e.type_ids) for e in encodings]

    @property
    def output_width(self) -> int:
        return 1  # one score per (query, document) pair: embed_tokens answers [score] for each

    def _forward(self, group: Sequence[Sequence[int]], longest: int) -> torch.Tensor:
        width = max(longest, min(_round_up(longest, self.pad_to_multiple), self.max_tokens))
        input_ids = torch.tensor(
            [list(ids) + [self.pad_id] * (width - len(ids)) for ids in group], dtype=torch.long
        )
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in group], dtype=torch.long)
        inputs: dict[str, torch.Tensor] = {
            "input_ids": input_ids.to(self.device),
            "attention_mask": mask.to(self.device),
        }
        if self.uses_token_types:
            types = [list(getattr(ids, "type_ids", [0] * len(ids))) for ids in group]
            inputs["token_type_ids"] = torch.tensor(
                [t + [0] * (width - len(t)) for t in types], dtype=torch.long
            ).to(self.device)
        logits = self.model(**inputs).logits
        return torch.sigmoid(logits.float()).cpu()


def _architecture(model_dir: Path, path: str) -> str:
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(path, "not a cross-encoder: no config.json")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(path, f"unreadable config.json: {exc}") from exc
    architectures = config.get("architectures") or []
    for name in architectures:
        if isinstance(name, str) and name.endswith("ForSequenceClassification"):
            labels = len(config.get("id2label") or {}) or int(config.get("num_labels", 1) or 1)
            if labels != 1:
                raise ModelLoadError(
                    path, f"not a single-score cross-encoder: {name} has {labels} labels, 1 is supported"
                )
            return name
    raise ModelLoadError(
        path,
        f"not a cross-encoder: config.json architectures {architectures} has no *ForSequenceClassification "
        "(a reranker is a sequence classifier with one label; is this an embedding model?)",
    )


def load_cross_encoder(path: str, options: EngineOptions) -> LoadedCrossEncoder:
    """Loads and validates a cross-encoder directory; every failure becomes a ModelLoadError naming it."""
    model_dir = _model_dir(path)
    architecture = _architecture(model_dir, path)
    try:
        device = resolve_device(options.device)
        dtype = resolve_dtype(options.dtype, device)
    except (ValueError, RuntimeError) as exc:
        raise ModelLoadError(path, str(exc)) from exc
    try:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        model = _load_transformer(AutoModelForSequenceClassification, model_dir, dtype).to(device).eval()
    except Exception as exc:
        raise ModelLoadError(path, f"{type(exc).__name__}: {exc}") from exc
    layout = ModelLayout(model_dir, ("cls",), False, None, False)
    return LoadedCrossEncoder(
        architecture=architecture,
        path=str(model_dir),
        layout=layout,
        tokenizer=tokenizer,
        model=model,
        device=device,
        dtype=dtype,
        max_tokens=_max_tokens(layout, tokenizer, model.config),
        dimension=1,
        pad_to_multiple=options.pad_to_multiple,
    )


class _PairQueue(Embedder):
    """The embedder's queue, fed (query, document) pairs: ``embed(documents)`` under a set ``_query``."""

    model: LoadedCrossEncoder

    async def _tokenize(self, texts: list[str]) -> list[list[int]]:
        query = _query.get()
        if query is None:
            raise TypeError("a reranker queue is fed through LocalReranker.score()")
        limit = self.model.max_chars
        size = min(len(query), limit) * len(texts) + sum(min(len(t), limit) for t in texts)
        if len(texts) <= _INLINE_TOKENIZE_PAIRS and size <= _INLINE_TOKENIZE_CHARS:
            return self.model.tokenize_pairs(query, texts)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._tokenize_pool, self.model.tokenize_pairs, query, texts)


class LocalReranker:
    """One cross-encoder and its batching queue. ``load`` (blocking), ``await start()``, ``await score()``.

    ``compute`` / ``tokenize``: executors to share with the embedders (one compute thread for all models,
    as ``EmbedderRegistry`` does); without them the reranker owns one thread of each and shuts them down
    on ``close()``.
    """

    def __init__(
        self,
        info: RerankerInfo,
        model: LoadedCrossEncoder,
        options: EngineOptions,
        compute: Executor | None = None,
        tokenize: Executor | None = None,
    ):
        self._info = info
        self.model = model
        self._options = options
        self._owned: list[ThreadPoolExecutor] = []
        if compute is None:
            compute = ThreadPoolExecutor(
                1, "memproxy-rerank", initializer=set_compute_threads, initargs=(options.threads,)
            )
            self._owned.append(compute)
        if tokenize is None:
            tokenize = ThreadPoolExecutor(1, "memproxy-rerank-tokenize")
            self._owned.append(tokenize)
        queue_info = EmbedderInfo(
            id=info.id,
            name=info.name,
            dimension=1,
            max_tokens=info.max_tokens,
            model_path=info.model_path,
            pooling="none",
            normalize=False,
            device=info.device,
            dtype=info.dtype,
        )
        self._queue = _PairQueue(queue_info, model, options, compute, tokenize)

    @classmethod
    def load(
        cls,
        path: str,
        options: EngineOptions,
        *,
        reranker_id: str | None = None,
        name: str | None = None,
        compute: Executor | None = None,
        tokenize: Executor | None = None,
    ) -> LocalReranker:
        """Loads a cross-encoder folder (blocking: run it off the event loop in a server)."""
        model = load_cross_encoder(path, options)
        label = name or Path(model.path).name
        info = RerankerInfo(
            id=reranker_id or label,
            name=label,
            model_path=model.path,
            architecture=model.architecture,
            max_tokens=model.max_tokens,
            device=str(model.device),
            dtype=dtype_name(model.dtype),
        )
        return cls(info, model, options, compute, tokenize)

    def info(self) -> RerankerInfo:
        return self._info

    @property
    def batches_run(self) -> int:
        """Forwards handed to the model (for tests and health)."""
        return self._queue.batches_run

    @property
    def pairs_computed(self) -> int:
        return self._queue.texts_computed

    @property
    def queued(self) -> int:
        return self._queue.queued

    async def start(self) -> None:
        """Starts the batching task, then warms the model up when ``options.warmup``."""
        self._queue.start()
        if self._options.warmup:
            await self.score("memproxy warm-up", ["remember this", "remember this " * 24])

    async def score(self, query: str, documents: Sequence[str]) -> list[float]:
        """One relevance score in [0, 1] per document, in the caller's order (sigmoid of the logit of the
        (query, document) pair). Raises EmbedderOverloaded (429) when the queue or the caller's share is
        full, EmbedderClosed when not running, EmbeddingFailed when the model raises."""
        if not isinstance(query, str):
            raise BadRequest(f"the query to rerank against is a {type(query).__name__}, not a string")
        if isinstance(documents, str):
            raise TypeError("score() takes a sequence of documents, not a single string")
        docs = list(documents)
        if not docs:
            return []
        token = _query.set(query)
        try:
            rows = await self._queue.embed(docs)
        finally:
            _query.reset(token)
        return [row[0] for row in rows]

    async def close(self) -> None:
        """Stops the batching task (waiting callers get EmbedderClosed) and any threads it owns."""
        await self._queue.close()
        for pool in self._owned:
            pool.shutdown(wait=False, cancel_futures=True)
        self._owned = []

    async def __aenter__(self) -> LocalReranker:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
