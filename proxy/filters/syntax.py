"""Text -> untyped syntax tree, with FilterErrors that name the position and the problem."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from .errors import FilterError
from .nodes import Pos

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "Raw", "parse_syntax"]

# Parsing costs about 10 µs a character, and some callers parse on the event loop (list memories' filter):
# 32 KiB bounds one parse to a few hundred ms on a busy machine and still fits an IN list of 500 UUIDs.
MAX_LENGTH = 32 * 1024
# Visitors recurse; and/or chains are flattened so only real nesting counts towards this.
MAX_DEPTH = 96

_ESCAPES = {"'": "'", "\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}

_TERMINAL_NAMES = {
    "OR": "OR",
    "AND": "AND",
    "NOT": "NOT",
    "LIKE": "LIKE",
    "ILIKE": "ILIKE",
    "IS": "IS",
    "IN": "IN",
    "NULL": "NULL",
    "TRUE": "TRUE",
    "FALSE": "FALSE",
    "CONTAINS": "CONTAINS",
    "OVERLAPS": "OVERLAPS",
    "CAST": "CAST",
    "AS": "AS",
    "EXTRACT": "EXTRACT",
    "FROM": "FROM",
    "CURRENT_DATE": "CURRENT_DATE",
    "CURRENT_TIMESTAMP": "CURRENT_TIMESTAMP",
    "NAME": "a name",
    "NUMBER": "a number",
    "STRING": "a string",
    "COMP_OP": "a comparison operator",
    "CONCAT_OP": "'||'",
    "ADD_OP": "'+' or '-'",
    "MUL_OP": "'*', '/' or '%'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "$END": "the end of the expression",
}


@dataclass(frozen=True, slots=True)
class Raw:
    """One syntax node: ``kind`` names the construct, ``value`` holds its token-level payload (operator,
    literal text, function name...), ``args`` its operands."""

    kind: str
    pos: Pos
    args: tuple[Raw, ...] = ()
    value: Any = None
    negated: bool = False
    extra: Any = field(default=None, compare=False)


@cache
def _parser() -> Lark:
    grammar = resources.files(__package__).joinpath("filter.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True)


def _pos_of(text: str, offset: int) -> Pos:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Pos(line, column, offset)


def _error(text: str, offset: int, problem: str) -> FilterError:
    pos = _pos_of(text, offset)
    return FilterError(problem, line=pos.line, column=pos.column, offset=offset)


def _token_pos(tok: Token) -> Pos:
    return Pos(tok.line or 1, tok.column or 1, tok.start_pos or 0)


def decode_string(text: str, token: str, offset: int) -> str:
    """The value of a single-quoted literal: '' is a quote; \\' \\\\ \\" \\n \\r \\t \\b \\f are decoded; any
    other backslash pair is kept as written (so '50\\%' reaches LIKE as an escaped %)."""
    body = token[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
        elif c == "'":
            out.append("'")
            i += 2
        else:
            out.append(c)
            i += 1
    value = "".join(out)
    for j, ch in enumerate(value):
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise _error(text, offset + 1 + j, "string literal contains an unpaired surrogate")
    return value


def _describe_bad_string(text: str, offset: int) -> str:
    i = offset + 1
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and ord(text[i + 1]) >= 0x20 and text[i + 1] != "\x7f":
            i += 2
            continue
        if c == "'":
            if i + 1 < len(text) and text[i + 1] == "'":
                i += 2
                continue
            break
        if ord(c) < 0x20 or c == "\x7f":
            return f"raw control character U+{ord(c):04X} inside a string literal (write \\n, \\t, ...)"
        i += 1
    return "unterminated string literal"


def _syntax_error(text: str, exc: UnexpectedInput) -> FilterError:
    if isinstance(exc, UnexpectedCharacters):
        offset = exc.pos_in_stream or 0
        c = text[offset] if offset < len(text) else ""
        if c == "'":
            return _error(text, offset, _describe_bad_string(text, offset))
        if c == '"':
            return _error(text, offset, "double-quoted strings are not supported; use single quotes")
        if c == "\\":
            return _error(text, offset, "unexpected '\\' outside a string literal")
        return _error(text, offset, f"unexpected character {c!r}")
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        expected = sorted({_TERMINAL_NAMES.get(t, t) for t in exc.expected if not t.startswith("__")})
        hint = f"; expected {', '.join(expected)}" if expected and len(expected) <= 12 else ""
        if tok.type != "NAME" and set(exc.expected) == {"LPAR"}:
            # A NAME not followed by '(' is a bare identifier (or NaN/Infinity): name it, not what follows.
            before = text[: len(text) if tok.type == "$END" else (tok.start_pos or 0)].rstrip()
            m = re.search(r"[A-Za-z_][A-Za-z0-9_]*$", before)
            if m and m.group().lower() not in ("cast", "extract"):
                tok = Token("NAME", m.group(), start_pos=m.start())
        if tok.type == "$END":
            return _error(text, len(text), f"unexpected end of expression{hint}")
        offset = tok.start_pos or 0
        if tok.type == "NAME" and str(tok).lower() in ("nan", "infinity", "inf"):
            return _error(text, offset, f"{tok} is not a valid number")
        if tok.type == "NAME":
            problem = f"unexpected name {str(tok)!r} (bare identifiers are not allowed; use val('$.name'))"
            return _error(text, offset, problem)
        what = _TERMINAL_NAMES.get(tok.type, repr(str(tok)))
        return _error(text, offset, f"unexpected {what} {str(tok)!r}{hint}")
    if isinstance(exc, UnexpectedEOF):
        return _error(text, len(text), "unexpected end of expression")
    return _error(text, 0, str(exc))


def parse_syntax(text: str) -> Raw:
    if not isinstance(text, str):
        raise FilterError("the filter must be a string")
    if len(text) > MAX_LENGTH:
        raise FilterError(
            f"expression is longer than {MAX_LENGTH} characters ({len(text)}), the most a filter may have "
            "(max_filter_chars)"
        )
    if not text.strip() or all(not line.split("--")[0].strip() for line in text.splitlines()):
        raise FilterError("the filter expression is empty")
    for i, ch in enumerate(text):
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise _error(text, i, "unpaired surrogate in expression")
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(text, exc) from None
    raw = _Builder(text).build(tree)
    _check_depth(raw, text)
    return raw


def _check_depth(root: Raw, text: str) -> None:
    stack: list[tuple[Raw, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _error(text, node.pos.offset, f"expression nests more than {MAX_DEPTH} levels deep")
        stack.extend((a, depth + 1) for a in node.args)


class _Builder:
    """Lark tree -> Raw, iteratively (a long AND chain is a left-deep tree that would overflow a recursive
    transformer)."""

    def __init__(self, text: str):
        self.text = text

    def build(self, tree: Tree | Token) -> Raw:
        done: dict[int, Any] = {}
        stack: list[tuple[Tree | Token, bool]] = [(tree, False)]
        while stack:
            node, expanded = stack.pop()
            if isinstance(node, Token) or node is None:
                done[id(node)] = node
                continue
            if not expanded:
                stack.append((node, True))
                stack.extend((c, False) for c in node.children if c is not None)
                continue
            kids = [done.pop(id(c)) if c is not None else None for c in node.children]
            done[id(node)] = self._make(node, kids)
        result = done[id(tree)]
        assert isinstance(result, Raw)
        return result

    def _pos(self, tree: Tree) -> Pos:
        meta = tree.meta
        if getattr(meta, "empty", True):
            return Pos(1, 1, 0)
        return Pos(meta.line, meta.column, meta.start_pos)

    def _make(self, tree: Tree, kids: list[Any]) -> Any:
        rule = tree.data
        pos = self._pos(tree)
        ops = [k for k in kids if isinstance(k, Raw)]
        toks = [k for k in kids if isinstance(k, Token)]
        negated = any(t.type == "NOT" for t in toks)
        if rule in ("or_", "and_"):
            kind = "or" if rule == "or_" else "and"
            items: list[Raw] = []
            for op in ops:
                items.extend(op.args if op.kind == kind and op.extra == "chain" else (op,))
            return Raw(kind, pos, tuple(items), extra="chain")
        if rule == "not_":
            return Raw("not", pos, (ops[0],))
        if rule == "compare":
            op_tok = next(t for t in toks if t.type == "COMP_OP")
            return Raw("compare", _token_pos(op_tok), tuple(ops), value=str(op_tok))
        if rule in ("like", "ilike"):
            return Raw("like", pos, tuple(ops), value=rule == "ilike", negated=negated)
        if rule == "is_null":
            return Raw("is_null", pos, tuple(ops), negated=negated)
        if rule == "in_list":
            arg, lst = ops[0], ops[1]
            return Raw("in_list", pos, (arg, *lst.args), negated=negated)
        if rule == "in_array":
            return Raw("in_array", pos, tuple(ops), negated=negated)
        if rule in ("contains", "overlaps"):
            return Raw(rule, pos, tuple(ops))
        if rule == "binary":
            op_tok = next(t for t in toks if t.type in ("CONCAT_OP", "ADD_OP", "MUL_OP"))
            return Raw("binary", _token_pos(op_tok), tuple(ops), value=str(op_tok))
        if rule == "unary":
            return Raw("unary", pos, tuple(ops), value=str(toks[0]))
        if rule == "paren":
            return ops[0]
        if rule == "subscript":
            return Raw("subscript", pos, tuple(ops))
        if rule == "arg_list":
            return Raw("args", pos, tuple(ops))
        if rule == "number":
            return Raw("number", pos, value=str(toks[0]))
        if rule == "string":
            tok = toks[0]
            return Raw("string", pos, value=decode_string(self.text, str(tok), tok.start_pos or 0))
        if rule in ("true", "false", "null", "current_date", "current_timestamp"):
            return Raw(rule, pos)
        if rule == "cast":
            name = next(t for t in toks if t.type == "NAME")
            return Raw("cast", pos, tuple(ops), value=str(name), extra=_token_pos(name))
        if rule == "extract":
            name = next(t for t in toks if t.type == "NAME")
            return Raw("extract", pos, tuple(ops), value=str(name), extra=_token_pos(name))
        if rule == "call":
            name = toks[0]
            args = ops[0].args if ops else ()
            return Raw("call", pos, args, value=str(name))
        if rule == "array":
            return Raw("array", pos, ops[0].args if ops else ())
        raise AssertionError(f"unhandled grammar rule {rule}")
