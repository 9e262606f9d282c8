"""The retrieve request, validated (the GoodMem slice parses both the POST body and the GET query into it)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CHAT_POST_PROCESSOR",
    "DEFAULT_REQUESTED_SIZE",
    "ITERATIVE_SCAN_MODES",
    "MAX_MESSAGE_CHARS",
    "MAX_REQUESTED_SIZE",
    "ChatConfig",
    "EmbedderWeight",
    "HnswOptions",
    "RetrieveRequest",
    "SpaceKey",
    "query_text",
]

DEFAULT_REQUESTED_SIZE = 20
# OpenSearch's k-NN answers at most index.max_result_window (10 000) hits per search.
MAX_REQUESTED_SIZE = 10_000
MAX_MESSAGE_CHARS = 10_000
CHAT_POST_PROCESSOR = "com.goodmem.retrieval.postprocess.ChatPostProcessorFactory"
ITERATIVE_SCAN_MODES = frozenset(
    {
        "ITERATIVE_SCAN_UNSPECIFIED",
        "ITERATIVE_SCAN_OFF",
        "ITERATIVE_SCAN_RELAXED_ORDER",
        "ITERATIVE_SCAN_STRICT_ORDER",
    }
)


@dataclass(frozen=True)
class EmbedderWeight:
    embedder_id: str
    weight: float


@dataclass(frozen=True)
class SpaceKey:
    space_id: str
    # None: the space's own defaultRetrievalWeight for every embedder.
    embedder_weights: tuple[EmbedderWeight, ...] | None = None
    filter: str | None = None


@dataclass(frozen=True)
class HnswOptions:
    ef_search: int | None = None
    iterative_scan: str | None = None
    max_scan_tuples: int | None = None
    scan_mem_multiplier: float | None = None


@dataclass(frozen=True)
class ChatConfig:
    """The built-in ChatPostProcessor's configuration, validated."""

    reranker_id: str | None = None
    llm_id: str | None = None
    relevance_threshold: float | None = None
    chronological_resort: bool | None = None
    llm_temp: float | None = None
    max_results: int | None = None
    sys_prompt: str | None = None
    prompt: str | None = None
    gen_token_budget: int | None = None


@dataclass(frozen=True)
class RetrieveRequest:
    message: str
    space_keys: tuple[SpaceKey, ...]
    requested_size: int = DEFAULT_REQUESTED_SIZE
    fetch_memory: bool = True
    fetch_memory_content: bool = False
    context_texts: tuple[str, ...] = ()
    binary_context_count: int = 0
    hnsw: HnswOptions | None = None
    chat: ChatConfig | None = None
    output_budget_tokens: int | None = None
    # Whether the caller gave a positive requestedSize (the post-processor's max_results defaults to it).
    requested_size_set: bool = False


def query_text(req: RetrieveRequest) -> str:
    """The text that is embedded: the message, then each text context item on its own line."""
    return "\n".join((req.message, *req.context_texts))
