"""Untyped syntax -> validated, typed AST (the language's static rules live here).

One module although long: it is one visitor over the syntax tree, one method per construct, and the typing
rules read best side by side (splitting it would split the rules of one operator across files)."""

from __future__ import annotations

from decimal import Decimal

from .errors import FilterError
from .evaluator import constant_value
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
    Pos,
    SqlType,
    Val,
    Vals,
    children,
    is_constant,
    walk,
)
from .paths import MAX_KEY_BYTES, MAX_PATH_ARRAY_STEPS, STAR, Path, PathSyntaxError, parse_path
from .syntax import Raw
from .values import (
    like_tokens,
    number_in_range,
    parse_date,
    parse_timestamp,
    text_to_boolean,
    text_to_integer,
    text_to_numeric,
)

__all__ = ["typecheck"]

T = SqlType

TYPE_NAMES = {
    "text": T.TEXT,
    "varchar": T.TEXT,
    "numeric": T.NUMERIC,
    "decimal": T.NUMERIC,
    "integer": T.INTEGER,
    "int": T.INTEGER,
    "bigint": T.INTEGER,
    "boolean": T.BOOLEAN,
    "bool": T.BOOLEAN,
    "date": T.DATE,
    "timestamp": T.TIMESTAMP,
    "timestamptz": T.TIMESTAMP,
}

DATE_UNITS = frozenset({"year", "quarter", "month", "day", "dow", "isodow", "doy", "epoch"})
TIMESTAMP_UNITS = DATE_UNITS | {"hour", "minute", "second"}

# What an explicit CAST may convert (source -> targets). TEXT sources are handled separately: parsing text
# at query time is only possible for constants (or, for DATE/TIMESTAMP, straight from a stored string).
_CASTS: dict[SqlType, frozenset[SqlType]] = {
    T.JSON: frozenset({T.JSON, T.TEXT, T.NUMERIC, T.INTEGER, T.BOOLEAN, T.DATE, T.TIMESTAMP}),
    T.NUMERIC: frozenset({T.NUMERIC, T.INTEGER, T.TEXT}),
    T.INTEGER: frozenset({T.INTEGER, T.NUMERIC, T.TEXT, T.BOOLEAN}),
    T.BOOLEAN: frozenset({T.BOOLEAN, T.TEXT, T.INTEGER}),
    T.DATE: frozenset({T.DATE, T.TIMESTAMP, T.TEXT}),
    T.TIMESTAMP: frozenset({T.TIMESTAMP, T.DATE, T.TEXT}),
}


