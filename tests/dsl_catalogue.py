"""What OpenSearch 3.x knows of the search DSL (its ``SearchModule`` and the modules a distribution ships:
percolator, parent-join, geo, mapper-extras, k-NN, neural-search), written down independently of memproxy's
allowlist so that ``tests/test_dsl_policy_unit.py`` can generate bodies from all of it.

Each entry builds a small, well-formed use of the name; ``sub`` is a nested query (or aggregation) the
generator chose. The sets at the bottom are this file's own verdicts: what must never be accepted in a
memory search, whatever the allowlist says.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

Q = dict[str, Any]
SECRET_INDEX = ".plugins-ml-config"


def _wrapped(sub: Q) -> str:
    return base64.b64encode(json.dumps(sub).encode()).decode()


# name → a clause body around ``sub`` (a query)
QUERIES: dict[str, Callable[[Q], Any]] = {
    "match_all": lambda sub: {},
    "match_none": lambda sub: {},
    "bool": lambda sub: {"must": [sub], "filter": sub, "should": [sub], "must_not": [sub]},
    "boosting": lambda sub: {"positive": sub, "negative": sub, "negative_boost": 0.5},
    "constant_score": lambda sub: {"filter": sub, "boost": 2},
    "dis_max": lambda sub: {"queries": [sub, sub], "tie_breaker": 0.1},
    "function_score": lambda sub: {
        "query": sub,
        "functions": [{"filter": sub, "weight": 2}, {"field_value_factor": {"field": "n", "missing": 1}}],
        "score_mode": "sum",
    },
    "nested": lambda sub: {"path": "p", "query": sub, "inner_hits": {"size": 1, "_source": ["p.a"]}},
    "term": lambda sub: {"f": {"value": "v", "boost": 1}},
    "terms": lambda sub: {"f": ["a", "b"]},
    "terms_set": lambda sub: {"f": {"terms": ["a"], "minimum_should_match_field": "n"}},
    "range": lambda sub: {"n": {"gte": 1, "lt": 9}},
    "exists": lambda sub: {"field": "f"},
    "ids": lambda sub: {"values": ["1"]},
    "prefix": lambda sub: {"f": {"value": "pre"}},
    "wildcard": lambda sub: {"f": {"value": "w*"}},
    "regexp": lambda sub: {"f": {"value": "r.*"}},
    "fuzzy": lambda sub: {"f": {"value": "fuzy", "fuzziness": 1}},
    "match": lambda sub: {"memory": {"query": "tea", "operator": "and"}},
    "match_phrase": lambda sub: {"memory": "green tea"},
    "match_phrase_prefix": lambda sub: {"memory": "green t"},
    "match_bool_prefix": lambda sub: {"memory": "green t"},
    "multi_match": lambda sub: {"query": "tea", "fields": ["memory", "tags.*"]},
    "query_string": lambda sub: {"query": "tea AND green", "default_field": "memory"},
    "simple_query_string": lambda sub: {"query": "tea +green", "fields": ["memory"]},
    "common": lambda sub: {"memory": {"query": "the tea"}},
    "more_like_this": lambda sub: {"fields": ["memory"], "like": "green tea", "min_term_freq": 1},
    "span_term": lambda sub: {"memory": "tea"},
    "span_or": lambda sub: {"clauses": [{"span_term": {"memory": "tea"}}]},
    "span_near": lambda sub: {"clauses": [{"span_term": {"memory": "tea"}}], "slop": 1},
    "span_not": lambda sub: {"include": {"span_term": {"m": "a"}}, "exclude": {"span_term": {"m": "b"}}},
    "span_first": lambda sub: {"match": {"span_term": {"memory": "tea"}}, "end": 3},
    "span_within": lambda sub: {"little": {"span_term": {"m": "a"}}, "big": {"span_term": {"m": "b"}}},
    "span_containing": lambda sub: {"little": {"span_term": {"m": "a"}}, "big": {"span_term": {"m": "b"}}},
    "span_multi": lambda sub: {"match": {"prefix": {"memory": {"value": "te"}}}},
    "field_masking_span": lambda sub: {"query": {"span_term": {"m": "a"}}, "field": "m"},
    "span_gap": lambda sub: {"memory": 2},
    "intervals": lambda sub: {"memory": {"match": {"query": "tea"}}},
    "distance_feature": lambda sub: {"field": "created_time", "origin": "now", "pivot": "1d"},
    "wrapper": lambda sub: {"query": _wrapped(sub)},
    "script": lambda sub: {"script": {"source": "true"}},
    "script_score": lambda sub: {"query": sub, "script": {"source": "1"}},
    "geo_distance": lambda sub: {"distance": "1km", "loc": [0, 0]},
    "geo_bounding_box": lambda sub: {"loc": {"top_left": [0, 1], "bottom_right": [1, 0]}},
    "geo_polygon": lambda sub: {"loc": {"points": [[0, 0], [0, 1], [1, 1]]}},
    "geo_shape": lambda sub: {"loc": {"shape": {"type": "point", "coordinates": [0, 0]}}},
    "xy_shape": lambda sub: {"loc": {"shape": {"type": "point", "coordinates": [0, 0]}}},
    "percolate": lambda sub: {"field": "q", "document": {"memory": "tea"}},
    "has_child": lambda sub: {"type": "child", "query": sub},
    "has_parent": lambda sub: {"parent_type": "parent", "query": sub},
    "parent_id": lambda sub: {"type": "child", "id": "1"},
    "rank_feature": lambda sub: {"field": "rank"},
    "template": lambda sub: {"source": sub},
    "knn": lambda sub: {"vec": {"vector": [0.1, 0.2], "k": 3, "filter": sub}},
    "neural": lambda sub: {"vec": {"query_text": "tea", "k": 3, "filter": sub}},
    "neural_sparse": lambda sub: {"sparse": {"query_text": "tea"}},
    "hybrid": lambda sub: {"queries": [sub]},
}

# Lookups: each makes the node fetch a stored document by index/id (never allowed in a memory search).
LOOKUPS: list[Q] = [
    {"terms": {"f": {"index": SECRET_INDEX, "id": "1", "path": "key"}}},
    {"geo_shape": {"f": {"indexed_shape": {"index": SECRET_INDEX, "id": "1", "path": "key"}}}},
    {"xy_shape": {"f": {"indexed_shape": {"index": SECRET_INDEX, "id": "1", "path": "key"}}}},
    {"more_like_this": {"fields": ["memory"], "like": [{"_index": SECRET_INDEX, "_id": "1"}]}},
    {"more_like_this": {"fields": ["memory"], "unlike": [{"_id": "1"}], "like": "x"}},
    {"percolate": {"field": "q", "index": SECRET_INDEX, "id": "1"}},
]

# name → aggregation parameters (``sub``: a query, for the aggregations that take one)
AGGREGATIONS: dict[str, Callable[[Q], Any]] = {
    **{m: (lambda sub: {"field": "n"}) for m in ("avg", "sum", "min", "max", "value_count", "stats")},
    "extended_stats": lambda sub: {"field": "n", "sigma": 2},
    "cardinality": lambda sub: {"field": "f", "precision_threshold": 100},
    "percentiles": lambda sub: {"field": "n", "percents": [50]},
    "percentile_ranks": lambda sub: {"field": "n", "values": [1]},
    "median_absolute_deviation": lambda sub: {"field": "n"},
    "weighted_avg": lambda sub: {"value": {"field": "n"}, "weight": {"field": "w"}},
    "geo_bounds": lambda sub: {"field": "loc"},
    "geo_centroid": lambda sub: {"field": "loc"},
    "matrix_stats": lambda sub: {"fields": ["n", "m"]},
    "scripted_metric": lambda sub: {"map_script": "state.x = 1", "reduce_script": "1"},
    "top_hits": lambda sub: {"size": 1, "sort": [{"n": "desc"}], "_source": ["memory"]},
    "terms": lambda sub: {"field": "f", "size": 3, "order": {"_count": "desc"}},
    "multi_terms": lambda sub: {"terms": [{"field": "a"}, {"field": "b"}]},
    "rare_terms": lambda sub: {"field": "f"},
    "significant_terms": lambda sub: {"field": "f", "background_filter": sub},
    "significant_text": lambda sub: {"field": "memory"},
    "range": lambda sub: {"field": "n", "ranges": [{"to": 1}, {"from": 1}]},
    "date_range": lambda sub: {"field": "d", "ranges": [{"to": "now"}]},
    "ip_range": lambda sub: {"field": "ip", "ranges": [{"to": "10.0.0.1"}]},
    "histogram": lambda sub: {"field": "n", "interval": 1, "min_doc_count": 0,
                              "extended_bounds": {"min": 0, "max": 9}},
    "date_histogram": lambda sub: {"field": "d", "calendar_interval": "day", "min_doc_count": 0},
    "auto_date_histogram": lambda sub: {"field": "d", "buckets": 3},
    "variable_width_histogram": lambda sub: {"field": "n", "buckets": 2},
    "geo_distance": lambda sub: {"field": "loc", "origin": "0,0", "ranges": [{"to": 1}]},
    "geohash_grid": lambda sub: {"field": "loc", "precision": 3},
    "geotile_grid": lambda sub: {"field": "loc", "precision": 3},
    "nested": lambda sub: {"path": "p"},
    "reverse_nested": lambda sub: {},
    "global": lambda sub: {},
    "missing": lambda sub: {"field": "f"},
    "filter": lambda sub: sub,
    "filters": lambda sub: {"filters": {"a": sub}, "other_bucket": True},
    "adjacency_matrix": lambda sub: {"filters": {"a": sub, "b": sub}},
    "sampler": lambda sub: {"shard_size": 10},
    "diversified_sampler": lambda sub: {"field": "f", "shard_size": 10},
    "composite": lambda sub: {"sources": [{"t": {"terms": {"field": "f"}}}], "size": 5},
    "children": lambda sub: {"type": "child"},
    "parent": lambda sub: {"type": "child"},
    **{p: (lambda sub: {"buckets_path": "_count"}) for p in (
        "derivative", "max_bucket", "min_bucket", "avg_bucket", "sum_bucket", "stats_bucket",
        "extended_stats_bucket", "percentiles_bucket", "moving_avg", "cumulative_sum", "serial_diff")},
    "bucket_script": lambda sub: {"buckets_path": {"a": "_count"}, "script": "params.a"},
    "bucket_selector": lambda sub: {"buckets_path": {"a": "_count"}, "script": "params.a > 0"},
    "bucket_sort": lambda sub: {"size": 1},
    "moving_fn": lambda sub: {"buckets_path": "_count", "window": 2, "script": "MovingFunctions.max(values)"},
}  # fmt: skip

# Aggregations that count terms the scoped query did not match unless asked not to.
ZERO_COUNT = {"terms": {"min_doc_count": 0}, "multi_terms": {"min_doc_count": 0}}

# SearchSourceBuilder's keys → a value (``q``: a query, ``aggs``: aggregations).
BODY_KEYS: dict[str, Callable[[Q, Any], Any]] = {
    "from": lambda q, aggs: 1,
    "size": lambda q, aggs: 5,
    "timeout": lambda q, aggs: "1s",
    "terminate_after": lambda q, aggs: 100,
    "query": lambda q, aggs: q,
    "post_filter": lambda q, aggs: q,
    "min_score": lambda q, aggs: 0.1,
    "version": lambda q, aggs: True,
    "seq_no_primary_term": lambda q, aggs: True,
    "explain": lambda q, aggs: True,
    "track_scores": lambda q, aggs: True,
    "track_total_hits": lambda q, aggs: True,
    "_source": lambda q, aggs: {"includes": ["memory"]},
    "stored_fields": lambda q, aggs: ["_none_"],
    "docvalue_fields": lambda q, aggs: [{"field": "created_time", "format": "epoch_millis"}],
    "fields": lambda q, aggs: ["memory"],
    "script_fields": lambda q, aggs: {"s": {"script": {"source": "1"}}},
    "indices_boost": lambda q, aggs: [{SECRET_INDEX: 2}],
    "aggs": lambda q, aggs: aggs,
    "aggregations": lambda q, aggs: aggs,
    "highlight": lambda q, aggs: {"fields": {"memory": {"highlight_query": q}}},
    "suggest": lambda q, aggs: {"s": {"text": "tea", "term": {"field": "memory"}}},
    "rescore": lambda q, aggs: {"window_size": 10, "query": {"rescore_query": q}},
    "ext": lambda q, aggs: {"plugin": {}},
    "stats": lambda q, aggs: ["group"],
    "profile": lambda q, aggs: True,
    "search_after": lambda q, aggs: [1, "x"],
    "slice": lambda q, aggs: {"id": 0, "max": 2},
    "collapse": lambda q, aggs: {"field": "f", "inner_hits": {"name": "top", "size": 2}},
    "pit": lambda q, aggs: {"id": "abc", "keep_alive": "1m"},
    "sort": lambda q, aggs: [{"created_time": {"order": "desc", "nested": {"path": "p", "filter": q}}},
                             "_score"],
    "search_pipeline": lambda q, aggs: "pipeline",
    "verbose_pipeline": lambda q, aggs: True,
    "derived": lambda q, aggs: {"d": {"type": "keyword", "script": "emit('x')"}},
    "include_named_queries_score": lambda q, aggs: True,
    "runtime_mappings": lambda q, aggs: {"r": {"type": "long"}},
}  # fmt: skip

SUGGESTERS: list[Q] = [
    {"s": {"text": "tea", "term": {"field": "memory"}}},
    {"s": {"text": "green tea", "phrase": {"field": "memory"}}},
    {"s": {"prefix": "te", "completion": {"field": "suggest"}}},
]

# This file's verdicts: names that read outside the scoped query, hide a body, or fetch documents.
NEVER_QUERIES = {"wrapper", "percolate", "has_child", "has_parent", "parent_id", "template", "hybrid"}
NEVER_AGGREGATIONS = {"global", "significant_terms", "significant_text", "children", "parent"}
NEVER_KEYS = {"suggest", "ext", "pit", "search_pipeline", "profile", "indices_boost"}
SCRIPTED = {"script", "script_score", "scripted_metric", "bucket_script", "bucket_selector", "moving_fn",
            "script_fields", "derived", "runtime_mappings"}  # fmt: skip
# Keys whose reads are confined to the hits of ``query`` (what the node reads for them is those hits).
WITHIN_QUERY = {
    "from", "size", "timeout", "terminate_after", "post_filter", "min_score", "version",
    "seq_no_primary_term",
    "explain", "track_scores", "track_total_hits", "_source", "stored_fields", "docvalue_fields", "fields",
    "script_fields", "aggs", "aggregations", "highlight", "rescore", "search_after", "collapse", "sort",
    "derived", "runtime_mappings", "slice", "stats", "verbose_pipeline", "include_named_queries_score",
}  # fmt: skip
