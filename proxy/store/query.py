"""The store's query language: the one filter tree both APIs build, and the hits searches return.

Filters form one boolean tree whose leaves come from ml-commons namespace/tags (``Term``), the caller's own
Query DSL (``RawDsl``) and parsed GoodMem expressions (``MetadataFilter``). ``proxy.store.query_dsl`` compiles
it; a vector search (``proxy.core.query.VectorSearch``) carries the tree whole so that every clause goes
*inside* the knn clause (efficient filtering).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = [
    "And",
    "Exists",
    "Filter",
    "Hit",
    "MatchAll",
    "MetadataFilter",
    "Not",
    "Or",
    "Range",
    "RawDsl",
    "Recency",
    "Term",
    "Terms",
    "all_of",
    "term_map",
]


@dataclass(frozen=True)
class MatchAll:
    """Matches every document (the neutral element of ``And``)."""


@dataclass(frozen=True)
class Term:
    """Exact match of one value (``flat_object`` sub-paths such as ``namespace.user_id`` included)."""

    field: str
    value: Any


@dataclass(frozen=True)
class Terms:
    field: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Exists:
    field: str


@dataclass(frozen=True)
class Range:
    field: str
    gte: Any = None
    gt: Any = None
    lte: Any = None
    lt: Any = None


@dataclass(frozen=True)
class RawDsl:
    """A caller's Query DSL object, passed to the node as it is (the node validates it)."""

    query: Mapping[str, Any]


@dataclass(frozen=True)
class MetadataFilter:
    """A parsed GoodMem filter expression; compiled by ``proxy.filters.compile_filter``."""

    expr: Any


@dataclass(frozen=True)
class And:
    clauses: tuple[Filter, ...]


@dataclass(frozen=True)
class Or:
    clauses: tuple[Filter, ...]


@dataclass(frozen=True)
class Not:
    clause: Filter


Filter: TypeAlias = MatchAll | Term | Terms | Exists | Range | RawDsl | MetadataFilter | And | Or | Not


def all_of(filters: Iterable[Filter | None]) -> Filter:
    """``And`` of the given filters, skipping ``None`` and ``MatchAll``; flattens nested ``And``."""
    flat: list[Filter] = []
    for f in filters:
        if f is None or isinstance(f, MatchAll):
            continue
        flat.extend(f.clauses if isinstance(f, And) else (f,))
    if not flat:
        return MatchAll()
    if len(flat) == 1:
        return flat[0]
    return And(tuple(flat))


def term_map(prefix: str, values: Mapping[str, Any] | None) -> list[Filter]:
    """One ``Term`` per entry, on ``<prefix>.<key>`` (ml-commons' namespace/tags filters), in input order."""
    return [Term(f"{prefix}.{key}", value) for key, value in (values or {}).items()]


@dataclass(frozen=True)
class Recency:
    """Opt-in recency decay of a search's scores (docs/opensearch-api.md, "Recency decay"): each hit's
    score times ``0.5 ** (age / half_life)``, age = ``|now_ms - last_updated_time|``; pinned memories
    keep factor 1."""

    half_life_ms: int
    now_ms: int


@dataclass(frozen=True)
class Hit:
    id: str
    index: str
    score: float | None
    source: dict[str, Any]
    sort: list[Any] | None = None
