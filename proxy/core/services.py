"""What every core operation needs: the store, the embedders and the read caches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from proxy.config import DEFAULT_CACHE_TTL_S
from proxy.core.cache import Caches
from proxy.core.models import ModelRegistry
from proxy.core.recall_canary import RecallCanary
from proxy.core.retention.settings import RetentionConfig
from proxy.store.client import Store
from proxy.store.models import ModelDocs

if TYPE_CHECKING:  # proxy.embedding imports torch; pure core code must not pay for that
    from proxy.embedding import EmbedderRegistry

__all__ = ["Services"]


@dataclass(frozen=True)
class Services:
    store: Store
    embedders: EmbedderRegistry
    caches: Caches = field(default_factory=lambda: Caches.with_ttl(DEFAULT_CACHE_TTL_S))
    # Every model by id (local embedders first, then remote and runtime-registered ones); the app passes
    # its configured registry, a bare one is made over ``embedders`` otherwise.
    models: ModelRegistry = field(default=None)  # type: ignore[assignment]
    # Samples graph-walked vector searches to measure their recall (proxy.core.recall_canary); None: off.
    canary: RecallCanary | None = None
    # ``--memory-retention``: retention is on unless ``PUT /_cluster/settings`` turned it off.
    memory_retention: bool = False
    # The retention cluster settings memproxy keeps (proxy.core.retention.settings); made over ``store``.
    retention: RetentionConfig = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.models is None:
            object.__setattr__(self, "models", ModelRegistry(ModelDocs(self.store), self.embedders))
        if self.retention is None:
            object.__setattr__(
                self, "retention", RetentionConfig(self.store, enabled_by_flag=self.memory_retention)
            )

    async def embed_query(self, embedder_id: str, text: str) -> list[float]:
        """A search query embedded by one model, as plain floats (unknown id: ``NotFound``; full queue:
        429). Stored texts go through ``proxy.core.longterm`` as documents."""
        (vector,) = await (await self.models.embedding_model(embedder_id)).embed([text], query=True)
        return [float(x) for x in vector]
