"""Differential proof, three ways: for random (filter, metadata) pairs the documents OpenSearch returns for
``compile_filter(f)`` are exactly those ``evaluate(f, metadata)`` accepts, and exactly those a real PostgreSQL
selects with the filter translated to SQL over a ``jsonb`` column by ``tests/filters_sql.py`` (its own parser,
typing and SQL: nothing shared with ``proxy.filters``). Also a parser fuzz.

FILTER_DIFF_PAIRS (default 60000) sets how many (filter, document) pairs the differential test checks;
every filter of a round runs against every document of that round's corpus. PostgreSQL comes from Debian's
``postgresql`` package (``tests/postgres.py``); without it the test fails and says so.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from opensearchpy import OpenSearch
from psycopg.types.json import Jsonb

from proxy.errors import BadRequest
from proxy.filters import (
    FilterError,
    compile_filter,
    evaluate,
    index_metadata,
    parse_filter,
    render_metadata_mapping,
)
from tests.filters_sql import (
    EXCLUSIONS,
    PRELUDE,
    Unsupported,
    case_divergence,
    exclusion,
    jsonb_storable,
    translate,
)
from tests.postgres import PostgresCluster

NOW = dt.datetime(2025, 3, 15, 12, 30, tzinfo=dt.UTC)
DOCS_PER_ROUND = 30
FILTERS_PER_ROUND = 40
KNN_EVERY = 3  # every third filter also runs inside a knn query's filter
TARGET_PAIRS = int(os.environ.get("FILTER_DIFF_PAIRS", "60000"))
DIM = 4

# --- metadata --------------------------------------------------------------------------------------------
STRINGS = [
    "", "a", "A", "abc", "ABC", "Manila", "manila", "MANILA", "o'brien", "O'Brien", "100%", "a_b", "a%b",
    "back\\slash", "İstanbul", "istanbul", "\u0131", "straße", "STRASSE", "ß", "ǅ", "ς", "Σ", "😀", "\uffff",
    "日本", "tag1", "tag2", "red", "blue", "ai", "An AI story", "true", "1", "1.5", "-0", " 7 ", "x\ny",
    "nul\x00in", "2024-10-01", "2024-10-01T12:30:00Z", "2024-10-01 23:59:59.999999+05:30", "2024-02-30",
    "2023-12-31T23:00:00-02:00", "2024-02-29", "0001-01-01", "9999-12-31T23:59:59Z", "1970-01-01T00:00:00.5",
    "2024-10-01T24:00:00", "2025-03-15", "archived",
]  # fmt: skip
NUMBERS: list[Any] = [
    0, -0.0, 1, -1, 2, 3, 7, -7, 2.5, -2.5, 0.5, -0.5, -1.5, 1.5, 79.5, 80, 80.49999, 0.1, 1e-7, 1e16, 1.0,
    2**53, 2**53 + 1, 2**63 - 1, -(2**63), 10**20, 1.5e300, 12345678901234567890123, 2024, 1.25, -1e-300,
]  # fmt: skip
PATHS = [
    "$.a", "$.b", "$.s", "$.d", "$.tags", "$.tags[0]", "$.tags[1]", "$.tags[*]", "$.c", "$.c.d", "$.c.e",
    "$.c.e[0]", "$.c.e[*]", '$."x.y"', '$["x.y"]', "$.Ünï", "$.missing", "$.tags[0].k", "$.c.e[*].k",
    "$.m[0][1]", "$.m[*][*]", "$.m[1][*]", "$",
]  # fmt: skip
SCALAR_PATHS = [p for p in PATHS if "*" not in p]

MANTISSAS = ["1", "10", "19", "2", "25", "255", "5", "5001", "51", "9", "99", "45", "4999"]


@st.composite
def decimal_text(draw: Any) -> str:
    """Decimals that share digit prefixes and sit on rounding boundaries, where an order-preserving encoding
    or a rounding rule would go wrong first."""
    digits = draw(st.sampled_from(MANTISSAS))
    exp = draw(st.integers(-3, 3))
    sign = draw(st.sampled_from(["", "-"]))
    return f"{sign}{Decimal(digits).scaleb(exp - len(digits) + 1)}"


@st.composite
def number_palette(draw: Any) -> list[str]:
    """A round's numbers: few exponents and mostly negative, so prefix-sharing mantissas meet often."""
    exps = draw(st.lists(st.integers(-3, 3), min_size=1, max_size=2))
    out = []
    for _ in range(draw(st.integers(3, 7))):
        digits = draw(st.sampled_from(MANTISSAS))
        sign = draw(st.sampled_from(["", "-", "-"]))
        out.append(f"{sign}{Decimal(digits).scaleb(draw(st.sampled_from(exps)) - len(digits) + 1)}")
    return out


def as_json_number(text: str) -> Any:
    d = Decimal(text)
    return int(d) if d == d.to_integral_value() and "E" not in text and "." not in text else float(d)


def writable(s: str) -> bool:
    """Can this string be written as a filter literal? (Raw control characters cannot.)"""
    return not any((ord(c) < 0x20 and c not in "\n\r\t\b\f") or c == "\x7f" for c in s)


DATES = ["2024-10-01", "2024-02-29", "2023-12-31", "0001-01-01", "9999-12-31", "1970-01-01", "2025-03-15"]
TIMESTAMPS = [
    *DATES,
    "2024-10-01T12:30:00Z",
    "2024-10-01 23:59:59.999999+05:30",
    "2024-10-01T00:00:00-02:00",
    "1970-01-01T00:00:00.5",
    "2025-03-15T12:30:00",
    "2024-12-31T23:30:00-01:00",
    "2025-01-01T00:00:00Z",
]
safe_chars = st.characters(codec="utf-8", exclude_categories=["Cs"])
any_string = st.one_of(st.sampled_from(STRINGS), st.text(safe_chars, max_size=4))
# One palette per round (st.shared): documents and filters draw many of their values from it, so that
# comparisons often meet equal, prefix-sharing or neighbouring values instead of missing everything.
PALETTE = st.shared(
    st.fixed_dictionaries(
        {
            "numbers": number_palette(),
            "strings": st.lists(any_string.filter(writable), min_size=3, max_size=6),
            "dates": st.lists(st.sampled_from(TIMESTAMPS), min_size=2, max_size=4),
        }
    ),
    key="palette",
)
pal_number = PALETTE.flatmap(lambda p: st.sampled_from(p["numbers"]))
pal_string = PALETTE.flatmap(lambda p: st.sampled_from(p["strings"]))
pal_date = PALETTE.flatmap(lambda p: st.sampled_from(p["dates"]))
any_number = st.one_of(
    st.sampled_from(NUMBERS),
    pal_number.map(as_json_number),
    pal_number.map(as_json_number),
    pal_number.map(as_json_number),
    st.integers(-100, 100),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.integers(-(2**70), 2**70),
)
scalar = st.one_of(
    any_string, pal_string, pal_string, pal_date, any_number, any_number, st.booleans(), st.none()
)
small_obj = st.fixed_dictionaries({}, optional={"k": scalar, "z": scalar})
element = st.one_of(scalar, scalar, small_obj, st.lists(scalar, max_size=2))
array = st.lists(element, max_size=4)
value = st.one_of(scalar, scalar, scalar, array)


