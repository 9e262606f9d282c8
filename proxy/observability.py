"""Request ids and log records: what every layer may read about the request it works for.

The request id lives in a :class:`~contextvars.ContextVar` because the code that needs it (the store, which
sends it to OpenSearch as ``X-Opaque-Id``, and every log line) runs far below the middleware that sets it and
must not take a request parameter for it. aiohttp runs each request in its own task, and a task copies the
context it starts from, so an id never leaks from one request into another; outside a request it is None.

This module is at the bottom of the import contract (standard library only), so the store can read the id
without importing anything of the layers above it, and ``proxy.__main__`` can install the log format before
the application is built.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TextIO

__all__ = [
    "LOG_FORMATS",
    "REQUEST_ID_MAX_CHARS",
    "JsonFormatter",
    "RequestIdFilter",
    "TextFormatter",
    "accept_request_id",
    "configure_logging",
    "current_request_id",
    "is_valid_request_id",
    "new_request_id",
]

LOG_FORMATS = ("text", "json")
# A caller's id is echoed in a header and written to logs and the node's task list: it stays short and
# printable so it can neither split a header nor forge a log line.
REQUEST_ID_MAX_CHARS = 128

current_request_id: ContextVar[str | None] = ContextVar("memproxy_request_id", default=None)


def is_valid_request_id(value: str) -> bool:
    """1..128 printable ASCII characters, none of them a space."""
    return 0 < len(value) <= REQUEST_ID_MAX_CHARS and all("!" <= ch <= "~" for ch in value)


def new_request_id() -> str:
    return uuid.uuid4().hex


def accept_request_id(header: str | None) -> str:
    """The caller's ``X-Request-Id`` when it is usable, else a fresh one (never an error: a bad id is the
    caller's bookkeeping, not a reason to refuse the request)."""
    return header if header is not None and is_valid_request_id(header) else new_request_id()


class RequestIdFilter(logging.Filter):
    """Gives every record the request id of the code that logged it (None outside a request). Installed on
    the handler, so records of every logger get it, the libraries' included."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id.get()
        return True


class TextFormatter(logging.Formatter):
    """The classic one-line format, with ``request_id=...`` before the message when there is one."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(request_tag)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        record.request_tag = f" request_id={request_id}" if request_id else ""
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, request_id when the record
    was logged for a request, exception text when it carries one. Newlines in a message or traceback are
    escaped by JSON, so one record is always exactly one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            out["request_id"] = request_id
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        # ensure_ascii: a message quoting bytes that are not UTF-8 (surrogates) still writes.
        return json.dumps(out, ensure_ascii=True)


def configure_logging(level: str, log_format: str = "text", stream: TextIO | None = None) -> None:
    """The root logger's one handler, in ``log_format`` (``text`` or ``json``), on stderr by default."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # Python warnings (a library's deprecation notice, the node's Warning headers that opensearch-py turns
    # into warnings) would otherwise be bare stderr text between the JSON lines.
    logging.captureWarnings(True)
