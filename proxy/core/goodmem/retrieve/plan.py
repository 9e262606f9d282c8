"""Planning a retrieval: everything before the first byte, so that every failure a client can act on arrives
as an ordinary HTTP error (:mod:`proxy.errors` kinds).

Order matters: every filter is parsed and compiled, then every space is looked up and both LIST_MEMORY and
READ_MEMORY are checked on each, and only then is anything embedded or searched. A space whose search fails
on the server side while others succeed becomes a :class:`SpaceFailed` note (a status event in the stream);
one with no positively weighted embedder a :class:`SpaceSkipped` note.

:class:`Retriever` is one per application. What planning asks of the rest of memproxy (a space, a permission,
a query vector, a k-NN search, memory records) are its public methods, so a test can replace exactly those.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from proxy.core.container_record import Container
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.embedders import canonical_embedder_id, embed_query
from proxy.core.goodmem.memories import get_memory_records
from proxy.core.goodmem.records import MemoryRecord
from proxy.core.goodmem.retrieve.rank import (
    RankedChunk,
    WeightedHits,
    cosine_from_os_score,
    fuse_space,
    merge_spaces,
)
from proxy.core.goodmem.retrieve.request import RetrieveRequest, SpaceKey, query_text
from proxy.core.goodmem.spaces import get_space
from proxy.core.identity import Principal, authorize_space
from proxy.core.models.registry import ChatModel, RerankModel
from proxy.core.query import VectorSearch
from proxy.core.search import semantic_search
from proxy.core.slots import CallerSlots
from proxy.core.tasks import gather
from proxy.errors import BadRequest, MemproxyError
from proxy.filters import parse_filter
from proxy.store.query import Filter, Hit, MatchAll, MetadataFilter, Recency, Terms
from proxy.store.query_dsl import compile_filter

__all__ = ["RetrievalPlan", "Retriever", "SpaceFailed", "SpaceSkipped", "parse_space_filter"]

log = logging.getLogger(__name__)

DEFAULT_MAX_PER_CALLER = 8


@dataclass(frozen=True)
class SpaceSkipped:
    """A space none of whose embedders has a positive weight: not searched."""

    space_id: str


@dataclass(frozen=True)
class SpaceFailed:
    """A space whose search failed on the server side while others succeeded."""

    space_id: str
    error: MemproxyError


@dataclass
class RetrievalPlan:
    """Everything planning decided: the ranked items, and notes on spaces that contribute none."""

    request: RetrieveRequest
    items: list[RankedChunk]
    notes: list[SpaceSkipped | SpaceFailed] = field(default_factory=list)
    result_set_id: str = field(default_factory=lambda: str(uuid.uuid4()))


def parse_space_filter(text: str, where: str) -> Filter:
    """A GoodMem filter expression → ``MetadataFilter`` (400 with the parser's message on a bad one).

    The expression is also compiled here, so an expression the compiler cannot express fails before any
    embedding or search rather than halfway through the spaces.
    """
    try:
        parsed = MetadataFilter(parse_filter(text))
        compile_filter(parsed)
    except BadRequest as exc:
        raise BadRequest(f"Invalid filter in {where}: {exc.message}", details=exc.details) from None
    return parsed


def _parse_filters(keys: Sequence[SpaceKey]) -> list[Filter]:
    """Each space's filter, every distinct text parsed once. Run on a worker thread: up to 32 KiB of
    expressions (proxy.filters.MAX_FILTER_CHARS_PER_REQUEST) take half a second of CPU that the event loop,
    which serves every other caller, must not spend."""
    parsed: dict[str, Filter] = {}
    out: list[Filter] = []
    for i, key in enumerate(keys):
        if not key.filter:
            out.append(MatchAll())
            continue
        if key.filter not in parsed:
            parsed[key.filter] = parse_space_filter(key.filter, f"spaceKeys[{i}].filter")
        out.append(parsed[key.filter])
    return out


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


def _hits_to_cosines(hits: Sequence[Hit]) -> dict[str, float]:
    return {h.id: cosine_from_os_score(h.score) for h in hits}


class Retriever:
    """GoodMem retrieval over one application's GoodMem state; see the module docstring."""

    def __init__(self, gm: GoodMem, *, max_per_caller: int = DEFAULT_MAX_PER_CALLER) -> None:
        self.gm = gm
        # A caller's retrieves in flight, planning and streaming both: the API holds one around each.
        self.slots = CallerSlots("retrieves", max_per_caller)

    # --- what planning asks of the rest of memproxy ---------------------------------------------------

    async def get_space(self, space_id: str) -> Container:
        """The space (a read from the last seconds may be reused: proxy.core.cache); 404 when none."""
        return await get_space(self.gm, space_id, cached=True)

    async def authorize(self, principal: Principal, container: Container, op: str) -> None:
        await authorize_space(self.gm, principal, container, op)

    def canonical_embedder(self, embedder_id: str) -> str:
        return canonical_embedder_id(self.gm, embedder_id)

    async def embed(self, embedder_ids: Iterable[str], text: str) -> dict[str, list[float]]:
        return await embed_query(self.gm, embedder_ids, text)

    async def search(self, search: VectorSearch) -> list[Hit]:
        return await semantic_search(self.gm.svc, search)

    async def load(
        self, memory_ids: list[str], spaces: Mapping[str, str] | None = None
    ) -> dict[str, MemoryRecord]:
        """The records of the memories that exist, by id (``memoryDefinition`` payloads while streaming);
        ``spaces`` (memory id → the space its chunk came from) leaves out a record of any other space."""
        return await get_memory_records(self.gm, memory_ids, spaces=spaces)

    async def rerank_model(self, model_id: str) -> RerankModel:
        """The post-processor's reranker (UnknownModel when no reranker has this id)."""
        return await self.gm.svc.models.rerank_model(model_id)

    async def chat_model(self, model_id: str) -> ChatModel:
        """The post-processor's LLM (UnknownModel when no LLM has this id)."""
        return await self.gm.svc.models.chat_model(model_id)

    async def llm_max_tokens(self, model_id: str) -> int | None:
        """The LLM's own ``defaultSamplingParams.maxTokens`` (GoodMem-registered LLMs), else None."""
        record = await self.gm.svc.models.get(model_id, ["llm"])
        params = record.view.get("defaultSamplingParams") if record is not None else None
        value = params.get("maxTokens") if isinstance(params, Mapping) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    # --- planning ---------------------------------------------------------------------------------------

    async def plan(self, principal: Principal, req: RetrieveRequest) -> RetrievalPlan:
        """Everything before the first byte (see the module docstring for the order). Raises
        :mod:`proxy.errors` kinds."""
        filters = await asyncio.to_thread(_parse_filters, req.space_keys)
        containers = await gather([self._authorized_space(principal, k) for k in req.space_keys])
        plans = [
            _SpaceSearch(key=k, container=c, filter=f, fields=self._space_fields(c, k))
            for k, c, f in zip(req.space_keys, containers, filters, strict=True)
        ]
        notes: list[SpaceSkipped | SpaceFailed] = []
        searchable: list[_SpaceSearch] = []
        for plan in plans:
            if any(f.weight > 0 for f in plan.fields):
                searchable.append(plan)
            else:
                notes.append(SpaceSkipped(plan.container.id))
        vectors = await self.embed(
            (f.embedder_id for p in searchable for f in p.fields if f.weight != 0), query_text(req)
        )
        ef = req.hnsw.ef_search if req.hnsw else None
        outcomes = await gather(
            [self._space_outcome(p, vectors, req.requested_size, ef, req.recency) for p in searchable]
        )
        failures = [(p, o) for p, o in zip(searchable, outcomes, strict=True) if isinstance(o, MemproxyError)]
        if failures and len(failures) == len(searchable):
            raise failures[0][1]
        notes.extend(SpaceFailed(p.container.id, exc) for p, exc in failures)
        ranked = [o for o in outcomes if not isinstance(o, MemproxyError)]
        return RetrievalPlan(request=req, items=merge_spaces(ranked, req.requested_size), notes=notes)

    async def _authorized_space(self, principal: Principal, key: SpaceKey) -> Container:
        container = await self.get_space(key.space_id)
        # The documented rule: LIST_MEMORY on the space and READ_MEMORY on its memories.
        await self.authorize(principal, container, "LIST_MEMORY")
        await self.authorize(principal, container, "READ_MEMORY")
        return container

    def _space_fields(self, container: Container, key: SpaceKey) -> tuple[_Field, ...]:
        """Effective weights: the request's ``embedderWeights`` over the space's default weights."""
        fields = container.vector_fields()
        defaults = _default_weights(container)
        weights = {embedder_id: defaults.get(embedder_id, 1.0) for _, embedder_id in fields}
        for override in key.embedder_weights or ():
            embedder_id = self.canonical_embedder(override.embedder_id)
            if embedder_id not in weights:
                raise BadRequest(
                    f"Embedder {override.embedder_id} is not an embedder of space {key.space_id}"
                )
            weights[embedder_id] = override.weight
        return tuple(_Field(name, embedder_id, weights[embedder_id]) for name, embedder_id in fields)

    async def _space_outcome(
        self,
        plan: _SpaceSearch,
        vectors: Mapping[str, list[float]],
        size: int,
        ef_search: int | None,
        recency: Recency | None,
    ) -> list[RankedChunk] | MemproxyError:
        """A server-side failure of one space is returned (it becomes a note if other spaces succeed)."""
        try:
            return await self._search_space(plan, vectors, size, ef_search, recency)
        except MemproxyError as exc:
            if exc.status < 500:
                raise
            log.warning("retrieve: search of space %s failed: %s", plan.container.id, exc.message)
            return exc

    async def _search_space(
        self,
        plan: _SpaceSearch,
        vectors: Mapping[str, list[float]],
        size: int,
        ef_search: int | None,
        recency: Recency | None,
    ) -> list[RankedChunk]:
        """The space's candidates (top ``size`` of each positively weighted embedder), fused exactly. With
        ``recency`` every score the node returns is decayed (the second pass's too: one request time), so
        the fused score is the decayed ``(1 + cos) / 2`` read back as a cosine."""
        active = [f for f in plan.fields if f.weight != 0]

        def search(f: _Field, k: int, flt: Filter) -> Awaitable[list[Hit]]:
            return self.search(
                VectorSearch(
                    container=plan.container,
                    k=k,
                    vector=vectors[f.embedder_id],
                    filter=flt,
                    ef_search=ef_search,
                    vector_field=f.vector_field,
                    source_excludes=("metadata",),
                    recency=recency,
                )
            )

        positive = [f for f in active if f.weight > 0]
        first = await gather([search(f, size, plan.filter) for f in positive])
        sources: dict[str, Mapping[str, object]] = {}
        for hits in first:
            for h in hits:
                sources.setdefault(h.id, h.source)
        by_field = dict(zip(positive, [_hits_to_cosines(hits) for hits in first], strict=True))
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

            by_field = dict(zip(active, await gather([complete(f) for f in active]), strict=True))
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
