"""The searches the store runs: k-NN and lexical legs over a long-term index with a filter tree, and a
caller's own ``_search`` body the way ml-commons runs it.

Bodies come from :mod:`proxy.store.query_dsl`; answers are the node's own (ml-commons relays them) or typed
:class:`proxy.store.query.Hit`\\ s. A missing index raises :class:`proxy.store.client.IndexMissing`, as every
read of the store does; :func:`empty_search_response` is the answer a search of it would have given.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.store.client import Store
from proxy.store.memories import search
from proxy.store.query import Filter, Hit, Recency
from proxy.store.query_dsl import (
    add_filter,
    apply_ml_search_options,
    bm25_search_body,
    compile_filter,
    container_term,
    count_body,
    exact_vector_search_body,
    replace_neural,
    vector_search_body,
)

__all__ = [
    "count_up_to",
    "empty_search_response",
    "hits",
    "lexical_search",
    "ml_request",
    "ml_search",
    "vector_search",
]

_EMPTY_SEARCH_RESPONSE: dict[str, Any] = {
    "took": 0,
    "timed_out": False,
    "_shards": {"total": 0, "successful": 0, "skipped": 0, "failed": 0},
    "hits": {"total": {"value": 0, "relation": "eq"}, "max_score": None, "hits": []},
}


def empty_search_response() -> dict[str, Any]:
    """The node's answer to a search that matched nothing, for an index that does not exist yet."""
    return copy.deepcopy(_EMPTY_SEARCH_RESPONSE)


def hits(response: Mapping[str, Any]) -> list[Hit]:
    """The hits of a search answer, typed."""
    return [
        Hit(
            id=h["_id"],
            index=h["_index"],
            score=h.get("_score"),
            source=h.get("_source", {}),
            sort=h.get("sort"),
        )
        for h in response["hits"]["hits"]
    ]


async def vector_search(
    store: Store,
    index: str,
    *,
    field: str,
    vector: Sequence[float],
    k: int,
    selection: Filter,
    min_score: float | None = None,
    ef_search: int | None = None,
    exact: bool = False,
    source_includes: Sequence[str] = (),
    source_excludes: Sequence[str] = (),
    routing: str | Sequence[str] | None = None,
    recency: Recency | None = None,
) -> dict[str, Any]:
    """The top k of ``selection`` by vector, ``size`` = k; the node's answer.

    By default one knn request with all of ``selection`` inside the knn clause (see
    :func:`proxy.store.query_dsl.vector_search_body`); ``exact`` scores every match instead
    (:func:`proxy.store.query_dsl.exact_vector_search_body`: same scores, ``ef_search`` unused), and its
    ``hits.total`` is the hits kept, as the knn query's is. ``recency`` decays the scores on the node
    (:func:`proxy.store.query_dsl.recency_decayed`)."""
    filter_dsl = compile_filter(selection)
    if not exact:
        body = vector_search_body(
            field=field,
            vector=vector,
            k=k,
            filter_dsl=filter_dsl,
            min_score=min_score,
            ef_search=ef_search,
            source_includes=source_includes,
            source_excludes=source_excludes,
            recency=recency,
        )
        return await search(store, index, body, routing=routing)
    exact_body = exact_vector_search_body(
        field=field,
        vector=vector,
        k=k,
        filter_dsl=filter_dsl,
        min_score=min_score,
        source_includes=source_includes,
        source_excludes=source_excludes,
        recency=recency,
    )
    answer = await search(store, index, exact_body, routing=routing)
    answer["hits"]["total"] = {"value": len(answer["hits"]["hits"]), "relation": "eq"}
    return answer


async def count_up_to(
    store: Store,
    index: str,
    selection: Filter,
    *,
    limit: int,
    routing: str | Sequence[str] | None = None,
) -> int:
    """How many documents ``selection`` matches, counted up to ``limit`` (a bigger set answers ``limit``
    or a little more): cheap however big the set is (:func:`proxy.store.query_dsl.count_body`)."""
    answer = await search(store, index, count_body(compile_filter(selection), up_to=limit), routing=routing)
    total = answer["hits"]["total"]
    return int(total["value"] if isinstance(total, Mapping) else total)


async def lexical_search(
    store: Store,
    index: str,
    *,
    text_field: str,
    text: str,
    size: int,
    selection: Filter,
    source_includes: Sequence[str] = (),
    source_excludes: Sequence[str] = (),
    routing: str | Sequence[str] | None = None,
    recency: Recency | None = None,
) -> dict[str, Any]:
    """BM25 ``match`` of ``text`` on ``text_field`` under ``selection``, top ``size``; the node's answer."""
    body = bm25_search_body(
        text_field=text_field,
        text=text,
        size=size,
        filter_dsl=compile_filter(selection),
        source_includes=source_includes,
        source_excludes=source_excludes,
        recency=recency,
    )
    return await search(store, index, body, routing=routing)


async def ml_search(
    store: Store,
    index: str,
    body: Mapping[str, Any],
    *,
    container_id: str | None = None,
    neural_vectors: Sequence[Sequence[float]] = (),
) -> dict[str, Any]:
    """A caller's ``_search`` body run the way ml-commons runs it; the node's answer.

    ``container_id`` scopes the query to one container (ml-commons' ``bool`` filter, see
    :func:`proxy.store.query_dsl.add_filter`), ``neural_vectors`` turn its ``neural`` clauses into ``knn``
    (one vector per clause, in :func:`proxy.store.query_dsl.neural_clauses` order), and ml-commons' forced
    options (versions, ``_source``) apply.
    """
    return await search(
        store,
        index,
        ml_request(body, container_id=container_id, neural_vectors=neural_vectors),
        routing=container_id,
    )


def ml_request(
    body: Mapping[str, Any],
    *,
    container_id: str | None = None,
    neural_vectors: Sequence[Sequence[float]] = (),
) -> dict[str, Any]:
    """The body :func:`ml_search` sends for a caller's body (checked by :mod:`proxy.store.dsl_policy`
    first): the query scoped, ``neural`` turned into ``knn``, ml-commons' forced options applied."""
    request = dict(body)
    if container_id is not None:
        request["query"] = add_filter(request.get("query"), container_term(container_id))
    if neural_vectors:
        request["query"] = replace_neural(request["query"], neural_vectors)
    return apply_ml_search_options(request)
