"""The bridge to ``proxy.filters``: parse and compile GoodMem filter expressions, index metadata for them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy import filters

__all__ = ["check_filter_total", "compile_metadata_filter", "index_metadata", "parse_metadata_filter"]

# The bound on the filter text of one request (a retrieve's spaceKeys, a batch delete's selectors).
check_filter_total = filters.check_filter_total


def parse_metadata_filter(text: str | None) -> Any | None:
    """The parsed expression (None for no filter); a syntax error is the filter package's 400."""
    if text is None or not text.strip():
        return None
    return filters.parse_filter(text)


def compile_metadata_filter(expr: Any) -> dict[str, Any]:
    """OpenSearch query clause (on ``metadata_index``) for a parsed expression."""
    clause: dict[str, Any] = filters.compile_filter(expr)
    return clause


def index_metadata(metadata: Mapping[str, Any] | None) -> Any | None:
    """The ``metadata_index`` fragment for a document, or None when there is no metadata."""
    if metadata is None:
        return None
    return filters.index_metadata(dict(metadata))
