"""``…/memories/long-term/_semantic_search`` and ``…/_hybrid_search``."""

from __future__ import annotations

from typing import Any, NamedTuple

from aiohttp import web

from proxy.api.opensearch_memory.common import (
    json_response,
    load_container,
    object_body,
    search_failures,
    services,
)
from proxy.api.opensearch_memory.lenient import as_float, as_int, as_object, as_str, scalar_string_map
from proxy.core.container_record import Container
from proxy.core.query import VectorSearch
from proxy.core.recency import recency_from
from proxy.core.search import MAX_K, SearchResult, hybrid_search_result, vector_search
from proxy.errors import BadRequest
from proxy.store.query import Filter, Hit, RawDsl, Recency, all_of, term_map

__all__ = ["hybrid_search", "render_search_result", "semantic_search"]

DEFAULT_K = 10
WEIGHT_TOLERANCE = 0.001
NO_EMBEDDING = (
    "This memory container does not have an embedding model configured. Semantic search requires a memory "
    "container with an embedding model (TEXT_EMBEDDING or SPARSE_ENCODING). Please update the memory "
    "container configuration to add an embedding model."
)
NO_EMBEDDING_ID = (
    "This memory container does not have an embedding model ID configured. Please update the memory "
    "container configuration to add an embedding model ID."
)


def _hit(hit: Hit) -> dict[str, Any]:
    return {"_index": hit.index, "_id": hit.id, "_score": hit.score, "_source": hit.source}


def render_search_result(result: SearchResult) -> dict[str, Any]:
    """A standard search response (hits without versions, as ml-commons' semantic search returns them)."""
    return {
        "took": result.took,
        "timed_out": result.timed_out,
        "_shards": result.shards or {"total": 0, "successful": 0, "skipped": 0, "failed": 0},
        "hits": {
            "total": {"value": result.total, "relation": "eq"},
            "max_score": result.max_score,
            "hits": [_hit(h) for h in result.hits],
        },
    }


class _Parsed(NamedTuple):
    """What both searches read from their body (before the container is loaded)."""

    query: str
    k: int
    filter: Filter
    min_score: float | None
    ef_search: int | None
    recency: Recency | None


def _parse_common(body: dict[str, Any]) -> _Parsed:
    query = body.get("query")
    if query is None or not as_str(query).strip():
        raise BadRequest("query cannot be null or blank")
    k = as_int(body["k"]) if body.get("k") is not None else DEFAULT_K
    if not 1 <= k <= MAX_K:
        raise BadRequest(f"k must be between 1 and {MAX_K}")
    clauses: list[Filter | None] = [
        *term_map(
            "namespace", scalar_string_map(body["namespace"]) if body.get("namespace") is not None else None
        ),
        *term_map("tags", scalar_string_map(body["tags"]) if body.get("tags") is not None else None),
    ]
    if body.get("filter") is not None:
        clauses.append(RawDsl(as_object(body["filter"])))
    min_score = as_float(body["min_score"]) if body.get("min_score") is not None else None
    # memproxy extension: the HNSW candidate list of the vector search.
    ef_search = as_int(body["ef_search"]) if body.get("ef_search") is not None else None
    if ef_search is not None and ef_search < 1:
        raise BadRequest("ef_search must be a positive integer")
    return _Parsed(as_str(query), k, all_of(clauses), min_score, ef_search, _recency(body))


def _recency(body: dict[str, Any]) -> Recency | None:
    """memproxy extension: ``"recency": {"half_life": "30d"}`` turns the recency decay on; absent: off."""
    value = body.get("recency")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest('recency must be an object such as {"half_life": "30d"}')
    unknown = sorted(set(value) - {"half_life"})
    if unknown:
        raise BadRequest(f"recency has unknown field [{unknown[0]}]; it takes half_life")
    if value.get("half_life") is None:
        raise BadRequest("recency.half_life is required")
    return recency_from(value["half_life"], "recency.half_life")


def _check_searchable(container: Container) -> None:
    cfg = container.configuration
    if not cfg.get("embedding_model_type"):
        raise BadRequest(NO_EMBEDDING, os_type="status_exception")
    if not cfg.get("embedding_model_id"):
        raise BadRequest(NO_EMBEDDING_ID, os_type="status_exception")


async def _vector_search_of(request: web.Request, parsed: _Parsed) -> VectorSearch:
    container = await load_container(request, cached=True)
    _check_searchable(container)
    return VectorSearch(
        container=container,
        k=parsed.k,
        query_text=parsed.query,
        filter=parsed.filter,
        min_score=parsed.min_score,
        ef_search=parsed.ef_search,
        recency=parsed.recency,
    )


async def semantic_search(request: web.Request) -> web.Response:
    body = await object_body(request, "Semantic search memories request has empty body")
    search = await _vector_search_of(request, _parse_common(body))
    with search_failures("Semantic search execution failed"):
        result = await vector_search(services(request), search)
    return json_response(render_search_result(result))


def _weights(body: dict[str, Any]) -> tuple[float, float]:
    bm25 = as_float(body["bm25_weight"]) if body.get("bm25_weight") is not None else 0.5
    neural = as_float(body["neural_weight"]) if body.get("neural_weight") is not None else 0.5
    if not (0.0 <= bm25 <= 1.0 and 0.0 <= neural <= 1.0):
        raise BadRequest("bm25_weight and neural_weight must be between 0.0 and 1.0")
    if abs(bm25 + neural - 1.0) > WEIGHT_TOLERANCE:
        raise BadRequest(f"bm25_weight and neural_weight must sum to 1.0, got {bm25 + neural}")
    return bm25, neural


async def hybrid_search(request: web.Request) -> web.Response:
    body = await object_body(request, "Hybrid search memories request has empty body")
    parsed = _parse_common(body)
    bm25, neural = _weights(body)
    search = await _vector_search_of(request, parsed)
    with search_failures("Hybrid search execution failed"):
        result = await hybrid_search_result(services(request), search, bm25_weight=bm25, neural_weight=neural)
    return json_response(render_search_result(result))
