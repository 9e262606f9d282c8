"""Remote rerankers: one score per document, in the caller's order, whatever order the provider answers in.

Wire formats (docs/models.md says where each was confirmed):

* ``tei``: ``POST /rerank`` ``{"query", "texts"}`` → ``[{"index", "score"}]``;
* ``cohere``, ``jina``, ``vllm``: ``POST /v1/rerank`` ``{"model", "query", "documents", "top_n"}`` →
  ``{"results": [{"index", "relevance_score"}]}`` (vLLM serves Cohere's and Jina's shape);
* ``voyage``: ``POST /v1/rerank`` ``{"model", "query", "documents"}`` → ``{"data": [{"index",
  "relevance_score"}]}`` (all documents are scored when ``top_k`` is left out).

Providers answer sorted by relevance and may leave documents out (``top_n``); ``top_n`` is always the
number of documents, and an answer that misses or repeats an index is refused rather than guessed at.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from proxy.models.provider import ProviderClient, api_path

__all__ = ["RERANK_WIRES", "RemoteReranker", "RerankWire"]

RerankWire = Literal["tei", "cohere", "jina", "voyage", "vllm"]
# wire → (path under the server's root, key of the result list or None for a bare list, score key)
RERANK_WIRES: dict[str, tuple[str, str | None, str]] = {
    "tei": ("/rerank", None, "score"),
    "cohere": ("/v1/rerank", "results", "relevance_score"),
    "jina": ("/v1/rerank", "results", "relevance_score"),
    "vllm": ("/v1/rerank", "results", "relevance_score"),
    "voyage": ("/v1/rerank", "data", "relevance_score"),
}


class RemoteReranker:
    def __init__(
        self, client: ProviderClient, *, wire: RerankWire, model: str | None = None, path: str | None = None
    ) -> None:
        if wire not in RERANK_WIRES:
            raise ValueError(f"unknown rerank wire format {wire!r}; known: {', '.join(RERANK_WIRES)}")
        if wire != "tei" and not model:
            raise ValueError(f"the {wire} rerank format needs a model name")
        self.client = client
        self.wire = wire
        self.model = model
        default_path, self._list_key, self._score_key = RERANK_WIRES[wire]
        base, _, endpoint = default_path.rpartition("/")
        # An explicit path (GoodMem's ``apiPath``) is used as given under the base URL.
        self.path = path if path is not None else api_path(client.settings.base_url, base, endpoint)

    def _body(self, query: str, documents: list[str]) -> dict[str, Any]:
        if self.wire == "tei":
            return {"query": query, "texts": documents}
        if self.wire == "voyage":
            return {"model": self.model, "query": query, "documents": documents}
        return {"model": self.model, "query": query, "documents": documents, "top_n": len(documents)}

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One relevance score per document, ``scores[i]`` for ``documents[i]``."""
        docs = list(documents)
        if not docs:
            return []
        answer = await self.client.post_json(self.path, self._body(query, docs))
        bad = self.client.bad_shape
        if self._list_key is None:
            items = answer
        else:
            items = answer.get(self._list_key) if isinstance(answer, dict) else None
        if not isinstance(items, list):
            where = "a list" if self._list_key is None else f"an object with a {self._list_key!r} list"
            raise bad(f"a rerank answer that is not {where}")
        scores: list[float | None] = [None] * len(docs)
        for item in items:
            index = item.get("index") if isinstance(item, dict) else None
            score = item.get(self._score_key) if isinstance(item, dict) else None
            if type(index) is not int or not 0 <= index < len(docs):
                raise bad(f"a rerank result with index {index!r} for {len(docs)} documents")
            if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
                raise bad(f"a rerank result without a numeric {self._score_key!r}")
            if scores[index] is not None:
                raise bad(f"index {index} twice in a rerank answer")
            scores[index] = float(score)
        missing = [i for i, s in enumerate(scores) if s is None]
        if missing:
            raise bad(f"no rerank score for documents {missing}")
        return [s for s in scores if s is not None]
