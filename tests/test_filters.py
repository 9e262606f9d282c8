"""Unit tests of the filter language: parser, typing rules, evaluator semantics, indexing, compiler shapes,
and the spec §7.5 / seed examples end to end on the real node (inside a knn query's filter, as a retrieve
runs them)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opensearchpy import OpenSearch

from proxy.errors import BadRequest
from proxy.filters import (
    METADATA_INDEX_FIELD,
    SCRIPT_SOURCE,
    FilterError,
    compile_filter,
    evaluate,
    filter_query,
    index_metadata,
    needs_script,
    parse_filter,
    render_metadata_mapping,
)
from proxy.filters.indexing import MAX_STRING_BYTES, sortable_number
from proxy.filters.values import canonical_number, lower_text, parse_date, parse_timestamp, upper_text

NOW = dt.datetime(2025, 3, 15, 12, 30, tzinfo=dt.UTC)

SPEC_EXAMPLES = [
    "lower(CAST(val('$.primaryLocation.city') AS TEXT)) = 'manila'",
    "CAST(val('$.effectiveDate') AS DATE) >= CAST('2024-10-01' AS DATE)",
    "EXTRACT(YEAR FROM CAST(val('$.effectiveDate') AS DATE)) = 2024",
    "CAST(val('$.score') AS INTEGER) >= 80 AND NOT (CAST(val('$.status') AS TEXT) = 'archived')",
    "CAST(val('$.title') AS TEXT) ILIKE '%ai%'",
    "'tag1' IN vals('$.tags')",
    "exists('$.reviewers[*]') OR val('$.owner') IS NULL",
    "CAST(val('$.team') AS TEXT) IN ('blue', 'red')",
    "CAST(val('$.owner') AS TEXT) = 'o\\'brien'",
]
# The two filters of seeds/goodmem-retrieve-advanced.txt (the second as the JSON body carries it).
SEED_EXAMPLES = [
    "lower(CAST(val('$.primaryLocation.city') AS TEXT)) = 'manila'",
    "CAST(val('$.effectiveDate') AS DATE) >= CAST('2024-10-01' AS DATE)",
]

MEMORIES: dict[str, Any] = {
    "m1": {
        "primaryLocation": {"city": "Manila"},
        "effectiveDate": "2024-10-05",
        "score": 85,
        "status": "active",
        "title": "An AI primer",
        "tags": ["tag1", "tag2"],
        "reviewers": ["ann"],
        "owner": "o'brien",
        "team": "blue",
    },
    "m2": {
        "primaryLocation": {"city": "MANILA"},
        "effectiveDate": "2024-09-30",
        "score": 79.5,  # CAST AS INTEGER rounds half away from zero: 80
        "status": "archived",
        "title": "Gardening",
        "tags": "tag1",  # vals() of a scalar is that scalar
        "reviewers": [],
        "owner": None,
        "team": "green",
    },
    "m3": {
        "primaryLocation": {"city": "Cebu"},
        "effectiveDate": "2023-12-31T23:00:00-02:00",  # DATE keeps the written date: 2023-12-31
        "score": "90",  # a string: CAST AS INTEGER does not match
        "title": "FAIR use",
        "tags": ["TAG1"],
        "team": "red",
        "owner": "O'Brien",
    },
    "m4": {},
    "m5": {
        "primaryLocation": {"city": "manila"},
        "effectiveDate": "2025-01-01",
        "score": 80.4,
        "status": None,
    },
}
EXPECTED = {
    SPEC_EXAMPLES[0]: {"m1", "m2", "m5"},
    SPEC_EXAMPLES[1]: {"m1", "m5"},
    SPEC_EXAMPLES[2]: {"m1", "m2"},
    SPEC_EXAMPLES[3]: {"m1"},  # m2 archived; m5 status null -> NOT(UNKNOWN) is UNKNOWN
    SPEC_EXAMPLES[4]: {"m1", "m3"},
    SPEC_EXAMPLES[5]: {"m1", "m2"},
    SPEC_EXAMPLES[6]: {"m1", "m2", "m4", "m5"},
    SPEC_EXAMPLES[7]: {"m1", "m3"},
    SPEC_EXAMPLES[8]: {"m1"},
}


def matches(text: str, doc: Any) -> bool | None:
    return evaluate(parse_filter(text), doc, now=NOW)


def error_of(text: str) -> FilterError:
    with pytest.raises(FilterError) as info:
        parse_filter(text)
    return info.value


# --- spec examples ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", SPEC_EXAMPLES)
def test_spec_examples_evaluate(text: str) -> None:
    got = {name for name, doc in MEMORIES.items() if matches(text, doc) is True}
    assert got == EXPECTED[text]


@pytest.mark.parametrize("text", SEED_EXAMPLES)
def test_seed_examples_parse_and_compile_without_scripts(text: str) -> None:
    query = filter_query(text, allow_scripts=False)
    assert "script" not in json.dumps(query)


@pytest.mark.parametrize("text", SPEC_EXAMPLES)
def test_spec_examples_need_no_painless(text: str) -> None:
    assert not needs_script(parse_filter(text))


@pytest.fixture(scope="module")
def client(opensearch_url: str) -> OpenSearch:
    return OpenSearch(opensearch_url, timeout=60)


def test_spec_and_seed_examples_end_to_end_in_knn(client: OpenSearch) -> None:
    """The examples as a retrieve runs them: the compiled filter inside a lucene knn query's filter."""
    index = f"test-filters-examples-{uuid.uuid4().hex[:10]}"
    client.indices.create(
        index=index,
        body={
            "settings": {"number_of_shards": 1, "number_of_replicas": 0, "index.knn": True},
            "mappings": {
                "properties": {
                    "metadata": {"type": "object", "enabled": False},
                    METADATA_INDEX_FIELD: render_metadata_mapping(),
                    "vec": {
                        "type": "knn_vector",
                        "dimension": 2,
                        "method": {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"},
                    },
                }
            },
        },
    )
    try:
        for n, (name, doc) in enumerate(MEMORIES.items()):
            body = {"metadata": doc, METADATA_INDEX_FIELD: index_metadata(doc), "vec": [1.0, float(n)]}
            client.index(index=index, id=name, body=body)
        client.indices.refresh(index=index)
        cases = {**EXPECTED, "TRUE": set(MEMORIES), "NULL": set(), "NOT exists('$.title')": {"m4", "m5"}}
        for text in [*cases, *SEED_EXAMPLES]:
            knn = {"vec": {"vector": [1.0, 0.5], "k": len(MEMORIES), "filter": filter_query(text)}}
            hits = client.search(index=index, body={"size": 10, "query": {"knn": knn}})["hits"]["hits"]
            assert {h["_id"] for h in hits} == cases[text], text
    finally:
        client.indices.delete(index=index, ignore=[404])


# --- lexical rules -----------------------------------------------------------------------------------------
def test_keywords_and_functions_are_case_insensitive() -> None:
    assert matches("cast(VAL('$.a') as text) Like 'x%' aNd NoT FaLsE", {"a": "xy"}) is True
    assert matches("EXISTS('$.a') or Exists('$.b')", {"b": 1}) is True


def test_both_quoting_styles_and_escapes() -> None:
    doc = {"o": "o'brien", "b": "a\\b", "n": "x\ny\tz"}
    assert matches("CAST(val('$.o') AS TEXT) = 'o\\'brien'", doc) is True
    assert matches("CAST(val('$.o') AS TEXT) = 'o''brien'", doc) is True
    assert matches("CAST(val('$.b') AS TEXT) = 'a\\\\b'", doc) is True
    assert matches("CAST(val('$.n') AS TEXT) = 'x\\ny\\tz'", doc) is True
    # An unknown escape keeps its backslash, so '50\%' reaches LIKE as an escaped percent sign.
    assert matches("CAST(val('$.p') AS TEXT) LIKE '50\\%'", {"p": "50%"}) is True
    assert matches("CAST(val('$.p') AS TEXT) LIKE '50\\%'", {"p": "500"}) is False
    assert matches("'a' || '\\\\' || 'b' = CAST(val('$.b') AS TEXT)", doc) is True


def test_comments_and_whitespace() -> None:
    text = "-- leading comment\nCAST(val('$.a') AS NUMERIC) -- trailing\n\t>=\r\n 1 -- end"
    assert matches(text, {"a": 2}) is True
    assert matches("'--not a comment' = '--not a comment'", {}) is True


def test_numbers() -> None:
    assert matches("42 = 42.0 AND 3.14 < 6.02e23 AND .5 = 0.5 AND 1e3 = 1000", {}) is True
    assert "NaN" in error_of("CAST(val('$.a') AS NUMERIC) = NaN").message
    assert "Infinity" in error_of("1 < Infinity").message


@pytest.mark.parametrize(
    ("text", "problem", "column"),
    [
        ("CAST(val('$.a') AS TEXT) = 'abc", "unterminated string literal", 28),
        ("CAST(val('$.a') AS TEXT) = 'a\nb'", "raw control character U+000A", 28),
        ("CAST(val('$.a') AS TEXT) = \"abc\"", "double-quoted strings are not supported", 28),
        ("frobnicate('$.a')", "unknown function frobnicate()", 1),
        ("CAST(val('$.a') AS TEXT)", "must be a boolean expression, not TEXT", 1),
        ("val('$.a') = 'x'", "cannot use a JSON value", 1),
        ("val('$.user-id') IS NULL", "contains '-'", 5),
        ("val('$.tags[*]') IS NULL", "use vals() or exists()", 1),
        ("CAST(val('$.a') AS FLOAT) = 1", "unknown type FLOAT", 20),
        ("CAST(val('$.a') AS TEXT) LIKE 'x\\\\'", "must not end with the escape character", 31),
        ("CAST(val('$.a') AS TEXT) =", "unexpected end of expression", 27),
        ("CAST(val('$.a') AS TEXT) = = 'x'", "unexpected a comparison operator", 28),
        ("lower(upper(CAST(val('$.a') AS TEXT))) = 'x'", "cannot be nested", 7),
        ("CAST(val('$.d') AS DATE) > '2024-13-01'", "invalid DATE value", 28),
        ("CAST(CAST(val('$.a') AS TEXT) || 'x' AS NUMERIC) = 1", "computed TEXT value", 1),
        ("CAST(val('$.a') AS TEXT) CONTAINS 'x'", "for substrings use LIKE", 1),
        ("a = 1", "bare identifiers are not allowed", 1),
        ("   ", "empty", None),
        ("val('$..a') IS NULL", "recursive descent", 5),
        ("EXTRACT(HOUR FROM CAST(val('$.d') AS DATE)) = 1", "not supported for DATE", 9),
        ("CAST(val('$.a') AS TEXT) = 'x' AND 1", "expected a boolean operand", 36),
    ],
)
def test_errors_name_position_and_problem(text: str, problem: str, column: int | None) -> None:
    err = error_of(text)
    assert isinstance(err, BadRequest) and err.status == 400
    assert problem in err.message, err.message
    if column is not None:
        assert err.details["column"] == column, err.message
        assert err.details["line"] == 1
        assert f"line 1, column {column}" in err.message


def test_error_position_on_later_line() -> None:
    err = error_of("exists('$.a')\n  AND\n  CAST(val('$.b') AS TEXT) = 'x\ny'")
    assert (err.details["line"], err.details["column"]) == (3, 30)
    assert err.details["offset"] == len("exists('$.a')\n  AND\n  CAST(val('$.b') AS TEXT) = ")


def test_too_deep_and_too_long() -> None:
    assert "nests more than" in error_of("NOT " * 200 + "TRUE").message
    assert "longer than 32768 characters" in error_of("TRUE AND " * 20000 + "TRUE").message
    # A long flat AND/OR chain is not "deep".
    assert parse_filter(" OR ".join(f"CAST(val('$.a') AS NUMERIC) = {i}" for i in range(800)))


# --- precedence and types ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "1 + 2 * 3 = 7",
        "(1 + 2) * 3 = 9",
        "-2 * 3 = -6",
        "2 - -1 = 3",
        "7 / 2 = 3",  # INTEGER / INTEGER truncates (PostgreSQL)
        "7.0 / 2 = 3.5",
        "-7 / 2 = -3",
        "-7 % 3 = -1",
        "1 / 3 * 3 = 0",
        "1.0 / 3 = 0.3333333333333333333333333333333333",  # 34 significant digits
        "'a' || 'b' || 'c' = 'abc'",
        "'a' || 1 + 2 = 'a3'",  # || binds looser than +
        "TRUE OR TRUE AND FALSE",
        "NOT FALSE AND TRUE",
        "NOT (TRUE AND FALSE)",
        "CAST('2024-03-01' AS DATE) - 1 = CAST('2024-02-29' AS DATE)",
        "CAST('2024-03-01' AS DATE) - CAST('2024-01-01' AS DATE) = 60",
        "CAST('2024-10-01T12:00:00+02:00' AS TIMESTAMP) = CAST('2024-10-01T10:00:00Z' AS TIMESTAMP)",
        "CAST('2024-10-01' AS DATE) < CAST('2024-10-01T00:00:01' AS TIMESTAMP)",
        "EXTRACT(DOW FROM CAST('2024-10-06' AS DATE)) = 0",
        "EXTRACT(ISODOW FROM CAST('2024-10-06' AS DATE)) = 7",
        "EXTRACT(SECOND FROM CAST('2024-10-06T01:02:03.25Z' AS TIMESTAMP)) = 3.25",
        "EXTRACT(EPOCH FROM CAST('1970-01-02' AS DATE)) = 86400",
        "CAST(2.5 AS INTEGER) = 3 AND CAST(-2.5 AS INTEGER) = -3",
        "CAST(TRUE AS TEXT) = 'true' AND upper(CAST(FALSE AS TEXT)) = 'FALSE'",
        "CAST(1.50 AS TEXT) = '1.5' AND CAST(1e3 AS TEXT) = '1000'",
        "CAST(CAST('2024-10-01T10:20:30.5Z' AS TIMESTAMP) AS TEXT) = '2024-10-01 10:20:30.5'",
        "CAST('yes' AS BOOLEAN) AND NOT CAST('off' AS BOOLEAN)",
        "lower('ÀÉÎ İ') = 'àéî i' AND upper('straße') = 'STRAßE'",
        "CURRENT_DATE = CAST('2025-03-15' AS DATE) AND CURRENT_DATE - 365 = CAST('2024-03-15' AS DATE)",
        "1 IN (1, NULL) AND (2 IN (1, NULL)) IS NULL AND (2 NOT IN (1, NULL)) IS NULL",
        "[1, 'a'] CONTAINS ['a'] AND NOT [1] OVERLAPS [2] AND 2.0 IN [1, 2]",
        "['a', 'b'][1] IS NOT NULL AND CAST(['a', 'b'][1] AS TEXT) = 'b'",
        "(1 / 0) IS NULL",
    ],
)
def test_constant_semantics(text: str) -> None:
    assert matches(text, {}) is True


