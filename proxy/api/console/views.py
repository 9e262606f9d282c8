"""What the console's pages show, built from the core's objects: rows and cards, never a secret.

Vectors are elided wherever a stored document or a sent request is shown (a 384-number list helps no one
read a page); the exact request is still on the page, unabridged, for whoever wants to copy it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from proxy.api.console.render import pretty_json, without_userinfo
from proxy.core.container_record import Container
from proxy.core.inspection import MemoryTypeCount
from proxy.core.models import ModelRecord, StartupModel
from proxy.embedding.config import EmbedderInfo
from proxy.store.client import SentRequest

__all__ = [
    "ContainerRow",
    "HitView",
    "MemoryView",
    "ModelRow",
    "RequestView",
    "elide_vectors",
    "local_embedder_rows",
    "registered_model_rows",
    "startup_model_rows",
]

# A list of more numbers than this is shown as its length: vectors, never a short list a person wrote.
_VECTOR_MIN = 16


def elide_vectors(value: Any) -> Any:
    """``value`` with every long list of numbers replaced by ``"<N numbers>"``."""
    if isinstance(value, Mapping):
        return {k: elide_vectors(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if len(value) > _VECTOR_MIN and all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in value
        ):
            return f"<{len(value)} numbers>"
        return [elide_vectors(v) for v in value]
    return value


def _strategies(container: Container) -> list[dict[str, Any]]:
    found = container.configuration.get("strategies") or []
    return [dict(s) for s in found if isinstance(s, Mapping)]


@dataclass(frozen=True)
class ContainerRow:
    """One container (= GoodMem space) as the list and the container page show it."""

    id: str
    name: str
    description: str | None
    kind: str
    embedders: list[str]
    strategies: list[dict[str, Any]]
    counts: Sequence[MemoryTypeCount]
    configuration: dict[str, Any]

    @classmethod
    def of(cls, container: Container, counts: Sequence[MemoryTypeCount]) -> ContainerRow:
        return cls(
            id=container.id,
            name=container.name,
            description=container.description,
            kind="GoodMem space" if container.goodmem is not None else "ml-commons container",
            embedders=[embedder for _, embedder in container.vector_fields()],
            strategies=_strategies(container),
            counts=counts,
            configuration=container.configuration,
        )

    def strategy_names(self) -> list[str]:
        return [str(s.get("type") or s.get("id") or "?") for s in self.strategies]


# The fields that hold a memory's text, by memory type (long-term, working, sessions, history).
_TEXT_FIELDS = ("memory", "messages", "structured_data", "summary", "after", "before")


@dataclass(frozen=True)
class MemoryView:
    """One stored memory: its text, namespace, tags and metadata, and the whole document (vectors elided)."""

    id: str
    index: str
    text: str
    namespace: Any
    tags: Any
    metadata: Any
    created_time: Any
    source_json: str

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> MemoryView:
        source: Mapping[str, Any] = doc.get("_source") or {}
        text: Any = next((source[f] for f in _TEXT_FIELDS if source.get(f) not in (None, "", [])), "")
        return cls(
            id=str(doc.get("_id")),
            index=str(doc.get("_index")),
            text=text if isinstance(text, str) else pretty_json(text),
            namespace=source.get("namespace"),
            tags=source.get("tags"),
            metadata=source.get("metadata"),
            created_time=source.get("created_time"),
            source_json=pretty_json(elide_vectors(source)),
        )


@dataclass(frozen=True)
class HitView:
    """One search hit: its score(s), and the memory it found."""

    score: float | None
    memory: MemoryView
    detail: str = ""
    # retrieve's cosine (its wire score is -cos under the live convention): what its score curve draws.
    cosine: float | None = None


@dataclass(frozen=True)
class RequestView:
    """One request memproxy sent to the node: readable (vectors elided) and exact."""

    method: str
    target: str
    body: str
    exact_body: str
    is_search: bool

    @classmethod
    def of(cls, sent: SentRequest) -> RequestView:
        target = sent.path + (("?" + urlencode(sent.params)) if sent.params else "")
        if sent.body is None:
            body = exact = ""
        elif isinstance(sent.body, str | bytes):
            exact = sent.body if isinstance(sent.body, str) else sent.body.decode("utf-8", "replace")
            body = exact
        else:
            body = pretty_json(elide_vectors(sent.body))
            exact = json.dumps(sent.body, ensure_ascii=False)
        return cls(sent.method, target, body, exact, sent.path.endswith("/_search"))


@dataclass(frozen=True)
class ModelRow:
    """A model of the registry. ``credential`` says only whether one is set: never what it is."""

    id: str
    kind: str
    source: str
    provider: str
    endpoint: str
    model: str
    dimension: int | None
    credential: str


def local_embedder_rows(infos: Sequence[EmbedderInfo]) -> list[ModelRow]:
    return [
        ModelRow(
            id=i.id,
            kind="embedder",
            source="local",
            provider=f"transformers ({i.device}, {i.dtype})",
            endpoint="",
            model=i.name,
            dimension=i.dimension,
            credential="none",
        )
        for i in infos
    ]


def startup_model_rows(models: Mapping[str, StartupModel], rerankers: Sequence[str]) -> list[ModelRow]:
    rows = [
        ModelRow(
            id=m.model_id,
            kind=m.kind,
            source="start-up flag",
            provider=m.call.chat_provider if m.kind == "llm" else m.call.wire,
            endpoint=without_userinfo(m.call.endpoint_url),
            model=m.call.model or "",
            dimension=m.call.dimension,
            credential="from the environment" if m.api_key else "none",
        )
        for m in models.values()
    ]
    rows += [
        ModelRow(
            id=r,
            kind="reranker",
            source="local",
            provider="cross-encoder",
            endpoint="",
            model="",
            dimension=None,
            credential="none",
        )
        for r in rerankers
    ]
    return rows


def registered_model_rows(records: Sequence[ModelRecord]) -> list[ModelRow]:
    rows = []
    for record in records:
        call = record.call or {}
        endpoint = call.get("endpoint_url") if call.get("form") == "provider" else None
        dimension = call.get("dimension")
        rows.append(
            ModelRow(
                id=record.model_id,
                kind=record.kind,
                source=f"registered ({record.api})",
                provider=record.provider or str(call.get("wire") or call.get("form") or ""),
                endpoint=without_userinfo(str(endpoint)) if endpoint else "",
                model=str(call.get("model") or record.view.get("name") or ""),
                dimension=dimension if isinstance(dimension, int) else None,
                credential="sealed" if record.credential else "none",
            )
        )
    return rows
