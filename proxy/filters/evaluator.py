"""The reference evaluator: the language's meaning, written as directly as possible. It is the oracle the
OpenSearch compilation is tested against, and it folds constants for the compiler (one visitor, one module).

SQL three-valued logic: a predicate is True, False or None (UNKNOWN); a row matches only when True.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from .nodes import (
    And,
    Arith,
    ArrayLit,
    Case,
    Cast,
    Compare,
    Concat,
    Contains,
    Exists,
    Expr,
    Extract,
    InList,
    IsNull,
    JsonConst,
    Like,
    Lit,
    Member,
    Neg,
    Not,
    Now,
    Or,
    Overlaps,
    SqlType,
    Val,
    Vals,
)
from .paths import resolve
from .values import (
    DIVISION,
    EXACT,
    MICROS_PER_DAY,
    bounded,
    canonical_number,
    date_from_day,
    date_text,
    day_number,
    json_number,
    like_match,
    lower_text,
    parse_date,
    parse_timestamp,
    round_half_up,
    text_to_boolean,
    text_to_integer,
    text_to_numeric,
    timestamp_parts,
    timestamp_text,
    upper_text,
)

__all__ = ["compare_values", "constant_value", "evaluate", "json_cast", "json_equal", "now_values"]

T = SqlType


def now_values(now: dt.datetime | None) -> tuple[dt.date, int]:
    """(CURRENT_DATE, CURRENT_TIMESTAMP in microseconds) in UTC."""
    moment = now or dt.datetime.now(dt.UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    moment = moment.astimezone(dt.UTC)
    micros = (day_number(moment.date()) * MICROS_PER_DAY) + (
        ((moment.hour * 60 + moment.minute) * 60 + moment.second) * 1_000_000 + moment.microsecond
    )
    return moment.date(), micros


def json_cast(value: Any, target: SqlType) -> Any:
    """CAST of a JSON value: succeeds only when the stored JSON type fits the target; a mismatch is NULL
    (live GoodMem: a mismatched cast is accepted and matches nothing)."""
    if value is None:
        return None
    if target is T.TEXT:
        return value if isinstance(value, str) else None
    if target is T.NUMERIC:
        return json_number(value)
    if target is T.INTEGER:
        number = json_number(value)
        return None if number is None else round_half_up(number)
    if target is T.BOOLEAN:
        return value if isinstance(value, bool) else None
    if target is T.DATE:
        return parse_date(value) if isinstance(value, str) else None
    if target is T.TIMESTAMP:
        return parse_timestamp(value) if isinstance(value, str) else None
    if target is T.JSON:
        return value
    raise AssertionError(target)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two collection elements: scalars by JSON type and value (numbers numerically); objects
    and arrays are never equal to anything (the index keeps no structure to compare them by)."""
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    na, nb = json_number(a), json_number(b)
    return na is not None and nb is not None and na == nb


_TEXT_PARSERS = {
    T.NUMERIC: text_to_numeric,
    T.INTEGER: text_to_integer,
    T.BOOLEAN: text_to_boolean,
    T.DATE: parse_date,
    T.TIMESTAMP: parse_timestamp,
}


def _element_matches(x: Any, xtype: SqlType, element: Any) -> bool:
    """Does a typed scalar equal a collection element? The element must hold the JSON type the SQL type
    comes from (a string for TEXT, DATE and TIMESTAMP; a number for numerics; a boolean)."""
    if xtype is T.TEXT:
        return isinstance(element, str) and element == x
    if xtype.is_numeric:
        number = json_number(element)
        return number is not None and number == x
    if xtype is T.BOOLEAN:
        return isinstance(element, bool) and element == x
    if xtype is T.DATE:
        return isinstance(element, str) and parse_date(element) == x
    if xtype is T.TIMESTAMP:
        return isinstance(element, str) and parse_timestamp(element) == x
    raise AssertionError(xtype)


def _and(values: list[bool | None]) -> bool | None:
    if any(v is False for v in values):
        return False
    return None if any(v is None for v in values) else True


def _or(values: list[bool | None]) -> bool | None:
    if any(v is True for v in values):
        return True
    return None if any(v is None for v in values) else False


def _not(value: bool | None) -> bool | None:
    return None if value is None else not value


