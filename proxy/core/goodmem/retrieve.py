"""GoodMem retrieve: the request model, ranking across spaces and embedders, and the event stream.

Two phases, so that every failure a client can act on arrives as an ordinary HTTP error:

1. :func:`plan_retrieval` (before the first byte): filters, spaces, permissions (LIST_MEMORY and READ_MEMORY
   on every space before any other work), query embedding and every k-NN search. Errors raise
   :mod:`proxy.errors` kinds. A space whose search fails while others succeed becomes a status event.
2. :func:`retrieval_events` (while streaming): the result set, with memory definitions loaded in batches as
   the stream advances. A failure here raises :class:`StreamFailure`, which carries the in-band status event
   and the terminal record's code; the HTTP layer writes both (it can no longer change the status line).

Events are plain JSON dicts, identical in NDJSON and SSE; framing is ``proxy.api.goodmem.streaming``'s job.

Scores: ``relevanceScore`` is the cosine similarity, ``2 * os_score - 1`` (Lucene's cosinesimil score is
``(1 + cos) / 2``); higher is better and items stream best first. Live GoodMem servers send pgvector's
negative inner product instead (more negative = better); see docs/goodmem-retrieve.md.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proxy.core.query import VectorSearch
from proxy.errors import BadRequest, DeadlineExceeded, MemproxyError
from proxy.filters import parse_filter
from proxy.store.query import Filter, MatchAll, MetadataFilter, Terms
from proxy.store.query_dsl import compile_filter

if TYPE_CHECKING:
    from proxy.core.containers import Container
    from proxy.core.goodmem.auth import Principal
    from proxy.core.services import Services

__all__ = [
    "CHAT_POST_PROCESSOR",
    "DEFAULT_REQUESTED_SIZE",
    "ITERATIVE_SCAN_MODES",
    "LOAD_BATCH",
    "MAX_MESSAGE_CHARS",
    "MAX_REQUESTED_SIZE",
    "STAGE_RETRIEVE",
    "ChatConfig",
    "EmbedderWeight",
    "EventAssembler",
    "HnswOptions",
    "MemoryLoader",
    "RankedChunk",
    "RetrievalPlan",
    "RetrieveRequest",
    "SpaceKey",
    "StreamFailure",
    "WeightedHits",
    "boundary_event",
    "chunk_json",
    "cosine_from_os_score",
    "fuse_space",
    "grpc_code",
    "load_memories",
    "merge_spaces",
    "parse_chat_config",
    "parse_space_filter",
    "plan_retrieval",
    "post_processor_statuses",
    "query_text",
    "request_statuses",
    "retrieval_events",
    "status_event",
]

log = logging.getLogger(__name__)

DEFAULT_REQUESTED_SIZE = 20
# OpenSearch's k-NN answers at most index.max_result_window (10 000) hits per search.
MAX_REQUESTED_SIZE = 10_000
MAX_MESSAGE_CHARS = 10_000
STAGE_RETRIEVE = "retrieve"
CHAT_POST_PROCESSOR = "com.goodmem.retrieval.postprocess.ChatPostProcessorFactory"
ITERATIVE_SCAN_MODES = frozenset(
    {
        "ITERATIVE_SCAN_UNSPECIFIED",
        "ITERATIVE_SCAN_OFF",
        "ITERATIVE_SCAN_RELAXED_ORDER",
        "ITERATIVE_SCAN_STRICT_ORDER",
    }
)
# Memory definitions are loaded this many items at a time, so the first events leave before the last
# records are read and a deadline or disconnect stops the work between batches.
LOAD_BATCH = 32


# --------------------------------------------------------------------------------------------------------
# Request model (validated by the HTTP layer's parsers; both POST and GET produce it)
# --------------------------------------------------------------------------------------------------------


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


def query_text(req: RetrieveRequest) -> str:
    """The text that is embedded: the message, then each text context item on its own line."""
    return "\n".join((req.message, *req.context_texts))


def _is_uuid(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _number(config: Mapping[str, Any], key: str) -> float | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadRequest(f"postProcessor.config.{key} must be a number")
    return float(value)


def _positive_int(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BadRequest(f"postProcessor.config.{key} must be a positive integer")
    return value


def _uuid_key(config: Mapping[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is None:
        return None
    if not _is_uuid(value):
        raise BadRequest(f"postProcessor.config.{key} must be a UUID, got {value!r}")
    return str(value)


def _text_key(config: Mapping[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"postProcessor.config.{key} must be a string")
    return value


_CHAT_KEYS = frozenset(
    {
        "reranker_id",
        "llm_id",
        "relevance_threshold",
        "chronological_resort",
        "llm_temp",
        "max_results",
        "sys_prompt",
        "prompt",
        "gen_token_budget",
    }
)


def parse_chat_config(config: Mapping[str, Any]) -> ChatConfig:
    """Validate the ChatPostProcessor config up front (the live server validates ids before streaming)."""
    unknown = sorted(set(config) - _CHAT_KEYS)
    if unknown:
        raise BadRequest(f"Unrecognized ChatPostProcessor config key: {unknown[0]}")
    resort = config.get("chronological_resort")
    if resort is not None and not isinstance(resort, bool):
        raise BadRequest("postProcessor.config.chronological_resort must be a boolean")
    temp = _number(config, "llm_temp")
    if temp is not None and not 0.0 <= temp <= 2.0:
        raise BadRequest("postProcessor.config.llm_temp must be between 0.0 and 2.0")
    return ChatConfig(
        reranker_id=_uuid_key(config, "reranker_id"),
        llm_id=_uuid_key(config, "llm_id"),
        relevance_threshold=_number(config, "relevance_threshold"),
        chronological_resort=resort,
        llm_temp=temp,
        max_results=_positive_int(config, "max_results"),
        sys_prompt=_text_key(config, "sys_prompt"),
        prompt=_text_key(config, "prompt"),
        gen_token_budget=_positive_int(config, "gen_token_budget"),
    )


# --------------------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------------------


def status_event(code: str, message: str, details: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A non-fatal status; ``details`` values are strings (the Gen B SDK types them ``dict[str, str]``)."""
    status: dict[str, Any] = {"code": code, "message": message}
    if details:
        status["details"] = {k: str(v) for k, v in details.items()}
    return {"status": status}


