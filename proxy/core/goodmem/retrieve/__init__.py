"""GoodMem retrieve, split by job: the request (:mod:`.request`), the plan (:mod:`.plan`: every check, the
query embedding and every search, before the first byte) and the ranking (:mod:`.rank`: cosines fused within a
space, merged across spaces). The events and their streaming are the GoodMem slice's
(``proxy.api.goodmem.retrieve_events``); memory records load through :meth:`Retriever.load` as they stream.

Scores: ranking, fusion and merging work on cosines, ``2 * os_score - 1`` (Lucene's cosinesimil score is
``(1 + cos) / 2``); the wire's vector-stage ``relevanceScore`` is :func:`.rank.vector_score` of the cosine:
``-cos`` (the live servers' negative inner product, the default) or ``cos`` (``--goodmem-vector-score``).
The ChatPostProcessor (:mod:`.postprocess`) reranks, filters, re-sorts, caps and asks an LLM; see
docs/goodmem-retrieve.md.
"""

from proxy.core.goodmem.retrieve.plan import RetrievalPlan, Retriever, SpaceFailed, SpaceSkipped
from proxy.core.goodmem.retrieve.rank import RankedChunk
from proxy.core.goodmem.retrieve.request import (
    ChatConfig,
    EmbedderWeight,
    HnswOptions,
    RetrieveRequest,
    SpaceKey,
)

__all__ = [
    "ChatConfig",
    "EmbedderWeight",
    "HnswOptions",
    "RankedChunk",
    "RetrievalPlan",
    "RetrieveRequest",
    "Retriever",
    "SpaceFailed",
    "SpaceKey",
    "SpaceSkipped",
]
