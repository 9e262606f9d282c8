"""Index bodies (settings + mappings) rendered from the jinja2 files in ``index_templates/``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

__all__ = ["MEMORY_TEMPLATES", "TEMPLATE_DIR", "MemoryLayout", "VectorField", "render_index_body"]

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "index_templates"

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=True,
)


# The shared memory indices: they grow with the memories, so their shards and replicas follow the
# operator's layout. Every other template (containers, jobs, models, GoodMem keys, users, grants,
# embedders, system) is a small system-like index that keeps one primary and ``auto_expand_replicas: 0-all``
# (a copy on every node, read locally, never worth a second primary).
MEMORY_TEMPLATES = frozenset(
    {"long_term", "working", "sessions", "history", "goodmem_memories", "goodmem_pages"}
)


@dataclass(frozen=True)
class MemoryLayout:
    """Primaries and replicas of a memory index memproxy creates (--memory-shards, --memory-replicas)."""

    shards: int = 1
    replicas: int = 1

    def apply(self, index_settings: Mapping[str, Any]) -> dict[str, Any]:
        """``index_settings`` (flat, without ``index.``) with this layout where they say nothing: a
        container's own ``number_of_shards``, ``number_of_replicas`` or ``auto_expand_replicas`` win."""
        settings: dict[str, Any] = {"number_of_shards": str(self.shards)}
        if "auto_expand_replicas" not in index_settings:
            settings["number_of_replicas"] = str(self.replicas)
        settings.update(index_settings)
        return settings


def VectorField(name: str, dimension: int) -> dict[str, Any]:
    if dimension < 1:
        raise ValueError(f"vector dimension must be positive, got {dimension}")
    return {"name": name, "dimension": int(dimension)}


def render_index_body(
    kind: str,
    *,
    vector_fields: Sequence[Mapping[str, Any]] = (),
    index_settings: Mapping[str, Any] | None = None,
    metadata_mapping: Mapping[str, Any] | None = None,
    layout: MemoryLayout | None = None,
) -> dict[str, Any]:
    """Render ``index_templates/<kind>.json.j2`` into an index-creation body; a memory index
    (:data:`MEMORY_TEMPLATES`) gets ``layout``'s shards and replicas (the defaults without one)."""
    flat = _flat_index_settings(index_settings or {})
    if kind in MEMORY_TEMPLATES:
        flat = (layout or MemoryLayout()).apply(flat)
    text = _env.get_template(f"{kind}.json.j2").render(
        vector_fields=list(vector_fields),
        index_settings=flat,
        metadata_mapping=metadata_mapping,
    )
    body: dict[str, Any] = json.loads(text)
    return body


def _flat_index_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """ml-commons accepts ``{"index": {"number_of_shards": "1"}}`` and ``{"index.number_of_shards": "1"}``."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping):
            for inner, v in _flat_index_settings(value).items():
                flat[f"{key}.{inner}"] = v
        else:
            flat[key] = value
    return {k.removeprefix("index."): v for k, v in flat.items()}