def boundary_event(
    result_set_id: str, kind: str, stage_name: str, expected_items: int | None = None
) -> dict[str, Any]:
    boundary: dict[str, Any] = {"resultSetId": result_set_id, "kind": kind, "stageName": stage_name}
    if expected_items is not None:
        boundary["expectedItems"] = expected_items
    return {"resultSetBoundary": boundary}


def request_statuses(req: RetrieveRequest) -> list[dict[str, Any]]:
    """Notes on request options memproxy accepts but cannot apply, so none is dropped silently."""
    out: list[dict[str, Any]] = []
    hnsw = req.hnsw
    if hnsw is not None:
        ignored = []
        if hnsw.iterative_scan not in (None, "ITERATIVE_SCAN_UNSPECIFIED"):
            ignored.append("iterativeScan")
        if hnsw.max_scan_tuples is not None:
            ignored.append("maxScanTuples")
        if hnsw.scan_mem_multiplier is not None:
            ignored.append("scanMemMultiplier")
        if ignored:
            out.append(
                status_event(
                    "FEATURE_DISABLED",
                    "pgvector iterative-scan settings do not apply to OpenSearch k-NN and were ignored: "
                    + ", ".join(f"hnsw.{name}" for name in ignored)
                    + " (filters run inside the Lucene HNSW search, which returns every match up to k).",
                    {"feature": "hnsw_iterative_scan", "ignored": ",".join(ignored)},
                )
            )
    if req.binary_context_count:
        out.append(
            status_event(
                "FEATURE_DISABLED",
                f"{req.binary_context_count} binary context item(s) ignored: the embedders are text-only.",
                {"feature": "binary_context"},
            )
        )
    return out


