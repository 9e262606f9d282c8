"""Memory containers (= GoodMem spaces): the record, and create / get / update / delete / search / list.

A container is one document in ``.plugins-ml-am-memory-container`` (ml-commons' layout plus a ``goodmem``
object); its memories live in ml-commons' per-prefix indices, shared by every container with the same
``index_prefix``, which is why every memory operation filters on ``memory_container_id``. Ids are UUIDs so
both API families accept them.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.configuration import (
    check_embedding_dimension,
    complete_for_create,
    has_embedding,
    merge_update,
    parse_configuration,
    validate_backend_roles,
)
from proxy.core.lenient import as_str
from proxy.core.query import DEFAULT_VECTOR_FIELD
from proxy.core.services import Services
from proxy.errors import BadRequest, Conflict, MemproxyError, NotFound
from proxy.filters import render_metadata_mapping
from proxy.store import goodmem as goodmem_docs
from proxy.store import memories as docs
from proxy.store.client import OpenSearchError
from proxy.store.containers import (
    CONTAINER_INDEX,
    EMBEDDING_META_KEY,
    create_index,
    delete_index,
    ensure_container_index,
    get_index_meta,
    render_memory_index,
)
from proxy.store.query_dsl import apply_ml_search_options, container_term

__all__ = [
    "CONTAINER_INDEX",
    "MEMORY_TYPES",
    "Container",
    "ContainerNotFound",
    "ContainerPage",
    "create_container",
    "delete_container",
    "get_container",
    "list_containers",
    "parse_memory_type",
    "search_containers",
    "update_container",
]

log = logging.getLogger(__name__)

MEMORY_TYPES = ("sessions", "working", "long-term", "history")
_INDEX_SETTINGS_KEY = {
    "sessions": "session_index",
    "working": "working_memory_index",
    "long-term": "long_term_memory_index",
    "history": "long_term_memory_history_index",
}
EMPTY_SEARCH_RESPONSE: dict[str, Any] = {
    "took": 0,
    "timed_out": False,
    "_shards": {"total": 0, "successful": 0, "skipped": 0, "failed": 0},
    "hits": {"total": {"value": 0, "relation": "eq"}, "max_score": None, "hits": []},
}


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
        return self.index_base + memory_type if enabled else None

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


# --- embedders and indices -------------------------------------------------------------------------


def _embedder_dimension(
    svc: Services, embedder_id: str, model_type: str = "TEXT_EMBEDDING"
) -> tuple[str, int]:
    """(canonical id, dimension) of a registered embedder, with ml-commons' texts for a bad model."""
    try:
        embedder = svc.embedders.get(embedder_id)
    except NotFound:
        raise BadRequest(f"Embedding model with ID {embedder_id} not found") from None
    if model_type != "TEXT_EMBEDDING":
        # memproxy's embedders are dense text-embedding models.
        raise BadRequest(f"Embedding model must be of type {model_type} or REMOTE, found: TEXT_EMBEDDING")
    return str(embedder.info.id), int(embedder.info.dimension)


def _index_settings(container: Container, memory_type: str) -> dict[str, Any]:
    raw = (container.configuration.get("index_settings") or {}).get(_INDEX_SETTINGS_KEY[memory_type]) or {}
    settings = dict(raw) if isinstance(raw, Mapping) else {}
    if container.configuration.get("use_system_index", True) and not any(
        "hidden" in k for k in _flat_keys(settings)
    ):
        # ml-commons' indices are system indices; hidden ones keep them out of users' wildcard searches.
        settings["hidden"] = "true"
    return settings


