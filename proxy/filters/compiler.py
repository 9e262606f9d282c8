"""Typed AST -> one OpenSearch query clause, exact under SQL three-valued logic.

One module although long: one visitor over the typed AST (grammar → AST → one visitor per target), each
construct's TRUE and FALSE queries next to each other.

For every boolean node the compiler can build two queries: the documents where it is TRUE and those where
it is FALSE (UNKNOWN is whatever is in neither). NOT swaps them, AND/OR combine them by De Morgan, so
``NOT x`` never matches a document where ``x`` is UNKNOWN — the classic bug of compiling NOT to
``must_not``. Leaves compare one stored, typed value with a constant and become term/range/wildcard queries
on the ``metadata_index`` fields (see indexing.py); leaves that need more (two stored values, arithmetic on
stored values, ...) become the painless interpreter script, asked for TRUE or FALSE.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

from .errors import FilterError
from .evaluator import compare_values, constant_value, now_values
from .indexing import FIELDS, METADATA_INDEX_FIELD, SEP, sortable_number
from .nodes import (
    And,
    Case,
    Cast,
    Compare,
    Contains,
    Exists,
    Expr,
    Extract,
    InList,
    IsNull,
    Like,
    Member,
    Not,
    Or,
    Overlaps,
    SqlType,
    Val,
    Vals,
    is_constant,
    walk,
)
from .painless import script_query
from .paths import STAR, Path
from .values import (
    EXACT,
    MICROS_PER_DAY,
    day_number,
    json_number,
    like_tokens,
    lower_text,
    parse_date,
    parse_timestamp,
    timestamp_key,
)

__all__ = ["compile_filter"]

T = SqlType
Query = dict[str, Any]
MATCH_ALL: Query = {"match_all": {}}
MATCH_NONE: Query = {"match_none": {}}
NEGATE = {"=": "<>", "<>": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
# Lucene determinizes wildcard automata; past this many % a pattern goes to painless rather than risk
# TooComplexToDeterminizeException.
MAX_WILDCARD_STARS = 12


def _and(queries: list[Query]) -> Query:
    parts: list[Query] = []
    for q in queries:
        if q == MATCH_NONE:
            return MATCH_NONE
        if q == MATCH_ALL:
            continue
        if set(q) == {"bool"} and set(q["bool"]) == {"filter"}:
            parts.extend(q["bool"]["filter"])
        else:
            parts.append(q)
    if not parts:
        return MATCH_ALL
    return parts[0] if len(parts) == 1 else {"bool": {"filter": parts}}


def _or(queries: list[Query]) -> Query:
    parts: list[Query] = []
    for q in queries:
        if q == MATCH_ALL:
            return MATCH_ALL
        if q == MATCH_NONE:
            continue
        if set(q) == {"bool"} and set(q["bool"]) == {"should", "minimum_should_match"}:
            parts.extend(q["bool"]["should"])
        else:
            parts.append(q)
    if not parts:
        return MATCH_NONE
    return parts[0] if len(parts) == 1 else {"bool": {"should": parts, "minimum_should_match": 1}}


def _not(query: Query) -> Query:
    if query == MATCH_ALL:
        return MATCH_NONE
    if query == MATCH_NONE:
        return MATCH_ALL
    if set(query) == {"bool"} and set(query["bool"]) == {"must_not"} and len(query["bool"]["must_not"]) == 1:
        inner: Query = query["bool"]["must_not"][0]
        return inner
    return {"bool": {"must_not": [query]}}


@dataclass(frozen=True, slots=True)
class _Access:
    """A stored value read through one typed view of one path: what DSL leaves compare against constants.

    kind: text | num | int (CAST AS INTEGER, rounded) | bool | date | ts | year_date | year_ts
    """

    path: Path
    kind: str
    case: str | None = None

    @property
    def tag(self) -> str:
        return {"text": "s", "num": "n", "int": "n", "bool": "b", "date": "d", "ts": "t"}.get(
            self.kind, "d" if self.kind == "year_date" else "t"
        )


def _json_path(e: Expr) -> Path | None:
    return e.path if isinstance(e, Val) else None


def _access(e: Expr) -> _Access | None:
    if isinstance(e, Case):
        inner = _access(e.arg)
        if inner is not None and inner.kind == "text" and inner.case in (None, e.fn):
            return _Access(inner.path, "text", e.fn)
        return None
    if isinstance(e, Extract) and e.unit == "year":
        inner = _access(e.arg)
        if inner is not None and inner.kind in ("date", "ts"):
            return _Access(inner.path, "year_" + inner.kind)
        return None
    if not isinstance(e, Cast):
        return None
    path = _json_path(e.arg)
    if path is not None:
        kind = {T.TEXT: "text", T.NUMERIC: "num", T.INTEGER: "int", T.BOOLEAN: "bool", T.DATE: "date"}.get(
            e.type, "ts" if e.type is T.TIMESTAMP else None
        )
        return None if kind is None else _Access(path, kind)
    inner = _access(e.arg)
    if inner is None:
        return None
    if inner.kind == "text" and inner.case is None and e.type in (T.DATE, T.TIMESTAMP):
        return _Access(inner.path, "date" if e.type is T.DATE else "ts")
    if inner.kind in ("num", "int") and e.type is T.INTEGER:
        return _Access(inner.path, "int")
    if inner.kind == "int" and e.type is T.NUMERIC:
        return inner
    return None


def _ceil(d: Decimal) -> Decimal:
    return d.to_integral_value(rounding=ROUND_CEILING, context=EXACT)


def _floor(d: Decimal) -> Decimal:
    return d.to_integral_value(rounding=ROUND_FLOOR, context=EXACT)


class _Compiler:
    def __init__(self, field: str, now: dt.datetime | None, allow_scripts: bool):
        self.field = field
        self.now = now
        self.allow_scripts = allow_scripts
        self.today, _ = now_values(now)

    # --- query atoms ----------------------------------------------------------------------------------
    def f(self, name: str) -> str:
        return f"{self.field}.{FIELDS[name]}"

    def term(self, name: str, value: str) -> Query:
        return {"term": {self.f(name): value}}

    def present(self, path: Path, tag: str = "") -> Query:
        return self.term("present", f"{path.key()}{SEP}{tag}" if tag else path.key())

    def has(self, acc: _Access) -> Query:
        return self.present(acc.path, acc.tag)

    def constant(self, e: Expr) -> Any:
        return constant_value(e, now=self.now)

    def script(self, e: Expr, want: bool) -> Query:
        if not self.allow_scripts:
            pos = e.pos
            raise FilterError(
                "this part of the filter needs a painless script, which the OpenSearch cluster does not "
                "allow (compare stored values only with constants here)",
                line=pos.line or None,
                column=pos.column or None,
                offset=pos.offset if pos.line else None,
            )
        return script_query(e, want, self.field, now=self.now)

    # --- truth ----------------------------------------------------------------------------------------
    def truth(self, e: Expr, want: bool) -> Query:
        """Documents where the boolean ``e`` evaluates to ``want`` (never those where it is UNKNOWN)."""
        if is_constant(e):
            return MATCH_ALL if self.constant(e) is want else MATCH_NONE
        if isinstance(e, And):
            parts = [self.truth(i, want) for i in e.items]
            return _and(parts) if want else _or(parts)
        if isinstance(e, Or):
            parts = [self.truth(i, want) for i in e.items]
            return _or(parts) if want else _and(parts)
        if isinstance(e, Not):
            return self.truth(e.arg, not want)
        if isinstance(e, Exists):
            q = self.present(e.path)
            return q if want else _not(q)
        query: Query | None = None
        if isinstance(e, IsNull):
            null = self.null_query(e.arg)
            if null is not None:
                query = null if want != e.negated else _not(null)
        elif isinstance(e, Compare):
            query = self.compare(e, want)
        elif isinstance(e, Like):
            query = self.like(e, want)
        elif isinstance(e, InList):
            query = self.in_list(e, want)
        elif isinstance(e, Member):
            query = self.member(e.arg, e.coll, want != e.negated)
        elif isinstance(e, Contains) and e.right.type.is_scalar:
            query = self.member(e.right, e.left, want)
        elif isinstance(e, Contains):
            query = self.contains(e, want)
        elif isinstance(e, Overlaps):
            query = self.overlaps(e, want)
        else:
            acc = _access(e)
            if acc is not None and acc.kind == "bool":
                query = self.term("value", f"{acc.path.key()}{SEP}b{'1' if want else '0'}")
        return query if query is not None else self.script(e, want)

    def null_query(self, e: Expr) -> Query | None:
        """Documents where ``e`` is NULL, when plain DSL can tell."""
        if e.type is T.ARRAY:
            return MATCH_NONE
        if isinstance(e, Val):
            return _or([_not(self.present(e.path)), self.present(e.path, "z")])
        acc = _access(e)
        if acc is not None:
            return _not(self.has(acc))
        return None

    # --- comparisons ----------------------------------------------------------------------------------
    def compare(self, e: Compare, want: bool) -> Query | None:
        if e.left.type is T.BOOLEAN:
            # A predicate compared with a constant may need both of its truth queries; nested, that would
            # double per level, so predicates that themselves compare predicates go to painless.
            if is_constant(e.right) and not _compares_predicates(e.left):
                return self.boolean_compare(e.left, e.op, self.constant(e.right), want)
            if is_constant(e.left) and not _compares_predicates(e.right):
                return self.boolean_compare(e.right, FLIP[e.op], self.constant(e.left), want)
            return None
        acc, op, other = _access(e.left), e.op, e.right
        if acc is None or not is_constant(other):
            acc, op, other = _access(e.right), FLIP[e.op], e.left
            if acc is None or not is_constant(other):
                return None
        value = self.constant(other)
        if value is None:
            return MATCH_NONE
        return self.access_compare(acc, op if want else NEGATE[op], value)

    def boolean_compare(self, b: Expr, op: str, value: bool | None, want: bool) -> Query | None:
        """A predicate compared with a boolean constant is a function of the predicate's own truth."""
        if value is None:
            return MATCH_NONE
        wanted = [v for v in (True, False) if compare_values(op, v, value) is want]
        return _or([self.truth(b, v) for v in wanted])

    def access_compare(self, acc: _Access, op: str, value: Any) -> Query | None:
        """Documents whose stored value (non-NULL through the access) satisfies ``value op`` constant."""
        kind = acc.kind
        if kind in ("int", "year_date", "year_ts"):
            return self.step_compare(acc, op, value)
        if kind == "text":
            name = {None: "value", "lower": "lower", "upper": "upper"}[acc.case]
            prefix = f"{acc.path.key()}{SEP}{'s' if acc.case is None else ''}"
            encoded = value
        else:
            name = "value"
            prefix = f"{acc.path.key()}{SEP}{acc.tag}"
            try:
                encoded = self.encode(acc.tag, value)
            except OverflowError:
                return None
        return self.ordered(acc, name, prefix, op, prefix + encoded)

    def encode(self, tag: str, value: Any) -> str:
        if tag == "n":
            return sortable_number(value)
        if tag == "b":
            return "1" if value else "0"
        if tag == "d":
            return str(value.isoformat())
        if tag == "t":
            return timestamp_key(value)
        raise AssertionError(tag)

    def ordered(self, acc: _Access, name: str, prefix: str, op: str, term: str) -> Query:
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        field = self.f(name)
        if op == "=":
            return {"term": {field: term}}
        if op == "<>":
            return _and([self.has(acc), _not({"term": {field: term}})])
        bounds = {
            "<": {"gte": prefix, "lt": term},
            "<=": {"gte": prefix, "lte": term},
            ">": {"gt": term, "lt": end},
            ">=": {"gte": term, "lt": end},
        }[op]
        return {"range": {field: bounds}}

    def step_compare(self, acc: _Access, op: str, value: Decimal) -> Query | None:
        """f(x) op c for a non-decreasing integer-valued f of the stored x (INTEGER rounding, EXTRACT YEAR):
        each side of the comparison is a half-line of x, found from the least x with f(x) >= m."""
        if op == "<>":
            eq = self.step_compare(acc, "=", value)
            return None if eq is None else _and([self.has(acc), _not(eq)])
        try:
            if op == ">=":
                return self.half_line(acc, _ceil(value), above=True)
            if op == ">":
                return self.half_line(acc, EXACT.add(_floor(value), 1), above=True)
            if op == "<":
                return self.half_line(acc, _ceil(value), above=False)
            if op == "<=":
                return self.half_line(acc, EXACT.add(_floor(value), 1), above=False)
            if value != _floor(value):
                return MATCH_NONE
            return _and(
                [
                    self.half_line(acc, value, above=True),
                    self.half_line(acc, EXACT.add(value, 1), above=False),
                ]
            )
        except OverflowError:
            return None

    def half_line(self, acc: _Access, m: Decimal, *, above: bool) -> Query:
        """Stored values with f(x) >= m (above) or f(x) < m (not above)."""
        prefix = f"{acc.path.key()}{SEP}{acc.tag}"
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        bound: str | None  # least x with f(x) >= m; None: no such x; "" : every x
        if acc.kind == "int":
            # round half away from zero: for m > 0 the least x is m - 0.5 itself; for m <= 0 it is just above
            threshold = EXACT.subtract(m, Decimal("0.5"))
            inclusive = m > 0
            key = prefix + sortable_number(threshold)
            lower = {"gte" if inclusive else "gt": key}
            upper = {"lt" if inclusive else "lte": key}
            field = self.f("value")
            if above:
                return {"range": {field: {**lower, "lt": end}}}
            return {"range": {field: {"gte": prefix, **upper}}}
        year = int(m) if abs(m) < 100_000 else (100_000 if m > 0 else -100_000)
        if year <= 1:
            bound = ""
        elif year > 9999:
            bound = None
        elif acc.kind == "year_date":
            bound = dt.date(year, 1, 1).isoformat()
        else:
            bound = timestamp_key(day_number(dt.date(year, 1, 1)) * MICROS_PER_DAY)
        field = self.f("value")
        if bound is None:
            return MATCH_NONE if above else self.has(acc)
        if bound == "":
            return self.has(acc) if above else MATCH_NONE
        if above:
            return {"range": {field: {"gte": prefix + bound, "lt": end}}}
        return {"range": {field: {"gte": prefix, "lt": prefix + bound}}}

    # --- LIKE -----------------------------------------------------------------------------------------
    def like(self, e: Like, want: bool) -> Query | None:
        acc = _access(e.arg)
        if acc is None or acc.kind != "text" or not is_constant(e.pattern):
            return None
        pattern = self.constant(e.pattern)
        if pattern is None:
            return MATCH_NONE
        case = acc.case
        if e.ci:
            pattern = lower_text(pattern)
            case = "lower"
        tokens = like_tokens(pattern)
        if tokens is None:
            return MATCH_NONE  # invalid pattern: UNKNOWN for every row
        if sum(1 for kind, _ in tokens if kind == 2) > MAX_WILDCARD_STARS:
            return None
        name = {None: "value", "lower": "lower", "upper": "upper"}[case]
        prefix = f"{acc.path.key()}{SEP}{'s' if case is None else ''}"
        wildcard = _wildcard_escape(prefix) + "".join(
            "*" if kind == 2 else "?" if kind == 1 else _wildcard_escape(ch) for kind, ch in tokens
        )
        match = {"wildcard": {self.f(name): {"value": wildcard}}}
        if want != e.negated:
            return match
        return _and([self.present(acc.path, "s"), _not(match)])

    # --- IN ---------------------------------------------------------------------------------------------
    def in_list(self, e: InList, want: bool) -> Query | None:
        acc = _access(e.arg)
        if (
            acc is not None
            and acc.kind not in ("int", "year_date", "year_ts")
            and all(map(is_constant, e.items))
        ):
            values = [self.constant(i) for i in e.items]
            present = [v for v in values if v is not None]
            if acc.kind == "text":
                name = {None: "value", "lower": "lower", "upper": "upper"}[acc.case]
                prefix = f"{acc.path.key()}{SEP}{'s' if acc.case is None else ''}"
                terms = sorted({prefix + v for v in present})
            else:
                name = "value"
                prefix = f"{acc.path.key()}{SEP}{acc.tag}"
                try:
                    terms = sorted({prefix + self.encode(acc.tag, v) for v in present})
                except OverflowError:
                    terms = None
            if terms is not None:
                hit = {"terms": {self.f(name): terms}} if terms else MATCH_NONE
                miss = MATCH_NONE if len(present) < len(values) else _and([self.has(acc), _not(hit)])
                return hit if want != e.negated else miss
        if acc is None:
            return None  # one script evaluating the operand once, not one per item
        # x IN (a, b) is exactly x = a OR x = b, UNKNOWNs included.
        expanded: Expr = Or(tuple(Compare("=", e.arg, i, e.pos) for i in e.items), e.pos)
        return self.truth(Not(expanded, e.pos) if e.negated else expanded, want)

    def element_terms(self, value: Any, xtype: SqlType | None) -> list[str]:
        """Tagged v-field payloads a collection element equal to ``value`` carries. xtype None: ``value``
        is a JSON element (collection equality); else a typed scalar."""
        if xtype is None:
            if isinstance(value, bool):
                return ["b1" if value else "b0"]
            if value is None:
                return ["z"]
            if isinstance(value, str):
                return ["s" + value]
            number = json_number(value)
            return [] if number is None else ["n" + sortable_number(number)]
        if xtype is T.TEXT:
            return ["s" + value]
        if xtype.is_numeric:
            return ["n" + sortable_number(value)]
        if xtype is T.BOOLEAN:
            return ["b1" if value else "b0"]
        if xtype is T.DATE:
            return ["d" + value.isoformat()]
        return ["t" + timestamp_key(value)]

    def element_hit(self, coll: Expr, payloads: list[str]) -> Query:
        """Documents whose stored collection has an element carrying one of ``payloads``."""
        if isinstance(coll, Vals):
            keys = [coll.path.key(), coll.path.child(STAR).key()]
        else:
            assert isinstance(coll, Val)
            keys = [coll.path.child(STAR).key()]
        terms = sorted({f"{k}{SEP}{p}" for k in keys for p in payloads})
        if not terms:
            return MATCH_NONE
        return {"terms": {self.f("value"): terms}}

    def known(self, coll: Expr) -> Query:
        """Documents where the stored collection is not UNKNOWN (val() must hold an array)."""
        return MATCH_ALL if isinstance(coll, Vals) else self.present(coll.path, "a")  # type: ignore[union-attr]

    def member(self, x: Expr, coll: Expr, want: bool) -> Query | None:
        if isinstance(coll, (Vals, Val)) and is_constant(x):
            value = self.constant(x)
            if value is None:
                return MATCH_NONE
            try:
                hit = self.element_hit(coll, self.element_terms(value, x.type))
            except OverflowError:
                return None
            return hit if want else _and([self.known(coll), _not(hit)])
        acc = _access(x)
        if acc is not None and is_constant(coll):
            items = self.constant(coll)
            if not isinstance(items, list):
                return MATCH_NONE
            typed = [v for v in (_typed_element(i, x.type) for i in items) if v is not None]
            if not typed:
                return MATCH_NONE if want else self.has(acc)
            eqs = [self.access_compare(acc, "=", v) for v in typed]
            if any(q is None for q in eqs):
                return None
            hit = _or([q for q in eqs if q is not None])
            return hit if want else _and([self.has(acc), _not(hit)])
        return None

    def contains(self, e: Contains, want: bool) -> Query | None:
        if not (isinstance(e.left, (Vals, Val)) and is_constant(e.right)):
            return None
        needles = self.constant(e.right)
        if not isinstance(needles, list):
            return MATCH_NONE
        try:
            hits = [self.element_hit(e.left, self.element_terms(n, None)) for n in needles]
        except OverflowError:
            return None
        all_hit = _and(hits)
        return _and([self.known(e.left), all_hit if want else _not(all_hit)])

    def overlaps(self, e: Overlaps, want: bool) -> Query | None:
        coll, other = e.left, e.right
        if not (isinstance(coll, (Vals, Val)) and is_constant(other)):
            coll, other = e.right, e.left
            if not (isinstance(coll, (Vals, Val)) and is_constant(other)):
                return None
        items = self.constant(other)
        if not isinstance(items, list):
            return MATCH_NONE
        try:
            payloads = [p for i in items for p in self.element_terms(i, None)]
        except OverflowError:
            return None
        hit = self.element_hit(coll, payloads)
        return _and([self.known(coll), hit if want else _not(hit)])