def test_three_valued_logic() -> None:
    missing: dict[str, Any] = {}
    assert matches("CAST(val('$.a') AS TEXT) = 'x'", missing) is None
    assert matches("NOT (CAST(val('$.a') AS TEXT) = 'x')", missing) is None
    assert matches("CAST(val('$.a') AS TEXT) = 'x' OR TRUE", missing) is True
    assert matches("CAST(val('$.a') AS TEXT) = 'x' AND FALSE", missing) is False
    assert matches("CAST(val('$.a') AS TEXT) IS NULL", missing) is True
    assert matches("NULL", missing) is None


def test_typing_rules_of_val() -> None:
    doc = {"flag": True, "n": 5, "s": "5", "nul": None, "d": "2024-10-01", "bad": "2024-02-30"}
    # A mismatched cast is accepted and matches nothing (live GoodMem behaviour).
    assert matches("CAST(val('$.flag') AS TEXT) = 'True'", doc) is None
    assert matches("CAST(val('$.flag') AS BOOLEAN) = true", doc) is True
    assert matches("CAST(val('$.s') AS NUMERIC) = 5", doc) is None
    assert matches("CAST(val('$.n') AS TEXT) = '5'", doc) is None
    assert matches("CAST(val('$.n') AS NUMERIC) = 5.000", doc) is True
    assert matches("CAST(val('$.bad') AS DATE) IS NULL", doc) is True
    assert matches("val('$.nul') IS NULL AND exists('$.nul') AND NOT exists('$.zzz')", doc) is True


