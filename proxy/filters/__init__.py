"""GoodMem metadata filter expressions: parse, evaluate, compile to OpenSearch, index metadata for them.

``parse_filter`` turns text into a validated typed AST (or raises FilterError, a 400). ``evaluate`` is the
reference meaning; ``compile_filter`` produces one OpenSearch query clause over the fields
``index_metadata`` writes, matching exactly the documents ``evaluate`` accepts. See docs/filters.md.
"""

from __future__ import annotations

from .compiler import compile_filter
from .errors import FilterError
from .evaluator import evaluate
from .indexing import METADATA_INDEX_FIELD, index_metadata, render_metadata_mapping
from .nodes import Expr, SqlType
from .painless import SCRIPT_SOURCE
from .syntax import parse_syntax
from .typecheck import typecheck

__all__ = [
    "METADATA_INDEX_FIELD",
    "SCRIPT_SOURCE",
    "Expr",
    "FilterError",
    "SqlType",
    "compile_filter",
    "evaluate",
    "filter_query",
    "index_metadata",
    "needs_script",
    "parse_filter",
    "render_metadata_mapping",
]


def parse_filter(text: str) -> Expr:
    """Parse and type-check a filter expression; raises FilterError naming the position and the problem."""
    return typecheck(parse_syntax(text), text)


def filter_query(text: str, field: str = METADATA_INDEX_FIELD, *, allow_scripts: bool = True) -> dict:
    """parse_filter + compile_filter in one call."""
    return compile_filter(parse_filter(text), field, allow_scripts=allow_scripts)


def needs_script(expr: Expr) -> bool:
    """Whether the compiled form of ``expr`` uses the painless interpreter."""
    try:
        compile_filter(expr, allow_scripts=False)
    except FilterError:
        return True
    return False
