"""GoodMem memories processed in the background: documents (PDF, DOCX, HTML, images) and long texts.

The rule (docs/documents.md): a text memory up to ``sync_max_chars`` characters is chunked and embedded within
its create request and answered ``COMPLETED`` (``proxy.core.goodmem.memories``); every memory whose content
needs extraction, and every longer text, is answered at once ``PENDING`` and processed by a durable job of
kind :data:`DOCUMENT_JOB` (``proxy.core.jobs``: state in OpenSearch, leases, retries, any memproxy process can
finish it), as live GoodMem servers do it:

``PENDING`` → ``PROCESSING`` (the job claimed it) → ``COMPLETED``, or ``FAILED`` with the job's
``failure_stage`` and ``last_error`` (``processingHistory.latestJob``).

The job is idempotent, as at-least-once delivery needs: chunk ids derive from the memory id, a retry first
removes what an earlier attempt stored, page images are overwritten by id, and the record is finished only at
the version the job read, so a memory deleted meanwhile has what the job wrote removed again.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.container_record import Container
from proxy.core.goodmem.chunking import DEFAULT_CHUNKING, chunk_documents, parse_chunking
from proxy.core.goodmem.content import decode_text, is_text_type
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.records import MemoryRecord
from proxy.core.goodmem.spaces import get_space
from proxy.core.jobs import Job, JobContext, JobRunner, PermanentJobError
from proxy.core.longterm import LongTermMemory, delete_long_term, write_long_term
from proxy.documents import DocumentError, DocumentKind, Extraction, Limits, extract, needs_extraction
from proxy.errors import MemproxyError, NotFound
from proxy.store.client import NodeConflict, NodeNotFound
from proxy.store.goodmem import MEMORIES
from proxy.store.query import Exists, Range, Term, all_of
from proxy.store.versioned import Versioned, mget_versioned, search_versioned, update_many

__all__ = [
    "DOCUMENT_JOB",
    "ORPHANED_AFTER_MS",
    "enqueue_document",
    "job_id_for",
    "job_number",
    "latest_jobs",
    "limits_json",
    "needs_job",
    "new_record_fields",
    "page_images_wanted",
    "register_documents",
    "requeue_orphans",
]

log = logging.getLogger(__name__)

# GoodMem's own job type name (``processingHistory.latestJob.jobType``).
DOCUMENT_JOB = "document_processor"
_JOB_IDS = uuid.UUID("6a0e7f52-3c1d-4b8e-9f21-5d7c2e9a4b10")
_CHUNK_IDS = uuid.UUID("0f3b9d6e-2a7c-4e51-8b90-1c4d5e6f7a83")

PENDING, PROCESSING, COMPLETED, FAILED = "PENDING", "PROCESSING", "COMPLETED", "FAILED"
# A PENDING record without a job this old was left by a process that stopped before enqueueing it.
ORPHANED_AFTER_MS = 60_000
# The stages a job reports (GoodMem's DOCUMENT_PROCESSING_STAGE_* without the prefix).
LOADING = "LOADING_MEMORY"
PREPARING = "PREPARING_DOCUMENT"
EXTRACTING = "EXTRACTING_CONTENT"
EMBEDDING = "GENERATING_EMBEDDINGS"
STORING_CHUNKS = "STORING_CHUNKS"
PAGE_IMAGES = "GENERATING_PAGE_IMAGES"
STORING_PAGES = "STORING_PAGE_IMAGES"
FINALIZING = "FINALIZING_MEMORY"


def needs_job(text: str | None, sync_max_chars: int) -> bool:
    """Whether a memory is processed by a background job: a document (no text yet) or a long text."""
    return text is None or len(text) > sync_max_chars


def page_images_wanted(content_type: str, content: bytes, hint: bool | None) -> bool:
    """Page images are made for PDFs and images unless the request said ``extractPageImages: false``."""
    if hint is False or (not needs_extraction(content_type) and not content.startswith(b"%PDF-")):
        return False
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime in ("application/pdf", "application/octet-stream") or mime.startswith("image/")


_JOB_LIMITS = (
    "max_pages",
    "ocr_timeout_s",
    "page_image_dpi",
    "max_draws",
    "max_form_depth",
    "max_page_chars",
    "max_chars",
    "page_timeout_s",
    "text_timeout_s",
)


def limits_json(limits: Limits) -> dict[str, Any]:
    """The operator's limits a job carries in its payload (the accepting process's settings)."""
    return {name: getattr(limits, name) for name in _JOB_LIMITS}


def limits_from(payload: Mapping[str, Any], default: Limits) -> Limits:
    given = payload.get("limits")
    if not isinstance(given, Mapping):
        return default
    return replace(default, **{k: v for k, v in given.items() if k in _JOB_LIMITS})


def job_id_for(memory_id: str) -> str:
    """The memory's job id: derived, so that enqueueing it again is the same job."""
    return str(uuid.uuid5(_JOB_IDS, memory_id))


