"""A vector search as the core plans it: a container, a query, and the store's filter tree.

The filter tree itself (``Term``, ``And``, …) is the store's query language, in ``proxy.store.query``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from proxy.store.query import Filter, MatchAll, Recency

if TYPE_CHECKING:
    from proxy.core.container_record import Container

__all__ = ["DEFAULT_VECTOR_FIELD", "VectorSearch"]

DEFAULT_VECTOR_FIELD = "memory_embedding"


@dataclass(frozen=True)
class VectorSearch:
    """One k-NN retrieval over a container's long-term memories.

    Give ``query_text`` (embedded with the embedder of ``vector_field``) or a ready ``vector``. Every filter,
    the container's own included, is applied inside the knn clause, so the answer holds min(k, matching)
    hits before ``min_score`` (on the ml-commons score ``(1 + cos) / 2``) drops any. ``recency`` (opt-in,
    a memproxy extension) multiplies each score by its age's decay factor on the node first, so ``min_score``
    then applies to the decayed score.
    """

    container: Container
    k: int
    query_text: str | None = None
    vector: list[float] | None = None
    filter: Filter = field(default_factory=MatchAll)
    min_score: float | None = None
    ef_search: int | None = None
    vector_field: str = DEFAULT_VECTOR_FIELD
    source_excludes: tuple[str, ...] = ()
    source_includes: tuple[str, ...] = ()
    recency: Recency | None = None