def _compares_predicates(e: Expr) -> bool:
    return any(
        (isinstance(n, Compare) and n.left.type is T.BOOLEAN)
        or (isinstance(n, InList) and n.arg.type is T.BOOLEAN)
        for n in walk(e)
    )


def _typed_element(element: Any, xtype: SqlType) -> Any:
    """The value a constant collection element has when compared with a scalar of ``xtype`` (None: it can
    never equal one)."""
    if xtype is T.TEXT:
        return element if isinstance(element, str) else None
    if xtype.is_numeric:
        return json_number(element)
    if xtype is T.BOOLEAN:
        return element if isinstance(element, bool) else None
    if xtype is T.DATE:
        return parse_date(element) if isinstance(element, str) else None
    if xtype is T.TIMESTAMP:
        return parse_timestamp(element) if isinstance(element, str) else None
    return None


def _wildcard_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?\\" else c for c in text)


def compile_filter(
    expr: Expr,
    field: str = METADATA_INDEX_FIELD,
    *,
    now: dt.datetime | None = None,
    allow_scripts: bool = True,
) -> dict[str, Any]:
    """One query clause (usable in a bool filter or a knn ``filter``) matching exactly the documents for
    which ``evaluate(expr, metadata)`` is True. ``now`` fixes CURRENT_DATE/CURRENT_TIMESTAMP (default: the
    current UTC time). With ``allow_scripts=False`` a filter that needs painless raises FilterError."""
    return _Compiler(field, now, allow_scripts).truth(expr, True)
