"""What a memory is made of: its content (text, or a document whose text a background job extracts:
PDF, DOCX, HTML, images; docs/documents.md) and the validated create request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core.goodmem.chunking import ChunkingConfig
from proxy.documents import DocumentError, DocumentKind, needs_extraction, sniff
from proxy.errors import BadRequest

__all__ = ["NewMemory", "decode_text", "is_text_type", "read_content"]

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
    """One memory to create, validated: ``text`` is ``content`` decoded (what is chunked and embedded), or
    None for a document whose text a background job extracts."""

    space_id: str
    content_type: str
    content: bytes
    text: str | None
    memory_id: str | None = None
    metadata: dict[str, Any] | None = None
    chunking: ChunkingConfig | None = None
    content_ref: str | None = None
    # GoodMem's extractPageImages hint: None (unsaid) renders the pages of a PDF, as True does.
    extract_page_images: bool | None = None


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


def read_content(content: bytes, content_type: str) -> str | None:
    """The text of a text memory, or None for a document a job extracts (PDF, DOCX, HTML, images: told by
    their bytes when the declared type is generic); 400 for bytes memproxy cannot read as declared."""
    if is_text_type(content_type) and not needs_extraction(content_type):
        return decode_text(content, content_type)
    try:
        kind = sniff(content, content_type)
    except DocumentError as exc:
        raise BadRequest(exc.message) from None
    if kind in (DocumentKind.TEXT, DocumentKind.MARKDOWN):
        return decode_text(content, content_type if is_text_type(content_type) else "text/plain")
    return None


def decode_text(content: bytes, content_type: str) -> str:
    """The text of ``content`` in its charset (default UTF-8); 400 for undecodable bytes."""
    try:
        return content.decode(_charset(content_type))
    except (LookupError, UnicodeDecodeError) as exc:
        raise BadRequest(f"originalContentB64 is not valid {_charset(content_type)} text: {exc}") from None
