"""The memory request bodies (create, batch create / get / delete) and the list query, read into the typed
requests of ``proxy.core.goodmem.memories`` and ``memory_list``.

Bodies are read by their camelCase names; the messages are GoodMem's, and the first problem of a body is
reported as it always was (the rule over several fields is checked where the last of them is read).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationInfo, field_validator, model_validator

from proxy.api.body import MalformedJson, PayloadTooLarge, check_unicode, has_surrogate
from proxy.api.goodmem.wire import Query, WireModel, raw_field, sort_descending, uuid_or_none, wire_field
from proxy.api.guards import current_limits
from proxy.core.goodmem.chunking import ChunkingConfig, parse_chunking
from proxy.core.goodmem.content import NewMemory, read_content
from proxy.core.goodmem.media import check_media_type
from proxy.core.goodmem.memories import Rejected
from proxy.core.goodmem.memory_list import SORT_FIELDS, STATUSES, DeleteItem, MemoryQuery, MemorySelector
from proxy.core.goodmem.metadata import check_filter_total, parse_metadata_filter
from proxy.errors import BadRequest, MemproxyError

__all__ = [
    "BatchDeleteBody",
    "BatchGetBody",
    "MemoryCreateBody",
    "batch_create_items",
    "memory_query",
    "memory_status",
]

_MIME_ERROR = "contentType must be a MIME type string"


def memory_status(status: Any) -> str | None:
    """``statusFilter``: one of the processing statuses, or none (absent or empty)."""
    if status is None or status == "":
        return None
    if status not in STATUSES:
        raise BadRequest(f"statusFilter must be one of {', '.join(STATUSES)}")
    return str(status)


def memory_query(q: Query) -> MemoryQuery:
    """``GET /v1/spaces/{id}/memories``'s query parameters."""
    include = q.flag("includeContent")
    status_filter, filter_text = q.text("statusFilter"), q.text("filter")
    max_results, next_token = q.integer("maxResults"), q.text("nextToken")
    status = memory_status(status_filter)
    sort_field = SORT_FIELDS.get(q.text("sortBy") or "created_at")
    if sort_field is None:
        raise BadRequest(f"sortBy must be one of {', '.join(SORT_FIELDS)}")
    return MemoryQuery(
        include_content=include,
        status=status,
        sort_field=sort_field,
        descending=sort_descending(q.text("sortOrder")),
        filter=parse_metadata_filter(filter_text),
        max_results=max_results,
        next_token=next_token,
    )


@dataclass(frozen=True)
class _Content:
    content_type: str
    content: bytes
    text: str | None  # None: a document a background job extracts


def _check_length(text: str, limit: int, what: str) -> None:
    if len(text) > limit:
        raise PayloadTooLarge(
            f"{what} has {len(text)} characters, more than the {limit} one memory may hold (max_memory_chars)"
        )