class _Typer:
    def __init__(self, text: str):
        self.text = text

    def error(self, pos: Pos, problem: str) -> FilterError:
        return FilterError(problem, line=pos.line, column=pos.column, offset=pos.offset)

    # --- entry --------------------------------------------------------------------------------------------
    def root(self, raw: Raw) -> Expr:
        e = self.expr(raw)
        if e.type is T.NULL:
            return Lit(None, T.BOOLEAN, raw.pos)
        if e.type is not T.BOOLEAN:
            hint = " (CAST(val(...) AS BOOLEAN) tests a stored boolean)" if e.type is T.JSON else ""
            raise self.error(raw.pos, f"the filter must be a boolean expression, not {e.type.value}{hint}")
        _check_case_functions(e, None, self)
        return e

    def boolean(self, raw: Raw) -> Expr:
        e = self.expr(raw)
        if e.type is T.NULL:
            return Lit(None, T.BOOLEAN, e.pos)
        if e.type is not T.BOOLEAN:
            raise self.error(raw.pos, f"expected a boolean operand, got {e.type.value}")
        return e

    def expr(self, raw: Raw) -> Expr:
        method = getattr(self, "k_" + raw.kind)
        result: Expr = method(raw)
        return result

    # --- literals -----------------------------------------------------------------------------------------
    def k_number(self, raw: Raw) -> Expr:
        text: str = raw.value
        value = Decimal(text)
        if not number_in_range(value):
            raise self.error(raw.pos, f"number {text[:40]} is out of range")
        integral = not any(c in text for c in ".eE")
        return Lit(value, T.INTEGER if integral else T.NUMERIC, raw.pos)

    def k_string(self, raw: Raw) -> Expr:
        return Lit(raw.value, T.TEXT, raw.pos)

    def k_true(self, raw: Raw) -> Expr:
        return Lit(True, T.BOOLEAN, raw.pos)

    def k_false(self, raw: Raw) -> Expr:
        return Lit(False, T.BOOLEAN, raw.pos)

    def k_null(self, raw: Raw) -> Expr:
        return Lit(None, T.NULL, raw.pos)

    def k_current_date(self, raw: Raw) -> Expr:
        return Now(T.DATE, raw.pos)

    def k_current_timestamp(self, raw: Raw) -> Expr:
        return Now(T.TIMESTAMP, raw.pos)

    def k_array(self, raw: Raw) -> Expr:
        items = []
        for item_raw in raw.args:
            item = self.expr(item_raw)
            if item.type not in (T.TEXT, T.NUMERIC, T.INTEGER, T.BOOLEAN, T.NULL) or not is_constant(item):
                raise self.error(
                    item_raw.pos, "array literal elements must be constant strings, numbers, booleans or NULL"
                )
            if any(isinstance(n, Now) for n in walk(item)):
                raise self.error(item_raw.pos, "array literal elements cannot use CURRENT_DATE")
            items.append(constant_value(item))
        return ArrayLit(tuple(items), raw.pos)

    # --- functions ----------------------------------------------------------------------------------------
    def path_arg(self, raw: Raw, fn: str) -> Path:
        if len(raw.args) != 1:
            raise self.error(raw.pos, f"{fn}() takes exactly one argument, a JSONPath string")
        arg = raw.args[0]
        if arg.kind != "string":
            raise self.error(arg.pos, f"the argument of {fn}() must be a string literal such as '$.field'")
        try:
            path = parse_path(arg.value)
        except PathSyntaxError as exc:
            problem = f"bad JSONPath {arg.value!r}: {exc.problem} (at path offset {exc.offset})"
            raise self.error(arg.pos, problem) from None
        return path

    def k_call(self, raw: Raw) -> Expr:
        name = raw.value.lower()
        if name in ("val", "vals", "exists"):
            path = self.path_arg(raw, name)
            self.check_path(path, raw.args[0].pos, name)
            if name == "val":
                if path.has_star:
                    raise self.error(
                        raw.pos, "val() needs a path selecting one value; use vals() or exists() with [*]"
                    )
                return Val(path, raw.pos)
            if name == "vals":
                return Vals(path, raw.pos)
            return Exists(path, raw.pos)
        if name in ("lower", "upper"):
            if len(raw.args) != 1:
                raise self.error(raw.pos, f"{name}() takes exactly one argument")
            arg = self.expr(raw.args[0])
            if arg.type is T.NULL:
                arg = Lit(None, T.TEXT, arg.pos)
            if arg.type is not T.TEXT:
                raise self.error(raw.args[0].pos, f"{name}() needs a TEXT argument, got {arg.type.value}")
            return Case(name, arg, raw.pos)
        if name == "now":
            if raw.args:
                raise self.error(raw.pos, "now() takes no arguments")
            return Now(T.TIMESTAMP, raw.pos)
        raise self.error(
            raw.pos,
            f"unknown function {raw.value}(); supported: val, vals, exists, lower, upper, now, CAST, EXTRACT",
        )

    def check_path(self, path: Path, pos: Pos, fn: str) -> None:
        steps = path.array_steps + (1 if fn == "vals" else 0)
        mixed = path.has_star and any(isinstance(s, int) for s in path.segments)
        if fn == "vals" and not path.has_star and path.array_steps > 0:
            mixed = True
        if steps > MAX_PATH_ARRAY_STEPS and mixed:
            raise self.error(
                pos,
                f"{path} mixes [n] and [*] over more than {MAX_PATH_ARRAY_STEPS} array levels, "
                "which the index does not cover",
            )
        if len(path.key().encode()) + 3 > MAX_KEY_BYTES:
            raise self.error(pos, f"path is longer than the {MAX_KEY_BYTES - 3} bytes the index covers")

    def k_cast(self, raw: Raw) -> Expr:
        type_pos: Pos = raw.extra
        target = TYPE_NAMES.get(raw.value.lower())
        if target is None:
            raise self.error(
                type_pos,
                f"unknown type {raw.value}; supported: TEXT, NUMERIC, INTEGER, BOOLEAN, DATE, TIMESTAMP",
            )
        arg = self.expr(raw.args[0])
        return self.cast(arg, target, raw.pos)

    def cast(self, arg: Expr, target: SqlType, pos: Pos) -> Expr:
        src = arg.type
        if src is T.NULL:
            return Lit(None, target, pos)
        if src is T.ARRAY:
            raise self.error(pos, "cannot CAST a collection (vals() or an array literal)")
        if src is T.TEXT and target is not T.TEXT:
            if is_constant(arg):
                if any(isinstance(n, Now) for n in walk(arg)):
                    return Cast(arg, target, pos)
                text = constant_value(arg)
                if text is None:
                    return Lit(None, target, pos)
                return Lit(self.text_constant(text, target, arg.pos), target, pos)
            if (
                target in (T.DATE, T.TIMESTAMP)
                and isinstance(arg, Cast)
                and arg.arg.type is T.JSON
                and isinstance(arg.arg, (Val, JsonConst))
            ):
                return Cast(arg, target, pos)
            raise self.error(
                pos,
                f"CAST of a computed TEXT value to {target.value} is not supported; "
                f"CAST(val('...') AS {target.value}) converts a stored value directly",
            )
        if src is T.TEXT:
            return arg
        if target not in _CASTS[src]:
            raise self.error(pos, f"cannot CAST {src.value} to {target.value}")
        if src is target:
            return arg
        if src is T.JSON and target is T.JSON:
            return arg
        return Cast(arg, target, pos)

    def text_constant(self, text: str, target: SqlType, pos: Pos) -> object:
        value: object
        if target is T.NUMERIC:
            value = text_to_numeric(text)
        elif target is T.INTEGER:
            value = text_to_integer(text)
        elif target is T.BOOLEAN:
            value = text_to_boolean(text)
        elif target is T.DATE:
            value = parse_date(text)
        elif target is T.TIMESTAMP:
            value = parse_timestamp(text)
        else:
            raise AssertionError(target)
        if value is None:
            raise self.error(pos, f"invalid {target.value} value {text[:60]!r}")
        return value

    def k_extract(self, raw: Raw) -> Expr:
        unit = raw.value.lower()
        arg = self.expr(raw.args[0])
        if arg.type is T.NULL:
            arg = Lit(None, T.TIMESTAMP, arg.pos)
        if arg.type is T.TEXT and isinstance(arg, Lit):
            arg = self.cast(arg, T.TIMESTAMP, arg.pos)
        if arg.type not in (T.DATE, T.TIMESTAMP):
            raise self.error(raw.args[0].pos, f"EXTRACT needs a DATE or TIMESTAMP, got {arg.type.value}")
        units = DATE_UNITS if arg.type is T.DATE else TIMESTAMP_UNITS
        if unit not in units:
            raise self.error(
                raw.extra,
                f"EXTRACT unit {raw.value} is not supported for {arg.type.value}; "
                f"supported: {', '.join(sorted(u.upper() for u in units))}",
            )
        return Extract(unit, arg, raw.pos)

    # --- operators ----------------------------------------------------------------------------------------
    def k_subscript(self, raw: Raw) -> Expr:
        base = self.expr(raw.args[0])
        index_expr = self.expr(raw.args[1])
        if not (isinstance(index_expr, Lit) and index_expr.type is T.INTEGER and index_expr.value >= 0):
            raise self.error(raw.args[1].pos, "a subscript must be a non-negative integer literal")
        index = int(index_expr.value)
        if index > 999_999_999:
            raise self.error(raw.args[1].pos, "subscript too large")
        if isinstance(base, Val):
            path = base.path.child(index)
            self.check_path(path, base.pos, "val")
            return Val(path, base.pos)
        if isinstance(base, ArrayLit):
            return JsonConst(base.items[index] if index < len(base.items) else None, raw.pos)
        if isinstance(base, JsonConst):
            return JsonConst(None, raw.pos)
        raise self.error(
            raw.pos, f"only val(...) and array literals can be subscripted, not {base.type.value}"
        )

    def k_unary(self, raw: Raw) -> Expr:
        arg = self.expr(raw.args[0])
        if arg.type is T.NULL:
            return Lit(None, T.NUMERIC, raw.pos)
        if not arg.type.is_numeric:
            raise self.error(raw.pos, f"unary {raw.value} needs a number, got {arg.type.value}")
        if raw.value == "+":
            return arg
        if isinstance(arg, Lit):
            return Lit(arg.value.copy_negate() if arg.value is not None else None, arg.type, raw.pos)
        return Neg(arg, arg.type, raw.pos)

    def k_binary(self, raw: Raw) -> Expr:
        op: str = raw.value
        left = self.expr(raw.args[0])
        right = self.expr(raw.args[1])
        if op == "||":
            return self.concat(left, right, raw.pos)
        return self.arith(op, left, right, raw.pos)

    def concat(self, left: Expr, right: Expr, pos: Pos) -> Expr:
        if left.type is T.NULL:
            left = Lit(None, T.TEXT, left.pos)
        if right.type is T.NULL:
            right = Lit(None, T.TEXT, right.pos)
        if T.TEXT not in (left.type, right.type):
            raise self.error(pos, f"|| needs a TEXT operand, got {left.type.value} and {right.type.value}")
        sides = []
        for side in (left, right):
            if not side.type.is_scalar:
                raise self.error(side.pos, f"|| cannot use a {side.type.value} value; CAST it to TEXT first")
            sides.append(side if side.type is T.TEXT else self.cast(side, T.TEXT, side.pos))
        return Concat(sides[0], sides[1], pos)

    def arith(self, op: str, left: Expr, right: Expr, pos: Pos) -> Expr:
        lt, rt = left.type, right.type
        if lt is T.NULL and rt is T.NULL:
            return Lit(None, T.NUMERIC, pos)
        if lt is T.NULL:
            left, lt = (
                Lit(None, rt if rt.is_numeric else T.INTEGER, left.pos),
                rt if rt.is_numeric else T.INTEGER,
            )
        if rt is T.NULL:
            right, rt = (
                Lit(None, lt if lt.is_numeric else T.INTEGER, right.pos),
                lt if lt.is_numeric else T.INTEGER,
            )
        if lt.is_numeric and rt.is_numeric:
            result = T.INTEGER if lt is T.INTEGER and rt is T.INTEGER else T.NUMERIC
            return Arith(op, left, right, result, pos)
        if op == "+" and lt is T.DATE and rt is T.INTEGER:
            return Arith("+", left, right, T.DATE, pos)
        if op == "+" and lt is T.INTEGER and rt is T.DATE:
            return Arith("+", right, left, T.DATE, pos)
        if op == "-" and lt is T.DATE and rt is T.INTEGER:
            return Arith("-", left, right, T.DATE, pos)
        if op == "-" and lt is T.DATE and rt is T.DATE:
            return Arith("-", left, right, T.INTEGER, pos)
        hint = " (CAST val(...) to a type first)" if T.JSON in (lt, rt) else ""
        raise self.error(pos, f"operator {op} is not defined for {lt.value} and {rt.value}{hint}")

    # --- predicates ---------------------------------------------------------------------------------------
    def unify(self, left: Expr, right: Expr, pos: Pos, what: str) -> tuple[Expr, Expr]:
        """Give both operands of a comparison one comparable type (SQL's rules for untyped literals)."""
        for side in (left, right):
            if side.type in (T.JSON, T.ARRAY):
                hint = (
                    "; CAST(val(...) AS TEXT|NUMERIC|BOOLEAN|DATE) it first"
                    if side.type is T.JSON
                    else "; use IN, CONTAINS or OVERLAPS with collections"
                )
                raise self.error(side.pos, f"{what} cannot use a {side.type.value} value{hint}")
        lt, rt = left.type, right.type
        if lt is T.NULL and rt is T.NULL:
            return Lit(None, T.TEXT, left.pos), Lit(None, T.TEXT, right.pos)
        if lt is T.NULL:
            return Lit(None, rt, left.pos), right
        if rt is T.NULL:
            return left, Lit(None, lt, right.pos)
        if lt is rt or (lt.is_numeric and rt.is_numeric):
            return left, right
        if lt is T.TEXT and isinstance(left, Lit):
            return self.coerce_literal(left, rt), right
        if rt is T.TEXT and isinstance(right, Lit):
            return left, self.coerce_literal(right, lt)
        if {lt, rt} == {T.DATE, T.TIMESTAMP}:
            if lt is T.DATE:
                return Cast(left, T.TIMESTAMP, left.pos), right
            return left, Cast(right, T.TIMESTAMP, right.pos)
        raise self.error(pos, f"cannot compare {lt.value} with {rt.value}; CAST one side")

    def coerce_literal(self, lit: Lit, target: SqlType) -> Lit:
        if lit.value is None:
            return Lit(None, target, lit.pos)
        numeric_target = T.NUMERIC if target.is_numeric else target
        return Lit(self.text_constant(lit.value, numeric_target, lit.pos), numeric_target, lit.pos)

    def k_compare(self, raw: Raw) -> Expr:
        op = {"==": "=", "!=": "<>"}.get(raw.value, raw.value)
        left, right = self.unify(self.expr(raw.args[0]), self.expr(raw.args[1]), raw.pos, f"'{raw.value}'")
        return Compare(op, left, right, raw.pos)

    def k_like(self, raw: Raw) -> Expr:
        word = "ILIKE" if raw.value else "LIKE"
        arg, pattern = self.expr(raw.args[0]), self.expr(raw.args[1])
        sides = []
        for side, side_raw in ((arg, raw.args[0]), (pattern, raw.args[1])):
            if side.type is T.NULL:
                side = Lit(None, T.TEXT, side.pos)
            if side.type is not T.TEXT:
                hint = "; CAST(val(...) AS TEXT) it first" if side.type is T.JSON else ""
                raise self.error(side_raw.pos, f"{word} needs TEXT operands, got {side.type.value}{hint}")
            sides.append(side)
        if isinstance(sides[1], Lit) and sides[1].value is not None and like_tokens(sides[1].value) is None:
            raise self.error(raw.args[1].pos, f"{word} pattern must not end with the escape character \\")
        return Like(sides[0], sides[1], raw.negated, bool(raw.value), raw.pos)

    def k_is_null(self, raw: Raw) -> Expr:
        arg = self.expr(raw.args[0])
        if arg.type is T.NULL:
            arg = Lit(None, T.TEXT, arg.pos)
        return IsNull(arg, raw.negated, raw.pos)

    def k_in_list(self, raw: Raw) -> Expr:
        arg = self.expr(raw.args[0])
        items = [self.expr(r) for r in raw.args[1:]]
        if len(items) == 1 and items[0].type in (T.ARRAY, T.JSON):
            return self.member(arg, items[0], raw.negated, raw.pos, raw.args[0].pos)
        if arg.type is T.NULL:
            return Lit(None, T.BOOLEAN, raw.pos)
        if arg.type in (T.JSON, T.ARRAY):
            raise self.error(raw.args[0].pos, f"IN cannot test a {arg.type.value} value; CAST it first")
        if arg.type is T.DATE and any(i.type is T.TIMESTAMP for i in items):
            arg = Cast(arg, T.TIMESTAMP, arg.pos)  # promote once; DATE items then promote against it
        typed: list[Expr] = []
        for item, item_raw in zip(items, raw.args[1:], strict=True):
            new_arg, new_item = self.unify(arg, item, item_raw.pos, "IN")
            assert new_arg is arg, "only the DATE/TIMESTAMP case changes the left side, handled above"
            typed.append(new_item)
        return InList(arg, tuple(typed), raw.negated, raw.pos)

    def k_in_array(self, raw: Raw) -> Expr:
        return self.member(
            self.expr(raw.args[0]), self.expr(raw.args[1]), raw.negated, raw.pos, raw.args[0].pos
        )

    def collection_operand(self, e: Expr) -> None:
        """A val() used as a collection is read through its elements' [*] key, which must be indexed."""
        if isinstance(e, Val):
            self.check_path(e.path.child(STAR), e.pos, "val")

    def member(self, arg: Expr, coll: Expr, negated: bool, pos: Pos, arg_pos: Pos) -> Expr:
        self.collection_operand(coll)
        if coll.type not in (T.ARRAY, T.JSON):
            raise self.error(
                pos, f"IN <array> needs vals(), val() or an array literal, got {coll.type.value}"
            )
        if arg.type is T.NULL:
            return Lit(None, T.BOOLEAN, pos)
        if arg.type in (T.JSON, T.ARRAY):
            raise self.error(arg_pos, f"the left operand of IN cannot be {arg.type.value}; CAST it first")
        return Member(arg, coll, negated, pos)

    def k_contains(self, raw: Raw) -> Expr:
        left, right = self.expr(raw.args[0]), self.expr(raw.args[1])
        if left.type not in (T.ARRAY, T.JSON):
            raise self.error(
                raw.args[0].pos,
                f"CONTAINS needs a collection (vals(), val() or an array literal) on the left, got "
                f"{left.type.value}; for substrings use LIKE",
            )
        self.collection_operand(left)
        self.collection_operand(right)
        if right.type is T.NULL:
            return Lit(None, T.BOOLEAN, raw.pos)
        return Contains(left, right, raw.pos)

    def k_overlaps(self, raw: Raw) -> Expr:
        left, right = self.expr(raw.args[0]), self.expr(raw.args[1])
        for side, side_raw in ((left, raw.args[0]), (right, raw.args[1])):
            if side.type not in (T.ARRAY, T.JSON):
                raise self.error(
                    side_raw.pos, f"OVERLAPS needs collections on both sides, got {side.type.value}"
                )
            self.collection_operand(side)
        return Overlaps(left, right, raw.pos)

    def k_and(self, raw: Raw) -> Expr:
        return And(tuple(self.boolean(a) for a in raw.args), raw.pos)

    def k_or(self, raw: Raw) -> Expr:
        return Or(tuple(self.boolean(a) for a in raw.args), raw.pos)

    def k_not(self, raw: Raw) -> Expr:
        return Not(self.boolean(raw.args[0]), raw.pos)


def _check_case_functions(e: Expr, outer: str | None, typer: _Typer) -> None:
    """lower()/upper() of stored text read pre-folded index entries, so a stored value may pass through one
    case function (repeated) but not through both: lower(upper(x)) has no index entry to read."""
    if is_constant(e):
        return
    if isinstance(e, Case):
        if outer is not None and outer != e.fn:
            raise typer.error(e.pos, "lower() and upper() cannot be nested over a stored value")
        _check_case_functions(e.arg, e.fn, typer)
    elif isinstance(e, Concat) or (isinstance(e, Cast) and e.type is T.TEXT and e.arg.type is T.TEXT):
        for c in children(e):
            _check_case_functions(c, outer, typer)
    elif isinstance(e, Like) and e.ci:
        _check_case_functions(e.arg, "lower", typer)
        _check_case_functions(e.pattern, "lower", typer)
    else:
        for c in children(e):
            _check_case_functions(c, None, typer)


def typecheck(raw: Raw, text: str) -> Expr:
    return _Typer(text).root(raw)
