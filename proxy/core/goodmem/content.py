"""Parsing a memory-create request: content (text or base64 of a text type), content type, metadata, ids."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.goodmem.chunking import ChunkingConfig, parse_chunking
from proxy.core.goodmem.validation import check_uuid
from proxy.errors import BadRequest

__all__ = ["CreateRequest", "is_text_type", "parse_create_request"]

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
class CreateRequest:
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


def _decode(content: bytes, content_type: str) -> str:
    if not is_text_type(content_type):
        raise BadRequest(
            f"Unsupported contentType {content_type!r}: memproxy stores text content only "
            "(text/* and textual application types such as application/json)"
        )
    try:
        return content.decode(_charset(content_type))
    except (LookupError, UnicodeDecodeError) as exc:
        raise BadRequest(f"originalContentB64 is not valid {_charset(content_type)} text: {exc}") from None


def parse_create_request(body: Any, *, file_bytes: bytes | None = None) -> CreateRequest:
    """Validate one JsonMemoryCreationRequest (``file_bytes``: a multipart upload standing in for content)."""
    if not isinstance(body, Mapping):
        raise BadRequest("Each memory creation request must be a JSON object")
    if body.get("spaceId") is None:
        raise BadRequest("spaceId is required")
    space_id = body["spaceId"]
    if not isinstance(space_id, str) or not space_id:
        raise BadRequest("spaceId must be a string")
    text_in, b64_in = body.get("originalContent"), body.get("originalContentB64")
    given = [x for x in (text_in, b64_in, file_bytes) if x is not None]
    if len(given) != 1:
        raise BadRequest("Exactly one of originalContent and originalContentB64 is required")
    content_type = body.get("contentType")
    if content_type is not None and (not isinstance(content_type, str) or not content_type.strip()):
        raise BadRequest("contentType must be a MIME type string")
    if text_in is not None:
        if not isinstance(text_in, str):
            raise BadRequest("originalContent must be a string")
        content_type = content_type or "text/plain"
        text, content = text_in, text_in.encode("utf-8")
    else:
        if content_type is None:
            raise BadRequest("contentType is required with originalContentB64")
        if file_bytes is not None:
            content = file_bytes
        else:
            if not isinstance(b64_in, str):
                raise BadRequest("originalContentB64 must be a base64 string")
            try:
                content = base64.b64decode(b64_in, validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest("originalContentB64 is not valid base64") from None
        text = _decode(content, content_type)
    if not text:
        raise BadRequest("originalContent must not be empty")
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise BadRequest("metadata must be a JSON object")
    ref = body.get("originalContentRef")
    if ref is not None and not isinstance(ref, str):
        raise BadRequest("originalContentRef must be a string")
    chunking = body.get("chunkingConfig")
    return CreateRequest(
        space_id=space_id,
        content_type=content_type,
        content=content,
        text=text,
        memory_id=check_uuid(body["memoryId"], "memoryId") if body.get("memoryId") is not None else None,
        metadata=dict(metadata) if metadata is not None else None,
        chunking=parse_chunking(chunking) if chunking is not None else None,
        content_ref=ref,
    )
