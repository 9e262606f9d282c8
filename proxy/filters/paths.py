"""The JSONPath subset of val()/vals()/exists(): ``$``, ``.name``, ``."quoted name"``, ``[n]``, ``[*]``
(and bracket-quoted names ``['name']`` / ``["name"]``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_PATH_ARRAY_STEPS",
    "STAR",
    "Path",
    "PathSyntaxError",
    "Segment",
    "Star",
    "parse_path",
    "resolve",
]

# Index keys (Path.key()) longer than this are not indexed, and filters may not name them.
MAX_KEY_BYTES = 1024
# Array nodes are indexed under every mix of [n] and [*] up to this many array steps; deeper, only the
# all-[n] and all-[*] forms exist.
MAX_PATH_ARRAY_STEPS = 4


class Star(Enum):
    """The ``[*]`` step."""

    STAR = "*"

    def __repr__(self) -> str:
        return "STAR"


STAR = Star.STAR
Segment = str | int | Star


class PathSyntaxError(ValueError):
    def __init__(self, problem: str, offset: int):
        super().__init__(problem)
        self.problem = problem
        self.offset = offset


def _is_name_start(c: str) -> bool:
    return c == "_" or c.isalpha()


def _is_name_char(c: str) -> bool:
    return c == "_" or c.isalnum()


@dataclass(frozen=True, slots=True)
class Path:
    segments: tuple[Segment, ...]

    @property
    def has_star(self) -> bool:
        return any(s is STAR for s in self.segments)

    @property
    def array_steps(self) -> int:
        return sum(1 for s in self.segments if not isinstance(s, str))

    def child(self, segment: Segment) -> Path:
        return Path((*self.segments, segment))

    def key(self) -> str:
        """Injective text form used as the index key: plain ASCII identifiers as ``.name``, every other
        member name JSON-quoted (``."a.b"``), so names containing dots, brackets, quotes or control
        characters cannot collide, and the form never contains NUL."""
        return str(self)

    def __str__(self) -> str:
        parts = ["$"]
        for s in self.segments:
            if isinstance(s, str):
                plain = s and _is_name_start(s[0]) and all(_is_name_char(c) for c in s) and s.isascii()
                parts.append("." + s if plain else "." + json.dumps(s, ensure_ascii=False))
            elif s is STAR:
                parts.append("[*]")
            else:
                parts.append(f"[{s}]")
        return "".join(parts)


def parse_path(text: str) -> Path:
    """Parse a path; raises PathSyntaxError with a 0-based offset into ``text``."""
    i = 0
    n = len(text)

    def skip_ws() -> None:
        nonlocal i
        while i < n and text[i] in " \t\r\n":
            i += 1

    def quoted(quote: str) -> str:
        nonlocal i
        start = i
        i += 1
        chars: list[str] = []
        while i < n and text[i] != quote:
            if text[i] == "\\":
                if i + 1 >= n:
                    break
                esc = text[i + 1]
                if esc == "u":
                    hexdigits = text[i + 2 : i + 6]
                    if len(hexdigits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in hexdigits):
                        raise PathSyntaxError("bad \\u escape in quoted member name", i)
                    chars.append(chr(int(hexdigits, 16)))
                    i += 6
                    continue
                mapped = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f", "/": "/"}.get(esc, esc)
                chars.append(mapped)
                i += 2
                continue
            chars.append(text[i])
            i += 1
        if i >= n:
            raise PathSyntaxError("unterminated quoted member name", start)
        i += 1
        name = "".join(chars)
        if any(0xD800 <= ord(c) <= 0xDFFF for c in name):
            raise PathSyntaxError("member name contains an unpaired surrogate", start)
        return name

    skip_ws()
    if i >= n or text[i] != "$":
        raise PathSyntaxError("a path must start with '$'", i)
    i += 1
    segments: list[Segment] = []
    while True:
        skip_ws()
        if i >= n:
            break
        c = text[i]
        if c == ".":
            i += 1
            if i < n and text[i] == ".":
                raise PathSyntaxError("recursive descent '..' is not supported", i - 1)
            skip_ws()
            if i < n and text[i] in "\"'":
                segments.append(quoted(text[i]))
                continue
            if i < n and text[i] == "*":
                raise PathSyntaxError("member wildcard '.*' is not supported; use [*] on arrays", i)
            start = i
            if i >= n or not _is_name_start(text[i]):
                raise PathSyntaxError("expected a member name after '.'", i)
            while i < n and _is_name_char(text[i]):
                i += 1
            name = text[start:i]
            if i < n and text[i] == "-":
                raise PathSyntaxError(
                    f"member name {name + text[i:].split('.')[0].split('[')[0]!r} contains '-'; "
                    'quote it: $."user-id"',
                    i,
                )
            segments.append(name)
        elif c == "[":
            i += 1
            skip_ws()
            if i < n and text[i] == "*":
                i += 1
                segments.append(STAR)
            elif i < n and text[i] in "\"'":
                segments.append(quoted(text[i]))
            elif i < n and text[i].isdigit() and text[i].isascii():
                start = i
                while i < n and text[i].isdigit() and text[i].isascii():
                    i += 1
                digits = text[start:i]
                if len(digits) > 9:
                    raise PathSyntaxError("array index too large", start)
                segments.append(int(digits))
            elif i < n and text[i] == "-":
                raise PathSyntaxError("negative array indexes are not supported", i)
            else:
                raise PathSyntaxError("expected an index, '*' or a quoted name after '['", i)
            skip_ws()
            if i >= n or text[i] != "]":
                raise PathSyntaxError("expected ']'", i)
            i += 1
        elif c == "?":
            raise PathSyntaxError("filter expressions '?()' are not supported", i)
        else:
            raise PathSyntaxError(f"unexpected {c!r} in path", i)
    return Path(tuple(segments))


def resolve(path: Path, document: Any) -> list[Any]:
    """The JSON nodes ``path`` selects in ``document``. Members of non-objects, indexes of non-arrays and
    [*] of non-arrays select nothing (no lax-mode unwrapping). A ``None`` document is a memory without
    metadata: nothing exists in it, not even ``$`` (so a stored document lacking metadata_index agrees)."""
    if document is None:
        return []
    nodes = [document]
    for seg in path.segments:
        nxt: list[Any] = []
        for node in nodes:
            if isinstance(seg, str):
                if isinstance(node, dict) and seg in node:
                    nxt.append(node[seg])
            elif seg is STAR:
                if isinstance(node, list):
                    nxt.extend(node)
            elif isinstance(node, list) and seg < len(node):
                nxt.append(node[seg])
        nodes = nxt
    return nodes