def test_paths() -> None:
    doc = {"a.b": 1, "a": {"b": 2}, "user-id": 3, "l": [[10, 11], [12]], "ü": 4, "x": [{"k": 1}, {"k": 2}]}
    assert matches("CAST(val('$.\"a.b\"') AS NUMERIC) = 1", doc) is True
    assert matches("CAST(val('$[\"a.b\"]') AS NUMERIC) = 1", doc) is True
    assert matches("CAST(val('$.a.b') AS NUMERIC) = 2", doc) is True
    assert matches("CAST(val('$.\"user-id\"') AS NUMERIC) = 3", doc) is True
    assert matches("CAST(val('$.l[0][1]') AS NUMERIC) = 11", doc) is True
    assert matches("CAST(val('$.l')[1][0] AS NUMERIC) = 12", doc) is True
    assert matches("CAST(val('$.ü') AS NUMERIC) = 4", doc) is True
    assert matches("12 IN vals('$.l[*]') AND 11 IN vals('$.l[*]')", doc) is True
    assert matches("2 IN vals('$.x[*].k') AND exists('$.x[*].k') AND NOT exists('$.x.k')", doc) is True


# --- indexing ---------------------------------------------------------------------------------------------
def test_no_metadata_is_an_empty_document() -> None:
    assert index_metadata(None) == {"p": [], "v": [], "l": [], "u": []}
    assert matches("exists('$')", None) is False and matches("val('$') IS NULL", None) is True
    assert matches("exists('$')", {}) is True and matches("exists('$.a')", {"a": None}) is True