class MemoryCreateBody(WireModel):
    """``JsonMemoryCreationRequest``: exactly one of ``originalContent`` (text) and ``originalContentB64`` (a
    text type's bytes)."""

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        # A JSON body was checked by its reader; a multipart request's JSON part and the headers of its file
        # part (which may become contentType) were not, and nothing with a lone surrogate is ever stored.
        try:
            check_unicode(data)
        except MalformedJson as exc:
            raise BadRequest(f"Invalid memory creation request: {exc.detail}") from None
        return data

    space_id: str = wire_field("spaceId")
    original_content: Any = raw_field("originalContent")
    original_content_b64: Any = raw_field("originalContentB64")
    content: _Content = wire_field("contentType")
    metadata: dict[str, Any] | None = wire_field("metadata")
    content_ref: str | None = wire_field("originalContentRef")
    memory_id: Annotated[str | None, uuid_or_none("memoryId")] = wire_field("memoryId")
    chunking: Annotated[
        ChunkingConfig | None, BeforeValidator(lambda v: parse_chunking(v) if v is not None else None)
    ] = wire_field("chunkingConfig")
    extract_page_images: bool | None = wire_field("extractPageImages")

    @field_validator("extract_page_images", mode="before")
    @classmethod
    def _page_images(cls, value: Any) -> bool | None:
        if value is not None and not isinstance(value, bool):
            raise BadRequest("extractPageImages must be a boolean")
        return value

    @field_validator("space_id", mode="before")
    @classmethod
    def _space(cls, value: Any) -> str:
        if value is None:
            raise BadRequest("spaceId is required")
        if not isinstance(value, str) or not value:
            raise BadRequest("spaceId must be a string")
        return value

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, content_type: Any, info: ValidationInfo) -> _Content:
        text_in, b64_in = info.data.get("original_content"), info.data.get("original_content_b64")
        if (text_in is None) == (b64_in is None):
            raise BadRequest("Exactly one of originalContent and originalContentB64 is required")
        if content_type is not None and (not isinstance(content_type, str) or not content_type.strip()):
            raise BadRequest(_MIME_ERROR)
        if content_type is not None:
            # Served back as a header on every download: parsed here, so no CR/LF or junk is ever stored.
            content_type = check_media_type(content_type)
        limit = current_limits().max_memory_chars
        if text_in is not None:
            if not isinstance(text_in, str):
                raise BadRequest("originalContent must be a string")
            _check_length(text_in, limit, "originalContent")
            content_type = content_type or "text/plain"
            text, content = text_in, text_in.encode("utf-8")
        else:
            if content_type is None:
                raise BadRequest("contentType is required with originalContentB64")
            if not isinstance(b64_in, str):
                raise BadRequest("originalContentB64 must be a base64 string")
            try:
                content = base64.b64decode(b64_in, validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest("originalContentB64 is not valid base64") from None
            if len(content) > current_limits().document_max_bytes:
                raise PayloadTooLarge(
                    f"The content has {len(content)} bytes, more than the "
                    f"{current_limits().document_max_bytes} one memory may hold (document_max_bytes)"
                )
            if not content:
                raise BadRequest("originalContent must not be empty")
            read = read_content(content, content_type)
            if read is None:
                return _Content(content_type, content, None)
            text = read
            _check_length(text, limit, "The text of originalContentB64")
            # A charset such as unicode_escape can decode bytes into a lone surrogate: never stored.
            if has_surrogate(text):
                raise BadRequest(f"originalContentB64 decodes to invalid text in {content_type!r}")
        if not text:
            raise BadRequest("originalContent must not be empty")
        return _Content(content_type, content, text)

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> dict[str, Any] | None:
        if value is not None and not isinstance(value, Mapping):
            raise BadRequest("metadata must be a JSON object")
        return dict(value) if value is not None else None

    @field_validator("content_ref", mode="before")
    @classmethod
    def _ref(cls, value: Any) -> str | None:
        if value is not None and not isinstance(value, str):
            raise BadRequest("originalContentRef must be a string")
        return value

    def to_core(self) -> NewMemory:
        return NewMemory(
            space_id=self.space_id,
            content_type=self.content.content_type,
            content=self.content.content,
            text=self.content.text,
            memory_id=self.memory_id,
            metadata=self.metadata,
            chunking=self.chunking,
            content_ref=self.content_ref,
            extract_page_images=self.extract_page_images,
        )

    @classmethod
    def read(cls, item: Any) -> NewMemory:
        return cls.parse(item, not_object="Each memory creation request must be a JSON object").to_core()


def _non_empty_list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise BadRequest(f"{field} must be a non-empty array")
    return value


def batch_create_items(requests: Any) -> list[NewMemory | Rejected]:
    """``requests`` of a batch create: each item's typed request, or why it cannot be one."""
    out: list[NewMemory | Rejected] = []
    for raw in _non_empty_list(requests, "requests"):
        try:
            out.append(MemoryCreateBody.read(raw))
        except MemproxyError as exc:
            out.append(Rejected(exc, raw.get("memoryId") if isinstance(raw, Mapping) else None))
    return out


class BatchGetBody(WireModel):
    memory_ids: Annotated[list[Any], BeforeValidator(lambda v: _non_empty_list(v, "memoryIds"))] = wire_field(
        "memoryIds"
    )
    # Any truthy value asks for the content, as memproxy has always read it.
    include_content: Annotated[bool, BeforeValidator(bool)] = wire_field("includeContent", False)
    include_processing_history: Annotated[bool, BeforeValidator(bool)] = wire_field(
        "includeProcessingHistory", False
    )


def _filter_text(value: Any, what: str) -> Any:
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{what} must be a string")
    return parse_metadata_filter(value)


def _delete_items(raws: list[Any]) -> list[DeleteItem]:
    # The selectors are parsed on the event loop: their text together is bounded before any is parsed.
    selectors = [r.get("filterSelector") for r in raws if isinstance(r, Mapping)]
    texts = [s.get("filter") for s in selectors if isinstance(s, Mapping)]
    check_filter_total((t for t in texts if isinstance(t, str)), "this batch delete")
    return [_delete_item(r) for r in raws]


def _delete_item(raw: Any) -> DeleteItem:
    memory_id = raw.get("memoryId") if isinstance(raw, Mapping) else None
    selector = raw.get("filterSelector") if isinstance(raw, Mapping) else None
    try:
        if (memory_id is None) == (selector is None):
            raise BadRequest("Each delete selector needs exactly one of memoryId and filterSelector")
        if memory_id is not None:
            return DeleteItem(memory_id=memory_id)
        if not isinstance(selector, Mapping) or not selector.get("spaceId"):
            raise BadRequest("filterSelector.spaceId is required")
        expr = _filter_text(selector.get("filter"), "filterSelector.filter")
        status = memory_status(selector.get("statusFilter"))
        return DeleteItem(
            selector=MemorySelector(space_id=str(selector["spaceId"]), status=status, filter=expr)
        )
    except MemproxyError as exc:
        return DeleteItem(memory_id=memory_id, error=exc)


class BatchDeleteBody(WireModel):
    items: Annotated[
        list[DeleteItem], BeforeValidator(lambda v: _delete_items(_non_empty_list(v, "requests")))
    ] = wire_field("requests")
