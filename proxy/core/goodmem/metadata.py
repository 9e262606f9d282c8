"""The bridge to ``proxy.filters``: parse and compile GoodMem filter expressions, index metadata for them.

Until the filters package is present, a filter is refused with a clear 400 (never ignored) and metadata is
stored without its filterable form.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from proxy.errors import BadRequest

__all__ = ["compile_metadata_filter", "index_metadata", "parse_metadata_filter"]

_UNAVAILABLE = (
    "Metadata filter expressions are not supported by this memproxy build (proxy.filters is missing)"
)


def _filters() -> Any | None:
    try:
        return importlib.import_module("proxy.filters")
    except ImportError:
        return None


def parse_metadata_filter(text: str | None) -> Any | None:
    """The parsed expression (None for no filter); a syntax error is the filter package's 400."""
    if text is None or not text.strip():
        return None
    mod = _filters()
    parse = getattr(mod, "parse_filter", None) if mod is not None else None
    if parse is None:
        raise BadRequest(_UNAVAILABLE)
    return parse(text)


def compile_metadata_filter(expr: Any) -> dict[str, Any]:
    """OpenSearch query clause (on ``metadata_index``) for a parsed expression."""
    mod = _filters()
    compile_ = getattr(mod, "compile_filter", None) if mod is not None else None
    if compile_ is None:
        raise BadRequest(_UNAVAILABLE)
    clause: dict[str, Any] = compile_(expr)
    return clause


def index_metadata(metadata: Mapping[str, Any] | None) -> Any | None:
    """The ``metadata_index`` fragment for a document, or None when there is nothing (or no filters
    package)."""
    if metadata is None:
        return None
    mod = _filters()
    fn = getattr(mod, "index_metadata", None) if mod is not None else None
    return fn(dict(metadata)) if fn is not None else None
