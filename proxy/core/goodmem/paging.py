"""Paging of every GoodMem list: opaque tokens (URL-safe base64 without padding, as GoodMem's), the window a
request asks for, and the page it gets.

A :class:`Window` is ``maxResults`` clamped into ``[1, high]`` (GoodMem clamps rather than rejects) and the
offset inside ``nextToken``. It cuts a page either from a search that asked for one hit more than the page
(:meth:`Window.probe`, :meth:`Window.page`) or from a complete list held in memory (:meth:`Window.cut`);
either way ``next_token`` is set only when another page exists.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from proxy.errors import BadRequest

__all__ = ["Page", "Window", "decode_offset", "decode_token", "encode_offset", "encode_token"]

T = TypeVar("T")


def encode_token(state: dict[str, Any]) -> str:
    raw = json.dumps(state, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str | None) -> dict[str, Any]:
    """The state inside a token; {} for none; 400 for one this server did not issue."""
    if not token:
        return {}
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        state = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("Invalid nextToken") from None
    if not isinstance(state, dict):
        raise BadRequest("Invalid nextToken")
    return state


def encode_offset(offset: int, **extra: Any) -> str:
    return encode_token({"o": offset, **extra})


def decode_offset(token: str | None) -> int:
    offset = decode_token(token).get("o", 0)
    if not isinstance(offset, int) or offset < 0:
        raise BadRequest("Invalid nextToken")
    return offset


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T] = field(default_factory=list)
    next_token: str | None = None


@dataclass(frozen=True)
class Window:
    """The part of a list one request asks for: ``size`` items from ``start``."""

    start: int
    size: int

    @classmethod
    def of(cls, max_results: int | None, next_token: str | None, *, default: int, high: int) -> Window:
        size = default if max_results is None else max(1, min(int(max_results), high))
        return cls(start=decode_offset(next_token), size=size)

    @property
    def end(self) -> int:
        return self.start + self.size

    def probe(self) -> tuple[int, int]:
        """(start, size) of a search for one hit more than the page (which tells whether more exist)."""
        return self.start, self.size + 1

    def page(self, probed: list[T]) -> Page[T]:
        """The page from a :meth:`probe` search's hits."""
        more = len(probed) > self.size
        return Page(items=probed[: self.size], next_token=encode_offset(self.end) if more else None)

    def cut(self, everything: list[T]) -> Page[T]:
        """The page from the complete list."""
        more = self.end < len(everything)
        return Page(
            items=everything[self.start : self.end], next_token=encode_offset(self.end) if more else None
        )
