"""The memory indices of a container: which ones its configuration enables, their settings and vector
fields, and the checks that keep an index shared by several containers (one per ``index_prefix``) valid for
all of them.

Indices are shared and reused, never half-owned: creating one that exists already is not an error, and a
shared long-term index only ever gains fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.core.configuration import check_embedding_dimension
from proxy.core.container_record import Container
from proxy.core.query import DEFAULT_VECTOR_FIELD
from proxy.core.services import Services
from proxy.errors import BadRequest, NotFound
from proxy.filters import render_metadata_mapping
from proxy.store.containers import (
    EMBEDDING_META_KEY,
    create_index,
    get_index_meta,
    put_mapping,
    render_memory_index,
)

__all__ = ["create_memory_indices", "embedder_dimension", "prepare_long_term", "primary_shards"]

_INDEX_SETTINGS_KEY = {
    "sessions": "session_index",
    "working": "working_memory_index",
    "long-term": "long_term_memory_index",
    "history": "long_term_memory_history_index",
}


async def embedder_dimension(
    svc: Services, embedder_id: str, model_type: str = "TEXT_EMBEDDING"
) -> tuple[str, int]:
    """(canonical id, dimension) of an embedding model, with ml-commons' texts for a bad model.

    Local embedders know their dimension, remote ones are declared (GoodMem's ``dimensionality``) or
    asked once (an ml-commons remote model embeds one text), so that a wrong ``embedding_dimension`` is
    refused when the container is created, not found at search time.
    """
    try:
        model = await svc.models.embedding_model(embedder_id)
    except NotFound:
        raise BadRequest(f"Embedding model with ID {embedder_id} not found") from None
    if model_type != "TEXT_EMBEDDING":
        # memproxy stores dense vectors: its models are text-embedding models, remote ones included.
        found = "TEXT_EMBEDDING" if model.local else "REMOTE"
        raise BadRequest(f"Embedding model must be of type {model_type} or REMOTE, found: {found}")
    return model.model_id, await svc.models.dimension(model)


def _index_settings(container: Container, memory_type: str) -> dict[str, Any]:
    raw = (container.configuration.get("index_settings") or {}).get(_INDEX_SETTINGS_KEY[memory_type]) or {}
    settings = dict(raw) if isinstance(raw, Mapping) else {}
    if container.configuration.get("use_system_index", True) and not any(
        "hidden" in k for k in _flat_keys(settings)
    ):
        # ml-commons' indices are system indices; hidden ones keep them out of users' wildcard searches.
        settings["hidden"] = "true"
    return settings


def primary_shards(container: Container, memory_type: str, default: int = 1) -> int:
    """How many primary shards the container's ``memory_type`` index was made with (``default``, the
    store's ``--memory-shards``, unless its ``index_settings`` say otherwise, nested or dotted)."""

    def find(settings: Mapping[str, Any]) -> Any:
        for key, value in settings.items():
            if isinstance(value, Mapping):
                found = find(value)
                if found is not None:
                    return found
            elif key.split(".")[-1] == "number_of_shards":
                return value
        return None

    try:
        return max(1, int(find(_index_settings(container, memory_type)) or default))
    except (TypeError, ValueError):
        return default


def _flat_keys(settings: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys: list[str] = []
    for key, value in settings.items():
        name = f"{prefix}{key}"
        keys.extend(_flat_keys(value, name + ".") if isinstance(value, Mapping) else [name])
    return keys


async def _embedding_meta(svc: Services, container: Container) -> dict[str, Any]:
    canonical, dimension = await embedder_dimension(svc, str(container.embedder_id))
    return {
        "embedding_model_id": canonical,
        "embedding_model_type": container.configuration.get("embedding_model_type"),
        "embedding_dimension": dimension,
    }


async def _vector_specs(svc: Services, container: Container) -> list[dict[str, Any]]:
    return [
        {"name": name, "dimension": (await embedder_dimension(svc, embedder_id))[1]}
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
    expected = await _embedding_meta(svc, container)
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
    for spec in await _vector_specs(svc, container):
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
    missing = [spec for spec in await _vector_specs(svc, container) if spec["name"] not in dims]
    meta_mapping = render_metadata_mapping()
    add_metadata = "metadata_index" not in (meta.get("properties") or [])
    if not missing and not add_metadata:
        return
    body = render_memory_index("long-term", vector_fields=missing, metadata_mapping=meta_mapping)
    props = body["mappings"]["properties"]
    wanted = [s["name"] for s in missing] + (["metadata_index"] if add_metadata else [])
    await put_mapping(
        svc.store, str(container.index_name("long-term")), {name: props[name] for name in wanted}
    )


async def prepare_long_term(svc: Services, container: Container) -> bool:
    """Check the container's embedding against its embedder and an existing shared long-term index, and give
    that index the fields the container needs; whether the long-term index exists already.

    A container without an embedding model has no long-term index (``False``).
    """
    if container.embedder_id is None:
        return False
    cfg = container.configuration
    _, dimension = await embedder_dimension(svc, container.embedder_id, cfg["embedding_model_type"])
    check_embedding_dimension(cfg, dimension)
    meta = await _check_shared_long_term(svc, container)
    if meta is not None:
        await _complete_long_term_mapping(svc, container, meta)
    return meta is not None


async def create_memory_indices(svc: Services, container: Container, types: Sequence[str]) -> None:
    """Create the indices of ``types`` the container enables (an existing one is reused)."""
    meta_mapping = render_metadata_mapping()
    for memory_type in types:
        index = container.index_name(memory_type)
        if index is None:
            continue
        kwargs: dict[str, Any] = {
            "index_settings": _index_settings(container, memory_type),
            "layout": svc.store.memory_layout,
        }
        if memory_type == "long-term":
            kwargs.update(
                vector_fields=await _vector_specs(svc, container),
                meta={EMBEDDING_META_KEY: await _embedding_meta(svc, container)},
                metadata_mapping=meta_mapping,
            )
        await create_index(svc.store, index, render_memory_index(memory_type, **kwargs))