@st.composite
def document(draw: Any) -> Any:
    """Mostly objects over a fixed key vocabulary (each key usually present, with a value of any type), so
    filters over those paths meet every type, nulls and missing keys; sometimes a bare scalar or array."""
    shape = draw(st.integers(0, 19))
    if shape == 0:
        return draw(scalar)
    if shape == 1:
        return draw(array)
    if shape == 2:
        return {}
    fields = {
        "a": value,
        "b": value,
        "s": st.one_of(any_string, pal_string, value),
        "d": st.one_of(pal_date, value),
        "tags": st.one_of(
            st.lists(st.one_of(st.sampled_from(["tag1", "tag2", "red", "A", "a"]), scalar)), value
        ),
        "c": st.fixed_dictionaries({}, optional={"d": value, "e": array}),
        "x.y": value,
        "Ünï": value,
        "m": st.lists(st.lists(scalar, max_size=3), max_size=3),
    }
    return {k: draw(v) for k, v in fields.items() if draw(st.integers(0, 9)) < 7}


metadata = document()


# --- filters ---------------------------------------------------------------------------------------------
def kw(draw: Any, word: str) -> str:
    return draw(st.sampled_from([word.upper(), word.lower(), word.title()]))


def sp(draw: Any) -> str:
    return draw(st.sampled_from([" "] * 12 + ["  ", "\n", "\t", " -- note\n", " --\n"]))


def sql_string(draw: Any, s: str) -> str:
    out = []
    for i, c in enumerate(s):
        if c == "'":
            out.append(draw(st.sampled_from(["''", "\\'"])))
        elif c == "\\":
            nxt = s[i + 1] if i + 1 < len(s) else ""
            verbatim_ok = nxt and nxt not in "'\\\"nrtbf" and ord(nxt) >= 0x20 and nxt != "\x7f"
            out.append(draw(st.sampled_from(["\\\\", "\\"])) if verbatim_ok else "\\\\")
        else:
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}.get(c, c))
    return "'" + "".join(out) + "'"


def number_literal(draw: Any, integral: bool = False) -> str:
    if draw(st.integers(0, 3)) == 0:
        n = draw(st.integers(-3, 7))  # rounding boundaries, weekdays, day offsets
        return f"({n})" if n < 0 else str(n)
    if integral:
        n = draw(
            st.one_of(st.integers(-100, 2100), st.sampled_from([0, 1, 2, 79, 80, 2024, 2**53 + 1, 10**20]))
        )
        return f"({n})" if n < 0 else str(n)
    v = draw(
        st.one_of(
            st.sampled_from(NUMBERS),
            st.integers(-50, 50),
            st.decimals(-1000, 1000, places=3),
            decimal_text(),
            pal_number,
            pal_number,
            pal_number,
        )
    )
    text = repr(v) if isinstance(v, float) else str(v)
    if text.startswith("-"):
        return "(" + text + ")"
    return text


@st.composite
def path_lit(draw: Any, scalar_only: bool = False) -> str:
    p = draw(st.sampled_from(SCALAR_PATHS if scalar_only else PATHS))
    return sql_string(draw, p)


TYPES = ["TEXT", "NUMERIC", "INTEGER", "BOOLEAN", "DATE", "TIMESTAMP"]


ALIASES = {
    "TEXT": ["TEXT", "VARCHAR"],
    "NUMERIC": ["NUMERIC", "DECIMAL"],
    "INTEGER": ["INTEGER", "INT", "BIGINT"],
    "BOOLEAN": ["BOOLEAN", "BOOL"],
    "DATE": ["DATE"],
    "TIMESTAMP": ["TIMESTAMP", "TIMESTAMPTZ"],
}


def access(draw: Any, t: str) -> str:
    p = draw(path_lit(scalar_only=True))
    name = draw(st.sampled_from(ALIASES[t]))
    inner = f"{kw(draw, 'val')}({p})"
    if draw(st.integers(0, 7)) == 0:
        # a subscript on val() extends its path: val('$.tags')[0] is val('$.tags[0]')
        inner = f"{kw(draw, 'val')}({draw(path_lit(scalar_only=True))})[{draw(st.integers(0, 1))}]"
    if t in ("DATE", "TIMESTAMP") and draw(st.booleans()):
        inner = f"CAST({inner} AS TEXT)"
    return f"{kw(draw, 'cast')}({inner}{sp(draw)}{kw(draw, 'as')} {name})"


@st.composite
def text_expr(draw: Any, depth: int, case: str | None = None) -> str:
    choice = draw(st.integers(0, 9 if depth > 0 else 3))
    if choice <= 1:
        return access(draw, "TEXT")
    if choice == 2:
        s = draw(st.one_of(any_string.filter(writable), pal_string, pal_string))
        return sql_string(draw, s)
    if choice == 3:
        return kw(draw, "null") if draw(st.integers(0, 5)) == 0 else access(draw, "TEXT")
    if choice in (4, 5):
        fn = case or draw(st.sampled_from(["lower", "upper"]))
        return f"{kw(draw, fn)}({draw(text_expr(depth - 1, fn))})"
    if choice == 6:
        return f"{draw(text_expr(depth - 1, case))}{sp(draw)}||{sp(draw)}{draw(text_expr(depth - 1, case))}"
    src = draw(st.sampled_from(["NUMERIC", "BOOLEAN", "DATE", "TIMESTAMP", "INTEGER"]))
    return f"CAST({draw(typed_expr(src, depth - 1))} AS TEXT)"


@st.composite
def numeric_expr(draw: Any, depth: int, integral: bool = False) -> str:
    choice = draw(st.integers(0, 9 if depth > 0 else 2))
    if choice <= 1:
        return access(draw, "INTEGER" if integral or draw(st.booleans()) else "NUMERIC")
    if choice == 2:
        return number_literal(draw, integral)
    if choice == 3:
        op = draw(st.sampled_from(["+", "-", "*", "/", "%"]))
        left, right = draw(numeric_expr(depth - 1, integral)), draw(numeric_expr(depth - 1, integral))
        return f"({left}{sp(draw)}{op}{sp(draw)}{right})"
    if choice == 4:
        return f"-({draw(numeric_expr(depth - 1, integral))})"
    if choice == 5 and not integral:
        src = draw(st.sampled_from(["DATE", "TIMESTAMP"]))
        units = ["YEAR", "QUARTER", "MONTH", "DAY", "DOW", "ISODOW", "DOY", "EPOCH"]
        if src == "TIMESTAMP":
            units += ["HOUR", "MINUTE", "SECOND"]
        unit = draw(st.sampled_from(units))
        return f"{kw(draw, 'extract')}({unit} {kw(draw, 'from')} {draw(typed_expr(src, depth - 1))})"
    if choice == 6:
        return f"CAST({draw(typed_expr('BOOLEAN', depth - 1))} AS INTEGER)"
    if choice == 7:
        return (
            f"({draw(typed_expr('DATE', depth - 1, False))} - {draw(typed_expr('DATE', depth - 1, False))})"
        )
    if choice == 8:
        return f"CAST({draw(numeric_expr(depth - 1))} AS INTEGER)"
    return (
        kw(draw, "null")
        if draw(st.integers(0, 4)) == 0
        else access(draw, "INTEGER" if integral else "NUMERIC")
    )


