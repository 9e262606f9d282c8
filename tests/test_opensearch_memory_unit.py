"""Pure parts of the ml-commons memory API: the query compiler, configuration rules, lenient parsing,
hybrid fusion. No node, no proxy: these run in milliseconds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.api.opensearch_memory.configuration import parse_configuration
from proxy.api.opensearch_memory.lenient import as_int, coerce_string_map, scalar_string_map
from proxy.core.configuration import (
    complete_for_create,
    merge_update,
    validate_backend_roles,
    validate_index_prefix,
)
from proxy.core.container_record import Container, parse_memory_type
from proxy.core.search import _fuse, min_max_normalize
from proxy.errors import BadRequest, Forbidden, MemproxyError, NotFound
from proxy.store.query import (
    And,
    Exists,
    Hit,
    MatchAll,
    Not,
    Or,
    Range,
    RawDsl,
    Term,
    Terms,
    all_of,
    term_map,
)
from proxy.store.query_dsl import (
    DEFAULT_EF_SEARCH,
    add_filter,
    apply_ml_search_options,
    bm25_search_body,
    compile_filter,
    neural_clauses,
    replace_neural,
    vector_search_body,
)

# --- filter compiler ---------------------------------------------------------------------------------


def test_leaves_compile_to_their_dsl() -> None:
    assert compile_filter(Term("namespace.user_id", "u1")) == {"term": {"namespace.user_id": "u1"}}
    assert compile_filter(Terms("strategy_type", ("A", "B"))) == {"terms": {"strategy_type": ["A", "B"]}}
    assert compile_filter(Exists("tags.x")) == {"exists": {"field": "tags.x"}}
    assert compile_filter(Range("created_time", gte=5)) == {"range": {"created_time": {"gte": 5}}}
    assert compile_filter(RawDsl({"match_all": {}})) == {"match_all": {}}
    assert compile_filter(MatchAll()) is None


def test_boolean_nodes() -> None:
    a, b = Term("a", 1), Term("b", 2)
    assert compile_filter(And((a, b))) == {"bool": {"filter": [{"term": {"a": 1}}, {"term": {"b": 2}}]}}
    assert compile_filter(And((a, MatchAll()))) == {"term": {"a": 1}}
    assert compile_filter(Or((a, b))) == {
        "bool": {"should": [{"term": {"a": 1}}, {"term": {"b": 2}}], "minimum_should_match": 1}
    }
    assert compile_filter(Or((a, MatchAll()))) is None
    assert compile_filter(Or(())) == {"match_none": {}}
    assert compile_filter(Not(a)) == {"bool": {"must_not": [{"term": {"a": 1}}]}}
    assert compile_filter(Not(MatchAll())) == {"match_none": {}}


def test_all_of_flattens_and_skips_neutral() -> None:
    a, b, c = Term("a", 1), Term("b", 2), Term("c", 3)
    assert all_of([None, MatchAll()]) == MatchAll()
    assert all_of([a, None]) == a
    assert all_of([And((a, b)), c]) == And((a, b, c))
    assert term_map("namespace", {"user_id": "u", "agent": "x"}) == [
        Term("namespace.user_id", "u"),
        Term("namespace.agent", "x"),
    ]


def test_raw_dsl_is_copied_not_shared() -> None:
    raw = {"bool": {"filter": [{"term": {"x": 1}}]}}
    compiled = compile_filter(RawDsl(raw))
    assert compiled is not None
    compiled["bool"]["filter"].append("mutated")
    assert raw == {"bool": {"filter": [{"term": {"x": 1}}]}}


def test_vector_search_puts_every_filter_inside_knn() -> None:
    body = vector_search_body(
        field="memory_embedding",
        vector=[0.1, 0.2],
        k=3,
        filter_dsl={"term": {"namespace.user_id": "u"}},
        min_score=0.6,
        ef_search=64,
        source_excludes=["memory_embedding"],
    )
    assert body == {
        "size": 3,
        "_source": {"includes": [], "excludes": ["memory_embedding"]},
        "query": {
            "knn": {
                "memory_embedding": {
                    "vector": [0.1, 0.2],
                    "k": 3,
                    "filter": {"term": {"namespace.user_id": "u"}},
                    "method_parameters": {"ef_search": 64},
                }
            }
        },
        "min_score": 0.6,
    }
    # No bool beside the knn clause: nothing is post-filtered.
    assert set(body["query"]) == {"knn"}


def test_searches_that_name_no_ef_search_get_memproxys_default() -> None:
    body = vector_search_body(field="f", vector=[1.0], k=5, filter_dsl=None)
    assert body["query"]["knn"]["f"]["method_parameters"] == {"ef_search": DEFAULT_EF_SEARCH}
    assert DEFAULT_EF_SEARCH == 300  # the value docs/benchmarks.md measured


def test_bm25_leg_has_the_same_filter() -> None:
    body = bm25_search_body(text_field="memory", text="tea", size=5, filter_dsl={"term": {"a": 1}})
    assert body["query"] == {"bool": {"must": [{"match": {"memory": "tea"}}], "filter": [{"term": {"a": 1}}]}}
    assert body["size"] == 5


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (None, {"bool": {"filter": [{"term": {"memory_container_id": "C"}}]}}),
        (
            {"match_all": {}},
            {
                "bool": {
                    "must": [{"match_all": {}}],
                    "filter": [{"bool": {"filter": [{"term": {"memory_container_id": "C"}}]}}],
                }
            },
        ),
        (
            {"bool": {"filter": [{"term": {"a": 1}}]}},
            {
                "bool": {
                    "filter": [
                        {"term": {"a": 1}},
                        {"bool": {"filter": [{"term": {"memory_container_id": "C"}}]}},
                    ]
                }
            },
        ),
        (
            {"bool": {"filter": {"term": {"a": 1}}}},
            {
                "bool": {
                    "filter": [
                        {"term": {"a": 1}},
                        {"bool": {"filter": [{"term": {"memory_container_id": "C"}}]}},
                    ]
                }
            },
        ),
        (
            {"bool": {"must": [{"term": {"a": 1}}]}},
            {
                "bool": {
                    "must": [{"term": {"a": 1}}],
                    "filter": [{"bool": {"filter": [{"term": {"memory_container_id": "C"}}]}}],
                }
            },
        ),
    ],
)
def test_add_filter_scopes_like_ml_commons(query: dict | None, expected: dict) -> None:
    assert add_filter(query, {"term": {"memory_container_id": "C"}}) == expected


def test_search_options_force_source_and_versions() -> None:
    assert apply_ml_search_options({})["_source"] == {
        "includes": [],
        "excludes": ["ui_metadata", "content", "model_content"],
    }
    forced = apply_ml_search_options({"_source": False})
    assert forced["_source"] == {"includes": [], "excludes": ["ui_metadata"]}
    assert forced["version"] is True and forced["seq_no_primary_term"] is True
    assert apply_ml_search_options({"_source": ["memory"]})["_source"] == {
        "includes": ["memory"],
        "excludes": ["ui_metadata"],
    }


def test_neural_clauses_become_knn() -> None:
    query = {
        "bool": {
            "must": [{"neural": {"memory_embedding": {"query_text": "tea", "model_id": "m", "k": 4}}}],
            "filter": [{"term": {"a": 1}}],
        }
    }
    clauses = neural_clauses(query)
    assert [(c.field, c.query_text, c.model_id) for c in clauses] == [("memory_embedding", "tea", "m")]
    rewritten = replace_neural(query, [[1.0, 0.0]])
    assert rewritten["bool"]["must"][0] == {"knn": {"memory_embedding": {"vector": [1.0, 0.0], "k": 4}}}
    assert rewritten["bool"]["filter"] == [{"term": {"a": 1}}]
    # neural-search's default k when none of k / min_score / max_distance is given
    default_k = replace_neural({"neural": {"f": {"query_text": "x"}}}, [[1.0]])
    assert default_k == {"knn": {"f": {"vector": [1.0], "k": 10}}}
    with pytest.raises(BadRequest):
        neural_clauses({"neural": {"f": {"k": 3}}})


# --- configuration -----------------------------------------------------------------------------------


def _create(raw: dict) -> dict:
    return complete_for_create(parse_configuration(raw))


def test_defaults_and_key_order() -> None:
    cfg = _create({})
    assert cfg == {
        "index_prefix": "default",
        "disable_history": False,
        "disable_session": False,
        "use_system_index": True,
    }
    full = _create(
        {
            "embedding_model_type": "text_embedding",
            "embedding_model_id": "e",
            "embedding_dimension": 384,
            "llm_id": "l",
            "strategies": [{"type": "semantic", "namespace": ["user_id"]}],
            "unknown_key": 1,
        }
    )
    assert list(full) == [
        "index_prefix",
        "llm_id",
        "embedding_model_type",
        "embedding_model_id",
        "embedding_dimension",
        "max_infer_size",
        "strategies",
        "disable_history",
        "disable_session",
        "use_system_index",
    ]
    assert full["embedding_model_type"] == "TEXT_EMBEDDING" and full["max_infer_size"] == 5
    strategy = full["strategies"][0]
    assert list(strategy) == ["id", "enabled", "type", "namespace"]
    assert strategy["id"].startswith("semantic_") and len(strategy["id"]) == len("semantic_") + 8
    private = _create({"use_system_index": False})
    assert len(private["index_prefix"]) == 8


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"embedding_model_type": "nope"}, "Wrong function name"),
        (
            {"embedding_model_type": "KMEANS"},
            "Embedding model type must be either TEXT_EMBEDDING or SPARSE_ENCODING",
        ),
        (
            {"embedding_model_type": "TEXT_EMBEDDING"},
            "Embedding model ID is required when embedding model type is provided",
        ),
        ({"embedding_model_id": "e"}, "Embedding model type is required when embedding model ID is provided"),
        (
            {"embedding_model_type": "TEXT_EMBEDDING", "embedding_model_id": "e"},
            "Dimension is required for TEXT_EMBEDDING",
        ),
        (
            {"embedding_model_type": "SPARSE_ENCODING", "embedding_model_id": "e", "embedding_dimension": 3},
            "Dimension is not allowed for SPARSE_ENCODING",
        ),
        ({"llm_id": "l", "max_infer_size": 11}, "Maximum infer size cannot exceed 10"),
        (
            {"strategies": [{"type": "SEMANTIC", "namespace": ["u"]}]},
            "Strategies require both an LLM model and embedding model to be configured. Missing: LLM model "
            "and embedding model. Strategies use LLM for fact extraction and embedding model for semantic "
            "search.",
        ),
        (
            {
                "llm_id": "l",
                "embedding_model_type": "TEXT_EMBEDDING",
                "embedding_model_id": "e",
                "embedding_dimension": 3,
                "strategies": [{"type": "SEMANTIC"}],
            },
            "Strategy namespace is required. Please provide a non-empty namespace array.",
        ),
        (
            {"strategies": [{"type": "OTHER"}]},
            "Invalid memory type: OTHER. Must be SEMANTIC, USER_PREFERENCE, or SUMMARY",
        ),
    ],
)
def test_configuration_errors(raw: dict, reason: str) -> None:
    with pytest.raises(BadRequest) as err:
        _create(raw)
    assert err.value.message == reason
    assert err.value.os_type == "illegal_argument_exception"


def test_retention_policy_is_refused() -> None:
    with pytest.raises(Forbidden) as err:
        _create({"retention_policy": {"sessions": {"retention_days": 3}}})
    assert err.value.message.startswith(
        "Cannot set retention_policy: the memory retention feature is not enabled."
    )
    assert _create({"retention_policy": None})["index_prefix"] == "default"


@pytest.mark.parametrize(
    ("prefix", "why"),
    [
        ("a#b", "must not contain '#'"),
        ("_x", "must not start with '_', '-', or '+'"),
        ("Upper", "must be lowercase"),
        ("a b", 'must not contain the following characters [ , ", *, \\, <, |, ,, >, /, ?]'),
    ],
)
def test_index_prefix_rules(prefix: str, why: str) -> None:
    with pytest.raises(BadRequest) as err:
        validate_index_prefix(prefix)
    assert err.value.message == f"missing or invalid index prefix [{prefix}] {why}"
    assert err.value.os_type == "parse_exception"


def test_index_prefix_control_chars() -> None:
    with pytest.raises(BadRequest, match="Index prefix must not contain any control characters"):
        validate_index_prefix("a\nb")


def test_backend_roles() -> None:
    assert validate_backend_roles(["team:a", "x.y@z"]) == ["team:a", "x.y@z"]
    with pytest.raises(BadRequest, match="Backend role cannot be empty or blank"):
        validate_backend_roles([" "])
    with pytest.raises(BadRequest, match="Backend role contains invalid characters"):
        validate_backend_roles(["a b"])


def _embedded(**extra: object) -> dict:
    return _create(
        {
            "embedding_model_type": "TEXT_EMBEDDING",
            "embedding_model_id": "e",
            "embedding_dimension": 3,
            **extra,
        }
    )


def test_update_merges_strategies_and_guards_embedding() -> None:
    current = _embedded(llm_id="l", strategies=[{"type": "SEMANTIC", "namespace": ["u"]}])
    sid = current["strategies"][0]["id"]
    merged = merge_update(
        current,
        parse_configuration(
            {"strategies": [{"id": sid, "namespace": ["u", "a"]}, {"type": "SUMMARY", "namespace": ["s"]}]},
            is_update=True,
        ),
    )
    assert [s["namespace"] for s in merged["strategies"]] == [["u", "a"], ["s"]]
    assert merged["strategies"][0]["id"] == sid
    with pytest.raises(NotFound, match="Strategy with id nope not found"):
        merge_update(current, parse_configuration({"strategies": [{"id": "nope"}]}, is_update=True))
    with pytest.raises(
        BadRequest, match=f"Cannot change strategy type from SEMANTIC to SUMMARY for strategy {sid}"
    ):
        merge_update(
            current, parse_configuration({"strategies": [{"id": sid, "type": "SUMMARY"}]}, is_update=True)
        )
    change = parse_configuration(
        {"embedding_model_type": "TEXT_EMBEDDING", "embedding_model_id": "other", "embedding_dimension": 3},
        is_update=True,
    )
    with pytest.raises(BadRequest) as err:
        merge_update(current, change)
    assert err.value.message.startswith(
        "Cannot change embedding configuration once strategies are configured."
    )
    assert (
        "Current: {embedding_model_id=e, embedding_model_type=TEXT_EMBEDDING, dimension=3}"
        in err.value.message
    )
    same = parse_configuration(
        {"embedding_model_type": "TEXT_EMBEDDING", "embedding_model_id": "e", "embedding_dimension": 3},
        is_update=True,
    )
    assert merge_update(current, same)["embedding_model_id"] == "e"
    # ml-commons' constructor quirk: llm_id alone resets max_infer_size to 5
    assert merge_update({**current, "max_infer_size": 8}, {"llm_id": "l2"})["max_infer_size"] == 5


# --- the container record ----------------------------------------------------------------------------


def test_index_names_follow_ml_commons() -> None:
    plain = Container("c", "n", None, 1, 1, _create({}))
    assert plain.index_name("working") == ".plugins-ml-am-default-memory-working"
    assert plain.index_name("sessions") == ".plugins-ml-am-default-memory-sessions"
    assert plain.index_name("long-term") is None and plain.index_name("history") is None
    embedded = Container("c", "n", None, 1, 1, _embedded(index_prefix="p1", use_system_index=False))
    assert embedded.index_name("long-term") == "p1-memory-long-term"
    assert embedded.index_name("history") == "p1-memory-history"
    no_history = Container("c", "n", None, 1, 1, _embedded(disable_history=True, disable_session=True))
    assert no_history.index_name("history") is None and no_history.index_name("sessions") is None
    space = Container(
        "c",
        "n",
        None,
        1,
        1,
        _embedded(),
        goodmem={"space_embedders": [{"embedder_id": "e"}, {"embedder_id": "f"}]},
    )
    assert space.vector_fields() == [("memory_embedding", "e"), ("memory_embedding__1", "f")]
    assert Container.from_source("c", space.source()).source() == space.source()


def test_memory_type_parsing() -> None:
    assert parse_memory_type("Long-Term") == "long-term"
    with pytest.raises(BadRequest) as err:
        parse_memory_type("short")
    assert (
        err.value.message
        == "Invalid memory type: short. Must be one of: sessions, working, long-term, history"
    )


# --- lenient parsing ---------------------------------------------------------------------------------


def test_add_memory_maps_are_coerced_to_strings() -> None:
    coerced = coerce_string_map(
        {"s": "x", "n": 123, "b": True, "o": {"k": "v", "n": 1}, "z": None, "l": [1, "a"]}
    )
    assert coerced == {"s": "x", "n": "123", "b": "true", "o": '{"k":"v","n":1}', "z": "null", "l": '[1,"a"]'}
    assert scalar_string_map({"a": 1, "b": "x"}) == {"a": "1", "b": "x"}
    with pytest.raises(BadRequest) as err:
        scalar_string_map({"a": {"b": 1}})
    assert err.value.os_type == "parsing_exception"


def test_lenient_integers() -> None:
    assert as_int("7") == 7 and as_int(7.0) == 7
    with pytest.raises(BadRequest):
        as_int(True)
    with pytest.raises(BadRequest):
        as_int("seven")


# --- hybrid fusion -----------------------------------------------------------------------------------


def test_min_max_matches_neural_search() -> None:
    assert min_max_normalize({}) == {}
    assert min_max_normalize({"a": 3.0}) == {"a": 1.0}
    assert min_max_normalize({"a": 1.0, "b": 3.0, "c": 2.0}) == {"a": 0.001, "b": 1.0, "c": 0.5}


def _hit(doc_id: str, score: float) -> Hit:
    return Hit(id=doc_id, index="i", score=score, source={})


def test_fuse_weighted_mean_missing_leg_counts_zero() -> None:
    bm25 = {"a": _hit("a", 5.0), "b": _hit("b", 1.0)}
    knn = {"a": _hit("a", 0.9), "c": _hit("c", 0.7)}
    hits, union = _fuse([bm25, knn], [0.3, 0.7], 10, None)
    scores = {h.id: h.score for h in hits}
    assert union == 3
    assert scores["a"] == pytest.approx(1.0)
    assert scores["b"] == pytest.approx(0.3 * 0.001)
    assert scores["c"] == pytest.approx(0.7 * 0.001)
    assert [h.id for h in hits] == ["a", "c", "b"]
    top, _ = _fuse([bm25, knn], [0.3, 0.7], 1, None)
    assert [h.id for h in top] == ["a"]
    above, _ = _fuse([bm25, knn], [0.3, 0.7], 10, 0.5)
    assert [h.id for h in above] == ["a"]


@given(
    st.dictionaries(st.text(min_size=1, max_size=3), st.floats(0, 100, allow_nan=False), max_size=8),
    st.dictionaries(st.text(min_size=1, max_size=3), st.floats(0, 1, allow_nan=False), max_size=8),
    st.floats(0, 1),
    st.integers(1, 10),
)
def test_fuse_properties(lex: dict, vec: dict, w: float, k: int) -> None:
    legs = [{i: _hit(i, s) for i, s in lex.items()}, {i: _hit(i, s) for i, s in vec.items()}]
    hits, union = _fuse(legs, [w, 1 - w], k, None)
    assert union == len(set(lex) | set(vec))
    assert len(hits) == min(k, union)
    scores = [h.score for h in hits if h.score is not None]
    assert len(scores) == len(hits)
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 + 1e-9 and not math.isnan(s) for s in scores)


def test_error_kinds_keep_ml_commons_types() -> None:
    assert MemproxyError("x").os_type == "status_exception"
    assert BadRequest("x").status == 400


def test_a_space_listing_order_is_total_without_id_unless_shards_need_it() -> None:
    """The memory list's keyset order ends with index and sequence number, unique in one shard; only a
    long-term index with several shards adds ``_id`` (whose sort loads fielddata on the node)."""
    from proxy.core.container_indices import primary_shards
    from proxy.store.goodmem import SpaceOrder

    one = Container("c", "n", None, 1, 1, _embedded())
    nested = {"long_term_memory_index": {"index": {"number_of_shards": 3}}}
    three = Container("c", "n", None, 1, 1, _embedded(index_settings=nested))
    flat = Container(
        "c",
        "n",
        None,
        1,
        1,
        _embedded(index_settings={"long_term_memory_index": {"index.number_of_shards": "2"}}),
    )
    assert [primary_shards(c, "long-term") for c in (one, three, flat)] == [1, 3, 2]

    single, several = SpaceOrder("created_time"), SpaceOrder("created_time", single_shard=False)
    assert [next(iter(k)) for k in single.spec()][-2:] == ["_index", "_seq_no"]
    assert [next(iter(k)) for k in several.spec()][-1] == "_id"
    values = [1, 1, None, "idx", 7]
    assert single.accepts(values) and not several.accepts(values) and several.accepts([*values, "doc"])
    assert not single.accepts([1, 1, None, "idx", "7"]) and not single.accepts(["x", 1, None, "idx", 7])
    assert SpaceOrder("content_type").accepts([None, 1, "m", "idx", 0])
