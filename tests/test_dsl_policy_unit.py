"""The Query DSL allowlist (proxy/store/dsl_policy.py) against the whole OpenSearch DSL, without a node.

Bodies are generated from ``tests/dsl_catalogue.py`` (every query, aggregation and search-body key OpenSearch
3.x and its bundled plugins know, lookups and suggesters included), nested at random. Each is either refused
with a 400 naming something in it, or accepted; an accepted body uses only allowlisted names, none of the
catalogue's never-allowed ones, no lookup and no script (unless scripts are on), and the request
``ml_search`` sends for it keeps the container filter around the query while every other key it carries reads
only that query's hits.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.store import dsl_grammar
from proxy.store.dsl_policy import DslRefused, check_query, check_search_body, refuse_lookups
from proxy.store.query_dsl import container_term, neural_clauses
from proxy.store.search import ml_request
from tests import dsl_catalogue as cat

CONTAINER = "c-under-test"


@dataclass
class Used:
    """What a generated body contains, recorded while it is generated."""

    queries: set[str] = field(default_factory=set)
    aggregations: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    lookup: bool = False
    zero_count: bool = False

    @property
    def names(self) -> set[str]:
        return self.queries | self.aggregations | self.keys


def _takes_sub(make: Any) -> bool:
    """Whether a catalogue entry puts its ``sub`` into the body (so its names are really in it)."""
    return "__sub__" in json.dumps(make({"__sub__": {}}))


@st.composite
def queries(draw: st.DrawFn, used: Used, depth: int = 0) -> dict[str, Any]:
    if depth < 3 and draw(st.integers(0, 9)) == 0:
        used.lookup = True
        return dict(draw(st.sampled_from(cat.LOOKUPS)))
    name = draw(st.sampled_from(sorted(cat.QUERIES)))
    used.queries.add(name)
    sub = draw(queries(used, depth + 1)) if depth < 3 and _takes_sub(cat.QUERIES[name]) else {"match_all": {}}
    return {name: cat.QUERIES[name](sub)}


@st.composite
def aggregations(draw: st.DrawFn, used: Used, depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i in range(draw(st.integers(1, 2))):
        name = draw(st.sampled_from(sorted(cat.AGGREGATIONS)))
        used.aggregations.add(name)
        make = cat.AGGREGATIONS[name]
        params = make(draw(queries(used, depth + 1)) if _takes_sub(make) else {"match_all": {}})
        if name in cat.ZERO_COUNT and draw(st.booleans()):
            used.zero_count = True
            params = {**params, **cat.ZERO_COUNT[name]}
        agg: dict[str, Any] = {name: params}
        if depth < 2 and draw(st.booleans()):
            agg["aggs"] = draw(aggregations(used, depth + 1))
        out[f"a{depth}{i}"] = agg
    return out


# The keys whose value holds the generated query (the others are values of their own).
HOLDS_QUERY = {"query", "post_filter", "highlight", "rescore", "sort"}


@st.composite
def bodies(draw: st.DrawFn) -> tuple[dict[str, Any], Used]:
    used = Used()
    keys = draw(st.lists(st.sampled_from(sorted(cat.BODY_KEYS)), min_size=1, max_size=6, unique=True))
    body: dict[str, Any] = {}
    for key in keys:
        used.keys.add(key)
        query = draw(queries(used)) if key in HOLDS_QUERY else {"match_all": {}}
        aggs = draw(aggregations(used)) if key in ("aggs", "aggregations") else {}
        body[key] = cat.BODY_KEYS[key](query, aggs)
        if key == "suggest":
            body[key] = draw(st.sampled_from(cat.SUGGESTERS))
    return body, used


def _scoped(query: Any) -> bool:
    """ml-commons' scope: the container filter is a top-level ``bool.filter`` of the query sent."""
    wrapper = {"bool": {"filter": [container_term(CONTAINER)]}}
    if query == wrapper:  # the caller sent no query: the scope is the whole query
        return True
    return isinstance(query, dict) and list(query) == ["bool"] and wrapper in query["bool"].get("filter", [])


def _assert_accepted_is_safe(body: dict[str, Any], used: Used, allow_scripts: bool) -> None:
    allowed = set(dsl_grammar.CLAUSES) | set(dsl_grammar.AGGREGATIONS) | set(dsl_grammar.SEARCH_BODY.keys)
    assert used.queries <= set(dsl_grammar.CLAUSES), used.queries - set(dsl_grammar.CLAUSES)
    assert used.aggregations <= set(dsl_grammar.AGGREGATIONS)
    assert used.names <= allowed
    assert not used.queries & cat.NEVER_QUERIES and not used.aggregations & cat.NEVER_AGGREGATIONS
    assert not used.keys & cat.NEVER_KEYS
    assert not used.lookup and not used.zero_count
    assert allow_scripts or not used.names & cat.SCRIPTED
    refuse_lookups(body)  # no lookup of any index, whatever the caller may read
    vectors = [[0.0, 0.0]] * len(neural_clauses(body.get("query")))
    sent = ml_request(body, container_id=CONTAINER, neural_vectors=vectors)
    assert _scoped(sent["query"])
    assert set(sent) - {"query"} <= cat.WITHIN_QUERY


