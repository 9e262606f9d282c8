"""Remote model providers (chat, embeddings, rerank) over HTTP, each in its provider's real wire format.

A stand-alone layer (docs/architecture.md): it knows only ``proxy.errors`` and ``proxy.ids``. What it offers
is described in docs/models.md; the registry and the API wiring are later steps of issue 14.
"""

from proxy.models.addresses import AddressPolicy
from proxy.models.chat import CHAT_PROVIDERS, ChatClient, ChatProvider, ChatResult
from proxy.models.embeddings import EMBED_PATHS, RemoteEmbedder
from proxy.models.provider import (
    AUTH_HEADERS,
    EndpointRefused,
    ProviderBadAnswer,
    ProviderClient,
    ProviderError,
    ProviderOverloaded,
    ProviderRejected,
    ProviderSettings,
    ProviderTimeout,
    ProviderUnavailable,
)
from proxy.models.rerank import RERANK_WIRES, RemoteReranker

__all__ = [
    "AUTH_HEADERS",
    "CHAT_PROVIDERS",
    "EMBED_PATHS",
    "RERANK_WIRES",
    "AddressPolicy",
    "ChatClient",
    "ChatProvider",
    "ChatResult",
    "EndpointRefused",
    "ProviderBadAnswer",
    "ProviderClient",
    "ProviderError",
    "ProviderOverloaded",
    "ProviderRejected",
    "ProviderSettings",
    "ProviderTimeout",
    "ProviderUnavailable",
    "RemoteEmbedder",
    "RemoteReranker",
]