def post_processor_statuses(chat: ChatConfig | None) -> list[dict[str, Any]]:
    """What the ChatPostProcessor reports when it cannot rerank or summarise (live wording where known).

    memproxy has no reranker or LLM execution yet: without an id the live FEATURE_DISABLED statuses are sent;
    with an id the stage fails like a live server whose reranker/LLM cannot be created, and the vector
    results stand unchanged.
    """
    if chat is None:
        return []
    out: list[dict[str, Any]] = []
    if chat.reranker_id is None:
        out.append(
            status_event(
                "FEATURE_DISABLED",
                "Reranking disabled: no reranker configured.",
                {"feature": "reranking", "required_param": "reranker_id"},
            )
        )
    else:
        out.append(
            status_event(
                "RERANKING_FAILED",
                "Failed to create reranker client: reranking is not available in memproxy; "
                "vector results are returned unreranked.",
                {"feature": "reranking", "reranker_id": chat.reranker_id},
            )
        )
    if chat.llm_id is None:
        out.append(
            status_event(
                "FEATURE_DISABLED",
                "Abstract reply generation disabled",
                {"feature": "summarization", "required_param": "llm_id"},
            )
        )
    else:
        out.append(
            status_event(
                "SUMMARIZATION_FAILED",
                "Abstract reply generation is not available in memproxy.",
                {"feature": "summarization", "llm_id": chat.llm_id},
            )
        )
    return out


# --------------------------------------------------------------------------------------------------------
# Ranking
# --------------------------------------------------------------------------------------------------------


def cosine_from_os_score(score: float | None) -> float:
    """Lucene cosinesimil ``_score`` = ``(1 + cos) / 2`` → ``cos``."""
    return 2.0 * float(score or 0.0) - 1.0


@dataclass(frozen=True)
class RankedChunk:
    """One retrieved chunk: its long-term document, the memory it belongs to, and its fused cosine."""

    chunk_id: str
    memory_id: str
    space_id: str
    score: float
    source: Mapping[str, Any]


@dataclass(frozen=True)
class WeightedHits:
    """One embedder's contribution to a space: its weight and the cosine of every chunk it scored."""

    weight: float
    scores: Mapping[str, float]


def fuse_space(contributions: Sequence[WeightedHits]) -> dict[str, float]:
    """Weighted mean of the embedders' cosines: ``Σ w·cos / Σ |w|`` over the non-zero weights.

    Candidates are the chunks found by a positively weighted embedder (a negative weight only penalises).
    The caller fills in each candidate's score under every embedder first (an exact second search), so no
    score is guessed; a chunk still missing from some embedder counts 0 there. With one embedder of weight
    w > 0 the fused score is that embedder's cosine.
    """
    active = [c for c in contributions if c.weight != 0]
    norm = sum(abs(c.weight) for c in active)
    if not active or norm == 0:
        return {}
    candidates: set[str] = set()
    for c in active:
        if c.weight > 0:
            candidates.update(c.scores)
    return {cid: sum(c.weight * c.scores.get(cid, 0.0) for c in active) / norm for cid in candidates}


def merge_spaces(per_space: Iterable[Sequence[RankedChunk]], size: int) -> list[RankedChunk]:
    """Best first across spaces (all scores are cosines, so they compare directly), at most ``size`` items.

    A chunk reached twice (the same space listed twice with different filters) keeps its best score.
    Ties keep request order (stable sort), so the answer is deterministic.
    """
    best: dict[str, RankedChunk] = {}
    order: list[str] = []
    for ranked in per_space:
        for item in ranked:
            seen = best.get(item.chunk_id)
            if seen is None:
                order.append(item.chunk_id)
                best[item.chunk_id] = item
            elif item.score > seen.score:
                best[item.chunk_id] = item
    merged = sorted((best[cid] for cid in order), key=lambda item: -item.score)
    return merged[:size]