def _flat_keys(settings: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys: list[str] = []
    for key, value in settings.items():
        name = f"{prefix}{key}"
        keys.extend(_flat_keys(value, name + ".") if isinstance(value, Mapping) else [name])
    return keys


def _embedding_meta(svc: Services, container: Container) -> dict[str, Any]:
    canonical, dimension = _embedder_dimension(svc, str(container.embedder_id))
    return {
        "embedding_model_id": canonical,
        "embedding_model_type": container.configuration.get("embedding_model_type"),
        "embedding_dimension": dimension,
    }


def _vector_specs(svc: Services, container: Container) -> list[dict[str, Any]]:
    return [
        {"name": name, "dimension": _embedder_dimension(svc, embedder_id)[1]}
        for name, embedder_id in container.vector_fields()
    ]


def _shared_index_conflict(expected: Mapping[str, Any], meta: Mapping[str, Any]) -> str | None:
    recorded = meta.get(EMBEDDING_META_KEY)
    dims = meta.get("knn_dimensions") or {}
    if isinstance(recorded, Mapping):
        for key in ("embedding_model_id", "embedding_model_type", "embedding_dimension"):
            if recorded.get(key) != expected.get(key):
                return f"{key}: existing index has {recorded.get(key)}, requested {expected.get(key)}"
        return None
    existing = dims.get(DEFAULT_VECTOR_FIELD)
    if existing != expected.get("embedding_dimension"):
        wanted = expected.get("embedding_dimension")
        return f"embedding_dimension: existing index has {existing}, requested {wanted}"
    return None


async def _check_shared_long_term(svc: Services, container: Container) -> dict[str, Any] | None:
    """The long-term index's current meta (``None`` if absent); 400 if it was built for another embedding."""
    index = container.index_name("long-term")
    if index is None:
        return None
    expected = _embedding_meta(svc, container)
    meta = await get_index_meta(svc.store, index)
    if meta is None:
        return None
    why = _shared_index_conflict(expected, meta)
    if why is not None:
        raise BadRequest(
            "Cannot create memory container: Embedding configuration conflicts with existing shared index.\n"
            f"The long-term memory index '{index}' is shared by every container with index prefix "
            f"'{container.index_prefix}' and was created for a different embedding configuration ({why}).\n"
            "Use the same embedding_model_id, embedding_model_type and embedding_dimension, or choose "
            "another index_prefix."
        )
    dims = meta.get("knn_dimensions") or {}
    for spec in _vector_specs(svc, container):
        have = dims.get(spec["name"])
        if have is not None and have != spec["dimension"]:
            raise BadRequest(
                "Cannot create memory container: Embedding configuration conflicts with existing shared "
                f"index.\nField '{spec['name']}' of '{index}' has dimension {have}, the embedder needs "
                f"{spec['dimension']}."
            )
    return meta


async def _complete_long_term_mapping(svc: Services, container: Container, meta: Mapping[str, Any]) -> None:
    """A shared long-term index gains what this container needs and it lacks (mappings only grow): the knn
    fields of a space's extra embedders, and ``metadata_index`` if the index predates metadata filters."""
    dims = meta.get("knn_dimensions") or {}
    missing = [spec for spec in _vector_specs(svc, container) if spec["name"] not in dims]
    meta_mapping = render_metadata_mapping()
    add_metadata = "metadata_index" not in (meta.get("properties") or [])
    if not missing and not add_metadata:
        return
    body = render_memory_index("long-term", vector_fields=missing, metadata_mapping=meta_mapping)
    props = body["mappings"]["properties"]
    wanted = [s["name"] for s in missing] + (["metadata_index"] if add_metadata else [])
    index = str(container.index_name("long-term"))
    await svc.store.request(
        "PUT", f"/{_quote(index)}/_mapping", body={"properties": {name: props[name] for name in wanted}}
    )


async def _create_memory_indices(svc: Services, container: Container, types: Sequence[str]) -> None:
    meta_mapping = render_metadata_mapping()
    for memory_type in types:
        index = container.index_name(memory_type)
        if index is None:
            continue
        kwargs: dict[str, Any] = {"index_settings": _index_settings(container, memory_type)}
        if memory_type == "long-term":
            kwargs.update(
                vector_fields=_vector_specs(svc, container),
                meta={EMBEDDING_META_KEY: _embedding_meta(svc, container)},
                metadata_mapping=meta_mapping,
            )
        await create_index(svc.store, index, render_memory_index(memory_type, **kwargs))


# --- create / get ----------------------------------------------------------------------------------

_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]*$")


