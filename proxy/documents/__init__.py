"""Documents, not only text: what memproxy embeds from a PDF, DOCX, HTML, Markdown, text or image upload.

``sniff`` checks an upload's declared type against its bytes, ``extract`` returns its text page by page
(OCR with Tesseract where a page has no text layer) and, when asked, its pages as PNG images;
``ocr_document`` serves ``POST /v1/ocr:document``. A stand-alone package: it imports nothing else from
memproxy, and its errors are its own (``DocumentError`` and kinds, with a processing ``stage``).
See docs/documents.md.
"""

from proxy.documents.errors import (
    CorruptDocument,
    DocumentError,
    DocumentTooComplex,
    EncryptedDocument,
    ImageTooLarge,
    InvalidRange,
    OcrTimeout,
    OcrUnavailable,
    Stage,
    TooManyPages,
    UnsupportedDocument,
)
from proxy.documents.kinds import DocumentKind, media_type, needs_extraction, sniff
from proxy.documents.model import (
    Extraction,
    Limits,
    OcrCell,
    OcrDocPage,
    OcrDocument,
    OcrFormat,
    OcrResult,
    PageImage,
    PageText,
)
from proxy.documents.ocr import INSTALL_HINT, ocr_image, tesseract_available
from proxy.documents.pdf import PDFIUM_LOCK
from proxy.documents.pipeline import MIN_TEXT_LAYER_CHARS, extract, ocr_document

__all__ = [
    "INSTALL_HINT",
    "MIN_TEXT_LAYER_CHARS",
    "PDFIUM_LOCK",
    "CorruptDocument",
    "DocumentError",
    "DocumentKind",
    "DocumentTooComplex",
    "EncryptedDocument",
    "Extraction",
    "ImageTooLarge",
    "InvalidRange",
    "Limits",
    "OcrCell",
    "OcrDocPage",
    "OcrDocument",
    "OcrFormat",
    "OcrResult",
    "OcrTimeout",
    "OcrUnavailable",
    "PageImage",
    "PageText",
    "Stage",
    "TooManyPages",
    "UnsupportedDocument",
    "extract",
    "media_type",
    "needs_extraction",
    "ocr_document",
    "ocr_image",
    "sniff",
    "tesseract_available",
]
