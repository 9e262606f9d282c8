"""What every core operation needs: the store and the embedders."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.store.client import Store

if TYPE_CHECKING:  # the embedding room imports torch; pure core code must not pay for that
    from proxy.embedding import EmbedderRegistry

__all__ = ["Services"]


@dataclass(frozen=True)
class Services:
    store: Store
    embedders: EmbedderRegistry
