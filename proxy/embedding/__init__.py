"""Local embedding engine: models loaded with transformers + torch, behind a dynamic batching queue.

``EmbedderRegistry`` is what the rest of memproxy holds; ``registry.get(id).embed(texts)`` is the one call
that computes vectors. See docs/embedding.md.
"""

from proxy.embedding.batching import Embedder
from proxy.embedding.config import (
    DEFAULT_EMBEDDER_ALIAS,
    DEFAULT_EMBEDDER_ID,
    DEFAULT_EMBEDDER_NAME,
    EmbedderInfo,
    EmbedderSpec,
    EngineOptions,
    embedder_id_for,
)
from proxy.embedding.errors import (
    EmbedderClosed,
    EmbedderOverloaded,
    EmbeddingFailed,
    ModelLoadError,
    UnknownEmbedder,
)
from proxy.embedding.registry import EmbedderRegistry, default_model_path, default_spec
from proxy.embedding.rerank import LocalReranker, RerankerInfo, load_cross_encoder

__all__ = [
    "DEFAULT_EMBEDDER_ALIAS",
    "DEFAULT_EMBEDDER_ID",
    "DEFAULT_EMBEDDER_NAME",
    "Embedder",
    "EmbedderClosed",
    "EmbedderInfo",
    "EmbedderOverloaded",
    "EmbedderRegistry",
    "EmbedderSpec",
    "EmbeddingFailed",
    "EngineOptions",
    "LocalReranker",
    "ModelLoadError",
    "RerankerInfo",
    "UnknownEmbedder",
    "default_model_path",
    "default_spec",
    "embedder_id_for",
    "load_cross_encoder",
]