def test_index_metadata_shape() -> None:
    out = index_metadata({"a.b": [1, "X"], "n": None})
    assert set(out) == {"p", "v", "l", "u"}
    assert '$."a.b"[*]' in out["p"] and '$."a.b"[0]\x00n' in out["p"] and "$.n\x00z" in out["p"]
    assert '$."a.b"[1]\x00sX' in out["v"] and '$."a.b"[*]\x00N1' in out["v"]
    assert '$."a.b"[1]\x00x' in out["l"] and '$."a.b"[1]\x00X' in out["u"]


@pytest.mark.parametrize(
    "bad",
    [{"x": float("nan")}, {"x": float("inf")}, {"x": "a" * (MAX_STRING_BYTES + 1)}, {"x": object()}, {1: 2}],
)
def test_index_metadata_refuses_what_it_cannot_index_exactly(bad: Any) -> None:
    with pytest.raises(BadRequest):
        index_metadata(bad)


def test_mapping_fragment() -> None:
    mapping = render_metadata_mapping()
    assert mapping["type"] == "object"
    assert {name: f["type"] for name, f in mapping["properties"].items()} == {
        "p": "keyword",
        "v": "keyword",
        "l": "keyword",
        "u": "keyword",
    }
    assert "normalizer" not in json.dumps(mapping)


