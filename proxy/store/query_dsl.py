"""The core query model → OpenSearch Query DSL. The only place vector-search DSL is built.

Vector searches put every filter inside the ``knn`` clause (efficient filtering: Lucene searches the HNSW
graph with the filter as an accept-list and falls back to an exact scan when few documents match), so a
search returns min(k, matching) hits. ml-commons puts the same filters in a ``bool.filter`` beside its
``neural`` clause, which post-filters the top k and can return fewer.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy import filters
from proxy.errors import BadRequest
from proxy.store.query import (
    And,
    Exists,
    Filter,
    MatchAll,
    MetadataFilter,
    Not,
    Or,
    Range,
    RawDsl,
    Recency,
    Term,
    Terms,
)

__all__ = [
    "DEFAULT_EF_SEARCH",
    "RECENCY_CANDIDATE_FACTOR",
    "SPACE_TYPE",
    "NeuralClause",
    "add_filter",
    "apply_ml_search_options",
    "bm25_search_body",
    "compile_filter",
    "container_term",
    "count_body",
    "exact_vector_search_body",
    "knn_clause",
    "neural_clauses",
    "recency_decayed",
    "replace_neural",
    "vector_search_body",
]

# neural-search's default when a neural clause gives neither k, min_score nor max_distance.
NEURAL_DEFAULT_K = 10


# The candidate list of a k-NN search that does not name one (ml-commons' API has no such parameter;
# GoodMem's is ``hnsw.efSearch``). The index template's own default, 100, gave recall@10 0.970 with a filter
# that matches the whole container at 1 M embedding-like memories; 300 gave 0.993 for 3 ms more at p50
# (docs/benchmarks.md). Selective filters are exact either way; small containers hardly notice.
DEFAULT_EF_SEARCH = 300

# The space type of every vector field the long-term template maps (index_templates/long_term.json.j2). The
# exact search scores with the k-NN plugin's own ``knn_score`` script in this space, whose score in k-NN 3.6
# is the knn query's for the lucene engine, (1 + cos) / 2 (tests/test_exact_search.py compares them).
SPACE_TYPE = "cosinesimil"

# With recency decay the knn query still picks its k candidates by similarity alone, and the decay re-ranks
# only those: asking for k * this many lets a fresher memory just outside the top k by similarity enter
# (``size`` stays k). Capped at the knn's own maximum, index.max_result_window.
RECENCY_CANDIDATE_FACTOR = 4
MAX_KNN_K = 10_000
# The long-term fields the decay reads (index_templates/long_term.json.j2 maps both).
RECENCY_DATE_FIELD = "last_updated_time"
PINNED_FIELD = "pinned"


def compile_filter(f: Filter) -> dict[str, Any] | None:
    """DSL for a filter tree; ``None`` when it matches everything (so callers can omit the clause)."""
    if isinstance(f, MatchAll):
        return None
    if isinstance(f, Term):
        return {"term": {f.field: f.value}}
    if isinstance(f, Terms):
        return {"terms": {f.field: list(f.values)}}
    if isinstance(f, Exists):
        return {"exists": {"field": f.field}}
    if isinstance(f, Range):
        bounds = {
            k: v for k, v in (("gte", f.gte), ("gt", f.gt), ("lte", f.lte), ("lt", f.lt)) if v is not None
        }
        return {"range": {f.field: bounds}}
    if isinstance(f, RawDsl):
        return copy.deepcopy(dict(f.query))
    if isinstance(f, MetadataFilter):
        return _compile_metadata(f.expr)
    if isinstance(f, And):
        clauses = [c for c in (compile_filter(x) for x in f.clauses) if c is not None]
        if not clauses:
            return None
        return clauses[0] if len(clauses) == 1 else {"bool": {"filter": clauses}}
    if isinstance(f, Or):
        compiled = [compile_filter(x) for x in f.clauses]
        if not compiled:
            return {"match_none": {}}
        if any(c is None for c in compiled):
            return None
        return {"bool": {"should": compiled, "minimum_should_match": 1}}
    if isinstance(f, Not):
        inner = compile_filter(f.clause)
        return {"match_none": {}} if inner is None else {"bool": {"must_not": [inner]}}
    raise TypeError(f"not a filter: {f!r}")


def _compile_metadata(expr: Any) -> dict[str, Any]:
    compiled: dict[str, Any] = filters.compile_filter(expr)
    return compiled


def container_term(container_id: str) -> dict[str, Any]:
    return {"term": {"memory_container_id": container_id}}


def knn_clause(
    field: str,
    vector: Sequence[float],
    k: int,
    *,
    filter_dsl: Mapping[str, Any] | None = None,
    ef_search: int | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"vector": list(vector), "k": k}
    if filter_dsl is not None:
        body["filter"] = dict(filter_dsl)
    # Lucene uses max(k, ef_search) candidates; the request's size keeps the answer at k.
    body["method_parameters"] = {"ef_search": DEFAULT_EF_SEARCH if ef_search is None else ef_search}
    return {"knn": {field: body}}


def recency_decayed(query: Mapping[str, Any], recency: Recency) -> dict[str, Any]:
    """``query`` with every hit's score multiplied by ``0.5 ** (age / half_life)`` on the node.

    The node's ``exp`` decay on a date field is ``exp(ln(decay) / scale * max(0, |value - origin| -
    offset))``; decay 0.5, scale = the half-life and offset 0 make it exactly that power of one half. No
    function matches a pinned memory, and a ``function_score`` whose functions all miss a document leaves its
    score as the query gave it (factor 1). A document without ``last_updated_time`` gets the decay's
    missing-field factor, 1, too. Filters stay inside ``query`` (the knn clause), untouched."""
    return {
        "function_score": {
            "query": dict(query),
            "functions": [
                {
                    "filter": {"bool": {"must_not": [{"term": {PINNED_FIELD: True}}]}},
                    "exp": {
                        RECENCY_DATE_FIELD: {
                            "origin": recency.now_ms,
                            "scale": f"{recency.half_life_ms}ms",
                            "offset": "0ms",
                            "decay": 0.5,
                        }
                    },
                }
            ],
            "score_mode": "multiply",
            "boost_mode": "multiply",
        }
    }


def _source_spec(includes: Sequence[str], excludes: Sequence[str]) -> dict[str, Any]:
    return {"includes": list(includes), "excludes": list(excludes)}


def vector_search_body(
    *,
    field: str,
    vector: Sequence[float],
    k: int,
    filter_dsl: Mapping[str, Any] | None,
    min_score: float | None = None,
    ef_search: int | None = None,
    source_includes: Sequence[str] = (),
    source_excludes: Sequence[str] = (),
    recency: Recency | None = None,
) -> dict[str, Any]:
    """One search request: a knn query with the whole filter inside it, ``size`` = k; with ``recency``
    the knn gathers k * :data:`RECENCY_CANDIDATE_FACTOR` candidates and :func:`recency_decayed` re-ranks
    them."""
    query = knn_clause(field, vector, k, filter_dsl=filter_dsl, ef_search=ef_search)
    if recency is not None:
        candidates = min(k * RECENCY_CANDIDATE_FACTOR, MAX_KNN_K)
        query = recency_decayed(
            knn_clause(field, vector, candidates, filter_dsl=filter_dsl, ef_search=ef_search), recency
        )
    body: dict[str, Any] = {
        "size": k,
        "_source": _source_spec(source_includes, source_excludes),
        "query": query,
    }
    if min_score is not None:
        # Request-level min_score (not the radial knn one): it drops hits by their final _score, which
        # for Lucene cosinesimil is ml-commons' (1 + cos) / 2.
        body["min_score"] = min_score
    return body


def exact_vector_search_body(
    *,
    field: str,
    vector: Sequence[float],
    k: int,
    filter_dsl: Mapping[str, Any] | None,
    min_score: float | None = None,
    source_includes: Sequence[str] = (),
    source_excludes: Sequence[str] = (),
    recency: Recency | None = None,
) -> dict[str, Any]:
    """The exact twin of :func:`vector_search_body`: every document the filter matches scored by the k-NN
    plugin's ``knn_score`` script (brute force, recall 1.0 by construction), top ``size`` = k, the same
    scores, ``_source`` and ``min_score``. Cheaper than the graph walk for small filtered sets only (see
    ``--exact-search-threshold`` in docs/benchmarks.md). The script is memproxy's own, on its own request:
    callers' scripts stay refused (``proxy.store.dsl_policy``). ``recency`` decays every match's score
    (:func:`recency_decayed`): exact scoring has no candidate cut, so no fresher memory is left out."""
    query: dict[str, Any] = {
        "script_score": {
            "query": {
                "bool": {"filter": [dict(filter_dsl) if filter_dsl is not None else {"match_all": {}}]}
            },
            "script": {
                "lang": "knn",
                "source": "knn_score",
                "params": {"field": field, "query_value": list(vector), "space_type": SPACE_TYPE},
            },
        }
    }
    body: dict[str, Any] = {
        "size": k,
        "_source": _source_spec(source_includes, source_excludes),
        # The knn query's total is the hits it kept; this one would count every match (the store rewrites it).
        "track_total_hits": False,
        "query": query if recency is None else recency_decayed(query, recency),
    }
    if min_score is not None:
        body["min_score"] = min_score
    return body


def count_body(filter_dsl: Mapping[str, Any] | None, *, up_to: int) -> dict[str, Any]:
    """A search that only counts the documents ``filter_dsl`` matches, and stops counting past ``up_to``
    (``track_total_hits`` as a number: the node early-terminates its collection there, and a lone term uses
    Lucene's index statistics), so deciding "small enough for exact scoring" costs little even for a big
    container."""
    return {
        "size": 0,
        "track_total_hits": up_to,
        "query": {"bool": {"filter": [dict(filter_dsl) if filter_dsl is not None else {"match_all": {}}]}},
    }


def bm25_search_body(
    *,
    text_field: str,
    text: str,
    size: int,
    filter_dsl: Mapping[str, Any] | None,
    source_includes: Sequence[str] = (),
    source_excludes: Sequence[str] = (),
    recency: Recency | None = None,
) -> dict[str, Any]:
    """The lexical leg of hybrid search: ``match`` on the text, the same filter as the vector leg, and the
    same ``recency`` decay (so both legs rank by decayed scores before the fusion normalises them)."""
    query: dict[str, Any] = {"bool": {"must": [{"match": {text_field: text}}]}}
    if filter_dsl is not None:
        query["bool"]["filter"] = [dict(filter_dsl)]
    decayed = query if recency is None else recency_decayed(query, recency)
    return {"size": size, "_source": _source_spec(source_includes, source_excludes), "query": decayed}


def add_filter(query: Mapping[str, Any] | None, clause: Mapping[str, Any]) -> dict[str, Any]:
    """ml-commons' way of scoping a caller's query (TransportSearchMemoriesAction):

    a ``bool`` gets ``{"bool":{"filter":[clause]}}`` appended to its ``filter`` list; any other query ``q``
    becomes ``{"bool":{"must":[q],"filter":[that]}}``; no query becomes that bool alone.
    """
    wrapper: dict[str, Any] = {"bool": {"filter": [dict(clause)]}}
    if query is None:
        return wrapper
    q = copy.deepcopy(dict(query))
    if len(q) == 1 and isinstance(q.get("bool"), dict):
        existing = q["bool"].get("filter")
        if existing is None:
            q["bool"]["filter"] = [wrapper]
        elif isinstance(existing, list):
            existing.append(wrapper)
        else:
            q["bool"]["filter"] = [existing, wrapper]
        return q
    return {"bool": {"must": [q], "filter": [wrapper]}}


@dataclass(frozen=True)
class NeuralClause:
    """A ``neural`` query in a caller's DSL: memproxy embeds ``query_text`` itself (no neural-search)."""

    field: str
    query_text: str
    model_id: str | None


_NEURAL_PASS = ("k", "filter", "min_score", "max_distance", "method_parameters", "boost", "_name", "rescore")


def _neural_parts(node: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    spec = node["neural"]
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise BadRequest(
            "[neural] query malformed, no start_object after query name", os_type="parsing_exception"
        )
    field, params = next(iter(spec.items()))
    if not isinstance(params, Mapping):
        raise BadRequest(f"[neural] query malformed for field [{field}]", os_type="parsing_exception")
    text = params.get("query_text")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest(
            "query_text field must be provided for neural query", os_type="illegal_argument_exception"
        )
    return str(field), dict(params)


def _walk(node: Any, visit: Any) -> Any:
    if isinstance(node, Mapping):
        if len(node) == 1 and "neural" in node:
            return visit(node)
        return {k: _walk(v, visit) for k, v in node.items()}
    if isinstance(node, list):
        return [_walk(v, visit) for v in node]
    return node


def neural_clauses(query: Any) -> list[NeuralClause]:
    """Every ``neural`` clause in a DSL tree, in document order (``replace_neural`` uses the same order)."""
    found: list[NeuralClause] = []

    def visit(node: Mapping[str, Any]) -> Any:
        field, params = _neural_parts(node)
        found.append(NeuralClause(field, params["query_text"], params.get("model_id")))
        if isinstance(params.get("filter"), Mapping):
            _walk(params["filter"], visit)
        return node

    _walk(query, visit)
    return found


def replace_neural(query: Any, vectors: Sequence[Sequence[float]]) -> Any:
    """The DSL with each ``neural`` clause turned into the ``knn`` clause neural-search would have run."""
    it = iter(vectors)

    def visit(node: Mapping[str, Any]) -> Any:
        field, params = _neural_parts(node)
        knn: dict[str, Any] = {"vector": list(next(it))}
        for key in _NEURAL_PASS:
            if key in params:
                knn[key] = _walk(params[key], visit) if key == "filter" else params[key]
        if not any(key in knn for key in ("k", "min_score", "max_distance")):
            knn["k"] = NEURAL_DEFAULT_K
        return {"knn": {field: knn}}

    return _walk(query, visit)


def apply_ml_search_options(body: Mapping[str, Any]) -> dict[str, Any]:
    """ml-commons' forced search options: versions on, ``_source`` always on (an explicit ``false`` is
    overridden), ``ui_metadata`` hidden, and ``content``/``model_content`` when no ``_source`` is given."""
    out = dict(body)
    out["version"] = True
    out["seq_no_primary_term"] = True
    source = out.get("_source")
    excludes = ["ui_metadata"]
    if source is None:
        out["_source"] = {"includes": [], "excludes": [*excludes, "content", "model_content"]}
    elif isinstance(source, bool):
        out["_source"] = {"includes": [], "excludes": excludes}
    elif isinstance(source, str | list):
        out["_source"] = {
            "includes": [source] if isinstance(source, str) else list(source),
            "excludes": excludes,
        }
    elif isinstance(source, Mapping):
        spec = dict(source)
        given = spec.pop("excludes", spec.pop("exclude", []))
        spec["excludes"] = [*(given if isinstance(given, list) else [given]), *excludes]
        out["_source"] = spec
    return out
