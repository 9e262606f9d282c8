"""The retrieve request, validated (the GoodMem slice parses both the POST body and the GET query into it)."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.errors import BadRequest
from proxy.filters import check_filter_total
from proxy.store.query import Recency

__all__ = [
    "CHAT_POST_PROCESSOR",
    "DEFAULT_REQUESTED_SIZE",
    "ITERATIVE_SCAN_MODES",
    "MAX_MESSAGE_CHARS",
    "MAX_REQUESTED_SIZE",
    "MAX_SPACE_KEYS",
    "ChatConfig",
    "EmbedderWeight",
    "HnswOptions",
    "RetrieveRequest",
    "SpaceKey",
    "check_space_count",
    "query_text",
]

DEFAULT_REQUESTED_SIZE = 20
# OpenSearch's k-NN answers at most index.max_result_window (10 000) hits per search.
MAX_REQUESTED_SIZE = 10_000
MAX_MESSAGE_CHARS = 10_000
# One retrieve fans out into a space lookup, two permission checks and a k-NN search per space: GoodMem
# documents no maximum, so memproxy names one (a caller with more spaces sends several retrieves).
MAX_SPACE_KEYS = 50
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
    # memproxy extension (``memproxyRecency``): the opt-in recency decay of every space's search.
    recency: Recency | None = None

    def __post_init__(self) -> None:
        """The bounds on what one request may fan out into (docs/security.md): every way of building a
        request (the POST body, the GET query, the console's playground) passes through here."""
        check_space_count(len(self.space_keys), "spaceKeys")
        first: dict[str, int] = {}
        for i, key in enumerate(self.space_keys):
            if key.space_id in first:
                # Searching a space twice would rank its chunks twice; what two filters on one space should
                # mean (either? both?) is not GoodMem's to guess either: one entry per space.
                raise BadRequest(
                    f"spaceKeys names space {key.space_id} twice (spaceKeys[{first[key.space_id]}] and "
                    f"spaceKeys[{i}]): list each space once"
                )
            first[key.space_id] = i
        # Parsed on a worker thread (plan.py), but a second of CPU is still a second of CPU.
        check_filter_total((key.filter for key in self.space_keys), "this retrieve")


def check_space_count(count: int, what: str) -> None:
    """400 for more than MAX_SPACE_KEYS spaces; the wire parsers call it before reading the entries."""
    if count > MAX_SPACE_KEYS:
        raise BadRequest(
            f"{what} lists {count} spaces, more than the {MAX_SPACE_KEYS} one retrieve may search "
            "(max_space_keys)"
        )


def query_text(req: RetrieveRequest) -> str:
    """The text that is embedded: the message, then each text context item on its own line."""
    return "\n".join((req.message, *req.context_texts))
