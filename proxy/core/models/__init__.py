"""The model registry both APIs share (docs/models.md): records in ``memproxy-models``, and handles that
embed, rerank and chat whichever way a model is reached (in-process, a provider's API, an ml-commons
connector)."""

from proxy.core.models.records import API, KIND, ModelRecord, ProviderCall
from proxy.core.models.registry import (
    CallLimits,
    ChatModel,
    EmbeddingModel,
    ModelRegistry,
    RerankModel,
    StartupModel,
    UnknownModel,
    UntrustedEndpoint,
)

__all__ = [
    "API",
    "KIND",
    "CallLimits",
    "ChatModel",
    "EmbeddingModel",
    "ModelRecord",
    "ModelRegistry",
    "ProviderCall",
    "RerankModel",
    "StartupModel",
    "UnknownModel",
    "UntrustedEndpoint",
]