def _check_custom_id(container_id: str) -> None:
    """ml-commons 3.9's rules for a caller-chosen container id."""
    if not container_id.strip():
        raise BadRequest("memory container id is invalid")
    if container_id.startswith("_"):
        raise BadRequest("memory container id must not start with '_'")
    if container_id.startswith("-"):
        raise BadRequest("memory container id must not start with '-'")
    if len(container_id.encode()) > 512:
        raise BadRequest("memory container id is too long, max length is 512")
    if not _CUSTOM_ID.match(container_id):
        raise BadRequest(
            "memory container id must contain only letters, digits, underscores, and hyphens, and must start "
            "with a letter or digit"
        )


async def create_container(
    svc: Services,
    *,
    name: str | None,
    description: str | None = None,
    configuration: Mapping[str, Any] | None = None,
    backend_roles: Sequence[str] | None = None,
    goodmem: Mapping[str, Any] | None = None,
    container_id: str | None = None,
) -> Container:
    """Validate, create the memory indices the configuration enables, then store the container document.

    ``configuration`` is the ml-commons wire object (GoodMem spaces pass ``embedding_model_type:
    TEXT_EMBEDDING``, ``embedding_model_id`` and ``embedding_dimension``). The indices come first so a
    failure leaves no container document behind; indices are shared and reused, never half-owned.
    """
    if name is None:
        raise BadRequest("name is null")
    if container_id is not None:
        _check_custom_id(container_id)
    cfg = complete_for_create(parse_configuration(configuration or {}))
    roles = validate_backend_roles(list(backend_roles)) if backend_roles is not None else []
    now = now_ms()
    container = Container(
        id=container_id or str(uuid.uuid4()),
        name=as_str(name),
        description=None if description is None else as_str(description),
        created_time=now,
        last_updated_time=now,
        configuration=cfg,
        backend_roles=roles,
        goodmem=dict(goodmem) if goodmem is not None else None,
    )
    if container.embedder_id is not None:
        _, dimension = _embedder_dimension(svc, container.embedder_id, cfg["embedding_model_type"])
        check_embedding_dimension(cfg, dimension)
        meta = await _check_shared_long_term(svc, container)
        if meta is not None:
            await _complete_long_term_mapping(svc, container, meta)
    await ensure_container_index(svc.store)
    if container_id is not None and await docs.get_doc(svc.store, CONTAINER_INDEX, container_id) is not None:
        raise Conflict(f"memory container id '{container_id}' already exists")
    await _create_memory_indices(svc, container, MEMORY_TYPES)
    try:
        result = await docs.index_doc(
            svc.store, CONTAINER_INDEX, container.source(), doc_id=container.id, create=True, refresh=True
        )
    except OpenSearchError as exc:
        if exc.status == 409:
            raise Conflict(f"memory container id '{container.id}' already exists") from exc
        raise
    return replace(container, seq_no=result.get("_seq_no"), primary_term=result.get("_primary_term"))


async def get_container(svc: Services, container_id: str, *, cached: bool = False) -> Container:
    """The container record; 404 when there is none. ``cached`` (the search paths only) may reuse a read
    from the last seconds (proxy.core.cache)."""
    if cached:
        return await svc.caches.containers.get(container_id, lambda: _read_container(svc, container_id))
    return await _read_container(svc, container_id)


async def _read_container(svc: Services, container_id: str) -> Container:
    try:
        found = await svc.store.request("GET", f"/{CONTAINER_INDEX}/_doc/{_quote(container_id)}")
    except OpenSearchError as exc:
        if exc.status == 404:
            raise ContainerNotFound(container_id, index_missing=docs.is_index_missing(exc)) from None
        raise
    if not found.get("found"):
        raise ContainerNotFound(container_id)
    return Container.from_source(
        container_id, found["_source"], seq_no=found.get("_seq_no"), primary_term=found.get("_primary_term")
    )


