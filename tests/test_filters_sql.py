"""The PostgreSQL oracle of the filter differential (tests/filters_sql.py) checked on its own: hand-written
expectations, its division rule against the standard library's decimal128, and its exclusions. Needs only
PostgreSQL (Debian's ``postgresql`` package), no OpenSearch node."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.filters_sql import PRELUDE, Unsupported, case_divergence, exclusion, translate
from tests.postgres import MISSING, PostgresCluster, find_bindir

NOW = dt.datetime(2025, 3, 15, 12, 30, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def conn(postgres: PostgresCluster) -> Iterator[psycopg.Connection]:
    with postgres.connect() as c:
        c.execute(PRELUDE)
        yield c


def run(conn: psycopg.Connection, text: str, doc: Any) -> bool | None:
    sql = translate(text, NOW).sql.replace("%", "%%")
    row = conn.execute(
        f"SELECT {sql} FROM (SELECT %s::jsonb AS m) AS d",
        [None if doc is None else Jsonb(doc)],
    ).fetchone()
    assert row is not None
    return row[0]


CASES: list[tuple[str, Any, bool | None]] = [
    # spec §7.5
    ("lower(CAST(val('$.primaryLocation.city') AS TEXT)) = 'manila'", {"primaryLocation": {"city": "Manila"}},
     True),
    ("CAST(val('$.effectiveDate') AS DATE) >= CAST('2024-10-01' AS DATE)", {"effectiveDate": "2024-09-30"},
     False),
    ("EXTRACT(YEAR FROM CAST(val('$.effectiveDate') AS DATE)) = 2024", {"effectiveDate": "2024-02-29"}, True),
    ("CAST(val('$.score') AS INTEGER) >= 80 AND NOT (CAST(val('$.status') AS TEXT) = 'archived')",
     {"score": 79.5, "status": "open"}, True),
    ("CAST(val('$.score') AS INTEGER) >= 80 AND NOT (CAST(val('$.status') AS TEXT) = 'archived')",
     {"score": 79.49}, False),
    ("CAST(val('$.title') AS TEXT) ILIKE '%ai%'", {"title": "An AI story"}, True),
    ("'tag1' IN vals('$.tags')", {"tags": ["tag0", "tag1"]}, True),
    ("'tag1' IN vals('$.tags')", {}, False),
    ("exists('$.reviewers[*]') OR val('$.owner') IS NULL", {"reviewers": [], "owner": None}, True),
    ("exists('$.reviewers[*]') OR val('$.owner') IS NULL", {"reviewers": [], "owner": "x"}, False),
    ("CAST(val('$.team') AS TEXT) IN ('blue', 'red')", {"team": "red"}, True),
    ("CAST(val('$.owner') AS TEXT) = 'o\\'brien'", {"owner": "o'brien"}, True),
    ("CAST(val('$.owner') AS TEXT) = 'O''Brien'", {"owner": "O'Brien"}, True),
    # a mismatched CAST is NULL; JSON null is SQL NULL; three-valued NOT
    ("CAST(val('$.flag') AS TEXT) = 'true'", {"flag": True}, None),
    ("CAST(val('$.flag') AS BOOLEAN) = true", {"flag": True}, True),
    ("NOT (CAST(val('$.n') AS NUMERIC) > 1)", {"n": None}, None),
    ("CAST(val('$.n') AS NUMERIC) IN (1, NULL)", {"n": 2}, None),
    ("CAST(val('$.n') AS NUMERIC) IN (1, NULL)", {"n": 1.0}, True),
    # paths: no lax unwrapping, quoted names, [*] over elements that lack the key
    ("CAST(val('$.a.b') AS NUMERIC) = 1", {"a": [{"b": 1}]}, None),
    ("CAST(val('$.\"x.y\"') AS NUMERIC) = 1", {"x.y": 1, "x": {"y": 2}}, True),
    ("CAST(val('$[\"x.y\"]') AS NUMERIC) = 2", {"x.y": 1}, False),
    ("vals('$.a[*].k') CONTAINS [1, 2]", {"a": [{"k": 1}, 5, {"k": [2]}]}, True),
    ("exists('$')", None, False),
    ("exists('$')", {}, True),
    # numbers: exact, INTEGER / INTEGER truncates, / by zero is NULL, decimal128 division
    ("CAST(val('$.n') AS NUMERIC) = 9007199254740993", {"n": 2**53 + 1}, True),
    ("7 / (-2) = (-3)", {}, True),
    ("CAST(val('$.n') AS NUMERIC) / 0 IS NULL", {"n": 1}, True),
    ("1.0 / 3 = 0.3333333333333333333333333333333333", {}, True),
    ("CAST(CAST(val('$.n') AS NUMERIC) * 2 AS TEXT) = '5'", {"n": 2.5}, True),
    # dates: shape, calendar, zones, day arithmetic, range
    ("CAST(val('$.d') AS DATE) IS NULL", {"d": "2024-02-30"}, True),
    ("CAST(val('$.d') AS DATE) IS NULL", {"d": "today"}, True),
    ("CAST(val('$.d') AS TIMESTAMP) = '2024-10-01T07:00:00Z'", {"d": "2024-10-01 12:30+05:30"}, True),
    ("CAST(val('$.d') AS DATE) = '2024-10-01'", {"d": "2024-10-01 23:59:59.999999+05:30"}, True),
    ("CAST(val('$.d') AS DATE) + 1 IS NULL", {"d": "9999-12-31"}, True),
    ("CURRENT_DATE - 365 = '2024-03-15'", {}, True),
    ("CAST(CAST(val('$.d') AS TIMESTAMP) AS TEXT) = '1970-01-01 00:00:00.5'", {"d": "1970-01-01T00:00:00.5"},
     True),
    # LIKE: escapes, one code point per _, an invalid computed pattern is NULL
    ("CAST(val('$.s') AS TEXT) LIKE '100\\%'", {"s": "100%"}, True),
    ("CAST(val('$.s') AS TEXT) LIKE '_'", {"s": "😀"}, True),
    ("CAST(val('$.s') AS TEXT) LIKE CAST(val('$.p') AS TEXT)", {"s": "a", "p": "a\\"}, None),
    ("CAST(val('$.s') AS TEXT) LIKE CAST(val('$.p') AS TEXT)", {"s": "ab", "p": "a\\"}, None),
    ("CAST(val('$.s') AS TEXT) LIKE CAST(val('$.p') AS TEXT)", {"s": "a\\", "p": "a\\\\"}, True),
    ("'ab' LIKE 'a' || '\\\\'", {}, None),
    # collections: UNKNOWN for val() that is not an array, element equality of JSON scalars only
    ("'a' IN val('$.t')", {"t": "a"}, None),
    ("vals('$.t') OVERLAPS [NULL]", {"t": [None]}, True),
    ("vals('$.t') CONTAINS vals('$.u')", {"t": [{"k": 1}], "u": [{"k": 1}]}, False),
    ("vals('$.t') CONTAINS CAST('2024-10-01' AS DATE)", {"t": ["2024-10-01T00:00:00"]}, True),
    ("vals('$.t') IS NULL", {}, False),
]  # fmt: skip


@pytest.mark.parametrize(("text", "doc", "expected"), CASES)
def test_postgres_oracle_by_hand(
    conn: psycopg.Connection, text: str, doc: Any, expected: bool | None
) -> None:
    assert run(conn, text, doc) is expected


def test_division_rule_is_decimal128(conn: psycopg.Connection) -> None:
    """mp_div (NUMERIC /) against the standard library: 34 significant digits, ties to even."""
    rng = random.Random(7)
    d128 = Context(prec=34, rounding=ROUND_HALF_EVEN)
    pairs = [(Decimal(1), Decimal(3)), (Decimal("1e-300"), Decimal(7)), (Decimal(2) ** 120 + 1, Decimal(4))]
    for _ in range(400):
        a = Decimal(rng.randint(-(10 ** rng.randint(1, 40)), 10**40)).scaleb(rng.randint(-60, 60))
        b = Decimal(rng.choice([1, -1]) * rng.randint(1, 10 ** rng.randint(1, 40))).scaleb(
            rng.randint(-60, 60)
        )
        pairs.append((a, b))
    pairs += [(Decimal(10**35 + 5), Decimal(10)), (Decimal(10**35 + 15), Decimal(10))]  # exact ties
    rows = conn.execute(
        "SELECT mp_div(a, b) FROM unnest(%s::numeric[], %s::numeric[]) AS t(a, b)",
        [[a for a, _ in pairs], [b for _, b in pairs]],
    ).fetchall()
    for (a, b), (got,) in zip(pairs, rows, strict=True):
        assert got == d128.divide(a, b), (a, b)


def test_case_divergence_is_small_and_known(conn: psycopg.Connection) -> None:
    """The cluster maps case per code point with glibc's tables (LC_CTYPE C.UTF-8): it differs from the
    documented mapping only where glibc applies Unicode's simple upper-case mapping to Greek letters with
    ypogegrammeni (memproxy keeps them, since their full mapping expands). A cluster whose ctype were C
    would diverge on thousands of code points and exclude most case-folding pairs."""
    divergent = case_divergence(conn)
    assert {"\u1f80", "\u1fb3", "\u1fc3", "\u1ff3"} <= divergent
    assert len(divergent) < 100, sorted(divergent)[:50]


def test_exclusions_name_their_reason() -> None:
    tr = translate("upper(CAST(val('$.s') AS TEXT)) = 'X'", NOW)
    assert exclusion(tr, {"s": "\u1fb3"}, frozenset({"\u1fb3"})) == "case-mapping"
    assert exclusion(tr, {"s": "x"}, frozenset({"\u1fb3"})) is None
    assert exclusion(tr, {"s": "a\x00"}, frozenset()) == "nul"
    dates = translate("CAST(val('$.d') AS TIMESTAMP) IS NULL", NOW)
    assert exclusion(dates, {"d": "2024-10-01T24:00:00"}, frozenset()) == "datetime-input"
    assert exclusion(dates, {"d": "2024-10-01T12:00:00.1234567"}, frozenset()) == "datetime-input"
    assert exclusion(dates, {"d": "2024-10-01T12:00:00+16:00"}, frozenset()) == "datetime-input"
    assert exclusion(dates, {"d": "2024-10-01T23:59:59.999999+05:30"}, frozenset()) is None
    assert exclusion(tr, {"d": "2024-10-01T24:00:00"}, frozenset()) is None  # the filter reads no dates


def test_unsupported_constructs_raise() -> None:
    for text in ["length(CAST(val('$.s') AS TEXT)) = 1", "val('$.a') = 'x'", "vals('$.a') OVERLAPS 'x'"]:
        with pytest.raises(Unsupported):
            translate(text, NOW)


def test_missing_postgres_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("PG_BINDIR", str(tmp_path))
    assert find_bindir() is None
    assert "postgresql" in MISSING and "apt-get install" in MISSING