@st.composite
def typed_expr(draw: Any, t: str, depth: int, nullable: bool = True) -> str:
    if t == "TEXT":
        return draw(text_expr(depth))
    if t in ("NUMERIC", "INTEGER"):
        return draw(numeric_expr(depth, integral=t == "INTEGER"))
    if t == "BOOLEAN":
        choice = draw(st.integers(0, 4 if depth > 0 else 1))
        if choice == 0:
            return access(draw, "BOOLEAN")
        if choice == 1:
            return kw(draw, draw(st.sampled_from(["true", "false", "null"])))
        if choice == 2:
            return f"CAST({draw(numeric_expr(depth - 1, integral=True))} AS BOOLEAN)"
        return f"({draw(bool_expr(depth - 1))})"
    if t == "DATE":
        choice = draw(st.integers(0, 6 if depth > 0 else 2))
        if choice <= 1:
            return access(draw, "DATE")
        if choice == 2:
            return f"CAST({sql_string(draw, draw(st.one_of(st.sampled_from(TIMESTAMPS), pal_date)))} AS DATE)"
        if choice == 3:
            op = draw(st.sampled_from(["+", "-"]))
            days = draw(numeric_expr(depth - 1, integral=True))
            return f"({draw(typed_expr('DATE', depth - 1, False))} {op} {days})"
        if choice == 4:
            return f"({kw(draw, 'current_date')} - {draw(st.integers(0, 4000))})"
        if choice == 5 or not nullable:
            return f"CAST({draw(typed_expr('TIMESTAMP', depth - 1))} AS DATE)"
        return kw(draw, "null")
    if t == "TIMESTAMP":
        choice = draw(st.integers(0, 4 if depth > 0 else 2))
        if choice <= 1:
            return access(draw, "TIMESTAMP")
        if choice == 2:
            text = sql_string(draw, draw(st.one_of(st.sampled_from(TIMESTAMPS), pal_date)))
            return f"CAST({text} AS TIMESTAMP)"
        if choice == 3:
            return f"CAST({draw(typed_expr('DATE', depth - 1))} AS TIMESTAMP)"
        return draw(st.sampled_from(["CURRENT_TIMESTAMP", "current_timestamp", "now()", "NOW()"]))
    raise AssertionError(t)


@st.composite
def comparand(draw: Any, t: str, depth: int) -> str:
    """An operand for a comparison with a ``t`` value: untyped string literals coerce to DATE etc."""
    if t in ("DATE", "TIMESTAMP") and draw(st.integers(0, 3)) == 0:
        return sql_string(
            draw, draw(st.one_of(st.sampled_from(TIMESTAMPS if t == "TIMESTAMP" else DATES), pal_date))
        )
    if t == "BOOLEAN" and draw(st.integers(0, 5)) == 0:
        return sql_string(draw, draw(st.sampled_from(["true", "f", "yes", "0"])))
    if t in ("NUMERIC", "INTEGER") and draw(st.integers(0, 8)) == 0:
        return sql_string(draw, draw(st.sampled_from(["80", "2.5", "-1", "1e3"])))
    other = {
        "DATE": ["DATE", "TIMESTAMP"],
        "TIMESTAMP": ["TIMESTAMP", "DATE"],
        "NUMERIC": ["NUMERIC", "INTEGER"],
        "INTEGER": ["INTEGER", "NUMERIC"],
    }.get(t, [t])
    return draw(typed_expr(draw(st.sampled_from(other)), depth))


PATTERNS = ["%", "a%", "%a", "_", "%\\%%", "M%la", "%ß%", "%😀%", "\\_%", "", "%ai%", "_%_", "a\\b", "%\\\\%",
            "%'%", "İ%", "t_g_", "%1", "%%%", "2024-%"]  # fmt: skip


@st.composite
def collection(draw: Any, depth: int) -> str:
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return f"{kw(draw, 'vals')}({draw(path_lit())})"
    if choice == 1:
        return f"{kw(draw, 'val')}({draw(path_lit(scalar_only=True))})"
    items = draw(st.lists(st.one_of(
        st.sampled_from(["tag1", "red", "a", "A", "2024-10-01"]).map(lambda s: sql_string(draw, s)),
        st.sampled_from(["1", "2.5", "80", "(-1)", "TRUE", "false", "NULL", "2024", "1e16"]),
    ), max_size=4))  # fmt: skip
    return "[" + ", ".join(items) + "]"


def simple_access(draw: Any, t: str) -> str:
    """A stored value through one typed view: what plain DSL handles."""
    choice = draw(st.integers(0, 3))
    if t == "TEXT" and choice >= 2:
        return f"{kw(draw, draw(st.sampled_from(['lower', 'upper'])))}({access(draw, 'TEXT')})"
    if t == "NUMERIC" and choice == 2:
        src = draw(st.sampled_from(["DATE", "TIMESTAMP"]))
        return f"{kw(draw, 'extract')}(YEAR {kw(draw, 'from')} {access(draw, src)})"
    if t == "NUMERIC" and choice == 3:
        return f"CAST({access(draw, 'NUMERIC')} AS INTEGER)"
    return access(draw, t)


def const_expr(draw: Any, t: str) -> str:
    if draw(st.integers(0, 15)) == 0:
        return kw(draw, "null")
    if t == "TEXT":
        return sql_string(draw, draw(st.one_of(pal_string, pal_string, any_string.filter(writable))))
    if t in ("NUMERIC", "INTEGER"):
        if draw(st.integers(0, 9)) == 0:
            return sql_string(draw, draw(pal_number))
        return number_literal(draw)
    if t == "BOOLEAN":
        return draw(st.sampled_from(["TRUE", "false", "'yes'", "'f'"]))
    pool = st.one_of(pal_date, pal_date, st.sampled_from(TIMESTAMPS if t == "TIMESTAMP" else DATES))
    choice = draw(st.integers(0, 3))
    if choice <= 1:
        return sql_string(draw, draw(pool))
    if choice == 2:
        return f"CAST({sql_string(draw, draw(pool))} AS {t})"
    if t == "DATE":
        return f"{kw(draw, 'current_date')} - {draw(st.integers(0, 20000))}"
    return kw(draw, "current_timestamp")