def _quote(part: str) -> str:
    from urllib.parse import quote

    return quote(part, safe="")


# --- update ----------------------------------------------------------------------------------------

_UPDATE_ATTEMPTS = 3


async def update_container(
    svc: Services,
    container_id: str,
    *,
    name: str | None = None,
    description: str | None = None,
    backend_roles: Sequence[str] | None = None,
    configuration: Mapping[str, Any] | None = None,
    goodmem: Mapping[str, Any] | None = None,
) -> tuple[Container, dict[str, Any]]:
    """Apply an update (ml-commons semantics for ``configuration``); returns the new record and the node's
    index result. Read-modify-write under ``if_seq_no``, retried when another writer got there first."""
    parsed = parse_configuration(configuration, is_update=True) if configuration is not None else None
    roles = validate_backend_roles(list(backend_roles)) if backend_roles is not None else None
    for attempt in range(_UPDATE_ATTEMPTS):
        current = await get_container(svc, container_id)
        updated = _apply_update(current, name, description, roles, parsed, goodmem)
        await _prepare_indices_for_update(svc, current, updated)
        try:
            result = await docs.index_doc(
                svc.store,
                CONTAINER_INDEX,
                updated.source(),
                doc_id=container_id,
                refresh=True,
                if_seq_no=current.seq_no,
                if_primary_term=current.primary_term,
            )
        except OpenSearchError as exc:
            if exc.status == 409 and attempt + 1 < _UPDATE_ATTEMPTS:
                continue
            raise
        svc.caches.containers.invalidate(container_id)
        return replace(
            updated, seq_no=result.get("_seq_no"), primary_term=result.get("_primary_term")
        ), result
    raise MemproxyError("Internal server error")  # pragma: no cover - the loop returns or raises


def _apply_update(
    current: Container,
    name: str | None,
    description: str | None,
    roles: list[str] | None,
    parsed: Mapping[str, Any] | None,
    goodmem: Mapping[str, Any] | None,
) -> Container:
    cfg = merge_update(current.configuration, parsed) if parsed is not None else current.configuration
    return replace(
        current,
        name=as_str(name) if name is not None else current.name,
        description=as_str(description) if description is not None else current.description,
        backend_roles=roles if roles is not None else current.backend_roles,
        configuration=cfg,
        goodmem=dict(goodmem) if goodmem is not None else current.goodmem,
        last_updated_time=now_ms(),
    )


async def _prepare_indices_for_update(svc: Services, current: Container, updated: Container) -> None:
    """First embedding model → long-term and history indices; new space embedders → their knn fields."""
    if updated.embedder_id is None:
        return
    _, dimension = _embedder_dimension(
        svc, updated.embedder_id, updated.configuration["embedding_model_type"]
    )
    check_embedding_dimension(updated.configuration, dimension)
    meta = await _check_shared_long_term(svc, updated)
    if meta is not None:
        await _complete_long_term_mapping(svc, updated, meta)
    if current.embedder_id is None or meta is None:
        await _create_memory_indices(svc, updated, ("long-term", "history"))


# --- delete ----------------------------------------------------------------------------------------


async def _containers_sharing_prefix(svc: Services, prefix: str) -> int:
    body = {"size": 0, "track_total_hits": True, "query": {"term": {"configuration.index_prefix": prefix}}}
    result = await docs.search(svc.store, CONTAINER_INDEX, body)
    return int(result["hits"]["total"]["value"])


