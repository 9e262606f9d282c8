"""The allowlist of caller-supplied Query DSL (docs/security.md, "Caller Query DSL: the allowlist").

A grammar, not a denylist: every search-body key, query clause, aggregation and option a memory search may
use is named here with the shape of its value, and :mod:`proxy.store.dsl_policy` refuses whatever is not.
What is left out reads documents outside the scoped query (``global``, ``significant_*``, suggesters, join
queries), fetches a document by index and id (lookups), hides a body the check cannot see (``wrapper``,
``ext``, search pipelines), or reveals the index beyond the hits (``profile``). A DSL feature of a future
OpenSearch is therefore refused until someone adds it here.

Schemas (checked by :func:`proxy.store.dsl_policy.check`): ``DATA`` is a value the node takes as data only
(a number, a field name, a bound, an ``order``); ``QUERY`` one query clause; ``AGGS`` named aggregations;
``SCRIPT`` a script (only with ``--allow-scripts``); :class:`Obj` an object of named keys, :class:`Fields`
an object keyed by field names, :class:`Shape` a value told apart by its JSON type, :class:`Scripted` a
feature that exists only to run scripts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AGGREGATIONS",
    "AGGS",
    "CLAUSES",
    "DATA",
    "QUERY",
    "REFUSED_WHY",
    "SCALAR",
    "SCRIPT",
    "SEARCH_BODY",
    "Fields",
    "ListOf",
    "MapOf",
    "Obj",
    "OneOrList",
    "Refused",
    "Schema",
    "Scripted",
    "Shape",
]

DATA, SCALAR, QUERY, AGGS, SCRIPT = "data", "scalar", "query", "aggs", "script"


@dataclass(frozen=True)
class Obj:
    """An object whose keys are all named in ``keys``; ``check`` may refuse a combination of values."""

    keys: Mapping[str, Schema]
    # (the key refused, why) for a value the grammar alone cannot refuse
    check: Callable[[Mapping[str, Any]], tuple[str, str] | None] | None = None


@dataclass(frozen=True)
class Fields:
    """``{field: value}`` (one field, checked by ``value``) beside the fixed keys of ``extra``."""

    value: Schema
    extra: Mapping[str, Schema] = field(default_factory=lambda: {"boost": DATA, "_name": DATA})


@dataclass(frozen=True)
class ListOf:
    item: Schema


@dataclass(frozen=True)
class MapOf:
    """An object of caller-chosen names (aggregation names, highlighted fields), each value ``item``."""

    item: Schema


@dataclass(frozen=True)
class OneOrList:
    item: Schema


@dataclass(frozen=True)
class Shape:
    """A value told apart by its JSON type; a type without a schema here is refused."""

    scalar: Schema | None = None
    obj: Schema | None = None
    array: Schema | None = None


@dataclass(frozen=True)
class Scripted:
    """A feature that only runs scripts: refused unless ``--allow-scripts``, then checked as ``inner``."""

    inner: Schema


@dataclass(frozen=True)
class Refused:
    """A value that is known and never allowed (a lookup), with the reason the 400 gives."""

    what: str
    why: str


Schema = str | Obj | Fields | ListOf | MapOf | OneOrList | Shape | Scripted | Refused


def opts(*names: str, **special: Schema) -> dict[str, Schema]:
    """Options that are data (``names``, several words to a string) and those with a schema of their own."""
    return {**dict.fromkeys([w for n in names for w in n.split()], DATA), **special}


COMMON = ("boost", "_name")
LOOKUP = "it makes the node fetch a stored document by index and id, which reads outside the search's scope"

# --- query clauses -----------------------------------------------------------------------------------

QUERIES = OneOrList(QUERY)
SCALARS = ListOf(SCALAR)
MATCH = opts(
    "query operator analyzer fuzziness prefix_length max_expansions fuzzy_transpositions fuzzy_rewrite",
    "lenient zero_terms_query cutoff_frequency auto_generate_synonyms_phrase_query minimum_should_match",
    *COMMON,
)
MULTI_MATCH = opts(*MATCH, "fields type slop tie_breaker")
QUERY_STRING = opts(
    "query default_field fields default_operator analyzer quote_analyzer quote_field_suffix",
    "allow_leading_wildcard enable_position_increments fuzzy_max_expansions fuzziness fuzzy_prefix_length",
    "fuzzy_transpositions fuzzy_rewrite phrase_slop auto_generate_phrase_queries analyze_wildcard",
    "max_determinized_states minimum_should_match lenient time_zone rewrite escape type tie_breaker",
    "auto_generate_synonyms_phrase_query",
    *COMMON,
)
SIMPLE_QUERY_STRING = opts(
    "query fields default_operator analyzer flags lenient analyze_wildcard minimum_should_match",
    "quote_field_suffix auto_generate_synonyms_phrase_query fuzzy_prefix_length fuzzy_max_expansions",
    "fuzzy_transpositions",
    *COMMON,
)


def by_field(*names: str, shorthand: bool = True) -> Fields:
    """A field-keyed clause: ``{field: value}`` or ``{field: {option: …}}``."""
    options = Obj(opts(*names, *COMMON))
    return Fields(Shape(scalar=SCALAR, obj=options) if shorthand else options)


VECTOR = opts("k min_score max_distance method_parameters rescore expand_nested_docs", *COMMON)
VECTOR["filter"] = QUERY
FUNCTION = opts("weight field_value_factor random_score gauss linear exp filter")
FUNCTION.update(filter=QUERY, script_score=Scripted(Obj({"script": SCRIPT})))
INNER_HITS: dict[str, Schema] = opts(
    "name from size explain version seq_no_primary_term track_scores stored_fields docvalue_fields fields",
    "ignore_unmapped",
    sort="sort",
    _source="source",
    highlight="highlight",
    script_fields=Scripted(MapOf(Obj(opts("ignore_failure", script=SCRIPT)))),
)

CLAUSES: dict[str, Schema] = {
    "match_all": Obj(opts(*COMMON)),
    "match_none": Obj(opts(*COMMON)),
    "bool": Obj(
        opts(
            "minimum_should_match",
            "adjust_pure_negative",
            *COMMON,
            must=QUERIES,
            filter=QUERIES,
            should=QUERIES,
            must_not=QUERIES,
        )
    ),
    "constant_score": Obj(opts(*COMMON, filter=QUERY)),
    "dis_max": Obj(opts("tie_breaker", *COMMON, queries=ListOf(QUERY))),
    "boosting": Obj(opts("negative_boost", *COMMON, positive=QUERY, negative=QUERY)),
    "function_score": Obj(
        opts(
            "boost_mode score_mode max_boost min_score",
            *COMMON,
            query=QUERY,
            functions=ListOf(Obj(FUNCTION)),
            **{k: v for k, v in FUNCTION.items() if k != "filter"},
        )
    ),
    "term": by_field("value", "case_insensitive"),
    # Values only: an object is the terms lookup ({index, id, path}), a read of any stored document.
    "terms": Fields(Shape(array=SCALARS, obj=Refused("terms", LOOKUP)), extra=opts("value_type", *COMMON)),
    "terms_set": Fields(
        Obj(opts("terms", "minimum_should_match_field", *COMMON, minimum_should_match_script=SCRIPT))
    ),
    "range": by_field(
        "gte gt lte lt from to include_lower include_upper format time_zone relation",
        shorthand=False,
    ),
    "exists": Obj(opts("field", *COMMON)),
    "ids": Obj(opts("values", *COMMON)),
    "prefix": by_field("value rewrite case_insensitive"),
    "wildcard": by_field("value wildcard rewrite case_insensitive"),
    "regexp": by_field("value flags max_determinized_states rewrite case_insensitive"),
    "fuzzy": by_field("value fuzziness prefix_length max_expansions transpositions rewrite"),
    "match": by_field(*MATCH),
    "match_phrase": by_field("query analyzer slop zero_terms_query"),
    "match_phrase_prefix": by_field("query analyzer slop max_expansions zero_terms_query"),
    "match_bool_prefix": by_field(
        "query analyzer operator minimum_should_match fuzziness prefix_length max_expansions",
        "fuzzy_transpositions fuzzy_rewrite",
    ),
    "multi_match": Obj(MULTI_MATCH),
    "query_string": Obj(QUERY_STRING),
    "simple_query_string": Obj(SIMPLE_QUERY_STRING),
    "more_like_this": Obj(
        opts(
            "fields min_term_freq max_query_terms min_doc_freq max_doc_freq min_word_length",
            "max_word_length stop_words analyzer minimum_should_match boost_terms include",
            "fail_on_unsupported_field",
            *COMMON,
            like=OneOrList(Shape(scalar=SCALAR, obj=Refused("more_like_this", LOOKUP))),
            unlike=OneOrList(Shape(scalar=SCALAR, obj=Refused("more_like_this", LOOKUP))),
        )
    ),
    "nested": Obj(opts("path score_mode ignore_unmapped", *COMMON, query=QUERY, inner_hits=Obj(INNER_HITS))),
    "geo_shape": Fields(
        Obj(opts("shape", "relation", indexed_shape=Refused("indexed_shape", LOOKUP))),
        extra=opts("ignore_unmapped", *COMMON),
    ),
    "knn": Fields(Obj(opts("vector", **VECTOR))),
    # memproxy embeds query_text itself and sends the knn clause neural-search would have run.
    "neural": Fields(Obj(opts("query_text", "model_id", **VECTOR))),
    "script": Scripted(Obj(opts(*COMMON, script=SCRIPT))),
    "script_score": Scripted(Obj(opts("min_score", *COMMON, query=QUERY, script=SCRIPT))),
}

# --- aggregations ------------------------------------------------------------------------------------

VALUES = "field missing format value_type"
BUCKETS = "buckets_path gap_policy format"


def _some_documents(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    if spec.get("min_doc_count") in (0, "0"):
        return "min_doc_count", "0 lists the terms of every document of the index, outside the search's scope"
    return None


def metric(*names: str) -> Obj:
    return Obj(opts(VALUES, *names, script=SCRIPT))


def pipeline(*names: str, **special: Schema) -> Obj:
    return Obj(opts(BUCKETS, *names, **special))


TERMS_OPTIONS = (
    "size shard_size show_term_doc_count_error order min_doc_count shard_min_doc_count collect_mode"
)
HISTOGRAM = "interval offset min_doc_count extended_bounds hard_bounds order keyed"
COMPOSITE_SOURCE = Obj(
    {
        kind: metric(
            "missing_bucket missing_order order interval calendar_interval fixed_interval time_zone offset",
            "precision",
        )
        for kind in ["terms", "histogram", "date_histogram", "geotile_grid"]
    }
)

AGGREGATIONS: dict[str, Schema] = {
    **{name: metric() for name in ["avg", "sum", "min", "max", "value_count", "stats", "geo_centroid"]},
    "extended_stats": metric("sigma"),
    "cardinality": metric("precision_threshold", "execution_hint"),
    "percentiles": metric("percents keyed tdigest hdr"),
    "percentile_ranks": metric("values keyed tdigest hdr"),
    "median_absolute_deviation": metric("compression"),
    "geo_bounds": metric("wrap_longitude"),
    "weighted_avg": Obj(opts("format", "value_type", value=metric(), weight=metric())),
    "matrix_stats": Obj(opts("fields missing mode")),
    "top_hits": Obj(INNER_HITS),
    "terms": Obj(
        opts(VALUES, TERMS_OPTIONS, "include exclude execution_hint", script=SCRIPT),
        check=_some_documents,
    ),
    "multi_terms": Obj(opts(TERMS_OPTIONS, terms=ListOf(metric())), check=_some_documents),
    "rare_terms": metric("max_doc_count precision include exclude"),
    # Empty buckets of a histogram are intervals between bounds the caller or the scoped hits set: they name
    # no other document, so min_doc_count 0 (and extended_bounds) is allowed here.
    "histogram": metric(HISTOGRAM),
    "date_histogram": metric(HISTOGRAM, "calendar_interval fixed_interval time_zone"),
    "auto_date_histogram": metric("buckets time_zone minimum_interval"),
    "range": metric("ranges", "keyed"),
    "date_range": metric("ranges keyed time_zone"),
    "ip_range": metric("ranges", "keyed"),
    "missing": metric(),
    "filter": QUERY,
    "filters": Obj(
        opts("other_bucket", "other_bucket_key", filters=Shape(obj=MapOf(QUERY), array=ListOf(QUERY)))
    ),
    "adjacency_matrix": Obj(opts("separator", filters=MapOf(QUERY))),
    "nested": Obj(opts("path")),
    "reverse_nested": Obj(opts("path")),
    "sampler": Obj(opts("shard_size")),
    "diversified_sampler": metric("shard_size max_docs_per_value execution_hint"),
    "composite": Obj(opts("size", "after", sources=ListOf(MapOf(COMPOSITE_SOURCE)))),
    "geohash_grid": metric("precision bounds size shard_size"),
    "geotile_grid": metric("precision bounds size shard_size"),
    **{name: pipeline() for name in ["avg_bucket", "max_bucket", "min_bucket", "sum_bucket", "stats_bucket"]},
    "extended_stats_bucket": pipeline("sigma"),
    "percentiles_bucket": pipeline("percents", "keyed"),
    "derivative": pipeline("unit"),
    "cumulative_sum": pipeline(),
    "serial_diff": pipeline("lag"),
    "bucket_sort": Obj(opts("from size gap_policy", sort="sort")),
    "scripted_metric": Scripted(
        Obj(
            opts("params", init_script=SCRIPT, map_script=SCRIPT, combine_script=SCRIPT, reduce_script=SCRIPT)
        )
    ),
    "bucket_script": Scripted(pipeline(script=SCRIPT)),
    "bucket_selector": Scripted(pipeline(script=SCRIPT)),
    "moving_fn": Scripted(pipeline("window", "shift", script=SCRIPT)),
}

# --- the search body ---------------------------------------------------------------------------------

HIGHLIGHT_OPTIONS = opts(
    "type fragment_size number_of_fragments fragment_offset matched_fields pre_tags post_tags tags_schema",
    "encoder require_field_match boundary_scanner boundary_scanner_locale boundary_chars boundary_max_scan",
    "fragmenter no_match_size phrase_limit order max_analyzer_offset options force_source highlight_filter",
    highlight_query=QUERY,
)
FIELD_SORT = Obj(opts("order mode missing unmapped_type numeric_type format", nested="nested_sort"))
# Named schemas, for the ones that contain themselves (a nested sort has a nested sort) or recur often.
NAMED: dict[str, Schema] = {
    "sort": OneOrList(
        Shape(
            scalar=SCALAR,
            obj=Fields(
                Shape(scalar=SCALAR, obj=FIELD_SORT),
                extra={
                    "_script": Scripted(Obj(opts("type order mode", script=SCRIPT, nested="nested_sort")))
                },
            ),
        )
    ),
    "nested_sort": Obj(opts("path", "max_children", filter=QUERY, nested="nested_sort")),
    "source": Shape(scalar=SCALAR, array=SCALARS, obj=Obj(opts("includes excludes include exclude"))),
    "highlight": Obj(
        {
            **HIGHLIGHT_OPTIONS,
            "fields": Shape(obj=MapOf(Obj(HIGHLIGHT_OPTIONS)), array=ListOf(MapOf(Obj(HIGHLIGHT_OPTIONS)))),
        }
    ),
}

SEARCH_BODY = Obj(
    opts(
        "size from fields track_total_hits track_scores search_after timeout min_score explain version",
        "seq_no_primary_term stored_fields docvalue_fields terminate_after",
        query=QUERY,
        post_filter=QUERY,
        aggs=AGGS,
        aggregations=AGGS,
        sort="sort",
        _source="source",
        highlight="highlight",
        # collapse's inner hits and rescore run the scoped query again (ExpandSearchPhase, QueryRescorer):
        # they only ever see its hits.
        collapse=Obj(opts("field", "max_concurrent_group_searches", inner_hits=OneOrList(Obj(INNER_HITS)))),
        rescore=OneOrList(
            Obj(
                opts(
                    "window_size",
                    query=Obj(opts("query_weight rescore_query_weight score_mode", rescore_query=QUERY)),
                )
            )
        ),
        script_fields=INNER_HITS["script_fields"],
        runtime_mappings=Scripted(DATA),
        derived=Scripted(DATA),
    )
)

# Why a name that is deliberately not on the list is refused (anything else: "not on the allowlist").
REFUSED_WHY = {
    "global": "it aggregates every document of the index, outside the search's scope",
    "significant_terms": "its background set is every document of the index, outside the search's scope",
    "significant_text": "its background set is every document of the index, outside the search's scope",
    "children": "join aggregations read documents outside the search's scope",
    "parent": "join aggregations read documents outside the search's scope",
    "has_child": "join queries read documents outside the search's scope",
    "has_parent": "join queries read documents outside the search's scope",
    "parent_id": "join queries read documents outside the search's scope",
    "percolate": "it runs stored queries and can fetch a document by index and id",
    "wrapper": "an encoded query cannot be checked",
    "suggest": "suggesters read the terms of every document of the index, outside the search's scope",
    "profile": "a profile shows the rewritten query, whose terms come from every document of the index",
    "pit": "a point in time names indices of its own",
    "search_pipeline": "a search pipeline can change the query after memproxy checked it",
    "ext": "search extensions are run by plugins memproxy cannot check",
    "indices_boost": "a memory search names no other index",
    "stats": "search statistics groups are not kept for memory searches",
}