@settings(max_examples=400, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False), st.decimals(allow_nan=False, allow_infinity=False))
def test_sortable_number_preserves_order(a: Decimal, b: Decimal) -> None:
    ea, eb = sortable_number(a), sortable_number(b)
    assert (ea < eb) == (a < b) and (ea == eb) == (a == b)
    assert (ea.encode() < eb.encode()) == (a < b)  # as UTF-8 bytes too: the order the keyword index sorts by


def test_value_helpers() -> None:
    assert canonical_number(Decimal("-0.000")) == "0" and canonical_number(Decimal("1E+3")) == "1000"
    assert parse_date("2024-02-29") == dt.date(2024, 2, 29) and parse_date("2023-02-29") is None
    assert parse_date("2024-10-01T23:00:00-05:00") == dt.date(2024, 10, 1)
    assert parse_timestamp("1970-01-01T00:00:01.5Z") == 1_500_000
    assert parse_timestamp("2024-10-01T24:00:00") is None
    assert parse_date("\uff12\uff10\uff12\uff14-10-01") is None  # full-width digits are not ASCII digits
    assert lower_text("\u03a3\u0391\u03a3 \u0130") == "\u03c3\u03b1\u03c3 i"  # ΣΑΣ İ, simple mappings
    assert upper_text("ß") == "ß"