def array_literal(draw: Any) -> str:
    strings = pal_string.map(lambda s: sql_string(draw, s))
    numbers = pal_number.map(lambda n: f"({n})" if n.startswith("-") else n)
    items = draw(
        st.lists(st.one_of(strings, numbers, st.sampled_from(["TRUE", "false", "NULL"])), max_size=4)
    )
    return "[" + ", ".join(items) + "]"


@st.composite
def simple_pred(draw: Any) -> str:
    t = draw(st.sampled_from(TYPES))
    kind = draw(st.integers(0, 11))
    neg = kw(draw, "not") + " " if draw(st.booleans()) else ""
    if kind <= 4:
        op = draw(st.sampled_from(["=", "==", "!=", "<>", "<", "<=", ">", ">="]))
        left, right = simple_access(draw, t), const_expr(draw, t)
        if draw(st.booleans()):
            left, right = right, left
        return f"{left}{sp(draw)}{op}{sp(draw)}{right}"
    if kind == 5:
        word = kw(draw, draw(st.sampled_from(["like", "ilike"])))
        subject = simple_access(draw, "TEXT")
        if word.lower() == "ilike" and subject.lower().startswith("upper"):
            subject = access(draw, "TEXT")
        base = draw(pal_string)
        stem = base[: draw(st.integers(0, len(base)))]
        if (len(stem) - len(stem.rstrip("\\"))) % 2:
            stem += "\\"
        template = draw(st.sampled_from(["{}%", "%{}", "{}_", "%{}%", "{}", "_{}%"]))
        pattern = draw(st.one_of(st.just(template.format(stem)), st.sampled_from(PATTERNS)))
        return f"{subject} {neg}{word} {sql_string(draw, pattern)}"
    if kind == 6:
        items = [const_expr(draw, t) for _ in range(draw(st.integers(1, 4)))]
        return f"{simple_access(draw, t)} {neg}{kw(draw, 'in')} ({', '.join(items)})"
    if kind == 7:
        if draw(st.booleans()):
            coll = f"{kw(draw, 'vals')}({draw(path_lit())})"
            if draw(st.booleans()):
                coll = f"{kw(draw, 'val')}({draw(path_lit(scalar_only=True))})"
            return f"{const_expr(draw, t)} {neg}{kw(draw, 'in')} {coll}"
        return f"{simple_access(draw, t)} {neg}{kw(draw, 'in')} {array_literal(draw)}"
    if kind == 8:
        what = draw(st.integers(0, 2))
        if what == 0:
            return f"{kw(draw, 'exists')}({draw(path_lit())})"
        subject = (
            f"{kw(draw, 'val')}({draw(path_lit(scalar_only=True))})" if what == 1 else simple_access(draw, t)
        )
        return f"{subject} {kw(draw, 'is')} {neg}{kw(draw, 'null')}"
    if kind == 9:
        return access(draw, "BOOLEAN")
    coll = f"{kw(draw, draw(st.sampled_from(['vals', 'val'])))}({draw(path_lit(scalar_only=True))})"
    word = kw(draw, draw(st.sampled_from(["contains", "overlaps"])))
    other = array_literal(draw) if word.lower() == "overlaps" or draw(st.booleans()) else const_expr(draw, t)
    if word.lower() == "overlaps" and draw(st.booleans()):
        coll, other = other, coll
    return f"{coll} {word} {other}"


@st.composite
def bool_expr(draw: Any, depth: int) -> str:
    """Mostly stored-value-vs-constant predicates (the DSL paths) under AND/OR/NOT, some anything-goes."""
    choice = draw(st.integers(0, 9))
    if depth > 0 and choice <= 2:
        if choice == 0:
            return f"{kw(draw, 'not')} ({draw(bool_expr(depth - 1))})"
        items = draw(st.lists(bool_expr(depth - 1), min_size=2, max_size=3))
        word = kw(draw, draw(st.sampled_from(["and", "or"])))
        return "(" + f"{sp(draw)}{word}{sp(draw)}".join(items) + ")"
    if choice <= 6:
        return draw(simple_pred())
    return draw(general_pred(max(depth - 1, 0)))


@st.composite
def general_pred(draw: Any, depth: int) -> str:
    choice = draw(st.integers(0, 16 if depth > 0 else 9))
    if choice <= 3:
        t = draw(st.sampled_from(TYPES))
        op = draw(st.sampled_from(["=", "==", "!=", "<>", "<", "<=", ">", ">="]))
        left = draw(typed_expr(t, max(depth - 1, 0)))
        right = draw(comparand(t, max(depth - 1, 0)))
        if draw(st.booleans()):
            left, right = right, left
        return f"{left}{sp(draw)}{op}{sp(draw)}{right}"
    if choice == 4:
        word = kw(draw, draw(st.sampled_from(["like", "ilike"])))
        neg = kw(draw, "not") + " " if draw(st.booleans()) else ""
        how = draw(st.integers(0, 5))
        if how == 0:
            pattern = draw(text_expr(0))
        elif how <= 2:
            pattern = sql_string(draw, draw(st.sampled_from(PATTERNS)))
        else:
            base = draw(pal_string)
            stem = base[: draw(st.integers(0, len(base)))]
            if (len(stem) - len(stem.rstrip("\\"))) % 2:
                stem += "\\"  # a lone trailing escape would be an invalid pattern
            pattern = sql_string(
                draw, draw(st.sampled_from(["{}%", "%{}", "{}_", "%{}%", "{}"])).format(stem)
            )
        case = "lower" if word.lower() == "ilike" else None
        return f"{draw(text_expr(max(depth - 1, 0), case))} {neg}{word} {pattern}"
    if choice == 5:
        neg = kw(draw, "not") + " " if draw(st.booleans()) else ""
        if draw(st.booleans()):
            subject = f"{kw(draw, 'val')}({draw(path_lit(scalar_only=True))})"
        else:
            subject = draw(typed_expr(draw(st.sampled_from(TYPES)), max(depth - 1, 0)))
        return f"{subject} {kw(draw, 'is')} {neg}{kw(draw, 'null')}"
    if choice == 6:
        t = draw(st.sampled_from(TYPES))
        items = draw(st.lists(comparand(t, 0), min_size=1, max_size=4))
        neg = kw(draw, "not") + " " if draw(st.booleans()) else ""
        return f"{draw(typed_expr(t, max(depth - 1, 0)))} {neg}{kw(draw, 'in')} ({', '.join(items)})"
    if choice == 7:
        t = draw(st.sampled_from(TYPES))
        neg = kw(draw, "not") + " " if draw(st.booleans()) else ""
        coll = draw(collection(depth))
        if draw(st.integers(0, 4)) == 0 and not coll.startswith("["):
            coll = f"({coll})"  # x IN (vals(...)) is membership, not a one-item list
        return f"{draw(typed_expr(t, max(depth - 1, 0)))} {neg}{kw(draw, 'in')} {coll}"
    if choice == 8:
        right = draw(st.one_of(collection(depth), st.sampled_from(TYPES).flatmap(lambda t: typed_expr(t, 0))))
        return f"{draw(collection(depth))} {kw(draw, 'contains')} {right}"
    if choice == 9:
        if draw(st.booleans()):
            return f"{draw(collection(depth))} {kw(draw, 'overlaps')} {draw(collection(depth))}"
        return f"{kw(draw, 'exists')}({draw(path_lit())})"
    if choice in (10, 11):
        items = draw(st.lists(bool_expr(depth - 1), min_size=2, max_size=3))
        word = kw(draw, draw(st.sampled_from(["and", "or"])))
        return "(" + f"{sp(draw)}{word}{sp(draw)}".join(items) + ")"
    if choice == 12:
        return f"{kw(draw, 'not')} ({draw(bool_expr(depth - 1))})"
    if choice == 13:
        return kw(draw, draw(st.sampled_from(["true", "false", "null"])))
    if choice == 14:
        return access(draw, "BOOLEAN")
    if choice == 15:
        other = kw(draw, draw(st.sampled_from(["true", "false", "null"])))
        op = draw(st.sampled_from(["=", "<>", "<", ">=", ">"]))
        return f"({draw(bool_expr(depth - 1))}) {op} {other}"
    return (
        f"({draw(bool_expr(depth - 1))}) {draw(st.sampled_from(['=', '<>']))} ({draw(bool_expr(depth - 1))})"
    )