def _assert_refusal_names_it(refused: DslRefused, body: dict[str, Any]) -> None:
    assert refused.status == 400 and refused.os_type == "illegal_argument_exception"
    assert f"[{refused.name}]" in refused.message
    assert refused.name in str(body) or refused.name in ("terms", "more_like_this", "lookup")


@pytest.mark.parametrize("allow_scripts", [False, True])
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated=bodies())
def test_every_generated_body_is_refused_or_scoped(
    generated: tuple[dict[str, Any], Used], allow_scripts: bool
) -> None:
    body, used = generated
    try:
        check_search_body(body, allow_scripts=allow_scripts)
    except DslRefused as refused:
        _assert_refusal_names_it(refused, body)
        return
    _assert_accepted_is_safe(body, used, allow_scripts)


def _verdict(body: dict[str, Any], allow_scripts: bool = False) -> bool:
    try:
        check_search_body(body, allow_scripts=allow_scripts)
    except DslRefused:
        return False
    return True


def test_each_catalogued_name_alone() -> None:
    """Every name of the catalogue, once, in a body of its own: the accepted ones are on the allowlist and
    none is a never-allowed one; the never-allowed ones are all refused."""
    q: dict[str, Any] = {"match_all": {}}
    accepted: set[str] = set()
    for name, clause in cat.QUERIES.items():
        if _verdict({"query": {name: clause(q)}}):
            accepted.add(name)
    for name, agg in cat.AGGREGATIONS.items():
        if _verdict({"aggs": {"a": {name: agg(q)}}}):
            accepted.add(name)
    for key, value in cat.BODY_KEYS.items():
        if _verdict({key: value(q, {"t": {"terms": {"field": "f"}}})}):
            accepted.add(key)
    allowed = set(dsl_grammar.CLAUSES) | set(dsl_grammar.AGGREGATIONS) | set(dsl_grammar.SEARCH_BODY.keys)
    assert accepted <= allowed
    assert not accepted & (cat.NEVER_QUERIES | cat.NEVER_AGGREGATIONS | cat.NEVER_KEYS | cat.SCRIPTED)
    for lookup in cat.LOOKUPS:
        assert not _verdict({"query": {"bool": {"filter": [lookup]}}}, allow_scripts=True)
    for suggester in cat.SUGGESTERS:
        assert not _verdict({"suggest": suggester})
    for name in cat.ZERO_COUNT:
        assert not _verdict({"aggs": {"a": {name: {**cat.AGGREGATIONS[name](q), **cat.ZERO_COUNT[name]}}}})
    # What memory searches need is there (ml-commons' own examples, the console, the docs).
    assert {
        "bool",
        "term",
        "terms",
        "match",
        "range",
        "neural",
        "knn",
        "nested",
        "top_hits",
    } <= accepted


def test_a_deep_body_is_refused_without_recursion() -> None:
    deep: dict[str, Any] = {"match_all": {}}
    for _ in range(10_000):
        deep = {"bool": {"must": [deep]}}
    started = time.monotonic()
    with pytest.raises(DslRefused) as refused:
        check_search_body({"query": deep}, allow_scripts=False)
    assert refused.value.name == "depth"
    with pytest.raises(DslRefused):
        refuse_lookups({"query": deep})
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("lookup", cat.LOOKUPS)
def test_forwarded_lookups_of_other_indices_are_refused(lookup: dict[str, Any]) -> None:
    body = {"size": 0, "query": {"bool": {"must": [lookup]}}, "aggs": {"g": {"global": {}}}}
    names_index = cat.SECRET_INDEX in str(lookup)
    if names_index:
        with pytest.raises(DslRefused) as refused:
            refuse_lookups(body)
        assert cat.SECRET_INDEX in refused.value.message and refused.value.status == 400
        refuse_lookups(body, may_read=lambda index: index == cat.SECRET_INDEX)  # a readable index: fine
    else:
        refuse_lookups(body)  # a document of the searched index itself, which the caller may read
    with pytest.raises(DslRefused):
        check_query(lookup, allow_scripts=True)


