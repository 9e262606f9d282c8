"""Semantic (k-NN) and hybrid (BM25 + k-NN) retrieval over a container's long-term memories.

Every filter, the container's own included, goes inside the knn clause, so a search returns
min(k, matching) hits (ml-commons post-filters and can return fewer). When the filter matches at most
``--exact-search-threshold`` memories (1,000 by default; docs/benchmarks.md measured where exact scoring stops
being cheaper than the graph walk), they are all scored exactly instead: identical vectors stored many times
trap Lucene's HNSW walk, and a typical user's memories are that small, so their search has recall 1.0 by
construction. The count that decides runs while the query is embedded. Scores are Lucene's cosinesimil
``(1 + cos) / 2``, which is ml-commons' score. Hybrid search fuses the two legs here as neural-search's
normalization processor would (min-max per leg, weighted arithmetic mean), because the node has no
neural-search plugin.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from proxy.core.longterm import long_term_index
from proxy.core.query import VectorSearch
from proxy.core.recall_canary import Sample
from proxy.core.services import Services
from proxy.errors import BadRequest
from proxy.store import dsl_policy
from proxy.store import search as searches
from proxy.store.client import IndexMissing
from proxy.store.query import And, Filter, Hit, Not, Or, RawDsl, Term, all_of

__all__ = [
    "MAX_K",
    "SearchResult",
    "check_caller_dsl",
    "hybrid_search_result",
    "min_max_normalize",
    "query_vector",
    "semantic_search",
    "vector_search",
]

MAX_K = 10_000
# neural-search's min-max: the lowest score of a leg maps to this instead of 0, a lone result to 1.
MIN_NORMALIZED = 0.001
INTERNAL_SOURCE_FIELDS = ("metadata_index",)


@dataclass(frozen=True)
class SearchResult:
    """Hits plus the response-level facts a standard search response reports."""

    hits: list[Hit]
    took: int = 0
    timed_out: bool = False
    shards: dict[str, Any] = field(
        default_factory=lambda: {"total": 0, "successful": 0, "skipped": 0, "failed": 0}
    )
    total: int = 0

    @property
    def max_score(self) -> float | None:
        scores = [h.score for h in self.hits if h.score is not None]
        return max(scores) if scores else None


def _caller_dsl(value: Filter | Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The caller's own Query DSL clauses in a filter tree (its ``RawDsl`` leaves)."""
    if isinstance(value, RawDsl):
        return [value.query]
    if isinstance(value, And | Or):
        return [dsl for clause in value.clauses for dsl in _caller_dsl(clause)]
    if isinstance(value, Not):
        return _caller_dsl(value.clause)
    return []  # memproxy's own clauses: terms, ranges, compiled GoodMem filters (painless included)


def check_caller_dsl(svc: Services, value: Filter | Mapping[str, Any], *, where: str = "filter") -> None:
    """400 unless a caller's Query DSL is on the allowlist (:mod:`proxy.store.dsl_policy`): a whole
    ``_search`` body, or the ``RawDsl`` clauses of a filter tree (named ``where`` in the 400). Scripts pass
    only when the operator allowed them (``--allow-scripts``)."""
    allow_scripts = svc.store.settings.allow_scripts
    if isinstance(value, Mapping):
        dsl_policy.check_search_body(value, allow_scripts=allow_scripts)
        return
    for clause in _caller_dsl(value):
        dsl_policy.check_query(clause, allow_scripts=allow_scripts, path=where)


def _check_k(k: int) -> None:
    if not 1 <= k <= MAX_K:
        raise BadRequest(f"k must be between 1 and {MAX_K}")


async def query_vector(svc: Services, search: VectorSearch) -> list[float]:
    """The search's vector: given, or ``query_text`` embedded by the embedder of ``vector_field``."""
    if search.vector is not None:
        return [float(x) for x in search.vector]
    if search.query_text is None or not search.query_text.strip():
        raise BadRequest("query cannot be null or blank")
    fields = dict(search.container.vector_fields())
    embedder_id = fields.get(search.vector_field)
    if embedder_id is None:
        raise BadRequest(f"field [{search.vector_field}] is not a vector field of this memory container")
    return await svc.embed_query(embedder_id, search.query_text)


