"""What can go wrong with a document, as this package's own exceptions (it imports nothing from the rest of
memproxy): the API turns them into 400s or a failed job's ``failureStage`` and ``lastError``.

Every message is one line, names the problem and never quotes the document's bytes: it ends up in job
records and HTTP answers that other people read.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "CorruptDocument",
    "DocumentError",
    "DocumentTooComplex",
    "EncryptedDocument",
    "ImageTooLarge",
    "InvalidRange",
    "OcrTimeout",
    "OcrUnavailable",
    "Stage",
    "TooManyPages",
    "UnsupportedDocument",
]

# The processing stages of GoodMem's job history (``failureStage``).
Stage = Literal["PREPARING_DOCUMENT", "EXTRACTING_CONTENT", "GENERATING_PAGE_IMAGES"]

_MAX_MESSAGE = 300


def one_line(text: str) -> str:
    """``text`` on one line, cut to a readable length."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_MESSAGE else flat[: _MAX_MESSAGE - 1] + "…"


def reason(exc: BaseException) -> str:
    """A parser's complaint, fit for a message: its first line, or only its type where the message quotes
    raw bytes (pypdf and zipfile put fragments of the input in some of theirs)."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    if not first or "b'" in first or 'b"' in first or not first.isprintable():
        return type(exc).__name__
    return one_line(first)[:160]


class DocumentError(Exception):
    """A document memproxy cannot turn into text; ``stage`` says where it failed."""

    default_stage: Stage = "EXTRACTING_CONTENT"

    def __init__(self, message: str, *, stage: Stage | None = None):
        self.message = one_line(message)
        self.stage: Stage = stage or self.default_stage
        super().__init__(self.message)


class CorruptDocument(DocumentError):
    """The bytes cannot be parsed as the type they claim (or were sniffed) to be."""

    default_stage: Stage = "PREPARING_DOCUMENT"


class EncryptedDocument(DocumentError):
    """A password-protected PDF: refused even when the user password is empty."""

    default_stage: Stage = "PREPARING_DOCUMENT"


class UnsupportedDocument(DocumentError):
    """A content type (or OCR input format) memproxy does not extract text from."""

    default_stage: Stage = "PREPARING_DOCUMENT"


class TooManyPages(DocumentError):
    """More pages (or image frames) than ``Limits.max_pages``; refused before any page is processed."""

    default_stage: Stage = "PREPARING_DOCUMENT"


class DocumentTooComplex(DocumentError):
    """A document that asks for more work than the limits allow: too many drawings or characters, or a text
    layer that takes too long (proxy.documents.pdfwork). Retrying would not help."""


class ImageTooLarge(DocumentError):
    """An image with more pixels than ``Limits.max_image_pixels``: a decompression bomb, or a photo that
    would cost more memory than a page should."""

    default_stage: Stage = "PREPARING_DOCUMENT"


class OcrUnavailable(DocumentError):
    """The Tesseract binary (or the requested language's data) is not installed."""


class OcrTimeout(DocumentError):
    """OCR ran past the document's time budget (``Limits.ocr_timeout_s``); Tesseract was killed."""


class InvalidRange(DocumentError):
    """``startPage``/``endPage`` of ``POST /v1/ocr:document`` outside the document: the API answers 400."""

    default_stage: Stage = "PREPARING_DOCUMENT"
