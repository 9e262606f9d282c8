"""Value semantics shared by the reference evaluator and the indexer.

These functions *define* the language's typing rules (what a JSON number is worth, which strings are dates,
how case folding works); the evaluator applies them to a document at query time, the indexer applies them
once at write time and stores the results, and the painless interpreter reads those stored results. Keeping
one definition here is what lets the three agree exactly.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from decimal import (
    MAX_EMAX,
    MAX_PREC,
    MIN_EMIN,
    ROUND_HALF_EVEN,
    ROUND_HALF_UP,
    Context,
    Decimal,
    InvalidOperation,
)
from typing import Any

# NUMERIC is exact decimal arithmetic, as PostgreSQL's numeric (GoodMem's original backend). The default
# decimal context rounds to 28 digits, so every operation goes through one of these contexts explicitly.
EXACT = Context(
    prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation]
)
# Division cannot be exact in general; 34 significant digits half-even is IEEE decimal128, which Java's
# MathContext.DECIMAL128 reproduces bit for bit in the painless interpreter.
DIVISION = Context(prec=34, Emax=MAX_EMAX, Emin=MIN_EMIN, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation])

EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
MICROS_PER_DAY = 86_400_000_000
MIN_DAY = dt.date.min.toordinal() - EPOCH_ORDINAL
MAX_DAY = dt.date.max.toordinal() - EPOCH_ORDINAL
MIN_MICROS = MIN_DAY * MICROS_PER_DAY
MAX_MICROS = (MAX_DAY + 1) * MICROS_PER_DAY - 1

# Literal and metadata numbers beyond these bounds are refused rather than approximated. The painless
# interpreter parses each number it reads once per document (BigDecimal parsing is quadratic in the digits)
# and CAST(... AS TEXT) writes numbers out in full, so both bounds are about per-document cost.
MAX_NUMBER_DIGITS = 1000
MAX_NUMBER_EXPONENT = 5000


def json_number(value: Any) -> Decimal | None:
    """The NUMERIC value of a JSON number, or None when ``value`` is not a (finite) JSON number.

    A float stands for the decimal text a JSON encoder writes for it (Python's shortest round-trip repr),
    which is the value PostgreSQL's jsonb would have parsed from the same document.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    return None


def canonical_number(value: Decimal) -> str:
    """Plain decimal text without exponent or trailing zeros (Java: stripTrailingZeros().toPlainString())."""
    if value.is_zero():
        return "0"
    return format(value.normalize(EXACT), "f")


def compact_number(value: Decimal) -> str:
    """Canonical exact text of a number that stays short for huge exponents (1E+5000): Python's
    to-scientific-string of the normalized value, which is character for character what Java prints for
    ``stripTrailingZeros().toString()`` (both switch to exponent form when the exponent is positive or the
    adjusted exponent is below -6). Collection elements compare by this text."""
    if value.is_zero():
        return "0"
    return str(value.normalize(EXACT))


def bounded(value: Decimal | None) -> Decimal | None:
    """Numeric overflow is NULL: a result whose decimal exponent leaves +-MAX_NUMBER_EXPONENT is UNKNOWN
    (PostgreSQL raises an error beyond its own, larger numeric range). Without a bound, a filter such as
    CAST(x AS INTEGER) over x * 1e4000 * 1e4000 would make the painless interpreter materialise
    million-digit integers for every document."""
    if value is None or value.is_zero() or abs(value.adjusted()) <= MAX_NUMBER_EXPONENT:
        return value
    return None


def round_half_up(value: Decimal) -> Decimal | None:
    """CAST(... AS INTEGER): PostgreSQL rounds numeric to integer half away from zero."""
    return bounded(value.to_integral_value(rounding=ROUND_HALF_UP, context=EXACT))


def number_in_range(value: Decimal) -> bool:
    if not value.is_finite():
        return False
    if value.is_zero():
        return True
    digits = len(value.normalize(EXACT).as_tuple().digits)
    return digits <= MAX_NUMBER_DIGITS and abs(value.adjusted()) <= MAX_NUMBER_EXPONENT


# --- dates and timestamps -------------------------------------------------------------------------------
# ISO 8601 extended form only: 2024-10-01, optionally followed by T or space, HH:MM[:SS[.fraction]] and a
# zone (Z or +HH[:MM]). [0-9] rather than \d: \d would also accept non-ASCII digits.
_DATETIME_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[Tt ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?"
    r"(?:([Zz])|([+-])([0-9]{2})(?::?([0-9]{2}))?)?)?"
)


def _parse_datetime(text: str) -> tuple[dt.date, int, int] | None:
    """(calendar date as written, microseconds into that day, zone offset in seconds) or None."""
    m = _DATETIME_RE.fullmatch(text)
    if m is None:
        return None
    year, month, day = int(m[1]), int(m[2]), int(m[3])
    try:
        date = dt.date(year, month, day)
    except ValueError:
        return None
    if m[4] is None:
        return date, 0, 0
    hour, minute, second = int(m[4]), int(m[5]), int(m[6] or 0)
    if hour > 23 or minute > 59 or second > 59:
        return None
    micros = int((m[7] or "").ljust(6, "0")[:6]) if m[7] else 0
    offset = 0
    if m[9]:
        oh, om = int(m[10]), int(m[11] or 0)
        if oh > 18 or om > 59 or oh * 60 + om > 18 * 60:
            return None
        offset = (oh * 3600 + om * 60) * (1 if m[9] == "+" else -1)
    return date, ((hour * 60 + minute) * 60 + second) * 1_000_000 + micros, offset


def parse_date(text: str) -> dt.date | None:
    """CAST(text AS DATE): the calendar date as written; a time and zone, if present, are validated and
    dropped (PostgreSQL's date input does the same)."""
    parsed = _parse_datetime(text)
    return None if parsed is None else parsed[0]


def parse_timestamp(text: str) -> int | None:
    """CAST(text AS TIMESTAMP): microseconds since the epoch, UTC. A zone offset is applied; no zone means
    UTC; fractions below a microsecond are truncated."""
    parsed = _parse_datetime(text)
    if parsed is None:
        return None
    date, micros, offset = parsed
    value = (date.toordinal() - EPOCH_ORDINAL) * MICROS_PER_DAY + micros - offset * 1_000_000
    return value if MIN_MICROS <= value <= MAX_MICROS else None


def day_number(date: dt.date) -> int:
    return date.toordinal() - EPOCH_ORDINAL


def date_from_day(day: int) -> dt.date | None:
    if not MIN_DAY <= day <= MAX_DAY:
        return None
    return dt.date.fromordinal(day + EPOCH_ORDINAL)


def date_text(date: dt.date) -> str:
    return date.isoformat()


def timestamp_parts(micros: int) -> tuple[dt.date, int, int, int, int]:
    """(date, hour, minute, second, microsecond) of a UTC timestamp."""
    day, rest = divmod(micros, MICROS_PER_DAY)
    seconds, frac = divmod(rest, 1_000_000)
    date = dt.date.fromordinal(day + EPOCH_ORDINAL)
    return date, seconds // 3600, seconds // 60 % 60, seconds % 60, frac


def timestamp_key(micros: int) -> str:
    """Fixed-width, lexicographically ordered form used in the index."""
    date, h, m, s, f = timestamp_parts(micros)
    return f"{date.isoformat()}T{h:02d}:{m:02d}:{s:02d}.{f:06d}"


def timestamp_text(micros: int) -> str:
    """CAST(timestamp AS TEXT), PostgreSQL style without zone suffix (timestamps are UTC)."""
    date, h, m, s, f = timestamp_parts(micros)
    text = f"{date.isoformat()} {h:02d}:{m:02d}:{s:02d}"
    if f:
        text += "." + f"{f:06d}".rstrip("0")
    return text


# --- case mapping ---------------------------------------------------------------------------------------
# Per code point, single-code-point (Unicode "simple") mappings only, so lower() and upper() never change a
# string's length in code points and distribute over ||. Full mappings that expand (ß -> SS) leave the code
# point unchanged; U+0130 gets its simple lower-case mapping (i), which Python only offers as a full one.
_LOWER: dict[str, str] = {"\u0130": "i"}
_UPPER: dict[str, str] = {}


def _map_char(c: str, table: dict[str, str], full: str) -> str:
    mapped = table.get(c)
    if mapped is None:
        mapped = full if len(full) == 1 else c
        table[c] = mapped
    return mapped


def lower_text(text: str) -> str:
    return "".join(_LOWER.get(c) or _map_char(c, _LOWER, c.lower()) for c in text)


def upper_text(text: str) -> str:
    return "".join(_UPPER.get(c) or _map_char(c, _UPPER, c.upper()) for c in text)


# --- constant conversions from TEXT (string literals coerced by context, or explicit CASTs) ---------------
_NUMERIC_RE = re.compile(r"\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*", re.ASCII)
_INTEGER_RE = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)
_TRUE_WORDS = frozenset({"t", "true", "y", "yes", "on", "1"})
_FALSE_WORDS = frozenset({"f", "false", "n", "no", "off", "0"})