def job_number(job_id: str) -> int:
    """GoodMem clients read ``jobId`` as an integer: 52 bits of the job's UUID (exact in JSON numbers)."""
    return int(uuid.UUID(job_id).hex[:13], 16)


def _chunk_id(memory_id: str, sequence: int) -> str:
    return str(uuid.uuid5(_CHUNK_IDS, f"{memory_id}:{sequence}"))


def _page_id(memory_id: str, index: int, dpi: int, content_type: str) -> str:
    return f"{memory_id}:{index}:{dpi}:{content_type}"


async def enqueue_document(gm: GoodMem, record: MemoryRecord) -> None:
    """Enqueue the job of a record created PENDING (again: the job id is the record's, so a second enqueue
    of a job that exists is a no-op)."""
    assert gm.jobs is not None and record.job_id is not None
    await gm.jobs.enqueue(
        DOCUMENT_JOB,
        # The limits of the process that accepted the document bind its job, wherever it runs.
        {
            "memory_id": record.memory_id,
            "space_id": record.space_id,
            "limits": limits_json(gm.documents.limits),
        },
        subject=record.memory_id,
        owner_id=record.created_by_id,
        job_id=record.job_id,
    )


async def requeue_orphans(gm: GoodMem, *, older_than_ms: int = ORPHANED_AFTER_MS) -> int:
    """Enqueue the job of every PENDING record that has none: a process that stopped between creating the
    record and enqueueing its job left it, and without this no worker would ever process it. How many."""
    if gm.jobs is None:
        return 0
    stale = await search_versioned(
        gm.store,
        MEMORIES,
        all_of(
            [
                Term("processing_status", PENDING),
                Exists("job_id"),
                Range("last_updated_time", lt=now_ms() - older_than_ms),
            ]
        ),
        size=500,
        source_excludes=("original_content_b64", "metadata_index"),
    )
    records = [MemoryRecord.from_source(v.source) for v in stale]
    known = await gm.jobs.docs.mget([r.job_id for r in records if r.job_id])
    orphans = [r for r in records if r.job_id and r.job_id not in known]
    for record in orphans:
        await enqueue_document(gm, record)
    return len(orphans)


async def latest_jobs(gm: GoodMem, records: Sequence[MemoryRecord]) -> dict[str, Job]:
    """The job of each record that has one, by memory id (for ``includeProcessingHistory``)."""
    if gm.jobs is None:
        return {}
    wanted = {r.job_id: r.memory_id for r in records if r.job_id}
    if not wanted:
        return {}
    found = await gm.jobs.docs.mget(list(wanted))
    return {wanted[job_id]: Job.from_doc(job_id, src) for job_id, src in found.items()}


# --- the job --------------------------------------------------------------------------------------------


