"""The one error kind the filter language raises (HTTP 400 in both front-ends)."""

from __future__ import annotations

from typing import Any

from proxy.errors import BadRequest

__all__ = ["FilterError"]


class FilterError(BadRequest):
    """A filter expression that cannot be parsed, typed or compiled.

    ``details`` carries the 1-based ``line``/``column`` and the 0-based ``offset`` of the problem in the
    expression text (when it has a position), so a front-end can echo it in its error body.
    """

    os_type = "parsing_exception"

    def __init__(
        self,
        problem: str,
        *,
        line: int | None = None,
        column: int | None = None,
        offset: int | None = None,
        details: dict[str, Any] | None = None,
    ):
        extra: dict[str, Any] = dict(details or {})
        where = ""
        if line is not None and column is not None:
            extra.update(line=line, column=column)
            where = f" at line {line}, column {column}"
        if offset is not None:
            extra["offset"] = offset
        super().__init__(f"invalid filter: {problem}{where}", details=extra)
        self.problem = problem
        self.line = line
        self.column = column
        self.offset = offset
