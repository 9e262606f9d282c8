"""The typed AST of a validated filter expression.

Every node knows its SQL type; the typer (``typecheck``) has already applied the coercions, so visitors
(the evaluator and the compilers) never re-derive types.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .paths import Path

__all__ = [
    "And",
    "Arith",
    "ArrayLit",
    "Case",
    "Cast",
    "Compare",
    "Concat",
    "Contains",
    "Exists",
    "Expr",
    "Extract",
    "InList",
    "IsNull",
    "JsonConst",
    "Like",
    "Lit",
    "Member",
    "Neg",
    "Not",
    "Now",
    "Or",
    "Overlaps",
    "Pos",
    "SqlType",
    "Val",
    "Vals",
    "children",
    "is_constant",
    "walk",
]


class SqlType(Enum):
    TEXT = "TEXT"
    NUMERIC = "NUMERIC"
    INTEGER = "INTEGER"
    BOOLEAN = "BOOLEAN"
    DATE = "DATE"
    TIMESTAMP = "TIMESTAMP"
    JSON = "JSON"  # a jsonb value: what val() yields
    ARRAY = "ARRAY"  # a collection of JSON values: vals(), array literals
    NULL = "NULL"  # the type of a bare NULL literal before context gives it one

    @property
    def is_numeric(self) -> bool:
        return self in (SqlType.NUMERIC, SqlType.INTEGER)

    @property
    def is_scalar(self) -> bool:
        return self not in (SqlType.JSON, SqlType.ARRAY)


@dataclass(frozen=True, slots=True)
class Pos:
    line: int
    column: int
    offset: int


NOPOS = Pos(0, 0, 0)


@dataclass(frozen=True, slots=True)
class Lit:
    """A constant. TEXT: str, NUMERIC/INTEGER: Decimal, BOOLEAN: bool, DATE: datetime.date,
    TIMESTAMP: int microseconds since the epoch (UTC); None is SQL NULL of ``type``."""

    value: Any
    type: SqlType
    pos: Pos = field(default=NOPOS, compare=False)


@dataclass(frozen=True, slots=True)
class ArrayLit:
    """``[e, ...]`` of constant JSON scalars (str, Decimal, bool, None)."""

    items: tuple[Any, ...]
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.ARRAY


@dataclass(frozen=True, slots=True)
class JsonConst:
    """A constant JSON value (an element picked out of an array literal by a subscript)."""

    value: Any
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.JSON


@dataclass(frozen=True, slots=True)
class Val:
    path: Path
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.JSON


@dataclass(frozen=True, slots=True)
class Vals:
    path: Path
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.ARRAY


@dataclass(frozen=True, slots=True)
class Exists:
    path: Path
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Cast:
    arg: Expr
    type: SqlType
    pos: Pos = field(default=NOPOS, compare=False)


@dataclass(frozen=True, slots=True)
class Case:
    """lower() / upper()."""

    fn: str
    arg: Expr
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.TEXT


@dataclass(frozen=True, slots=True)
class Extract:
    unit: str  # lower-case: year, quarter, month, day, dow, isodow, doy, hour, minute, second, epoch
    arg: Expr
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.NUMERIC


@dataclass(frozen=True, slots=True)
class Now:
    """CURRENT_DATE / CURRENT_TIMESTAMP, fixed per evaluation or compilation."""

    type: SqlType
    pos: Pos = field(default=NOPOS, compare=False)


@dataclass(frozen=True, slots=True)
class Neg:
    arg: Expr
    type: SqlType
    pos: Pos = field(default=NOPOS, compare=False)


@dataclass(frozen=True, slots=True)
class Arith:
    """+ - * / %. With a DATE operand: DATE +/- INTEGER (days) and DATE - DATE (days between)."""

    op: str
    left: Expr
    right: Expr
    type: SqlType
    pos: Pos = field(default=NOPOS, compare=False)


@dataclass(frozen=True, slots=True)
class Concat:
    left: Expr
    right: Expr
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.TEXT


@dataclass(frozen=True, slots=True)
class Compare:
    """op in = <> < <= > >=; both operands have the same comparable type (numeric types mix)."""

    op: str
    left: Expr
    right: Expr
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Like:
    arg: Expr
    pattern: Expr
    negated: bool
    ci: bool  # ILIKE: lower(arg) LIKE lower(pattern)
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.BOOLEAN


@dataclass(frozen=True, slots=True)
class IsNull:
    arg: Expr
    negated: bool
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.BOOLEAN


@dataclass(frozen=True, slots=True)
class InList:
    """x [NOT] IN (a, b, ...): the OR of x = a, x = b, ... (SQL three-valued semantics)."""

    arg: Expr
    items: tuple[Expr, ...]
    negated: bool
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Member:
    """x [NOT] IN <array>: x equals some element of the collection."""

    arg: Expr
    coll: Expr
    negated: bool
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Contains:
    """a CONTAINS b: every element of collection b (or the scalar b) is an element of collection a."""

    left: Expr
    right: Expr
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Overlaps:
    left: Expr
    right: Expr
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.BOOLEAN


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Expr, ...]
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Expr, ...]
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Not:
    arg: Expr
    pos: Pos = field(default=NOPOS, compare=False)
    type: SqlType = SqlType.BOOLEAN


Expr = (
    Lit
    | ArrayLit
    | JsonConst
    | Val
    | Vals
    | Exists
    | Cast
    | Case
    | Extract
    | Now
    | Neg
    | Arith
    | Concat
    | Compare
    | Like
    | IsNull
    | InList
    | Member
    | Contains
    | Overlaps
    | And
    | Or
    | Not
)


def children(node: Expr) -> tuple[Expr, ...]:
    if isinstance(node, (Cast, Case, Extract, Neg, IsNull, Not)):
        return (node.arg,)
    if isinstance(node, (Arith, Concat, Compare, Contains, Overlaps)):
        return (node.left, node.right)
    if isinstance(node, Like):
        return (node.arg, node.pattern)
    if isinstance(node, InList):
        return (node.arg, *node.items)
    if isinstance(node, Member):
        return (node.arg, node.coll)
    if isinstance(node, (And, Or)):
        return node.items
    return ()


def walk(node: Expr) -> Iterator[Expr]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(children(n))


def is_constant(node: Expr) -> bool:
    """True when the value does not depend on the document (it may still depend on CURRENT_DATE)."""
    return not any(isinstance(n, (Val, Vals, Exists)) for n in walk(node))