def _scoped(search: VectorSearch) -> Filter:
    return all_of([search.filter, Term("memory_container_id", search.container.id)])


def _source_excludes(search: VectorSearch) -> list[str]:
    vector_fields = [name for name, _ in search.container.vector_fields()]
    return list(dict.fromkeys([*vector_fields, *INTERNAL_SOURCE_FIELDS, *search.source_excludes]))


def _result(response: Mapping[str, Any], hits: list[Hit] | None = None) -> SearchResult:
    total = response["hits"].get("total")
    return SearchResult(
        hits=searches.hits(response) if hits is None else hits,
        took=int(response.get("took", 0)),
        timed_out=bool(response.get("timed_out", False)),
        shards=dict(response.get("_shards") or {}),
        total=int(total["value"]) if isinstance(total, Mapping) else int(total or 0),
    )


T = TypeVar("T")


async def _or_none(answer: Awaitable[T]) -> T | None:
    """A search's answer; ``None`` when the long-term index does not exist yet (nothing written)."""
    try:
        return await answer
    except IndexMissing:
        return None


def exact_search_threshold(svc: Services) -> int:
    """The largest filtered set scored exactly (``--exact-search-threshold``; 0: always the graph)."""
    return svc.store.settings.exact_search_threshold


async def _exact_wanted(svc: Services, search: VectorSearch, index: str) -> bool | None:
    """Whether the search's filter matches at most the threshold; ``None`` when the index does not exist."""
    threshold = exact_search_threshold(svc)
    if threshold <= 0:
        return False
    scope = _scoped(search)
    # Cached for --cache-ttl-s (proxy.core.cache: a stale size changes how a search scores, never what it
    # finds): a text query otherwise pays a second node round trip, and its CPU, on every search.
    key = (index, search.container.id, repr(scope), threshold + 1)
    counted = await _or_none(
        svc.caches.set_sizes.get(
            key,
            lambda: searches.count_up_to(
                svc.store, index, scope, limit=threshold + 1, routing=search.container.id
            ),
        )
    )
    return None if counted is None else counted <= threshold


async def _plan(svc: Services, search: VectorSearch, index: str) -> tuple[list[float], bool | None]:
    """The query's vector and :func:`_exact_wanted`, the count running on the node while the query embeds
    (embedding is most of a search's time, so the count adds no latency to a text query)."""
    counting = asyncio.ensure_future(_exact_wanted(svc, search, index))
    try:
        vector = await query_vector(svc, search)
    except BaseException:
        # The embedding's error is the answer; the count is abandoned, and whatever it ends in is moot.
        counting.cancel()
        await asyncio.gather(counting, return_exceptions=True)
        raise
    return vector, await counting


async def _knn(
    svc: Services,
    search: VectorSearch,
    index: str,
    vector: list[float],
    *,
    with_min_score: bool,
    exact: bool,
) -> dict[str, Any]:
    """The vector search itself; a graph-walked one may be offered to the recall canary (after it answered,
    so the canary never delays it)."""

    def run(exact: bool, source_includes: Sequence[str]) -> Awaitable[dict[str, Any]]:
        return searches.vector_search(
            svc.store,
            index,
            field=search.vector_field,
            vector=vector,
            k=search.k,
            selection=_scoped(search),
            min_score=search.min_score if with_min_score else None,
            ef_search=search.ef_search,
            exact=exact,
            source_includes=source_includes,
            source_excludes=_source_excludes(search),
            routing=search.container.id,
            recency=search.recency,
        )

    response = await run(exact, search.source_includes)
    canary = svc.canary
    # A decayed search's candidates are k * a factor, its scores no longer similarities: the canary measures
    # the graph's recall on plain searches only.
    if not exact and search.recency is None and canary is not None and canary.wants():

        async def exact_scores() -> list[float]:
            # Only the scores are compared: fetch one small field, not the memories.
            answer = await run(True, ("memory_container_id",))
            return [float(h.get("_score") or 0.0) for h in answer["hits"]["hits"]]

        found = tuple(float(h.get("_score") or 0.0) for h in response["hits"]["hits"])
        canary.offer(Sample(index=index, k=search.k, found=found, exact=exact_scores))
    return response


