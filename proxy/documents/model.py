"""What extraction and OCR return, and the limits they work under."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

from proxy.documents.kinds import DocumentKind

__all__ = [
    "Extraction",
    "Limits",
    "OcrCell",
    "OcrDocPage",
    "OcrDocument",
    "OcrFormat",
    "OcrResult",
    "PageImage",
    "PageText",
]

OcrFormat = Literal["PDF", "PNG", "JPEG", "TIFF", "BMP"]


@dataclass(frozen=True)
class Limits:
    """Bounds on one document's processing; each is a memproxy setting."""

    max_pages: int = 500
    # For the whole document, not per page: a 500-page scan must not hold a worker for 500 x the budget.
    ocr_timeout_s: float = 120.0
    ocr_dpi: int = 300
    page_image_dpi: int = 150
    ocr_language: str = "eng"
    # Per decoded image or rendered page: 60 MP is an A4 page at 600 dpi with room to spare.
    max_image_pixels: int = 60_000_000
    # Pages of one document OCR'd side by side (one Tesseract process each, single-threaded); rendering the
    # next page overlaps the OCR of this one.
    ocr_workers: int = 2
    # The work of a PDF (proxy.documents.pdfwork): drawings per page through nested forms, form nesting, text
    # characters per page and per document, and the seconds the text of one page and of the document may take
    # to extract. pypdf interprets a drawn form in about 2.5 ms on a busy machine: 2 000 drawings, 5 s.
    max_draws: int = 2_000
    max_form_depth: int = 12
    max_page_chars: int = 1_000_000
    max_chars: int = 20_000_000
    page_timeout_s: float = 10.0
    text_timeout_s: float = 120.0


@dataclass
class PageText:
    index: int
    text: str
    ocr: bool


@dataclass
class PageImage:
    index: int
    dpi: int
    content_type: str
    data: bytes
    width: int
    height: int

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class Extraction:
    kind: DocumentKind
    # What gets chunked: the non-empty pages' texts joined with "\n\n".
    text: str
    pages: list[PageText]
    images: list[PageImage]
    ocr_pages: int
    # Milliseconds per phase (prepare, text_layer, render, ocr, page_images, total); absent when not run.
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class OcrCell:
    """One line of text Tesseract found; ``bbox`` is (left, top, right, bottom) in image pixels."""

    text: str
    bbox: tuple[int, int, int, int]
    category: str = "TEXT"


@dataclass
class OcrResult:
    text: str
    cells: list[OcrCell]
    width: int
    height: int


@dataclass
class OcrDocPage:
    """One page of ``POST /v1/ocr:document``: a ``result`` or an ``error``, with its timings."""

    index: int
    result: OcrResult | None
    error: str | None
    width_px: int
    height_px: int
    dpi: int
    render_ms: float
    ocr_ms: float
    total_ms: float
    # Time the page waited for the PDF renderer (one page renders at a time in the process).
    queue_wait_ms: float = 0.0


@dataclass
class OcrDocument:
    detected_format: OcrFormat
    pages: list[OcrDocPage]
    wall_ms: float
