"""The events of a retrieve stream, in the order they are sent (docs/goodmem-retrieve.md, *The stream*):

request statuses → plan notes → BEGIN(retrieve, expectedItems) → [memoryDefinition] retrievedItem … → END →
with a post-processor: reranker statuses → BEGIN(rerank | postprocess) retrievedItem … END → LLM statuses →
abstractReply.

The post-processor's work (:mod:`proxy.core.goodmem.retrieve.postprocess`) runs after the retrieve set has
been sent, so the vector results reach the client before any reranker or LLM is waited for.

Events are plain JSON dicts, identical in NDJSON and SSE; framing is :mod:`proxy.api.goodmem.streaming`'s
job. Memory definitions are loaded in batches as the stream advances; a failure then raises
:class:`StreamFailure`, which carries the in-band status event and the terminal record's code (the status
line has been sent, so the handler reports it in the stream).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from proxy.api.goodmem.render import chunk_json, memory_json
from proxy.core.goodmem.records import MemoryRecord
from proxy.core.goodmem.retrieve import (
    ChatConfig,
    RankedChunk,
    RetrievalPlan,
    RetrieveRequest,
    SpaceFailed,
    SpaceSkipped,
)
from proxy.core.goodmem.retrieve.postprocess import (
    PostModels,
    Problem,
    reply_score,
    rerank,
    select,
    summarize,
)
from proxy.core.goodmem.retrieve.rank import VectorScore, single, vector_score
from proxy.errors import DeadlineExceeded, MemproxyError

__all__ = [
    "LOAD_BATCH",
    "STAGE_POSTPROCESS",
    "STAGE_RERANK",
    "STAGE_RETRIEVE",
    "EventAssembler",
    "MemoryLoader",
    "StreamFailure",
    "boundary_event",
    "feature_disabled",
    "grpc_code",
    "note_status",
    "post_processor_statuses",
    "problem_statuses",
    "request_statuses",
    "retrieval_events",
    "status_event",
]

STAGE_RETRIEVE = "retrieve"
STAGE_RERANK = "rerank"
STAGE_POSTPROCESS = "postprocess"
# Memory definitions are loaded this many items at a time, so the first events leave before the last
# records are read and a deadline or disconnect stops the work between batches.
LOAD_BATCH = 32

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

MemoryLoader = Callable[[list[str]], Awaitable[Mapping[str, MemoryRecord]]]
# Sends what the consumer holds (EventStream.flush).
Flush = Callable[[], Awaitable[None]]


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


# --- statuses --------------------------------------------------------------------------------------------


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


def note_status(note: SpaceSkipped | SpaceFailed) -> dict[str, Any]:
    """The status of a space that contributes no items."""
    if isinstance(note, SpaceSkipped):
        return status_event(
            "SPACE_NO_EMBEDDERS",
            f"Space {note.space_id} has no embedder with a positive retrieval weight; skipped.",
            {"spaceId": note.space_id},
        )
    return status_event(
        "VECTOR_SEARCH_FAILED",
        f"Vector search of space {note.space_id} failed: {note.error.message}",
        {"spaceId": note.space_id},
    )


def feature_disabled(feature: str) -> dict[str, Any]:
    """The live FEATURE_DISABLED status of a post-processor stage that has no model configured."""
    if feature == "reranking":
        return status_event(
            "FEATURE_DISABLED",
            "Reranking disabled: no reranker configured.",
            {"feature": "reranking", "required_param": "reranker_id"},
        )
    return status_event(
        "FEATURE_DISABLED",
        "Abstract reply generation disabled",
        {"feature": "summarization", "required_param": "llm_id"},
    )


def problem_statuses(problem: Problem) -> list[dict[str, Any]]:
    """The statuses of a post-processor stage that did not deliver (live wording where known)."""
    rerank = problem.stage == "rerank"
    id_key = "reranker_id" if rerank else "llm_id"
    details = {"feature": "reranking" if rerank else "summarization", id_key: problem.model_id}
    if problem.reason:
        details["reason"] = problem.reason
    failed = "RERANKING_FAILED" if rerank else "SUMMARIZATION_FAILED"
    if problem.kind == "not_found":
        what = "Reranker" if rerank else "LLM"
        client = "reranker" if rerank else "LLM"
        return [
            status_event("NOT_FOUND", f"{what} not found", {id_key: problem.model_id}),
            status_event(
                failed, f"Failed to create {client} client: {what} {problem.model_id} not found", details
            ),
        ]
    if rerank:
        message = f"Reranking failed: {problem.message}; the vector results stand unreranked"
        return [status_event(failed, message, details)]
    if problem.kind in ("timeout", "deadline"):
        return [
            status_event(
                "SUMMARIZATION_TIMEOUT", f"Abstract reply generation timed out: {problem.message}", details
            )
        ]
    return [status_event(failed, f"Abstract reply generation failed: {problem.message}", details)]


def post_processor_statuses(chat: ChatConfig | None) -> list[dict[str, Any]]:
    """The FEATURE_DISABLED statuses of a post-processor that names no reranker and/or no LLM."""
    if chat is None:
        return []
    out = []
    if chat.reranker_id is None:
        out.append(feature_disabled("reranking"))
    if chat.llm_id is None:
        out.append(feature_disabled("summarization"))
    return out


def _nonfatal_statuses(problems: list[Problem]) -> list[dict[str, Any]]:
    return [status for p in problems if p.kind != "deadline" for status in problem_statuses(p)]


def _check_deadline(problems: list[Problem]) -> None:
    """The caller's budget ran out in a stage: its status, then the stream fails (no successful end, as
    GoodMem-Timeout-Ms documents for an expiry after streaming started)."""
    for problem in problems:
        if problem.kind == "deadline":
            raise StreamFailure(problem_statuses(problem)[0], "DEADLINE_EXCEEDED", problem.message)


# --- the result set --------------------------------------------------------------------------------------


class EventAssembler:
    """``memoryDefinition`` / ``retrievedItem`` bookkeeping for one result set.

    The n-th definition sent is index n. Each memory's definition goes out once, just before its first
    chunk. With ``fetchMemory=false`` no definitions are sent and ``memoryIndex`` is still the position the
    memory would have had (order of first appearance).
    """

    def __init__(
        self,
        result_set_id: str,
        *,
        fetch_memory: bool,
        include_content: bool = False,
        convention: VectorScore = "live",
    ) -> None:
        self.result_set_id = result_set_id
        self.convention: VectorScore = convention
        self.stage = STAGE_RETRIEVE
        self.fetch_memory = fetch_memory
        self.include_content = include_content
        self._index: dict[str, int] = {}

    def next_set(self, result_set_id: str, stage: str) -> None:
        """Start another result set of the same stream: memory indexes carry over (one client-side list),
        so a memory defined in an earlier set is not defined again."""
        self.result_set_id = result_set_id
        self.stage = stage

    def begin(self, expected_items: int) -> dict[str, Any]:
        return boundary_event(self.result_set_id, "BEGIN", self.stage, expected_items)

    def end(self) -> dict[str, Any]:
        # The live END carries an empty stageName and no expectedItems.
        return boundary_event(self.result_set_id, "END", "")

    def item_events(
        self, item: RankedChunk, memory: MemoryRecord | None, score: float | None = None
    ) -> list[dict[str, Any]]:
        """The events for one chunk: its memory's definition when first seen, then the item.

        The chunk's audit actor is its memory's creator when it was loaded (else the document's owner).
        """
        events: list[dict[str, Any]] = []
        index = self._index.get(item.memory_id)
        if index is None:
            index = len(self._index)
            self._index[item.memory_id] = index
            if self.fetch_memory:
                events.append(
                    {"memoryDefinition": memory_json(memory, self.include_content) if memory else {}}
                )
        chunk_ref = {
            "resultSetId": self.result_set_id,
            "chunk": chunk_json(
                item.chunk_id, item.source, actor_id=memory.created_by_id if memory else None
            ),
            "memoryIndex": index,
            # Vector scores in the configured convention; a reranker's score as it is (higher = better).
            "relevanceScore": vector_score(item.score, self.convention) if score is None else single(score),
        }
        events.append({"retrievedItem": {"chunk": chunk_ref}})
        return events


async def _flushed(flush: Flush | None) -> None:
    if flush is not None:
        await flush()


async def _load_batch(
    loader: MemoryLoader, memory_ids: list[str], deadline: float | None
) -> Mapping[str, MemoryRecord]:
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
    plan: RetrievalPlan,
    loader: MemoryLoader,
    *,
    deadline: float | None = None,
    models: PostModels | None = None,
    convention: VectorScore = "live",
    flush: Flush | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The stream after the first byte, in the order of the module docstring.

    ``loader(ids)`` returns memory records by id (only called with ``fetchMemory=true``); ``deadline`` is an
    event-loop time bounding each load, rerank and LLM call; ``models`` resolves the post-processor's
    reranker and LLM (None: none is known); ``convention`` is how vector scores are sent. A memory that
    cannot be found (deleted meanwhile) gets a ``MEMORY_LOAD_FAILED`` status and its chunks are left out, so
    no ``memoryIndex`` points at nothing. ``flush`` is awaited before each wait (a load, the reranker, the
    LLM), so that the consumer can send what it has while this waits.
    """
    req = plan.request
    for status in request_statuses(req):
        yield status
    for note in plan.notes:
        yield note_status(note)
    assembler = EventAssembler(
        plan.result_set_id,
        fetch_memory=req.fetch_memory,
        include_content=req.fetch_memory_content,
        convention=convention,
    )
    yield assembler.begin(len(plan.items))
    loaded: dict[str, MemoryRecord] = {}
    missing: set[str] = set()
    streamed: list[RankedChunk] = []
    for start in range(0, len(plan.items), LOAD_BATCH):
        batch = plan.items[start : start + LOAD_BATCH]
        if req.fetch_memory:
            wanted = list(dict.fromkeys(i.memory_id for i in batch if i.memory_id not in loaded))
            wanted = [m for m in wanted if m not in missing]
            if wanted:
                await _flushed(flush)
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
            streamed.append(item)
            for event in assembler.item_events(item, loaded.get(item.memory_id)):
                yield event
    yield assembler.end()
    if req.chat is not None:
        post = _post_process(req, req.chat, streamed, loaded, assembler, models, deadline, flush)
        async for event in post:
            yield event


async def _post_process(
    req: RetrieveRequest,
    chat: ChatConfig,
    items: list[RankedChunk],
    loaded: Mapping[str, MemoryRecord],
    assembler: EventAssembler,
    models: PostModels | None,
    deadline: float | None,
    flush: Flush | None,
) -> AsyncIterator[dict[str, Any]]:
    """After the retrieve set: reranker statuses, the post-processor's result set, LLM statuses, the reply.

    The post-processor's set is ``rerank`` when the reranker scored the items, ``postprocess`` when only an
    LLM is configured (its cap and re-sort still shape what the LLM reads); after a failed rerank there is
    no second set — the vector results stand, as on a live server — and the reply links to the retrieve set.
    """
    if chat.reranker_id is None:
        yield feature_disabled("reranking")
    await _flushed(flush)
    reranked = await rerank(models, chat, req.message, items, deadline)
    for status in _nonfatal_statuses(reranked.problems):
        yield status
    _check_deadline(reranked.problems)
    if chat.reranker_id is None and chat.llm_id is None:
        yield feature_disabled("summarization")
        return
    created = {mid: record.created_at for mid, record in loaded.items()}
    selected = select(items, reranked.scores, chat, req, created)
    answered_set = assembler.result_set_id
    if reranked.scores is not None or chat.reranker_id is None:
        stage = STAGE_RERANK if reranked.scores is not None else STAGE_POSTPROCESS
        assembler.next_set(str(uuid.uuid4()), stage)
        answered_set = assembler.result_set_id
        yield assembler.begin(len(selected))
        reranker_scores = reranked.scores is not None
        for s in selected:
            score = s.score if reranker_scores else None  # None: the vector score, in its convention
            for event in assembler.item_events(s.item, loaded.get(s.item.memory_id), score):
                yield event
        yield assembler.end()
    if chat.llm_id is None:
        yield feature_disabled("summarization")
        return
    await _flushed(flush)
    abstract = await summarize(models, chat, req, selected, created, deadline)
    for status in _nonfatal_statuses(abstract.problems):
        yield status
    _check_deadline(abstract.problems)
    if abstract.text is not None:
        yield {
            "abstractReply": {
                "text": abstract.text,
                "relevanceScore": single(reply_score(selected, reranked.scores is not None)),
                "resultSetId": answered_set,
            }
        }
