"""Remote embedders: OpenAI-compatible ``POST /embeddings`` and Hugging Face TEI ``POST /embed``.

Inputs are sent in chunks of ``batch_size`` (providers cap how many inputs one call may carry: OpenAI 2048,
TEI its ``--max-client-batch-size``, 32 by default), and every answer is checked before a vector is
returned: one vector per input, in input order, each of the expected dimension. A wrong vector stored in a
k-NN index would be found only at search time, as a wrong result, so it is refused here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from proxy.models.provider import ProviderClient, api_path

__all__ = ["EMBED_PATHS", "EmbedWire", "RemoteEmbedder"]

EmbedWire = Literal["openai", "tei", "cohere"]
# Where each wire format lives under the server's root (kept once when the base URL already ends with it).
EMBED_PATHS: dict[str, str] = {"openai": "/v1/embeddings", "tei": "/embed", "cohere": "/v2/embed"}


class RemoteEmbedder:
    def __init__(
        self,
        client: ProviderClient,
        *,
        wire: EmbedWire = "openai",
        model: str | None = None,
        dimension: int | None = None,
        batch_size: int = 32,
        path: str | None = None,
    ) -> None:
        if wire not in EMBED_PATHS:
            raise ValueError(f"unknown embedding wire format {wire!r}; known: {', '.join(EMBED_PATHS)}")
        if wire in ("openai", "cohere") and not model:
            raise ValueError(f"the {wire} embeddings format needs a model name")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.client = client
        self.wire = wire
        self.model = model
        self.dimension = dimension
        self.batch_size = batch_size
        base, _, endpoint = EMBED_PATHS[wire].rpartition("/")
        # An explicit path (GoodMem's ``apiPath``) is used as given under the base URL.
        self.path = path if path is not None else api_path(client.settings.base_url, base, endpoint)

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        """``texts`` as vectors; ``query``: they are search queries (Cohere embeds them as
        ``search_query``, documents as ``search_document``; the other formats make no difference)."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            vectors.extend(await self._embed_batch(batch, query))
        return vectors

    async def _embed_batch(self, batch: list[str], query: bool) -> list[list[float]]:
        raw: Any
        if self.wire == "openai":
            answer = await self.client.post_json(self.path, {"model": self.model, "input": batch})
            raw = self._openai_vectors(answer)
        elif self.wire == "cohere":
            body = {
                "model": self.model,
                "texts": batch,
                "input_type": "search_query" if query else "search_document",
                "embedding_types": ["float"],
            }
            answer = await self.client.post_json(self.path, body)
            embeddings = answer.get("embeddings") if isinstance(answer, dict) else None
            raw = embeddings.get("float") if isinstance(embeddings, dict) else embeddings
        else:
            raw = await self.client.post_json(self.path, {"inputs": batch})
        bad = self.client.bad_shape
        if not isinstance(raw, list):
            raise bad(f"embeddings that are not a list but {type(raw).__name__}")
        if len(raw) != len(batch):
            raise bad(f"{len(raw)} embeddings for {len(batch)} inputs")
        return [self._vector(v, i) for i, v in enumerate(raw)]

    def _openai_vectors(self, answer: Any) -> list[Any]:
        """``data[].embedding`` ordered by ``data[].index``: the spec does not promise list order."""
        bad = self.client.bad_shape
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise bad("an embeddings answer without a data list")
        if not all(isinstance(item, dict) and "embedding" in item for item in data):
            raise bad("an embeddings answer with a data item without an embedding")
        indices = [item.get("index", i) for i, item in enumerate(data)]
        if sorted(indices) != list(range(len(data))) or not all(type(i) is int for i in indices):
            raise bad(f"embedding indices {indices} that are not 0..{len(data) - 1} once each")
        ordered: list[Any] = [None] * len(data)
        for index, item in zip(indices, data, strict=True):
            ordered[index] = item["embedding"]
        return ordered

    def _vector(self, value: Any, position: int) -> list[float]:
        bad = self.client.bad_shape
        ok = isinstance(value, list) and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in value
        )
        if not ok or not value:
            raise bad(f"embedding {position} that is not a non-empty list of finite numbers")
        if self.dimension is not None and len(value) != self.dimension:
            raise bad(f"embedding {position} of dimension {len(value)}, expected {self.dimension}")
        return [float(x) for x in value]
