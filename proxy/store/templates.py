"""Index bodies (settings + mappings) rendered from the jinja2 files in ``index_templates/``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2

__all__ = ["TEMPLATE_DIR", "VectorField", "render_index_body"]

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "index_templates"

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=True,
)


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
) -> dict[str, Any]:
    """Render ``index_templates/<kind>.json.j2`` into an index-creation body."""
    text = _env.get_template(f"{kind}.json.j2").render(
        vector_fields=list(vector_fields),
        index_settings=_flat_index_settings(index_settings or {}),
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