async def delete_container(
    svc: Services,
    container_id: str,
    *,
    delete_memory_types: Sequence[str] = (),
    delete_all_memories: bool = False,
    purge_memories: bool = False,
) -> dict[str, Any]:
    """Delete the container document; returns the node's delete result.

    ``delete_memory_types`` / ``delete_all_memories`` delete whole indices as ml-commons does (refused with
    409 when another container shares the prefix). ``purge_memories`` (memproxy, used by GoodMem) instead
    deletes this container's documents from every index it uses, which is safe on shared indices.
    """
    container = await get_container(svc, container_id)
    types = list(MEMORY_TYPES) if delete_all_memories else [parse_memory_type(t) for t in delete_memory_types]
    if types and await _containers_sharing_prefix(svc, container.index_prefix) > 1:
        raise Conflict(
            "Cannot delete memory indices as multiple containers share the index prefix "
            f"'{container.index_prefix}'. Please delete the container without index deletion, or use "
            "delete_by_query API for data cleanup."
        )
    if purge_memories:
        for memory_type in MEMORY_TYPES:
            index = container.index_name(memory_type)
            if index is not None:
                await _purge(svc, index, container.id)
    result = await docs.delete_doc(svc.store, CONTAINER_INDEX, container_id, refresh=True)
    svc.caches.containers.invalidate(container_id)
    svc.caches.access_changed()
    # The container is also a GoodMem space, whichever API deletes it: its memory records and grants go
    # with it, or they would linger unreachable in GoodMem's indices.
    await goodmem_docs.delete_by_query(
        svc.store, goodmem_docs.MEMORIES, {"term": {"space_id": container_id}}, ignore_missing=True
    )
    await goodmem_docs.delete_by_query(
        svc.store, goodmem_docs.GRANTS, {"term": {"resource_id": container_id}}, ignore_missing=True
    )
    for memory_type in dict.fromkeys(types):
        index = container.index_name(memory_type)
        if index is not None:
            await delete_index(svc.store, index)
    return result


async def _purge(svc: Services, index: str, container_id: str) -> None:
    try:
        await docs.delete_by_query(svc.store, index, container_term(container_id))
    except OpenSearchError as exc:
        if not docs.is_index_missing(exc):
            raise


# --- search / list ---------------------------------------------------------------------------------


async def search_containers(svc: Services, body: Mapping[str, Any]) -> dict[str, Any]:
    """ml-commons container ``_search``: the node's response (with ``_version``/``_seq_no`` on every hit)."""
    try:
        return await docs.search(svc.store, CONTAINER_INDEX, apply_ml_search_options(body))
    except OpenSearchError as exc:
        if docs.is_index_missing(exc):
            return dict(EMPTY_SEARCH_RESPONSE)
        raise


@dataclass(frozen=True)
class ContainerPage:
    containers: list[Container]
    total: int
    # The last hit's sort values: pass as ``search_after`` for the next page (None when the page is empty).
    next_search_after: list[Any] | None


async def list_containers(
    svc: Services,
    *,
    query: Mapping[str, Any] | None = None,
    size: int = 100,
    from_: int = 0,
    search_after: Sequence[Any] | None = None,
    sort: Sequence[Any] | None = None,
) -> ContainerPage:
    """A page of containers; the default order (created_time, then id) is total, so ``search_after`` pages
    neither skip nor repeat."""
    body: dict[str, Any] = {
        "size": size,
        "track_total_hits": True,
        "seq_no_primary_term": True,
        "query": dict(query) if query is not None else {"match_all": {}},
        "sort": list(sort) if sort is not None else [{"created_time": "asc"}, {"_id": "asc"}],
    }
    if search_after is not None:
        body["search_after"] = list(search_after)
    elif from_:
        body["from"] = from_
    try:
        result = await docs.search(svc.store, CONTAINER_INDEX, body)
    except OpenSearchError as exc:
        if docs.is_index_missing(exc):
            return ContainerPage([], 0, None)
        raise
    hits = result["hits"]["hits"]
    containers = [
        Container.from_source(
            h["_id"], h["_source"], seq_no=h.get("_seq_no"), primary_term=h.get("_primary_term")
        )
        for h in hits
    ]
    return ContainerPage(
        containers, int(result["hits"]["total"]["value"]), hits[-1].get("sort") if hits else None
    )