class _Processing:
    """One run of the document job for one memory."""

    def __init__(self, gm: GoodMem, ctx: JobContext, payload: Mapping[str, Any]) -> None:
        self.gm = gm
        self.ctx = ctx
        self.memory_id = str(payload["memory_id"])
        self.limits = limits_from(payload, gm.documents.limits)

    async def run(self) -> dict[str, Any]:
        await self.ctx.set_stage(LOADING)
        current = await self._load()
        if current is None:
            return {"outcome": "the memory was deleted"}
        if current.source.get("processing_status") == COMPLETED:
            return {"outcome": "already completed"}
        record = MemoryRecord.from_source(current.source)
        try:
            container = await get_space(self.gm, record.space_id)
        except NotFound:
            raise PermanentJobError("The memory's space was deleted", stage=LOADING) from None
        want_images = record.page_image_status in (PENDING, PROCESSING)
        current = await self._mark(
            current,
            {"processing_status": PROCESSING, **({"page_image_status": PROCESSING} if want_images else {})},
        )
        if current is None:
            return {"outcome": "the memory was deleted"}

        await self.ctx.set_stage(PREPARING)
        content = base64.b64decode(record.content_b64 or "")
        started = time.monotonic()
        extraction, image_error = await self._extract(record, content, want_images)
        text = extraction.text if extraction is not None else decode_text(content, record.content_type)
        if not text.strip():
            raise PermanentJobError("No text could be extracted from the document", stage=EXTRACTING)

        await self.ctx.set_stage(EMBEDDING)
        chunks = await self._chunks(record, text)
        # An earlier attempt may have stored chunks (perhaps more of them): remove them first.
        await delete_long_term(self.gm.svc, container, filter=Term("memory_id", self.memory_id))
        await write_long_term(self.gm.svc, container, chunks, refresh=True, overwrite=True)

        images = extraction.images if extraction is not None else []
        if want_images and image_error is None:
            await self.ctx.set_stage(STORING_PAGES)
            now = now_ms()
            await self.gm.docs.put_pages(
                [
                    (
                        _page_id(self.memory_id, image.index, image.dpi, image.content_type),
                        {
                            "memory_id": self.memory_id,
                            "space_id": record.space_id,
                            "page_index": image.index,
                            "dpi": image.dpi,
                            "content_type": image.content_type,
                            "image_b64": base64.b64encode(image.data).decode("ascii"),
                            "image_content_length": len(image.data),
                            "image_content_sha256": image.sha256,
                            "width": image.width,
                            "height": image.height,
                            "created_time": now,
                            "last_updated_time": now,
                            "created_by_id": record.created_by_id,
                            "updated_by_id": record.created_by_id,
                        },
                    )
                    for image in images
                ]
            )

        await self.ctx.set_stage(FINALIZING)
        fields: dict[str, Any] = {
            "processing_status": COMPLETED,
            "chunk_count": len(chunks),
            "extracted_text_length": len(text),
            "last_updated_time": now_ms(),
        }
        if want_images:
            fields["page_image_status"] = FAILED if image_error else COMPLETED
            fields["page_image_count"] = 0 if image_error else len(images)
        if await self._mark(current, fields) is None:
            await self._remove_outputs(container)  # deleted while it was processed
            return {"outcome": "the memory was deleted"}
        return {
            "chunks": len(chunks),
            "pages": len(extraction.pages) if extraction is not None else 0,
            "ocr_pages": extraction.ocr_pages if extraction is not None else 0,
            "page_images": 0 if image_error else len(images),
            **({"page_image_error": image_error} if image_error else {}),
            "seconds": round(time.monotonic() - started, 3),
        }

    async def _load(self) -> Versioned | None:
        return (await mget_versioned(self.gm.store, MEMORIES, [self.memory_id])).get(self.memory_id)

    async def _mark(self, current: Versioned, fields: Mapping[str, Any]) -> Versioned | None:
        """Update the record at the version read; None when it was deleted meanwhile."""
        try:
            [item] = await update_many(self.gm.store, MEMORIES, [(current, fields)])
        except (NodeNotFound, NodeConflict):
            return None
        if int(item.get("status", 500)) >= 300:
            return None
        return Versioned(
            current.id, {**current.source, **fields}, item.get("_seq_no"), item.get("_primary_term")
        )

    async def _extract(
        self, record: MemoryRecord, content: bytes, want_images: bool
    ) -> tuple[Extraction | None, str | None]:
        """The extraction (None for plain text), and why page images failed, if they did: page images are
        independent of the text, so their failure does not fail the memory."""
        if is_text_type(record.content_type) and not needs_extraction(record.content_type):
            return None, None
        await self.ctx.set_stage(EXTRACTING)
        try:
            extraction = await extract(content, record.content_type, self.limits, page_images=want_images)
        except DocumentError as exc:
            if not want_images or exc.stage != PAGE_IMAGES:
                raise PermanentJobError(exc.message, stage=exc.stage) from None
            log.warning("memory %s: page images failed (%s); extracting the text alone", self.memory_id, exc)
            extraction = await self._extract_text_only(record, content)
            return extraction, exc.message
        if extraction.kind in (DocumentKind.TEXT, DocumentKind.MARKDOWN):
            return None, None
        return extraction, None

    async def _extract_text_only(self, record: MemoryRecord, content: bytes) -> Extraction:
        try:
            return await extract(content, record.content_type, self.limits, page_images=False)
        except DocumentError as exc:
            raise PermanentJobError(exc.message, stage=exc.stage) from None

    async def _chunks(self, record: MemoryRecord, text: str) -> list[LongTermMemory]:
        config = parse_chunking(record.chunking_config) if record.chunking_config else DEFAULT_CHUNKING
        try:
            return await chunk_documents(
                text,
                config,
                memory_id=self.memory_id,
                metadata=record.metadata,
                owner_id=record.created_by_id,
                now=now_ms(),
                max_chunks=self.gm.store.settings.max_chunks_per_memory,
                chunk_id=lambda sequence: _chunk_id(self.memory_id, sequence),
            )
        except MemproxyError as exc:
            raise PermanentJobError(exc.message, stage=EMBEDDING) from None

    async def _remove_outputs(self, container: Container) -> None:
        await delete_long_term(self.gm.svc, container, filter=Term("memory_id", self.memory_id))
        await self.gm.docs.delete_pages_of([self.memory_id])


