"""GoodMem metadata filter expressions: parse, evaluate, compile to OpenSearch, index metadata for them.

``parse_filter`` turns text into a validated typed AST (or raises FilterError, a 400). ``evaluate`` is the
reference meaning; ``compile_filter`` produces one OpenSearch query clause over the fields
``index_metadata`` writes, matching exactly the documents ``evaluate`` accepts. See docs/filters.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from .compiler import compile_filter
from .errors import FilterError
from .evaluator import evaluate
from .indexing import METADATA_INDEX_FIELD, index_metadata, render_metadata_mapping
from .nodes import Expr, SqlType
from .painless import SCRIPT_SOURCE
from .syntax import MAX_LENGTH as MAX_FILTER_CHARS
from .syntax import parse_syntax
from .typecheck import typecheck

__all__ = [
    "MAX_FILTER_CHARS",
    "MAX_FILTER_CHARS_PER_REQUEST",
    "METADATA_INDEX_FIELD",
    "SCRIPT_SOURCE",
    "Expr",
    "FilterError",
    "SqlType",
    "check_filter_total",
    "compile_filter",
    "evaluate",
    "filter_query",
    "index_metadata",
    "needs_script",
    "parse_filter",
    "render_metadata_mapping",
]


# The distinct expressions of one request, summed (a retrieve's spaceKeys, a batch delete's selectors): as
# much as one expression may have (syntax.MAX_LENGTH), however it is split. Parsing costs about 10 µs a
# character (lark) and holds the GIL: a stream of requests each parsing more would take the event loop's
# share of it (measured by tests/adversarial/test_stall.py).
MAX_FILTER_CHARS_PER_REQUEST = 32 * 1024


def check_filter_total(texts: Iterable[str | None], what: str) -> None:
    """400 when the distinct ``texts`` (None: no filter) of one request are longer than the request's
    budget together; checked before any of them is parsed. A text given twice is parsed once."""
    total = sum(len(text) for text in {t for t in texts if t})
    if total > MAX_FILTER_CHARS_PER_REQUEST:
        raise FilterError(
            f"the filters of {what} have {total} characters, more than the {MAX_FILTER_CHARS_PER_REQUEST} "
            "one request may carry (max_filter_chars_per_request)"
        )


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