# --- compiled shapes ---------------------------------------------------------------------------------------
def test_not_over_unknown_is_not_must_not() -> None:
    query = filter_query("NOT (CAST(val('$.status') AS TEXT) = 'archived')")
    # NOT x must not match documents where x is UNKNOWN (status missing or not a string).
    assert query == {
        "bool": {
            "filter": [
                {"term": {"metadata_index.p": "$.status\x00s"}},
                {"bool": {"must_not": [{"term": {"metadata_index.v": "$.status\x00sarchived"}}]}},
            ]
        }
    }


def test_painless_only_where_needed_and_values_only_in_params() -> None:
    text = (
        "CAST(val('$.a') AS NUMERIC) + CAST(val('$.b') AS NUMERIC) > 4321 AND CAST(val('$.c') AS TEXT) = 'zz'"
    )
    query = compile_filter(parse_filter(text), now=NOW)
    scripts = [c for c in query["bool"]["filter"] if "script" in c]
    assert len(scripts) == 1
    script = scripts[0]["script"]["script"]
    assert script["source"] == SCRIPT_SOURCE
    for value in ("$.a", "$.b", "4321"):
        assert value not in script["source"]
        assert value in json.dumps(script["params"])
    with pytest.raises(FilterError, match="painless"):
        compile_filter(parse_filter(text), allow_scripts=False)


def test_custom_field_name() -> None:
    assert filter_query("exists('$.a')", "md") == {"term": {"md.p": "$.a"}}


def test_nested_predicate_comparisons_compile_in_linear_size() -> None:
    """Constructs that would duplicate an operand per level (a predicate compared with a constant needs
    both its TRUE and FALSE queries; IN repeats its operand) must not blow up when nested."""
    nested_cmp, nested_in, nested_date = "exists('$.a')", "exists('$.a')", "CAST(val('$.d') AS DATE)"
    for _ in range(40):
        nested_cmp = f"({nested_cmp}) <= TRUE"
        nested_in = f"({nested_in}) IN (TRUE, FALSE, NULL)"
    for _ in range(20):
        nested_date = (
            f"CAST(val('$.d') AS DATE) + CAST(({nested_date}) IN (CAST('2024-01-01' AS DATE), "
            "CAST('2024-01-01' AS TIMESTAMP)) AS INTEGER)"
        )
    for text in (nested_cmp, nested_in, f"({nested_date}) IS NULL"):
        expr = parse_filter(text)
        assert len(json.dumps(compile_filter(expr))) < 50_000
        evaluate(expr, {"a": 1, "d": "2024-01-01"})