# Half the filters lean on stored-vs-constant predicates (plain DSL), half on anything the language allows
# (mostly the painless interpreter).
filters = st.one_of(bool_expr(3), general_pred(3))


# --- the node --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(opensearch_url: str) -> OpenSearch:
    return OpenSearch(opensearch_url, timeout=120)


@pytest.fixture(scope="module")
def diff_index(client: OpenSearch):
    name = f"test-filters-diff-{uuid.uuid4().hex[:10]}"
    client.indices.create(
        index=name,
        body={
            "settings": {
                "number_of_shards": 1,
                "number_of_replicas": 0,
                "index.knn": True,
                "refresh_interval": -1,
            },
            "mappings": {
                "properties": {
                    "round": {"type": "keyword"},
                    "metadata": {"type": "object", "enabled": False},
                    "metadata_index": render_metadata_mapping(),
                    "vec": {
                        "type": "knn_vector",
                        "dimension": DIM,
                        "method": {"name": "hnsw", "engine": "lucene", "space_type": "l2"},
                    },
                }
            },
        },
    )
    yield name
    client.indices.delete(index=name, ignore=[404])


class Stats:
    pairs = 0
    filters = 0
    knn_filters = 0
    rounds = 0
    matches = 0
    scripts = 0
    pg_pairs = 0
    pg_matches = 0
    pg_excluded: Counter[str] = Counter()
    pg_seconds = 0.0


class PostgresOracle:
    """The third opinion: the round's documents in a jsonb column, each filter translated to SQL."""

    def __init__(self, cluster: PostgresCluster) -> None:
        self.conn = cluster.connect()
        self.conn.execute(PRELUDE)
        self.conn.execute("CREATE TABLE IF NOT EXISTS docs (round text NOT NULL, id text NOT NULL, m jsonb)")
        self.conn.execute("CREATE INDEX IF NOT EXISTS docs_round ON docs (round)")
        self.divergent = case_divergence(self.conn)

    def check(
        self, rnd: str, ids: list[str], docs: list[Any], cases: list[tuple[str, Any, set[str]]]
    ) -> None:
        started = time.monotonic()
        storable = {i for i, doc in zip(ids, docs, strict=True) if jsonb_storable(doc)}
        with self.conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO docs (round, id, m) VALUES (%s, %s, %s)",
                [
                    (rnd, i, None if doc is None else Jsonb(doc))
                    for i, doc in zip(ids, docs, strict=True)
                    if i in storable
                ],
            )
        for text, _, expected in cases:
            try:
                tr = translate(text, NOW)
            except Unsupported as exc:
                pytest.fail(f"tests/filters_sql.py cannot translate {text!r}: {exc}")
            included = set()
            for doc_id, doc in zip(ids, docs, strict=True):
                reason = exclusion(tr, doc, self.divergent)
                if reason is None:
                    included.add(doc_id)
                else:
                    Stats.pg_excluded[reason] += 1
            assert included <= storable
            sql = f"SELECT id FROM docs WHERE round = '{rnd}' AND {tr.sql}"
            try:
                got = {row[0] for row in self.conn.execute(sql)} & included
            except Exception as exc:
                pytest.fail(f"PostgreSQL failed on filter {text!r}: {exc}\nSQL: {sql[:4000]}")
            want = expected & included
            if got != want:
                detail = [
                    {
                        "id": i,
                        "metadata": docs[ids.index(i)],
                        "evaluator and OpenSearch": i in want,
                        "PostgreSQL": i in got,
                    }
                    for i in sorted(got ^ want)
                ][:5]
                pytest.fail(
                    f"PostgreSQL disagrees with the evaluator and OpenSearch on filter {text!r}\n"
                    f"SQL: {tr.sql[:3000]}\n{json.dumps(detail, default=str, ensure_ascii=False)[:3000]}"
                )
            Stats.pg_pairs += len(included)
            Stats.pg_matches += len(want)
        self.conn.execute(f"DELETE FROM docs WHERE round = '{rnd}'")
        Stats.pg_seconds += time.monotonic() - started


@pytest.fixture(scope="module")
def pg_oracle(postgres: PostgresCluster) -> Iterator[PostgresOracle]:
    oracle = PostgresOracle(postgres)
    yield oracle
    oracle.conn.close()


