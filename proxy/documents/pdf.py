"""PDFs: the text layer with pypdf, page rendering with pypdfium2.

PDFium is not thread-safe, and memproxy calls it from worker threads (``asyncio.to_thread``): every call into
pypdfium2, opening and closing included, holds ``PDFIUM_LOCK``. Objects are closed explicitly under the lock,
never left to the garbage collector, whose finalizers would call PDFium from whichever thread runs them.
"""

from __future__ import annotations

import io
import logging
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

import pypdfium2 as pdfium
from PIL import Image
from pypdf import PdfReader
from pypdf.errors import PyPdfError

from proxy.documents.errors import CorruptDocument, EncryptedDocument, TooManyPages, reason
from proxy.documents.model import Limits
from proxy.documents.pdfwork import DrawCounts, TextBudget, check_draws

__all__ = ["PDFIUM_LOCK", "Rendered", "Renderer", "check_work", "open_reader", "page_texts"]

PDFIUM_LOCK = threading.Lock()
# What pypdf raises on a malformed file (it has no single base class for them).
_PYPDF_ERRORS = (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError)
_POINTS_PER_INCH = 72.0

# pypdf logs every repaired cross-reference table as a warning; a scanner's PDF is not an operator's problem.
logging.getLogger("pypdf").setLevel(logging.ERROR)


def open_reader(data: bytes, max_pages: int | None) -> PdfReader:
    """pypdf's reader, after refusing encrypted documents and (unless None) more than ``max_pages`` pages."""
    try:
        reader = PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted
        count = 0 if encrypted else len(reader.pages)
    except _PYPDF_ERRORS as exc:
        raise CorruptDocument(f"cannot parse the PDF: {reason(exc)}") from exc
    if encrypted:
        # Even with an empty user password: an owner that encrypted it did not mean it to be copied out.
        raise EncryptedDocument("the PDF is encrypted (password-protected); upload a copy without encryption")
    if count == 0:
        raise CorruptDocument("the PDF has no pages")
    if max_pages is not None and count > max_pages:
        raise TooManyPages(f"the PDF has {count} pages, more than the limit of {max_pages}")
    return reader


def page_texts(reader: PdfReader, limits: Limits) -> list[str]:
    """The text layer of every page, in order, within the work bounds of :mod:`proxy.documents.pdfwork`."""
    budget = TextBudget(limits)
    counts = DrawCounts()
    texts = []
    for index, page in enumerate(reader.pages):
        try:
            check_draws(page, index, limits, counts)
            budget.start(index)
            texts.append(
                page.extract_text(visitor_operand_before=budget.operator, visitor_text=budget.text) or ""
            )
            budget.check()
        except _PYPDF_ERRORS as exc:
            budget.check()  # a bound pypdf reported as its own failure
            raise CorruptDocument(f"cannot read the text of page {index}: {reason(exc)}") from exc
    return texts


def check_work(reader: PdfReader, pages: Iterable[int], limits: Limits) -> None:
    """The drawing bounds of ``pages`` (before they are rendered without their text being read)."""
    counts = DrawCounts()
    for index in pages:
        try:
            check_draws(reader.pages[index], index, limits, counts)
        except _PYPDF_ERRORS as exc:
            raise CorruptDocument(f"cannot read page {index}: {reason(exc)}") from exc


class Renderer:
    """One open PDFium document; every method takes ``PDFIUM_LOCK``. ``close()`` it (blocking: call it from
    a worker thread)."""

    def __init__(self, data: bytes):
        with PDFIUM_LOCK:
            try:
                self._document = pdfium.PdfDocument(data)
            except pdfium.PdfiumError as exc:
                raise CorruptDocument(f"cannot open the PDF for rendering: {reason(exc)}") from exc

    def close(self) -> None:
        with PDFIUM_LOCK:
            self._document.close()

    def __len__(self) -> int:
        with PDFIUM_LOCK:
            return len(self._document)

    def render(self, index: int, dpi: int, max_pixels: int, *, grey: bool) -> Rendered:
        """Page ``index`` at ``dpi`` (less where the page would exceed ``max_pixels``)."""
        asked = time.perf_counter()
        with PDFIUM_LOCK:
            started = time.perf_counter()
            page = self._document[index]
            try:
                width_pt, height_pt = page.get_size()
                dpi = _capped_dpi(width_pt, height_pt, dpi, max_pixels)
                bitmap = page.render(scale=dpi / _POINTS_PER_INCH, grayscale=grey, rev_byteorder=True)
                try:
                    # to_pil() shares the bitmap's buffer: copy before the bitmap is freed.
                    image = bitmap.to_pil().copy()
                finally:
                    bitmap.close()
            except pdfium.PdfiumError as exc:
                raise CorruptDocument(f"cannot render page {index}: {reason(exc)}") from exc
            finally:
                page.close()
        return Rendered(image, dpi, wait_s=started - asked, render_s=time.perf_counter() - started)


@dataclass
class Rendered:
    image: Image.Image
    dpi: int
    # Time spent waiting for PDFIUM_LOCK (one page renders at a time in the process), then rendering.
    wait_s: float
    render_s: float


def _capped_dpi(width_pt: float, height_pt: float, dpi: int, max_pixels: int) -> int:
    """The largest dpi <= ``dpi`` at which the page stays under ``max_pixels`` (a PDF may declare a page
    hundreds of inches wide; rendering it at 300 dpi would need gigabytes)."""
    area_in2 = max(width_pt, 1.0) * max(height_pt, 1.0) / (_POINTS_PER_INCH**2)
    if area_in2 * dpi * dpi <= max_pixels:
        return dpi
    return max(1, math.floor(math.sqrt(max_pixels / area_in2)))
