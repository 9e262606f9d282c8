"""The GoodMem memory record (what ``Memory`` shows) and the long-term memories that stand in for one.

A record lives in ``memproxy-goodmem-memories`` (content, content type, metadata, status, chunking); its
chunks are long-term documents of the space's container. A long-term memory written through the OpenSearch API
has no record: it is presented as a memory of one chunk whose id (memory and chunk alike) is the document id.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core.goodmem.ids import NIL_UUID

__all__ = ["MemoryRecord", "record_from_long_term"]


@dataclass
class MemoryRecord:
    memory_id: str
    space_id: str
    content_type: str
    processing_status: str
    created_at: int
    updated_at: int
    created_by_id: str
    updated_by_id: str
    content_b64: str | None = None
    content_length: int | None = None
    content_sha256: str | None = None
    content_ref: str | None = None
    metadata: dict[str, Any] | None = None
    chunking_config: dict[str, Any] | None = None
    chunk_count: int = 0
    # Page images (PDFs and images processed by a document job): their state and how many are stored.
    page_image_status: str = "COMPLETED"
    page_image_count: int = 0
    # The background job that processes the memory (documents, long texts; proxy.core.goodmem.documents):
    # its id in memproxy-jobs, and the integer GoodMem clients are shown as ``jobId``.
    job_id: str | None = None
    job_number: int | None = None
    # True for a long-term memory written through the OpenSearch API (no record of its own).
    from_long_term: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_content(
        cls,
        *,
        memory_id: str,
        space_id: str,
        content_type: str,
        content: bytes,
        actor_id: str,
        now: int,
        metadata: dict[str, Any] | None,
        chunking_config: dict[str, Any] | None,
        content_ref: str | None,
        chunk_count: int,
    ) -> MemoryRecord:
        return cls(
            memory_id=memory_id,
            space_id=space_id,
            content_type=content_type,
            processing_status="COMPLETED",
            created_at=now,
            updated_at=now,
            created_by_id=actor_id,
            updated_by_id=actor_id,
            content_b64=base64.b64encode(content).decode("ascii"),
            content_length=len(content),
            content_sha256=hashlib.sha256(content).hexdigest(),
            content_ref=content_ref,
            metadata=metadata,
            chunking_config=chunking_config,
            chunk_count=chunk_count,
        )

    def to_source(self, metadata_index: Any = None) -> dict[str, Any]:
        """The stored document (``created_time``/``last_updated_time`` as in the long-term index)."""
        doc: dict[str, Any] = {
            "memory_id": self.memory_id,
            "space_id": self.space_id,
            "content_type": self.content_type,
            "processing_status": self.processing_status,
            "page_image_status": self.page_image_status,
            "page_image_count": self.page_image_count,
            "job_id": self.job_id,
            "job_number": self.job_number,
            "original_content_b64": self.content_b64,
            "original_content_length": self.content_length,
            "original_content_sha256": self.content_sha256,
            "original_content_ref": self.content_ref,
            "chunking_config": self.chunking_config,
            "chunk_count": self.chunk_count,
            "created_time": self.created_at,
            "last_updated_time": self.updated_at,
            "created_by_id": self.created_by_id,
            "updated_by_id": self.updated_by_id,
            "metadata": self.metadata,
        }
        if metadata_index is not None:
            doc["metadata_index"] = metadata_index
        return {k: v for k, v in doc.items() if v is not None}

    @classmethod
    def from_source(cls, source: Mapping[str, Any]) -> MemoryRecord:
        return cls(
            memory_id=str(source["memory_id"]),
            space_id=str(source["space_id"]),
            content_type=str(source.get("content_type") or "text/plain"),
            processing_status=str(source.get("processing_status") or "COMPLETED"),
            created_at=int(source.get("created_time") or 0),
            updated_at=int(source.get("last_updated_time") or source.get("created_time") or 0),
            created_by_id=str(source.get("created_by_id") or ""),
            updated_by_id=str(source.get("updated_by_id") or source.get("created_by_id") or ""),
            content_b64=source.get("original_content_b64"),
            content_length=source.get("original_content_length"),
            content_sha256=source.get("original_content_sha256"),
            content_ref=source.get("original_content_ref"),
            metadata=source.get("metadata"),
            chunking_config=source.get("chunking_config"),
            chunk_count=int(source.get("chunk_count") or 0),
            page_image_status=str(source.get("page_image_status") or "COMPLETED"),
            page_image_count=int(source.get("page_image_count") or 0),
            job_id=source.get("job_id"),
            job_number=source.get("job_number"),
        )


def record_from_long_term(
    doc_id: str, source: Mapping[str, Any], *, owner_id: str | None = None
) -> MemoryRecord:
    """A long-term memory written through the OpenSearch API, as a GoodMem memory (one chunk, same id)."""
    text = str(source.get("memory") or "")
    content = text.encode("utf-8", "replace")  # a lone surrogate stored in the node: never a 500
    created = int(source.get("created_time") or 0)
    actor = str(source.get("owner_id") or owner_id or NIL_UUID)
    metadata = source.get("metadata")
    if metadata is None:
        # The ml-commons attributes are what an OpenSearch-API memory has for metadata.
        metadata = {k: source[k] for k in ("namespace", "tags", "strategy_type") if source.get(k)}
    return MemoryRecord(
        memory_id=doc_id,
        space_id=str(source.get("memory_container_id") or ""),
        content_type="text/plain",
        processing_status="COMPLETED",
        created_at=created,
        updated_at=int(source.get("last_updated_time") or created),
        created_by_id=actor,
        updated_by_id=actor,
        content_b64=base64.b64encode(content).decode("ascii"),
        content_length=len(content),
        content_sha256=hashlib.sha256(content).hexdigest(),
        metadata=dict(metadata) if isinstance(metadata, Mapping) else None,
        chunking_config={"none": {}},
        chunk_count=1,
        from_long_term=True,
    )