def _run_round(
    client: OpenSearch, index: str, docs: list[Any], texts: list[str], pg: PostgresOracle | None = None
) -> None:
    rnd = uuid.uuid4().hex[:12]
    ids = [f"{rnd}-{i}" for i in range(len(docs))]
    rng = random.Random(rnd)
    actions: list[dict[str, Any]] = []
    for doc_id, doc in zip(ids, docs, strict=True):
        actions.append({"index": {"_index": index, "_id": doc_id}})
        vec = [rng.uniform(-1, 1) for _ in range(DIM)]
        actions.append({"round": rnd, "metadata": doc, "metadata_index": index_metadata(doc), "vec": vec})
    resp = client.bulk(body=actions, refresh=True)
    assert not resp["errors"], json.dumps([i for i in resp["items"] if "error" in i["index"]][:2])[:2000]

    cases = []
    for text in texts:
        expr = parse_filter(text)
        query = compile_filter(expr, now=NOW)
        expected = {
            doc_id for doc_id, doc in zip(ids, docs, strict=True) if evaluate(expr, doc, now=NOW) is True
        }
        cases.append((text, query, expected))
    body: list[dict[str, Any]] = []
    kinds = []
    for n, (_, query, _) in enumerate(cases):
        scoped = {"bool": {"filter": [{"term": {"round": rnd}}, query]}}
        body += [{"index": index}, {"query": scoped, "size": len(docs) + 5, "_source": False}]
        kinds.append((n, "bool"))
        if n % KNN_EVERY == 0:
            knn = {"vec": {"vector": [0.1] * DIM, "k": len(docs), "filter": scoped}}
            body += [{"index": index}, {"query": {"knn": knn}, "size": len(docs) + 5, "_source": False}]
            kinds.append((n, "knn"))
    responses = client.msearch(body=body)["responses"]
    for (n, kind), response in zip(kinds, responses, strict=True):
        text, query, expected = cases[n]
        if "error" in response:
            pytest.fail(f"{kind} query failed for filter {text!r}:\n{json.dumps(response['error'])[:3000]}")
        got = {hit["_id"] for hit in response["hits"]["hits"]}
        if got != expected:
            detail = [
                {
                    "id": i,
                    "metadata": docs[ids.index(i)],
                    "oracle": evaluate(parse_filter(text), docs[ids.index(i)], now=NOW),
                }
                for i in sorted(got ^ expected)
            ][:5]
            pytest.fail(
                f"{kind} mismatch for filter {text!r}\n"
                f"query: {json.dumps(query, ensure_ascii=False)[:3000]}\n"
                f"only in OpenSearch: {sorted(got - expected)}\nonly in oracle: {sorted(expected - got)}\n"
                f"{json.dumps(detail, default=str, ensure_ascii=False)[:3000]}"
            )
        if kind == "bool":
            Stats.pairs += len(docs)
            Stats.filters += 1
            Stats.matches += len(expected)
            Stats.scripts += '"script"' in json.dumps(query)
        else:
            Stats.knn_filters += 1
    if pg is not None:
        pg.check(rnd, ids, docs, cases)
    Stats.rounds += 1


def test_differential_filters_match_reference_evaluator(
    client: OpenSearch, diff_index: str, pg_oracle: PostgresOracle, capsys: pytest.CaptureFixture[str]
) -> None:
    rounds = max(1, math.ceil(TARGET_PAIRS / (DOCS_PER_ROUND * FILTERS_PER_ROUND)))
    started = time.monotonic()

    # Shrinking re-indexes a corpus per step and takes minutes; the failure message already names the
    # filter, the compiled query and the disagreeing documents. FILTER_DIFF_SHRINK=1 turns it back on.
    phases = list(Phase) if os.environ.get("FILTER_DIFF_SHRINK") else [Phase.generate]

    @settings(
        max_examples=rounds,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        phases=phases,
    )
    @given(
        docs=st.lists(metadata, min_size=DOCS_PER_ROUND, max_size=DOCS_PER_ROUND),
        texts=st.lists(filters, min_size=FILTERS_PER_ROUND, max_size=FILTERS_PER_ROUND),
    )
    def check(docs: list[Any], texts: list[str]) -> None:
        _run_round(client, diff_index, docs, texts, pg_oracle)

    before = (Stats.pairs, Stats.pg_pairs, Stats.pg_matches, Stats.pg_seconds, Stats.pg_excluded.copy())
    check()
    elapsed = time.monotonic() - started
    pairs, pg_pairs, pg_matches = (
        Stats.pairs - before[0],
        Stats.pg_pairs - before[1],
        Stats.pg_matches - before[2],
    )
    excluded = Stats.pg_excluded - before[4]
    with capsys.disabled():  # the pair count belongs in the CI log even without -s
        print(
            f"\nfilter differential: {pairs} (filter, metadata) pairs checked "
            f"({Stats.filters} filters x {DOCS_PER_ROUND} docs in {Stats.rounds} rounds; "
            f"{Stats.knn_filters} filters "
            f"also inside knn; {Stats.matches} matching pairs; {Stats.scripts} filters used painless) "
            f"in {elapsed:.1f}s, 100% agreement\n"
            f"three ways with PostgreSQL: {pg_pairs} pairs agree ({pg_matches} matching; "
            f"{Stats.pg_seconds - before[3]:.1f}s in PostgreSQL); {sum(excluded.values())} pairs excluded "
            f"from the PostgreSQL comparison {dict(sorted(excluded.items())) or ''} "
            f"(reasons: tests/filters_sql.py EXCLUSIONS)"
        )
    assert pairs >= TARGET_PAIRS
    assert set(excluded) <= set(EXCLUSIONS)
    # the exclusions are for corner cases; the PostgreSQL comparison must cover nearly every pair
    assert pg_pairs >= 0.9 * pairs, (pg_pairs, pairs, excluded)


# --- parser fuzz -----------------------------------------------------------------------------------------
TOKENS = [
    "val", "vals", "exists", "lower", "upper", "CAST", "AS", "TEXT", "NUMERIC", "DATE", "(", ")", "[", "]",
    ",", "'$.a'", "'$.tags[*]'", "'x'", "'", '"', "''", "\\", "1", "2.5", "1e3", "-", "+", "*", "/", "%",
    "||", "=", "<>", "!=", "<", ">=", "AND", "OR", "NOT", "IS", "NULL", "IN", "LIKE", "ILIKE", "CONTAINS",
    "OVERLAPS", "TRUE", "FALSE", "EXTRACT", "YEAR", "FROM", "CURRENT_DATE", "--", "\n", " ", "NaN", "$",
    "'$.'", "'$[-1]'", "'$..a'", "'$.a-b'", "'\x01'", "'\\'", "'%\\'", "[1]", "0",
    "99999999999999999999e999999",
]  # fmt: skip


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.one_of(st.lists(st.sampled_from(TOKENS), max_size=14).map(" ".join), st.text(max_size=40), filters))
def test_parser_fuzz_only_raises_filter_error(text: str) -> None:
    try:
        expr = parse_filter(text)
    except FilterError as exc:
        assert exc.status == 400 and exc.message.startswith("invalid filter: ")
        return
    compile_filter(expr, now=NOW)
    evaluate(expr, {"a": 1, "tags": ["x"]}, now=NOW)


def test_generated_filters_are_valid() -> None:
    """The differential generator must produce parseable filters, or it would test nothing."""

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(filters)
    def check(text: str) -> None:
        try:
            parse_filter(text)
        except FilterError as exc:
            pytest.fail(f"generator produced an invalid filter {text!r}: {exc.message}")

    check()