async def _failed(gm: GoodMem, job: Job) -> None:
    """The job gave up: the memory is FAILED (its job says why), and nothing it half-stored stays."""
    memory_id = str(job.payload.get("memory_id") or "")
    current = (await mget_versioned(gm.store, MEMORIES, [memory_id])).get(memory_id)
    if current is None or current.source.get("processing_status") == COMPLETED:
        return
    record = MemoryRecord.from_source(current.source)
    try:
        container = await get_space(gm, record.space_id)
        await delete_long_term(gm.svc, container, filter=Term("memory_id", memory_id))
    except NotFound:
        pass
    await gm.docs.delete_pages_of([memory_id])
    fields: dict[str, Any] = {"processing_status": FAILED, "last_updated_time": now_ms()}
    if record.page_image_status in (PENDING, PROCESSING):
        fields["page_image_status"] = FAILED
    await update_many(gm.store, MEMORIES, [(current, fields)])


def register_documents(runner: JobRunner, gm: GoodMem) -> None:
    async def run(payload: Mapping[str, Any], ctx: JobContext) -> Mapping[str, Any]:
        return await _Processing(gm, ctx, payload).run()

    async def failed(job: Job) -> None:
        await _failed(gm, job)

    runner.register(DOCUMENT_JOB, run, on_failed=failed)


def new_record_fields(memory_id: str, page_images: bool) -> dict[str, Any]:
    """What a record processed by a job starts with."""
    job_id = job_id_for(memory_id)
    return {
        "processing_status": PENDING,
        "page_image_status": PENDING if page_images else COMPLETED,
        "page_image_count": 0,
        "job_id": job_id,
        "job_number": job_number(job_id),
    }