def compare_values(op: str, a: Any, b: Any) -> bool:
    if op == "=":
        return bool(a == b)
    if op == "<>":
        return bool(a != b)
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    if op == ">=":
        return bool(a >= b)
    raise AssertionError(op)


class _Evaluator:
    def __init__(self, document: Any, now: dt.datetime | None):
        self.document = document
        self.today, self.now_micros = now_values(now)

    def value(self, e: Expr) -> Any:
        method = getattr(self, "v_" + type(e).__name__)
        return method(e)

    def collection(self, e: Expr) -> list[Any] | None:
        """The elements of a collection operand; None (UNKNOWN) when a JSON operand is not an array."""
        v = self.value(e)
        if e.type is T.ARRAY:
            assert isinstance(v, list)
            return v
        return v if isinstance(v, list) else None

    # --- leaves -----------------------------------------------------------------------------------------
    def v_Lit(self, e: Lit) -> Any:
        return e.value

    def v_ArrayLit(self, e: ArrayLit) -> Any:
        return list(e.items)

    def v_JsonConst(self, e: JsonConst) -> Any:
        return e.value

    def v_Val(self, e: Val) -> Any:
        nodes = resolve(e.path, self.document)
        # JSON null and a missing path are both SQL NULL: `val('$.owner') IS NULL` is true for either.
        return nodes[0] if nodes else None

    def v_Vals(self, e: Vals) -> Any:
        out: list[Any] = []
        for node in resolve(e.path, self.document):
            # Each selected array contributes its elements (one level), so 'x' IN vals('$.tags') works
            # whether or not the path ends in [*].
            if isinstance(node, list):
                out.extend(node)
            else:
                out.append(node)
        return out

    def v_Exists(self, e: Exists) -> Any:
        return bool(resolve(e.path, self.document))

    def v_Now(self, e: Now) -> Any:
        return self.today if e.type is T.DATE else self.now_micros

    # --- scalar functions ------------------------------------------------------------------------------
    def v_Cast(self, e: Cast) -> Any:
        src, target = e.arg.type, e.type
        v = self.value(e.arg)
        if v is None:
            return None
        if src is T.JSON:
            return json_cast(v, target)
        if src is T.TEXT:
            return _TEXT_PARSERS[target](v)
        if target is T.TEXT:
            if src.is_numeric:
                return canonical_number(v)
            if src is T.BOOLEAN:
                return "true" if v else "false"
            if src is T.DATE:
                return date_text(v)
            if src is T.TIMESTAMP:
                return timestamp_text(v)
        if target is T.INTEGER:
            if src is T.NUMERIC:
                return round_half_up(v)
            if src is T.BOOLEAN:
                return Decimal(1 if v else 0)
        if target is T.NUMERIC and src is T.INTEGER:
            return v
        if target is T.BOOLEAN and src is T.INTEGER:
            return not v.is_zero()
        if target is T.TIMESTAMP and src is T.DATE:
            return day_number(v) * MICROS_PER_DAY
        if target is T.DATE and src is T.TIMESTAMP:
            return timestamp_parts(v)[0]
        raise AssertionError((src, target))

    def v_Case(self, e: Case) -> Any:
        v = self.value(e.arg)
        if v is None:
            return None
        return lower_text(v) if e.fn == "lower" else upper_text(v)

    def v_Extract(self, e: Extract) -> Any:
        v = self.value(e.arg)
        if v is None:
            return None
        if e.arg.type is T.DATE:
            date, hour, minute, second, micro = v, 0, 0, 0, 0
            epoch_micros = day_number(v) * MICROS_PER_DAY
        else:
            date, hour, minute, second, micro = timestamp_parts(v)
            epoch_micros = v
        unit = e.unit
        if unit == "year":
            return Decimal(date.year)
        if unit == "quarter":
            return Decimal((date.month - 1) // 3 + 1)
        if unit == "month":
            return Decimal(date.month)
        if unit == "day":
            return Decimal(date.day)
        if unit == "dow":
            return Decimal(date.isoweekday() % 7)
        if unit == "isodow":
            return Decimal(date.isoweekday())
        if unit == "doy":
            return Decimal(date.timetuple().tm_yday)
        if unit == "hour":
            return Decimal(hour)
        if unit == "minute":
            return Decimal(minute)
        if unit == "second":
            return EXACT.add(Decimal(second), EXACT.scaleb(Decimal(micro), -6))
        if unit == "epoch":
            return EXACT.scaleb(Decimal(epoch_micros), -6)
        raise AssertionError(unit)

    def v_Neg(self, e: Neg) -> Any:
        v = self.value(e.arg)
        return None if v is None else v.copy_negate()

    def v_Arith(self, e: Arith) -> Any:
        a, b = self.value(e.left), self.value(e.right)
        if a is None or b is None:
            return None
        if e.left.type is T.DATE:
            if e.right.type is T.DATE:
                return Decimal(day_number(a) - day_number(b))
            if abs(b) > 10_000_000:
                return None
            days = int(b)
            return date_from_day(day_number(a) + (days if e.op == "+" else -days))
        return bounded(self.arith(e.op, e.type, a, b))

    @staticmethod
    def arith(op: str, type_: SqlType, a: Decimal, b: Decimal) -> Decimal | None:
        if op == "+":
            return EXACT.add(a, b)
        if op == "-":
            return EXACT.subtract(a, b)
        if op == "*":
            return EXACT.multiply(a, b)
        if b.is_zero():
            return None  # PostgreSQL raises division_by_zero; here the row is UNKNOWN instead
        if op == "/":
            return EXACT.divide_int(a, b) if type_ is T.INTEGER else DIVISION.divide(a, b)
        if op == "%":
            return EXACT.remainder(a, b)
        raise AssertionError(op)

    def v_Concat(self, e: Concat) -> Any:
        a, b = self.value(e.left), self.value(e.right)
        return None if a is None or b is None else a + b

    # --- predicates ------------------------------------------------------------------------------------
    def v_Compare(self, e: Compare) -> Any:
        a, b = self.value(e.left), self.value(e.right)
        if a is None or b is None:
            return None
        return compare_values(e.op, a, b)

    def v_Like(self, e: Like) -> Any:
        text, pattern = self.value(e.arg), self.value(e.pattern)
        if text is None or pattern is None:
            return None
        if e.ci:
            text, pattern = lower_text(text), lower_text(pattern)
        result = like_match(text, pattern)
        return _not(result) if e.negated else result

    def v_IsNull(self, e: IsNull) -> Any:
        # A collection (vals(), an array literal) is never NULL; it may be empty.
        is_null = False if e.arg.type is T.ARRAY else self.value(e.arg) is None
        return not is_null if e.negated else is_null

    def v_InList(self, e: InList) -> Any:
        x = self.value(e.arg)
        results: list[bool | None] = []
        for item in e.items:
            y = self.value(item)
            results.append(None if x is None or y is None else x == y)
        result = _or(results)
        return _not(result) if e.negated else result

    def v_Member(self, e: Member) -> Any:
        x = self.value(e.arg)
        elements = self.collection(e.coll)
        if x is None or elements is None:
            return None
        result = any(_element_matches(x, e.arg.type, el) for el in elements)
        return not result if e.negated else result

    def v_Contains(self, e: Contains) -> Any:
        haystack = self.collection(e.left)
        if haystack is None:
            return None
        if e.right.type.is_scalar:
            x = self.value(e.right)
            if x is None:
                return None
            return any(_element_matches(x, e.right.type, el) for el in haystack)
        needles = self.collection(e.right)
        if needles is None:
            return None
        return all(any(json_equal(n, h) for h in haystack) for n in needles)

    def v_Overlaps(self, e: Overlaps) -> Any:
        a, b = self.collection(e.left), self.collection(e.right)
        if a is None or b is None:
            return None
        return any(json_equal(x, y) for x in a for y in b)

    def v_And(self, e: And) -> Any:
        return _and([self.value(i) for i in e.items])

    def v_Or(self, e: Or) -> Any:
        return _or([self.value(i) for i in e.items])

    def v_Not(self, e: Not) -> Any:
        return _not(self.value(e.arg))


def evaluate(expr: Expr, metadata: Any, *, now: dt.datetime | None = None) -> bool | None:
    """Evaluate a boolean filter over one memory's metadata JSON: True, False or None (UNKNOWN)."""
    result = _Evaluator(metadata, now).value(expr)
    assert result is None or isinstance(result, bool)
    return result


def constant_value(expr: Expr, *, now: dt.datetime | None = None) -> Any:
    """The value of an expression that does not read the document."""
    return _Evaluator(None, now).value(expr)