# --------------------------------------------------------------------------------------------------------
# Event assembly
# --------------------------------------------------------------------------------------------------------


def chunk_json(item: RankedChunk, memory: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``MemoryChunkResponse`` of a retrieved chunk, in the same form the rest of the GoodMem API uses.

    The chunk's audit actor is its memory's creator when the memory was loaded (else the document's owner).
    """
    from proxy.core.goodmem.records import chunk_json as record_chunk_json

    actor = (memory or {}).get("createdById")
    return record_chunk_json(item.chunk_id, item.source, actor_id=actor if isinstance(actor, str) else None)


class EventAssembler:
    """``memoryDefinition`` / ``retrievedItem`` bookkeeping for one result set (rules 2-3 of the event model).

    The n-th definition sent is index n. Each memory's definition goes out once, just before its first
    chunk. With ``fetchMemory=false`` no definitions are sent and ``memoryIndex`` is still the position the
    memory would have had (order of first appearance).
    """

    def __init__(self, result_set_id: str, *, fetch_memory: bool) -> None:
        self.result_set_id = result_set_id
        self.fetch_memory = fetch_memory
        self._index: dict[str, int] = {}

    def begin(self, expected_items: int) -> dict[str, Any]:
        return boundary_event(self.result_set_id, "BEGIN", STAGE_RETRIEVE, expected_items)

    def end(self) -> dict[str, Any]:
        # The live END carries an empty stageName and no expectedItems.
        return boundary_event(self.result_set_id, "END", "")

    def item_events(self, item: RankedChunk, memory: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """The events for one chunk: its memory's definition when first seen, then the item."""
        events: list[dict[str, Any]] = []
        index = self._index.get(item.memory_id)
        if index is None:
            index = len(self._index)
            self._index[item.memory_id] = index
            if self.fetch_memory:
                events.append({"memoryDefinition": dict(memory or {})})
        chunk_ref = {
            "resultSetId": self.result_set_id,
            "chunk": chunk_json(item, memory),
            "memoryIndex": index,
            "relevanceScore": item.score,
        }
        events.append({"retrievedItem": {"chunk": chunk_ref}})
        return events


# --------------------------------------------------------------------------------------------------------
# Streaming phase
# --------------------------------------------------------------------------------------------------------


_GRPC_BY_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def grpc_code(exc: BaseException) -> str:
    """The gRPC-style code of an error (GoodMem's REST statuses are the gRPC mapping)."""
    if isinstance(exc, TimeoutError | DeadlineExceeded):
        return "DEADLINE_EXCEEDED"
    if isinstance(exc, MemproxyError):
        return _GRPC_BY_STATUS.get(exc.status, "INTERNAL")
    return "INTERNAL"


class StreamFailure(Exception):
    """Retrieval failed after the first byte: send ``status`` in-band, then end with ``code``/``message``."""

    def __init__(self, status: dict[str, Any], code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass
class RetrievalPlan:
    """Everything phase 1 decided: the ranked items and the statuses to report before them."""

    request: RetrieveRequest
    items: list[RankedChunk]
    statuses: list[dict[str, Any]] = field(default_factory=list)
    result_set_id: str = field(default_factory=lambda: str(uuid.uuid4()))


MemoryLoader = Callable[[list[str]], Awaitable[Mapping[str, Mapping[str, Any]]]]


async def _load_batch(
    loader: MemoryLoader, memory_ids: list[str], deadline: float | None
) -> Mapping[str, Mapping[str, Any]]:
    budget = asyncio.timeout_at(deadline)
    try:
        async with budget:
            return await loader(memory_ids)
    except TimeoutError:
        if not budget.expired():  # some other timeout below: not the caller's budget
            raise
        message = "Deadline exceeded (GoodMem-Timeout-Ms) while loading memory definitions"
        raise StreamFailure(
            status_event("MEMORY_LOAD_FAILED", message, {"reason": "DEADLINE_EXCEEDED"}),
            "DEADLINE_EXCEEDED",
            message,
        ) from None
    except MemproxyError as exc:
        message = f"Loading memory definitions failed: {exc.message}"
        raise StreamFailure(
            status_event("MEMORY_LOAD_FAILED", message, {"reason": grpc_code(exc)}), grpc_code(exc), message
        ) from exc


async def retrieval_events(
    plan: RetrievalPlan, loader: MemoryLoader, *, deadline: float | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The stream after the first byte, in order:

    request statuses → BEGIN(retrieve, expectedItems) → [memoryDefinition] retrievedItem … → END →
    post-processor statuses.

    ``loader(ids)`` returns memory JSON by id (only called with ``fetchMemory=true``); ``deadline`` is an
    event-loop time bounding each load. A memory that cannot be found (deleted meanwhile) gets a
    ``MEMORY_LOAD_FAILED`` status and its chunks are left out, so no ``memoryIndex`` points at nothing.
    """
    req = plan.request
    for status in plan.statuses:
        yield status
    assembler = EventAssembler(plan.result_set_id, fetch_memory=req.fetch_memory)
    yield assembler.begin(len(plan.items))
    loaded: dict[str, Mapping[str, Any]] = {}
    missing: set[str] = set()
    for start in range(0, len(plan.items), LOAD_BATCH):
        batch = plan.items[start : start + LOAD_BATCH]
        if req.fetch_memory:
            wanted = list(dict.fromkeys(i.memory_id for i in batch if i.memory_id not in loaded))
            wanted = [m for m in wanted if m not in missing]
            if wanted:
                found = await _load_batch(loader, wanted, deadline)
                loaded.update(found)
                for memory_id in wanted:
                    if memory_id not in found:
                        missing.add(memory_id)
                        yield status_event(
                            "MEMORY_LOAD_FAILED",
                            f"Memory {memory_id} could not be loaded; its chunks are left out.",
                            {"memoryId": memory_id},
                        )
        for item in batch:
            if item.memory_id in missing:
                continue
            for event in assembler.item_events(item, loaded.get(item.memory_id)):
                yield event
    yield assembler.end()
    for status in post_processor_statuses(req.chat):
        yield status


# --------------------------------------------------------------------------------------------------------
# Planning phase (before the first byte)
# --------------------------------------------------------------------------------------------------------


def parse_space_filter(text: str, where: str) -> Filter:
    """A GoodMem filter expression → ``MetadataFilter`` (400 with the parser's message on a bad one).

    The expression is also compiled here, so an expression the compiler cannot express fails before any
    embedding or search rather than halfway through the spaces.
    """
    try:
        expr = parse_filter(text)
        parsed = MetadataFilter(expr)
        compile_filter(parsed)
    except BadRequest as exc:
        raise BadRequest(f"Invalid filter in {where}: {exc.message}", details=exc.details) from None
    return parsed


@dataclass(frozen=True)
class _Field:
    """One embedder of a space as searched: its knn field, its (registry) id, its effective weight."""

    vector_field: str
    embedder_id: str
    weight: float


@dataclass(frozen=True)
class _SpaceSearch:
    key: SpaceKey
    container: Container
    filter: Filter
    fields: tuple[_Field, ...]


def _default_weights(container: Container) -> dict[str, float]:
    weights: dict[str, float] = {}
    for entry in (container.goodmem or {}).get("space_embedders") or []:
        if isinstance(entry, Mapping) and entry.get("embedder_id"):
            raw = entry.get("default_retrieval_weight", 1.0)
            weights[str(entry["embedder_id"])] = 1.0 if raw is None else float(raw)
    return weights


def _canonical_embedder(svc: Services, embedder_id: str) -> str:
    """The registry's id for an id or alias; unknown ids stay as given (and then match no space)."""
    from proxy.core.goodmem.embedders import find_embedder

    info = find_embedder(svc, embedder_id)
    return str(info.id) if info is not None else embedder_id


def _space_fields(svc: Services, container: Container, key: SpaceKey) -> tuple[_Field, ...]:
    """Effective weights: the request's ``embedderWeights`` over the space's ``defaultRetrievalWeight``s."""
    fields = container.vector_fields()
    defaults = _default_weights(container)
    weights = {embedder_id: defaults.get(embedder_id, 1.0) for _, embedder_id in fields}
    for override in key.embedder_weights or ():
        embedder_id = _canonical_embedder(svc, override.embedder_id)
        if embedder_id not in weights:
            raise BadRequest(f"Embedder {override.embedder_id} is not an embedder of space {key.space_id}")
        weights[embedder_id] = override.weight
    return tuple(_Field(name, embedder_id, weights[embedder_id]) for name, embedder_id in fields)


async def _authorized_space(svc: Services, principal: Principal, key: SpaceKey) -> Container:
    from proxy.core.goodmem.auth import authorize_space
    from proxy.core.goodmem.spaces import get_space

    container = await get_space(svc, key.space_id, cached=True)
    # The documented rule: LIST_MEMORY on the space and READ_MEMORY on its memories.
    await authorize_space(svc, principal, container, "LIST_MEMORY")
    await authorize_space(svc, principal, container, "READ_MEMORY")
    return container


async def _gather(coros: Sequence[Awaitable[Any]]) -> list[Any]:
    """Run concurrently; the first error cancels the rest (TaskGroup), and is raised as itself."""
    if len(coros) == 1:
        # The common case (one space, one embedder): nothing to run beside it, so no task and no group,
        # which cost more than the rest of the planning's own work.
        return [await coros[0]]
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(_as_coro(c)) for c in coros]
    except BaseExceptionGroup as group:
        first = group.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
    return [t.result() for t in tasks]


async def _as_coro(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


async def _embed_query(svc: Services, embedder_ids: Iterable[str], text: str) -> dict[str, list[float]]:
    """One query vector per distinct embedder (spaces sharing an embedder share the vector)."""
    ids = list(dict.fromkeys(embedder_ids))

    async def one(embedder_id: str) -> list[float]:
        vectors = await svc.embedders.get(embedder_id).embed([text])
        return [float(x) for x in vectors[0]]

    vectors = await _gather([one(e) for e in ids])
    return dict(zip(ids, vectors, strict=True))


def _hits_to_cosines(hits: Sequence[Any]) -> dict[str, float]:
    return {h.id: cosine_from_os_score(h.score) for h in hits}


async def _search_space(
    svc: Services, plan: _SpaceSearch, vectors: Mapping[str, list[float]], size: int, ef_search: int | None
) -> list[RankedChunk]:
    """The space's candidates (top ``size`` of each positively weighted embedder), fused exactly."""
    from proxy.core.search import semantic_search

    active = [f for f in plan.fields if f.weight != 0]

    def search(f: _Field, k: int, flt: Filter) -> Awaitable[list[Any]]:
        return semantic_search(
            svc,
            VectorSearch(
                container=plan.container,
                k=k,
                vector=vectors[f.embedder_id],
                filter=flt,
                ef_search=ef_search,
                vector_field=f.vector_field,
                source_excludes=("metadata",),
            ),
        )

    first = await _gather([search(f, size, plan.filter) for f in active if f.weight > 0])
    sources: dict[str, Mapping[str, Any]] = {}
    for hits in first:
        for h in hits:
            sources.setdefault(h.id, h.source)
    scores = [_hits_to_cosines(hits) for hits in first]
    by_field = dict(zip([f for f in active if f.weight > 0], scores, strict=True))
    if len(active) > 1 and sources:
        # Second pass: each embedder's exact score for the candidates it did not rank (an ids filter of
        # that size makes Lucene score them exhaustively), so the fusion never guesses a score.
        async def complete(f: _Field) -> dict[str, float]:
            known = by_field.get(f, {})
            missing = tuple(sorted(set(sources) - set(known)))
            if not missing:
                return dict(known)
            extra = await search(f, len(missing), Terms("_id", missing))
            return {**known, **_hits_to_cosines(extra)}

        completed = await _gather([complete(f) for f in active])
        by_field = dict(zip(active, completed, strict=True))
    fused = fuse_space([WeightedHits(f.weight, by_field.get(f, {})) for f in active])
    ranked = [
        RankedChunk(
            chunk_id=cid,
            memory_id=str(sources[cid].get("memory_id") or cid),
            space_id=plan.container.id,
            score=score,
            source=sources[cid],
        )
        for cid, score in fused.items()
    ]
    ranked.sort(key=lambda r: -r.score)
    return ranked[:size]


async def _space_outcome(
    svc: Services, plan: _SpaceSearch, vectors: Mapping[str, list[float]], size: int, ef_search: int | None
) -> list[RankedChunk] | MemproxyError:
    """A server-side failure of one space is returned (it becomes a status if other spaces succeed)."""
    try:
        return await _search_space(svc, plan, vectors, size, ef_search)
    except MemproxyError as exc:
        if exc.status < 500:
            raise
        log.warning("retrieve: search of space %s failed: %s", plan.container.id, exc.message)
        return exc


async def plan_retrieval(svc: Services, principal: Principal, req: RetrieveRequest) -> RetrievalPlan:
    """Phase 1: everything before the first byte. Raises :mod:`proxy.errors` kinds.

    Order matters: filters are parsed, then every space is looked up and both permissions are checked on
    each, and only then is anything embedded or searched.
    """
    filters: list[Filter] = [
        parse_space_filter(k.filter, f"spaceKeys[{i}].filter") if k.filter else MatchAll()
        for i, k in enumerate(req.space_keys)
    ]
    containers = await _gather([_authorized_space(svc, principal, k) for k in req.space_keys])
    plans = [
        _SpaceSearch(key=k, container=c, filter=f, fields=_space_fields(svc, c, k))
        for k, c, f in zip(req.space_keys, containers, filters, strict=True)
    ]
    statuses = request_statuses(req)
    searchable: list[_SpaceSearch] = []
    for plan in plans:
        if any(f.weight > 0 for f in plan.fields):
            searchable.append(plan)
        else:
            statuses.append(
                status_event(
                    "SPACE_NO_EMBEDDERS",
                    f"Space {plan.container.id} has no embedder with a positive retrieval weight; skipped.",
                    {"spaceId": plan.container.id},
                )
            )
    vectors = await _embed_query(
        svc, (f.embedder_id for p in searchable for f in p.fields if f.weight != 0), query_text(req)
    )
    ef = req.hnsw.ef_search if req.hnsw else None
    outcomes = await _gather([_space_outcome(svc, p, vectors, req.requested_size, ef) for p in searchable])
    failures = [(p, o) for p, o in zip(searchable, outcomes, strict=True) if isinstance(o, MemproxyError)]
    if failures and len(failures) == len(searchable):
        raise failures[0][1]
    for p, exc in failures:
        statuses.append(
            status_event(
                "VECTOR_SEARCH_FAILED",
                f"Vector search of space {p.container.id} failed: {exc.message}",
                {"spaceId": p.container.id},
            )
        )
    ranked = [o for o in outcomes if not isinstance(o, MemproxyError)]
    return RetrievalPlan(request=req, items=merge_spaces(ranked, req.requested_size), statuses=statuses)


async def load_memories(
    svc: Services, memory_ids: list[str], *, include_content: bool
) -> dict[str, dict[str, Any]]:
    """Memory JSON (``memoryDefinition`` payloads) by id for the ids that exist."""
    from proxy.core.goodmem.memories import get_memory_records, memory_json

    records = await get_memory_records(svc, memory_ids)
    return {mid: memory_json(rec, include_content) for mid, rec in records.items()}