def text_to_numeric(text: str) -> Decimal | None:
    if not _NUMERIC_RE.fullmatch(text):
        return None
    value = Decimal(text.strip())
    return value if number_in_range(value) else None


def text_to_integer(text: str) -> Decimal | None:
    if not _INTEGER_RE.fullmatch(text):
        return None
    value = Decimal(text.strip())
    return value if number_in_range(value) else None


def text_to_boolean(text: str) -> bool | None:
    word = text.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    return None


# --- LIKE -----------------------------------------------------------------------------------------------
_LITERAL, _ANY_ONE, _ANY_SEQ = 0, 1, 2


def like_tokens(pattern: str) -> list[tuple[int, str]] | None:
    """LIKE pattern -> tokens; backslash escapes the next character. None when the pattern ends with a lone
    escape (PostgreSQL rejects such a pattern)."""
    tokens: list[tuple[int, str]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 == len(pattern):
                return None
            tokens.append((_LITERAL, pattern[i + 1]))
            i += 2
            continue
        if c == "%":
            tokens.append((_ANY_SEQ, ""))
        elif c == "_":
            tokens.append((_ANY_ONE, ""))
        else:
            tokens.append((_LITERAL, c))
        i += 1
    return tokens


def like_match(text: str, pattern: str) -> bool | None:
    """SQL LIKE over code points. Greedy matching with backtracking to the last %: linear in practice, and
    immune to the exponential blow-up a regex translation can hit."""
    tokens = like_tokens(pattern)
    if tokens is None:
        return None
    si = pi = 0
    star = -1
    mark = 0
    n, m = len(text), len(tokens)
    while si < n:
        if pi < m and (
            tokens[pi][0] == _ANY_ONE or (tokens[pi][0] == _LITERAL and tokens[pi][1] == text[si])
        ):
            si += 1
            pi += 1
        elif pi < m and tokens[pi][0] == _ANY_SEQ:
            star, mark = pi, si
            pi += 1
        elif star >= 0:
            pi = star + 1
            mark += 1
            si = mark
        else:
            return False
    while pi < m and tokens[pi][0] == _ANY_SEQ:
        pi += 1
    return pi == m