async def vector_search(svc: Services, search: VectorSearch) -> SearchResult:
    """The top k by vector: exact scoring of a filtered set up to the threshold, else one knn request with
    the whole filter inside the knn clause; ``size`` = k either way."""
    _check_k(search.k)
    check_caller_dsl(svc, search.filter)
    index = long_term_index(search.container)
    vector, exact = await _plan(svc, search, index)
    if exact is None:
        return SearchResult(hits=[])
    response = await _or_none(_knn(svc, search, index, vector, with_min_score=True, exact=exact))
    return SearchResult(hits=[]) if response is None else _result(response)


async def semantic_search(svc: Services, search: VectorSearch) -> list[Hit]:
    return (await vector_search(svc, search)).hits


def min_max_normalize(scores: Mapping[str, float]) -> dict[str, float]:
    """neural-search's ``min_max`` technique for one leg's scores."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    out: dict[str, float] = {}
    for doc_id, score in scores.items():
        if high == low:
            out[doc_id] = 1.0
        else:
            normalized = (score - low) / (high - low)
            out[doc_id] = normalized if normalized != 0.0 else MIN_NORMALIZED
    return out


def _fuse(
    legs: Sequence[Mapping[str, Hit]], weights: Sequence[float], k: int, min_score: float | None
) -> tuple[list[Hit], int]:
    """Weighted arithmetic mean of the normalised leg scores; a document missing from a leg scores 0 there."""
    normalized = [min_max_normalize({i: float(h.score or 0.0) for i, h in leg.items()}) for leg in legs]
    ids = list(dict.fromkeys(i for leg in legs for i in leg))
    total_weight = sum(weights) or 1.0
    fused: list[Hit] = []
    for doc_id in ids:
        score = (
            sum(w * norm.get(doc_id, 0.0) for w, norm in zip(weights, normalized, strict=True)) / total_weight
        )
        if min_score is not None and score < min_score:
            continue
        first = next(leg[doc_id] for leg in legs if doc_id in leg)
        fused.append(Hit(id=doc_id, index=first.index, score=score, source=first.source))
    fused.sort(key=lambda h: (-(h.score or 0.0), h.id))
    return fused[:k], len(ids)


async def hybrid_search_result(
    svc: Services,
    search: VectorSearch,
    *,
    bm25_weight: float = 0.5,
    neural_weight: float = 0.5,
    text_field: str = "memory",
) -> SearchResult:
    """BM25 ``match`` on ``text_field`` and the knn search, both top-k under the same filter, fused."""
    _check_k(search.k)
    check_caller_dsl(svc, search.filter)
    if search.query_text is None or not search.query_text.strip():
        raise BadRequest("query cannot be null or blank")
    index = long_term_index(search.container)
    vector, exact = await _plan(svc, search, index)
    if exact is None:
        return SearchResult(hits=[])
    lexical_leg = searches.lexical_search(
        svc.store,
        index,
        text_field=text_field,
        text=search.query_text,
        size=search.k,
        selection=_scoped(search),
        source_includes=search.source_includes,
        source_excludes=_source_excludes(search),
        routing=search.container.id,
        recency=search.recency,
    )
    lexical, neural = await asyncio.gather(
        _or_none(lexical_leg), _or_none(_knn(svc, search, index, vector, with_min_score=False, exact=exact))
    )
    if lexical is None or neural is None:
        return SearchResult(hits=[])
    legs = [{h.id: h for h in searches.hits(lexical)}, {h.id: h for h in searches.hits(neural)}]
    hits, union = _fuse(legs, [bm25_weight, neural_weight], search.k, search.min_score)
    merged = _result(neural, hits)
    return SearchResult(
        hits=hits,
        took=max(int(lexical.get("took", 0)), merged.took),
        timed_out=bool(lexical.get("timed_out")) or merged.timed_out,
        shards=merged.shards,
        total=union,
    )