def test_generated_filters_translate_to_sql() -> None:
    """The PostgreSQL oracle covers everything the generator writes (no database needed to check that)."""

    @settings(
        max_examples=int(os.environ.get("FILTER_SQL_EXAMPLES", "300")),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(filters)
    def check(text: str) -> None:
        try:
            translate(text, NOW)
        except Unsupported as exc:
            pytest.fail(f"tests/filters_sql.py cannot translate {text!r}: {exc}")

    check()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(metadata)
def test_generated_metadata_indexes(doc: Any) -> None:
    try:
        index_metadata(doc)
    except BadRequest as exc:  # pragma: no cover - the generator avoids unindexable values
        pytest.fail(f"unindexable generated metadata: {exc.message}")


# --- painless conformance: every interpreter operation, value by value -------------------------------------
def _conformance_corpus() -> list[Any]:
    rng = random.Random(20250315)
    dates = ["2024-02-29", "2024-12-31T23:30:00-01:00", "0001-01-01", "9999-12-31", "1970-01-01T00:00:00.5",
             "2023-01-01", "2024-01-01T00:00:00Z", "1969-12-31T23:59:59.999999Z", "2024-03-31 12:00", "x", 5,
             "2025-03-15T12:30:00", "2000-02-29T06:07:08.09+05:30", "1900-03-01"]  # fmt: skip
    numbers = [-0.5, 0.5, 1.5, -1.5, 2.5, 0, 7, -7, 1e-7, 10**20, 2.55, -2.551, 0.3333333333333333, 3, -2,
               0.1, 1e300, -(2**63), 12345678901234567890123, "3", True, None]  # fmt: skip
    strings = ["😀", "\uffff", "a", "ab", "", "A", "ß", "a%b", "a_b", "İ", "%", "a\\b", "\\", "Ab", 1, None,
               "2024-02-29", "_"]  # fmt: skip
    arrays = [["a", 1, True, None], ["A", "ab"], [], [1.0, "1", {"k": 1}], [["a"]], "a", None, ["2024-02-29"],
              [2.5, -0.5, "😀"]]  # fmt: skip
    docs: list[Any] = []
    for i in range(48):
        doc = {
            "d": dates[i % len(dates)],
            "e": dates[(i * 5 + 3) % len(dates)],
            "n": numbers[i % len(numbers)],
            "m": numbers[(i * 7 + 2) % len(numbers)],
            "i": rng.choice([0, 1, -1, 2, 366, -400, 3000000, 10**8, 2.5]),
            "s": strings[i % len(strings)],
            "t": strings[(i * 5 + 1) % len(strings)],
            "b": rng.choice([True, False, None, "true", 1]),
            "arr": arrays[i % len(arrays)],
            "arr2": arrays[(i * 4 + 1) % len(arrays)],
        }
        docs.append({k: v for k, v in doc.items() if rng.random() < 0.93})
    return docs


CONFORMANCE_VALUES = (
    [f"EXTRACT({u} FROM CAST(val('$.d') AS DATE))" for u in
     ["YEAR", "QUARTER", "MONTH", "DAY", "DOW", "ISODOW", "DOY", "EPOCH"]]
    + [f"EXTRACT({u} FROM CAST(val('$.d') AS TIMESTAMP))" for u in
       ["YEAR", "QUARTER", "MONTH", "DAY", "DOW", "ISODOW", "DOY", "EPOCH", "HOUR", "MINUTE", "SECOND"]]
    + [f"CAST(val('$.n') AS NUMERIC) {op} CAST(val('$.m') AS NUMERIC)" for op in "+-*/%"]
    + [f"CAST(val('$.n') AS INTEGER) {op} CAST(val('$.m') AS INTEGER)" for op in "/%"]
    + [
        "-CAST(val('$.n') AS NUMERIC)",
        "CAST(CAST(val('$.n') AS NUMERIC) AS TEXT)",
        "CAST(CAST(val('$.n') AS INTEGER) AS TEXT)",
        "CAST(val('$.n') AS NUMERIC) + 0",
        "CAST(val('$.d') AS DATE) + CAST(val('$.i') AS INTEGER)",
        "CAST(val('$.d') AS DATE) - CAST(val('$.i') AS INTEGER)",
        "CAST(val('$.d') AS DATE) - CAST(val('$.e') AS DATE)",
        "CAST(CAST(val('$.d') AS DATE) AS TEXT)",
        "CAST(CAST(val('$.d') AS TIMESTAMP) AS TEXT)",
        "CAST(CAST(val('$.d') AS TIMESTAMP) AS DATE)",
        "CAST(CAST(val('$.d') AS DATE) AS TIMESTAMP)",
        "CAST(val('$.s') AS TEXT) || CAST(val('$.t') AS TEXT)",
        "lower(CAST(val('$.s') AS TEXT) || 'X' || CAST(val('$.t') AS TEXT))",
        "upper(CAST(val('$.s') AS TEXT) || CAST(CAST(val('$.b') AS BOOLEAN) AS TEXT))",
        "CAST(CAST(val('$.b') AS BOOLEAN) AS INTEGER)",
        "CAST(CAST(val('$.i') AS INTEGER) AS BOOLEAN)",
        "CAST(val('$.n') AS NUMERIC) / 3 * 3",
        "CURRENT_DATE - CAST(val('$.d') AS DATE)",
    ]
)  # fmt: skip
# Stored values read through the DSL (term/range) views, compared with every corpus value and its neighbours.
CONFORMANCE_ACCESSES = [
    "CAST(val('$.n') AS NUMERIC)",
    "CAST(val('$.n') AS INTEGER)",
    "CAST(CAST(val('$.n') AS NUMERIC) AS INTEGER)",
    "EXTRACT(YEAR FROM CAST(val('$.d') AS DATE))",
    "EXTRACT(YEAR FROM CAST(val('$.d') AS TIMESTAMP))",
    "CAST(val('$.d') AS DATE)",
    "CAST(val('$.d') AS TIMESTAMP)",
    "CAST(CAST(val('$.d') AS TEXT) AS DATE)",
    "CAST(val('$.s') AS TEXT)",
    "lower(CAST(val('$.s') AS TEXT))",
    "upper(CAST(val('$.s') AS TEXT))",
    "CAST(val('$.b') AS BOOLEAN)",
]


def _balanced_product(factor: str, levels: int) -> str:
    return (
        factor
        if levels == 0
        else f"({_balanced_product(factor, levels - 1)} * {_balanced_product(factor, levels - 1)})"
    )


HUGE = _balanced_product("1e4000", 7)  # overflows (NULL) at the first product
CONFORMANCE_PREDICATES = [
    *[f"CAST(val('$.s') AS TEXT) {op} CAST(val('$.t') AS TEXT)" for op in ["=", "<>", "<", "<=", ">", ">="]],
    "CAST(val('$.s') AS TEXT) LIKE CAST(val('$.t') AS TEXT)",
    "CAST(val('$.s') AS TEXT) ILIKE CAST(val('$.t') AS TEXT)",
    "CAST(val('$.s') AS TEXT) NOT LIKE CAST(val('$.t') AS TEXT) || '%'",
    "CAST(val('$.s') AS TEXT) IN vals('$.arr')",
    "CAST(val('$.s') AS TEXT) NOT IN val('$.arr')",
    "CAST(val('$.n') AS NUMERIC) IN vals('$.arr')",
    "CAST(val('$.b') AS BOOLEAN) IN vals('$.arr')",
    "CAST(val('$.d') AS DATE) IN vals('$.arr')",
    "CAST(val('$.d') AS TIMESTAMP) IN vals('$.arr')",
    "vals('$.arr') OVERLAPS vals('$.arr2')",
    "vals('$.arr') CONTAINS vals('$.arr2')",
    "val('$.arr') CONTAINS val('$.arr2')",
    "val('$.arr') OVERLAPS vals('$.arr2[*]')",
    "vals('$.arr') CONTAINS CAST(val('$.s') AS TEXT)",
    "(val('$.s') IS NULL) = (CAST(val('$.n') AS NUMERIC) IS NULL)",
    "exists('$.arr[*]') <> (CAST(val('$.b') AS BOOLEAN) OR CAST(val('$.i') AS INTEGER) > 0)",
    "CAST(val('$.d') AS DATE) < CAST(val('$.e') AS TIMESTAMP)",
    "CAST(val('$.d') AS TIMESTAMP) >= CAST(val('$.e') AS TIMESTAMP)",
    "CAST(val('$.n') AS NUMERIC) <= CAST(val('$.m') AS NUMERIC)",
    "CAST(val('$.b') AS BOOLEAN) < (CAST(val('$.n') AS INTEGER) = 0)",
    "(CAST(val('$.n') AS NUMERIC) > 0) IS NULL",
    "CAST(val('$.s') AS TEXT) IN (CAST(val('$.t') AS TEXT), 'a', NULL)",
    # DSL fallbacks: constants beyond the sortable encoding, wildcard patterns with many %, collections
    f"CAST(val('$.n') AS NUMERIC) < {HUGE}",
    f"CAST(val('$.n') AS INTEGER) >= -{HUGE}",
    f"-{HUGE} IN vals('$.arr')",
    f"CAST(val('$.n') AS NUMERIC) * {HUGE} / {HUGE} = CAST(val('$.n') AS NUMERIC)",
    "(CAST(val('$.n') AS NUMERIC) * 1e4000 * 1e900) IS NULL",
    "CAST(CAST(val('$.n') AS NUMERIC) * 1e4000 AS INTEGER) > 0",
    "CAST(val('$.n') AS NUMERIC) * 1e-4700 / 1e300 IS NOT NULL",
    "CAST(val('$.n') AS NUMERIC) / 1e-4800 > 1",
    "CAST(val('$.s') AS TEXT) LIKE '%%%%%%%%%%%%%a%'",
    "vals('$.arr') IS NULL",
    "val('$.arr') IS NOT NULL",
    # the interpreter's IN_LIST: an operand that is not a plain stored view, each type
    "CAST(val('$.s') AS TEXT) || '' IN ('a', '😀', CAST(val('$.t') AS TEXT))",
    "CAST(val('$.s') AS TEXT) || '' NOT IN ('a', 'ab', NULL)",
    "CAST(val('$.n') AS NUMERIC) + 0 IN (0.5, -7, 10e19, CAST(val('$.m') AS NUMERIC))",
    "CAST(val('$.n') AS NUMERIC) * 1 NOT IN (0.5, 3)",
    "(CAST(val('$.n') AS NUMERIC) > 0) IN (TRUE, NULL)",
    "(CAST(val('$.n') AS NUMERIC) > 0) NOT IN (FALSE)",
    "CAST(val('$.d') AS DATE) + 0 IN ('2024-02-29', CAST('2023-01-01T00:00:00Z' AS TIMESTAMP))",
    "CAST(val('$.d') AS TIMESTAMP) IN (CAST(val('$.e') AS TIMESTAMP), '1970-01-01T00:00:00.5')",
]


def _literal(value: Any, t: Any) -> str:
    from proxy.filters.nodes import SqlType
    from proxy.filters.values import canonical_number, timestamp_key

    if value is None:
        return "NULL"
    if t is SqlType.TEXT:
        return "'" + value.replace("\\", "\\\\").replace("'", "''").replace("\n", "\\n") + "'"
    if t.is_numeric:
        text = canonical_number(value)
        return f"({text})" if text.startswith("-") else text
    if t is SqlType.BOOLEAN:
        return "TRUE" if value else "FALSE"
    if t is SqlType.DATE:
        return f"CAST('{value.isoformat()}' AS DATE)"
    return f"CAST('{timestamp_key(value)}Z' AS TIMESTAMP)"


def test_painless_conformance(
    client: OpenSearch, diff_index: str, pg_oracle: PostgresOracle, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each interpreter operation against the evaluator, value by value: for an expression E and every value
    v it takes on the corpus, `E = v` and `E < v` must select the same documents in OpenSearch as in the
    evaluator and in PostgreSQL, so a single wrong value anywhere is a mismatch."""
    from proxy.filters.evaluator import _Evaluator
    from proxy.filters.nodes import IsNull

    docs = _conformance_corpus()
    texts: list[str] = []
    for source in CONFORMANCE_VALUES:
        probe = parse_filter(f"({source}) IS NULL")
        assert isinstance(probe, IsNull)
        values = {_Evaluator(doc, NOW).value(probe.arg) for doc in docs}
        texts.append(f"({source}) IS NULL")
        for v in sorted(values - {None}, key=repr):
            lit = _literal(v, probe.arg.type)
            texts += [f"({source}) = {lit}", f"({source}) < {lit}"]
    for source in CONFORMANCE_ACCESSES:
        probe = parse_filter(f"({source}) IS NULL")
        assert isinstance(probe, IsNull)
        t = probe.arg.type
        values = {_Evaluator(doc, NOW).value(probe.arg) for doc in docs} - {None}
        if t.is_numeric:
            half = Decimal("0.5")
            values |= {
                v + d for v in values for d in (half, -half, Decimal(1), Decimal(-1)) if abs(v) < 10**30
            }
        for v in sorted(values, key=repr):
            lit = _literal(v, t)
            texts += [f"{source} {op} {lit}" for op in ["=", "<>", "<", "<=", ">", ">="]]
            texts.append(f"NOT ({source} < {lit})")
    for pred in CONFORMANCE_PREDICATES:
        texts += [pred, f"NOT ({pred})"]
    pg_before, seconds_before, excluded_before = Stats.pg_pairs, Stats.pg_seconds, Stats.pg_excluded.copy()
    for start in range(0, len(texts), 100):
        _run_round(client, diff_index, docs, texts[start : start + 100], pg_oracle)
    excluded = Stats.pg_excluded - excluded_before
    with capsys.disabled():
        print(
            f"\npainless conformance: {len(texts)} filters x {len(docs)} docs agree in OpenSearch and the "
            f"evaluator; {Stats.pg_pairs - pg_before} pairs also in PostgreSQL "
            f"({Stats.pg_seconds - seconds_before:.1f}s), "
            f"{sum(excluded.values())} excluded {dict(sorted(excluded.items())) or ''}"
        )
