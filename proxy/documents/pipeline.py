"""``extract``: a document's text (and page images) by kind; ``ocr_document``: ``POST /v1/ocr:document``.

CPU-bound work runs on worker threads (``asyncio.to_thread``), OCR in Tesseract subprocesses, so the event
loop only schedules.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from proxy.documents.errors import (
    CorruptDocument,
    DocumentError,
    InvalidRange,
    OcrUnavailable,
    TooManyPages,
    UnsupportedDocument,
)
from proxy.documents.images import (
    decode_frame,
    dpi_of,
    for_ocr,
    frame_count,
    neutral_to_grey,
    open_image,
    png_bytes,
)
from proxy.documents.kinds import DocumentKind, ImageFormat, image_format, is_pdf, sniff
from proxy.documents.model import (
    Extraction,
    Limits,
    OcrDocPage,
    OcrDocument,
    OcrFormat,
    OcrResult,
    PageImage,
    PageText,
)
from proxy.documents.ocr import Deadline
from proxy.documents.pdf import Renderer, check_work, open_reader, page_texts
from proxy.documents.text import decode, html_text
from proxy.documents.word import docx_text

__all__ = ["MIN_TEXT_LAYER_CHARS", "extract", "ocr_document"]

# A PDF page whose text layer holds fewer letters and digits than this is OCR'd: a scan often carries only a
# page number or a stamp as text.
MIN_TEXT_LAYER_CHARS = 8
# Text beyond this size is decoded on a worker thread rather than on the event loop.
_DECODE_INLINE = 1 << 20

T = TypeVar("T")


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


async def _in_order(job: Callable[[int], Awaitable[T]], pages: Sequence[int], limit: int) -> list[T]:
    """``job(page)`` for every page, at most ``limit`` at a time; results in page order. The first failure
    cancels the rest and is raised."""
    semaphore = asyncio.Semaphore(max(1, limit))

    async def bounded(page: int) -> T:
        async with semaphore:
            return await job(page)

    tasks = [asyncio.ensure_future(bounded(page)) for page in pages]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        # Let cancelled jobs kill their Tesseract processes before the caller moves on.
        await asyncio.gather(*tasks, return_exceptions=True)
    return [task.result() for task in tasks]


def _threaded(fn: Callable[[int], T]) -> Callable[[int], Awaitable[T]]:
    """``fn`` run on a worker thread, as an awaitable of its one argument."""

    async def run(page: int) -> T:
        return await asyncio.to_thread(fn, page)

    return run


def _html(data: bytes, content_type: str) -> str:
    return html_text(decode(data, content_type, html=True))


def _negligible(text: str) -> bool:
    return sum(c.isalnum() for c in text) < MIN_TEXT_LAYER_CHARS


def _joined(pages: list[PageText]) -> str:
    return "\n\n".join(page.text for page in pages if page.text)


async def extract(data: bytes, content_type: str, limits: Limits, *, page_images: bool) -> Extraction:
    """The text of a document to chunk and embed, page by page, with page images when asked.

    PDF: the text layer, OCR for pages without one; DOCX: paragraphs and table rows; HTML: the readable
    text; text and Markdown: the decoded text; images: OCR of every frame. Raises ``DocumentError``s.
    """
    started = time.perf_counter()
    kind = sniff(data, content_type)
    if kind is DocumentKind.PDF:
        result = await _extract_pdf(data, limits, page_images)
    elif kind is DocumentKind.IMAGE:
        result = await _extract_image(data, limits, page_images)
    else:
        if kind is DocumentKind.DOCX:
            text = await asyncio.to_thread(docx_text, data)
        elif kind is DocumentKind.HTML:
            text = await asyncio.to_thread(_html, data, content_type)
        elif len(data) > _DECODE_INLINE:
            text = await asyncio.to_thread(decode, data, content_type)
        else:
            text = decode(data, content_type)
        text = text.strip()
        pages = [PageText(index=0, text=text, ocr=False)]
        result = Extraction(kind=kind, text=text, pages=pages, images=[], ocr_pages=0)
    result.timings["total_ms"] = _ms(time.perf_counter() - started)
    return result


async def _extract_pdf(data: bytes, limits: Limits, page_images: bool) -> Extraction:
    timings: dict[str, float] = {}
    started = time.perf_counter()
    reader = await asyncio.to_thread(open_reader, data, limits.max_pages)
    timings["prepare_ms"] = _ms(time.perf_counter() - started)
    started = time.perf_counter()
    texts = await asyncio.to_thread(page_texts, reader, limits)
    timings["text_layer_ms"] = _ms(time.perf_counter() - started)
    pages = [PageText(index=i, text=t.strip(), ocr=False) for i, t in enumerate(texts)]
    scanned = [i for i, t in enumerate(texts) if _negligible(t)]
    images: list[PageImage] = []
    if not scanned and not page_images:
        return Extraction(DocumentKind.PDF, _joined(pages), pages, images, 0, timings)
    renderer = await asyncio.to_thread(Renderer, data)
    try:
        if scanned:
            deadline = Deadline(limits.ocr_timeout_s)
            render_s = ocr_s = 0.0

            async def ocr_page(index: int) -> OcrResult:
                nonlocal render_s, ocr_s
                rendered = await asyncio.to_thread(
                    renderer.render, index, limits.ocr_dpi, limits.max_image_pixels, grey=True
                )
                png = await asyncio.to_thread(for_ocr, rendered.image)
                render_s += rendered.render_s
                begun = time.perf_counter()
                result = await deadline.ocr(png, limits.ocr_language)
                ocr_s += time.perf_counter() - begun
                return result

            started = time.perf_counter()
            results = await _deadlined(_in_order(ocr_page, scanned, limits.ocr_workers), deadline)
            timings.update(
                render_ms=_ms(render_s), ocr_ms=_ms(ocr_s), ocr_wall_ms=_ms(time.perf_counter() - started)
            )
            for index, result in zip(scanned, results, strict=True):
                if result.text.strip():  # else keep whatever the text layer had
                    pages[index] = PageText(index=index, text=result.text.strip(), ocr=True)
        if page_images:
            started = time.perf_counter()
            images = await _pdf_page_images(renderer, len(pages), limits)
            timings["page_images_ms"] = _ms(time.perf_counter() - started)
    finally:
        await asyncio.to_thread(renderer.close)
    ocr_pages = sum(page.ocr for page in pages)
    return Extraction(DocumentKind.PDF, _joined(pages), pages, images, ocr_pages, timings)


async def _deadlined(work: Awaitable[T], deadline: Deadline) -> T:
    """``work`` within what is left of the document's OCR budget: rendering counts too, not only the
    Tesseract runs (which ``ocr_image`` bounds itself)."""
    try:
        return await asyncio.wait_for(work, deadline.remaining())
    except TimeoutError as exc:
        raise deadline.expired() from exc


async def _pdf_page_images(renderer: Renderer, count: int, limits: Limits) -> list[PageImage]:
    def one(index: int) -> PageImage:
        rendered = renderer.render(index, limits.page_image_dpi, limits.max_image_pixels, grey=False)
        data = png_bytes(neutral_to_grey(rendered.image), stage="GENERATING_PAGE_IMAGES")
        width, height = rendered.image.size
        return PageImage(index, rendered.dpi, "image/png", data, width, height)

    try:
        # Two at a time: one page's PNG encoding (outside the PDFium lock) overlaps the next one's render.
        return await _in_order(_threaded(one), range(count), 2)
    except DocumentError as exc:
        exc.stage = "GENERATING_PAGE_IMAGES"
        raise


async def _extract_image(data: bytes, limits: Limits, page_images: bool) -> Extraction:
    timings: dict[str, float] = {}
    pages: list[PageText] = []
    images: list[PageImage] = []
    deadline = Deadline(limits.ocr_timeout_s)
    decode_s = ocr_s = 0.0
    with open_image(data, limits.max_image_pixels) as image:
        count = await asyncio.to_thread(frame_count, image)
        _check_pages(count, limits, "the image has")
        dpi = dpi_of(image)
        # Frames one after another: a Pillow image is not safe to seek from two threads at once.
        for index in range(count):
            begun = time.perf_counter()
            frame = await asyncio.to_thread(decode_frame, image, index, limits.max_image_pixels)
            png = await asyncio.to_thread(for_ocr, frame)
            if page_images:
                encoded = await asyncio.to_thread(
                    png_bytes, neutral_to_grey(frame), stage="GENERATING_PAGE_IMAGES"
                )
                images.append(PageImage(index, dpi, "image/png", encoded, frame.width, frame.height))
            decode_s += time.perf_counter() - begun
            begun = time.perf_counter()
            result = await deadline.ocr(png, limits.ocr_language)
            ocr_s += time.perf_counter() - begun
            pages.append(PageText(index=index, text=result.text.strip(), ocr=True))
    timings.update(decode_ms=_ms(decode_s), ocr_ms=_ms(ocr_s))
    return Extraction(DocumentKind.IMAGE, _joined(pages), pages, images, len(pages), timings)


def _check_pages(count: int, limits: Limits, what: str) -> None:
    if count > limits.max_pages:
        raise TooManyPages(f"{what} {count} pages, more than the limit of {limits.max_pages}")


# ------------------------------------------------------------------------------------ POST /v1/ocr:document

_OCR_FORMATS: dict[ImageFormat, OcrFormat] = {
    ImageFormat.PNG: "PNG",
    ImageFormat.JPEG: "JPEG",
    ImageFormat.TIFF: "TIFF",
    ImageFormat.BMP: "BMP",
}


def _detect_ocr_format(data: bytes, fmt: str | None) -> OcrFormat:
    found: OcrFormat | None = "PDF" if is_pdf(data) else None
    if found is None:
        signature = image_format(data)
        if signature is not None and signature not in _OCR_FORMATS:
            raise UnsupportedDocument(f"OCR reads PDF, PNG, JPEG, TIFF and BMP, not {signature.value}")
        found = _OCR_FORMATS.get(signature) if signature is not None else None
    asked = (fmt or "AUTO").upper()
    if asked not in ("AUTO", "PDF", "PNG", "JPEG", "TIFF", "BMP"):
        raise UnsupportedDocument(f"unknown OCR format {fmt!r}: use AUTO, PDF, PNG, JPEG, TIFF or BMP")
    if found is None:
        raise CorruptDocument("the content is neither a PDF nor a PNG, JPEG, TIFF or BMP image")
    if asked != "AUTO" and asked != found:
        raise CorruptDocument(f"format {asked} was given but the bytes are {found}")
    return found


def _page_range(count: int, start: int | None, end: int | None) -> range:
    """The 0-based inclusive range asked for; an end past the last page stops at it."""
    first = 0 if start is None else start
    if not 0 <= first < count:
        raise InvalidRange(f"startPage {first} is outside the document's pages 0..{count - 1}")
    last = count - 1 if end is None else min(end, count - 1)
    if last < first:
        raise InvalidRange(f"endPage {end} is before startPage {first}")
    return range(first, last + 1)


async def ocr_document(
    data: bytes, fmt: str | None, limits: Limits, *, start_page: int | None, end_page: int | None
) -> OcrDocument:
    """Every page in the range rendered (PDF at ``ocr_dpi``; image frames as they are) and OCR'd.

    A page that fails carries its ``error`` and the others go on; the document's OCR budget running out
    fails the pages not done by then. The document as a whole fails (raises) only when it cannot be opened,
    the range is invalid, or Tesseract is not installed.
    """
    started = time.perf_counter()
    detected = _detect_ocr_format(data, fmt)
    deadline = Deadline(limits.ocr_timeout_s)
    if detected == "PDF":
        reader = await asyncio.to_thread(open_reader, data, None)  # refuses encrypted and unparseable PDFs
        renderer = await asyncio.to_thread(Renderer, data)
        try:
            pages = _page_range(await asyncio.to_thread(len, renderer), start_page, end_page)
            _check_pages(len(pages), limits, "the range holds")
            # What rendering would draw is bounded as the text layer's extraction is (pdfwork).
            await asyncio.to_thread(check_work, reader, pages, limits)

            async def pdf_page(index: int) -> OcrDocPage:
                begun = time.perf_counter()
                try:
                    deadline.remaining()  # a page past the budget is not even rendered
                    rendered = await asyncio.to_thread(
                        renderer.render, index, limits.ocr_dpi, limits.max_image_pixels, grey=True
                    )
                    png = await asyncio.to_thread(for_ocr, rendered.image)
                except DocumentError as exc:
                    return _failed_page(index, exc, begun)
                return await _ocr_page(
                    index, png, rendered.image.size, rendered.dpi, begun, rendered.wait_s, limits, deadline
                )

            done = await _in_order(pdf_page, pages, limits.ocr_workers)
        finally:
            await asyncio.to_thread(renderer.close)
    else:
        done = []
        with open_image(data, limits.max_image_pixels) as image:
            pages = _page_range(await asyncio.to_thread(frame_count, image), start_page, end_page)
            _check_pages(len(pages), limits, "the range holds")
            dpi = dpi_of(image)
            for index in pages:
                begun = time.perf_counter()
                try:
                    deadline.remaining()
                    frame = await asyncio.to_thread(decode_frame, image, index, limits.max_image_pixels)
                    png = await asyncio.to_thread(for_ocr, frame)
                except DocumentError as exc:
                    done.append(_failed_page(index, exc, begun))
                    continue
                done.append(await _ocr_page(index, png, frame.size, dpi, begun, 0.0, limits, deadline))
    return OcrDocument(detected_format=detected, pages=done, wall_ms=_ms(time.perf_counter() - started))


async def _ocr_page(
    index: int,
    png: bytes,
    size: tuple[int, int],
    dpi: int,
    begun: float,
    wait_s: float,
    limits: Limits,
    deadline: Deadline,
) -> OcrDocPage:
    render_s = time.perf_counter() - begun - wait_s
    ocr_started = time.perf_counter()
    result: OcrResult | None = None
    error: str | None = None
    try:
        result = await deadline.ocr(png, limits.ocr_language)
    except OcrUnavailable:
        raise
    except DocumentError as exc:  # this page fails; the others still get their OCR
        error = exc.message
    ocr_s = time.perf_counter() - ocr_started
    return OcrDocPage(
        index=index,
        result=result,
        error=error,
        width_px=size[0],
        height_px=size[1],
        dpi=dpi,
        render_ms=_ms(render_s),
        ocr_ms=_ms(ocr_s),
        total_ms=_ms(time.perf_counter() - begun),
        queue_wait_ms=_ms(wait_s),
    )


def _failed_page(index: int, exc: DocumentError, begun: float) -> OcrDocPage:
    total = _ms(time.perf_counter() - begun)
    return OcrDocPage(index, None, exc.message, 0, 0, 0, render_ms=total, ocr_ms=0.0, total_ms=total)
