"""What a memory is made of: text content (memproxy stores text only, whatever its MIME type says) and the
validated create request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core.goodmem.chunking import ChunkingConfig
from proxy.errors import BadRequest

__all__ = ["NewMemory", "decode_text", "is_text_type"]

_TEXT_APPLICATION = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-ndjson",
        "application/ndjson",
        "application/yaml",
        "application/x-yaml",
        "application/javascript",
        "application/ecmascript",
        "application/sql",
        "application/graphql",
        "application/toml",
        "application/x-sh",
        "application/csv",
    }
)


@dataclass(frozen=True)
class NewMemory:
    """One memory to create, validated: ``text`` is ``content`` decoded (what is chunked and embedded)."""

    space_id: str
    content_type: str
    content: bytes
    text: str
    memory_id: str | None = None
    metadata: dict[str, Any] | None = None
    chunking: ChunkingConfig | None = None
    content_ref: str | None = None


def is_text_type(content_type: str) -> bool:
    mime = content_type.split(";", 1)[0].strip().lower()
    return (
        mime.startswith("text/")
        or mime in _TEXT_APPLICATION
        or mime.endswith("+json")
        or mime.endswith("+xml")
        or mime.endswith("+yaml")
    )


def _charset(content_type: str) -> str:
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return "utf-8"


def decode_text(content: bytes, content_type: str) -> str:
    """The text of ``content`` in its charset (default UTF-8); 400 for a binary type or undecodable bytes."""
    if not is_text_type(content_type):
        raise BadRequest(
            f"Unsupported contentType {content_type!r}: memproxy stores text content only "
            "(text/* and textual application types such as application/json)"
        )
    try:
        return content.decode(_charset(content_type))
    except (LookupError, UnicodeDecodeError) as exc:
        raise BadRequest(f"originalContentB64 is not valid {_charset(content_type)} text: {exc}") from None
