"""Errors raised by the embedding engine, placed in the project's exception tree."""

from __future__ import annotations

from proxy.errors import MemproxyError, NotFound, Overloaded, Unavailable

__all__ = [
    "CallerShareFull",
    "EmbedderClosed",
    "EmbedderOverloaded",
    "EmbeddingFailed",
    "ModelLoadError",
    "UnknownEmbedder",
]


class UnknownEmbedder(NotFound):
    """No embedder is registered under the requested id or alias."""

    def __init__(self, embedder_id: str, known: list[str] | None = None):
        hint = f"; known: {', '.join(sorted(known))}" if known else ""
        super().__init__(f"unknown embedder [{embedder_id}]{hint}", details={"embedder_id": embedder_id})
        self.embedder_id = embedder_id


class EmbedderOverloaded(Overloaded):
    """The embedder's bounded queue cannot take the texts now: retry later (HTTP 429)."""


class CallerShareFull(EmbedderOverloaded):
    """This caller already holds its share of the queue (``embed_caller_share``); others may still queue."""


class EmbedderClosed(Unavailable):
    """The embedder is not running (not started yet, or shut down while the caller waited)."""


class EmbeddingFailed(MemproxyError):
    """The model raised while computing a batch (out of memory, say)."""


class ModelLoadError(MemproxyError):
    """A configured model could not be loaded at start-up; the message names the path."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"cannot load embedding model from [{path}]: {reason}", details={"model_path": path})
        self.path = path
        self.reason = reason
