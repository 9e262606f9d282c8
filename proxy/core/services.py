"""What every core operation needs: the store, the embedders and the read caches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from proxy.config import DEFAULT_CACHE_TTL_S
from proxy.core.cache import Caches
from proxy.store.client import Store

if TYPE_CHECKING:  # proxy.embedding imports torch; pure core code must not pay for that
    from proxy.embedding import EmbedderRegistry

__all__ = ["Services"]


@dataclass(frozen=True)
class Services:
    store: Store
    embedders: EmbedderRegistry
    caches: Caches = field(default_factory=lambda: Caches.with_ttl(DEFAULT_CACHE_TTL_S))

    async def embed_text(self, embedder_id: str, text: str) -> list[float]:
        """``text`` embedded by one embedder, as plain floats (unknown id: ``NotFound``; full queue: 429)."""
        (vector,) = await self.embedders.get(embedder_id).embed([text])
        return [float(x) for x in vector]