def test_forwarded_bodies_keep_everything_but_lookups() -> None:
    refuse_lookups(
        {"aggs": {"g": {"global": {}, "aggs": {"t": {"top_hits": {}}}}}, "suggest": cat.SUGGESTERS[0]}
    )
    refuse_lookups({"query": {"terms": {"f": ["index", "id"]}}, "sort": [{"id": "asc"}]})
    with pytest.raises(DslRefused) as refused:
        refuse_lookups({"query": {"wrapper": {"query": "e30="}}})
    assert refused.value.name == "wrapper"
    with pytest.raises(DslRefused):  # one index of a list that may not be read
        refuse_lookups(
            {"query": {"terms": {"f": {"index": "ok,secret", "id": "1", "path": "p"}}}},
            may_read=lambda index: index == "ok",
        )


@pytest.mark.parametrize(
    ("body", "name"),
    [
        ({"size": 0, "aggs": {"g": {"global": {}, "aggs": {"t": {"top_hits": {"size": 100}}}}}}, "global"),
        ({"aggs": {"t": {"terms": {"field": "memory_container_id", "min_doc_count": 0}}}}, "min_doc_count"),
        ({"aggs": {"s": {"significant_terms": {"field": "f", "background_filter": {"match_all": {}}}}}},
         "significant_terms"),
        ({"suggest": {"s": {"text": "x", "term": {"field": "memory"}}}}, "suggest"),
        ({"query": {"geo_shape": {"f": {"indexed_shape": {"index": "i", "id": "1", "path": "p"}}}}},
         "indexed_shape"),
        ({"query": {"terms": {"f": {"index": "i", "id": "1", "path": "p"}}}}, "terms"),
        ({"query": {"more_like_this": {"like": [{"_index": "i", "_id": "1"}]}}}, "more_like_this"),
        ({"query": {"percolate": {"field": "q", "index": "i", "id": "1"}}}, "percolate"),
        ({"query": {"match_all": {}}, "profile": True}, "profile"),
        ({"query": {"match": {"memory": {"query": "x", "new_option": 1}}}}, "new_option"),
        ({"query": {"a_future_query": {}}}, "a_future_query"),
        ({"query": {"script": {"script": {"id": "stored"}}}}, "id"),
    ],
)  # fmt: skip
def test_refusals_name_what_they_refuse(body: dict[str, Any], name: str) -> None:
    with pytest.raises(DslRefused) as refused:
        check_search_body(body, allow_scripts=True)
    assert refused.value.name == name and f"[{name}]" in refused.value.message
    assert "not allowed in a memory search" in refused.value.message


def test_legitimate_bodies_are_accepted() -> None:
    legitimate: list[dict[str, Any]] = [
        {"query": {"bool": {"must": [{"match": {"memory": "tea"}}],
                            "filter": [{"term": {"namespace.user_id": "b"}}]}},
         "size": 5, "from": 5, "sort": [{"created_time": "desc"}], "_source": ["memory"]},
        {"size": 0, "aggs": {"t": {"terms": {"field": "tags.topic", "size": 3},
                                    "aggs": {"top": {"top_hits": {"size": 1, "_source": ["memory"]}}}}}},
        {"query": {"neural": {"memory_embedding": {"query_text": "tea", "k": 3,
                                                    "filter": {"term": {"a": 1}}}}}},
        {"query": {"knn": {"memory_embedding": {"vector": [0.1], "k": 3,
                                                 "filter": {"bool": {"filter": []}}}}}},
        {"aggs": {"h": {"date_histogram": {"field": "created_time", "calendar_interval": "day",
                                            "min_doc_count": 0}}}},
        {"query": {"match_all": {}}, "post_filter": {"term": {"a": 1}}, "collapse": {"field": "f"},
         "highlight": {"fields": {"memory": {}}}, "track_total_hits": True, "search_after": [1]},
    ]  # fmt: skip
    for body in legitimate:
        check_search_body(body, allow_scripts=False)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from([*cat.BODY_KEYS, *cat.QUERIES, *cat.AGGREGATIONS, "x", "id"]), inner,
                      max_size=4),
    max_leaves=40,
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(body=st.dictionaries(st.sampled_from(sorted(cat.BODY_KEYS)), JSON, max_size=4))
def test_any_json_is_accepted_or_refused_never_an_exception(body: dict[str, Any]) -> None:
    """Whatever the caller sends (the JSON reader's types, nested at random) is a 400 or accepted: the
    check itself never fails with anything else (which would be a 500)."""
    for allow_scripts in (False, True):
        try:
            check_search_body(body, allow_scripts=allow_scripts)
        except DslRefused as refused:
            assert refused.status == 400
    try:
        refuse_lookups(body)
    except DslRefused as refused:
        assert refused.status == 400


def test_a_null_top_level_key_is_absent_as_the_node_reads_it() -> None:
    check_search_body({"query": None, "size": 3, "aggs": None}, allow_scripts=False)
    with pytest.raises(DslRefused):
        check_search_body({"query": None, "aggs": {"g": {"global": {}}}}, allow_scripts=False)
