"""The memory container record (= a GoodMem space) and the memory types it can hold.

A container is one document in the container index (ml-commons' layout plus a ``goodmem`` object); its
memories live in ml-commons' per-prefix indices, shared by every container with the same ``index_prefix``,
which is why every memory operation filters on ``memory_container_id``. Ids are UUIDs so both API families
accept them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core.configuration import has_embedding
from proxy.core.query import DEFAULT_VECTOR_FIELD
from proxy.errors import BadRequest, NotFound

__all__ = [
    "LONG_TERM_INDEX_KEY",
    "MEMORY_TYPES",
    "SWITCH_KEY",
    "Container",
    "ContainerNotFound",
    "parse_memory_type",
]

MEMORY_TYPES = ("sessions", "working", "long-term", "history")
# memproxy's own keys of the container document (never in an ml-commons answer, which lists its keys):
# the long-term index of a container whose embedding model was switched (its model's index beside the
# family's), and the state of a switch under way (proxy.core.embedding_switch).
LONG_TERM_INDEX_KEY = "memproxy_long_term_index"
SWITCH_KEY = "memproxy_embedding_switch"


class ContainerNotFound(NotFound):
    """No such container (``index_missing``: the container index itself does not exist yet)."""

    def __init__(self, container_id: str, *, index_missing: bool = False):
        super().__init__("Memory container not found")
        self.container_id = container_id
        self.index_missing = index_missing


def parse_memory_type(value: str) -> str:
    text = value.lower()
    if text not in MEMORY_TYPES:
        raise BadRequest(
            f"Invalid memory type: {value}. Must be one of: sessions, working, long-term, history"
        )
    return text


@dataclass(frozen=True)
class Container:
    id: str
    name: str
    description: str | None
    created_time: int
    last_updated_time: int
    configuration: dict[str, Any]
    backend_roles: list[str] = field(default_factory=list)
    goodmem: dict[str, Any] | None = None
    # Stored keys memproxy does not model (owner, tenant_id, ...), kept so an update does not drop them.
    extra: dict[str, Any] = field(default_factory=dict)
    seq_no: int | None = None
    primary_term: int | None = None

    @property
    def embedder_id(self) -> str | None:
        """The embedder of ``memory_embedding`` (``configuration.embedding_model_id``), if any."""
        if not has_embedding(self.configuration):
            return None
        return str(self.configuration["embedding_model_id"])

    @property
    def index_prefix(self) -> str:
        return str(self.configuration.get("index_prefix") or "default")

    @property
    def index_base(self) -> str:
        if self.configuration.get("use_system_index", True):
            return f".plugins-ml-am-{self.index_prefix}-memory-"
        return f"{self.index_prefix}-memory-"

    def index_name(self, memory_type: str) -> str | None:
        """The index of a memory type, or ``None`` when that type is disabled for this container.

        Long-term memory is enabled whenever an embedding model is configured (ml-commons also wants an LLM
        and strategies; memproxy writes long-term memories without an LLM); history follows long-term
        unless ``disable_history``.
        """
        cfg = self.configuration
        enabled = {
            "sessions": not cfg.get("disable_session", False),
            "working": True,
            "long-term": self.embedder_id is not None,
            "history": self.embedder_id is not None and not cfg.get("disable_history", False),
        }[memory_type]
        if not enabled:
            return None
        if memory_type == "long-term" and isinstance(self.extra.get(LONG_TERM_INDEX_KEY), str):
            return str(self.extra[LONG_TERM_INDEX_KEY])
        return self.index_base + memory_type

    @property
    def embedding_switch(self) -> dict[str, Any] | None:
        """The embedding-model switch under way (its job, state, source and target), if any."""
        found = self.extra.get(SWITCH_KEY)
        return dict(found) if isinstance(found, Mapping) else None

    def vector_fields(self) -> list[tuple[str, str]]:
        """(knn field, embedder id) pairs: ``memory_embedding`` for the configured model, then one
        ``memory_embedding__<n>`` per further GoodMem space embedder (n = its position in the list)."""
        if self.embedder_id is None:
            return []
        fields = [(DEFAULT_VECTOR_FIELD, self.embedder_id)]
        for n, entry in enumerate((self.goodmem or {}).get("space_embedders") or []):
            if n >= 1 and isinstance(entry, Mapping) and entry.get("embedder_id"):
                fields.append((f"{DEFAULT_VECTOR_FIELD}__{n}", str(entry["embedder_id"])))
        return fields

    def source(self) -> dict[str, Any]:
        """The stored document, keys in ml-commons' order; the id is not part of it."""
        doc: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            doc["description"] = self.description
        for key in ("owner", "tenant_id"):
            if key in self.extra:
                doc[key] = self.extra[key]
        doc["created_time"] = self.created_time
        doc["last_updated_time"] = self.last_updated_time
        doc["configuration"] = self.configuration
        if self.backend_roles:
            doc["backend_roles"] = list(self.backend_roles)
        doc.update({k: v for k, v in self.extra.items() if k not in doc})
        if self.goodmem is not None:
            doc["goodmem"] = self.goodmem
        return doc

    @classmethod
    def from_source(
        cls,
        container_id: str,
        source: Mapping[str, Any],
        *,
        seq_no: int | None = None,
        primary_term: int | None = None,
    ) -> Container:
        known = {
            "name",
            "description",
            "created_time",
            "last_updated_time",
            "configuration",
            "backend_roles",
            "goodmem",
        }
        return cls(
            id=container_id,
            name=str(source.get("name") or ""),
            description=source.get("description"),
            created_time=int(source.get("created_time") or 0),
            last_updated_time=int(source.get("last_updated_time") or 0),
            configuration=dict(source.get("configuration") or {}),
            backend_roles=list(source.get("backend_roles") or []),
            goodmem=source.get("goodmem"),
            extra={k: v for k, v in source.items() if k not in known},
            seq_no=seq_no,
            primary_term=primary_term,
        )

    @classmethod
    def from_hit(cls, hit: Mapping[str, Any]) -> Container:
        """The record of one node answer (a GET answer or a search hit with ``seq_no_primary_term``)."""
        return cls.from_source(
            str(hit["_id"]), hit["_source"], seq_no=hit.get("_seq_no"), primary_term=hit.get("_primary_term")
        )
