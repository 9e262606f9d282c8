"""Which kind of document a payload is: its declared content type checked against its bytes."""

from __future__ import annotations

import io
import struct
import zipfile
from enum import StrEnum

from proxy.documents.errors import CorruptDocument, UnsupportedDocument

__all__ = [
    "DOCX_TYPE",
    "DocumentKind",
    "ImageFormat",
    "charset_of",
    "image_format",
    "is_docx",
    "is_pdf",
    "media_type",
    "needs_extraction",
    "sniff",
]

DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


class DocumentKind(StrEnum):
    TEXT = "TEXT"
    MARKDOWN = "MARKDOWN"
    HTML = "HTML"
    PDF = "PDF"
    DOCX = "DOCX"
    IMAGE = "IMAGE"


class ImageFormat(StrEnum):
    PNG = "PNG"
    JPEG = "JPEG"
    TIFF = "TIFF"
    BMP = "BMP"
    GIF = "GIF"
    WEBP = "WEBP"


# Types that say nothing about the bytes: the bytes decide.
_GENERIC = {"", "application/octet-stream", "binary/octet-stream", "application/unknown", "unknown/unknown"}
_HTML = {"text/html", "application/xhtml+xml"}
_MARKDOWN = {"text/markdown", "text/x-markdown"}
_TEXTUAL_APPLICATION = {
    "application/json",
    "application/x-ndjson",
    "application/xml",
    "application/yaml",
    "application/x-yaml",
    "application/javascript",
    "application/x-sh",
    "application/sql",
    "application/toml",
}
_IMAGE_TYPES = {
    "image/png": ImageFormat.PNG,
    "image/jpeg": ImageFormat.JPEG,
    "image/jpg": ImageFormat.JPEG,
    "image/pjpeg": ImageFormat.JPEG,
    "image/tiff": ImageFormat.TIFF,
    "image/tif": ImageFormat.TIFF,
    "image/bmp": ImageFormat.BMP,
    "image/x-bmp": ImageFormat.BMP,
    "image/x-ms-bmp": ImageFormat.BMP,
    "image/gif": ImageFormat.GIF,
    "image/webp": ImageFormat.WEBP,
}
SUPPORTED = (
    "text/plain (and other text/* types, JSON, XML, YAML), text/markdown, text/html, application/pdf, "
    f"{DOCX_TYPE}, image/png, image/jpeg, image/tiff, image/bmp, image/gif, image/webp"
)
# Sizes of the BMP info headers Pillow reads: "BM" alone is too weak a signature (a text may start "BMW").
_BMP_HEADERS = {12, 16, 40, 52, 56, 64, 108, 124}


def media_type(content_type: str) -> str:
    """``text/plain; charset=utf-8`` → ``text/plain``."""
    return content_type.split(";", 1)[0].strip().lower()


def charset_of(content_type: str) -> str | None:
    """The ``charset`` parameter of a content type, if any."""
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip("\"'").lower()
    return None


def is_pdf(data: bytes) -> bool:
    # The PDF reference allows the header anywhere in the first 1024 bytes (after a mail header, say).
    return b"%PDF-" in data[:1024]


def is_docx(data: bytes) -> bool:
    if not data.startswith(b"PK\x03\x04"):
        return False
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return "word/document.xml" in archive.namelist()
    except (zipfile.BadZipFile, ValueError, OSError):
        return False


def image_format(data: bytes) -> ImageFormat | None:
    """The image format the signature at the start of ``data`` names, if any."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return ImageFormat.PNG
    if data.startswith(b"\xff\xd8\xff"):
        return ImageFormat.JPEG
    if data.startswith((b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")):
        return ImageFormat.TIFF
    if data.startswith((b"GIF87a", b"GIF89a")):
        return ImageFormat.GIF
    if len(data) >= 12 and data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return ImageFormat.WEBP
    if len(data) >= 18 and data.startswith(b"BM") and struct.unpack_from("<I", data, 14)[0] in _BMP_HEADERS:
        return ImageFormat.BMP
    return None


def _binary_kind(data: bytes) -> DocumentKind | None:
    if is_pdf(data):
        return DocumentKind.PDF
    if image_format(data) is not None:
        return DocumentKind.IMAGE
    if is_docx(data):
        return DocumentKind.DOCX
    return None


def _is_textual(kind: str) -> bool:
    return (
        kind.startswith("text/") or kind in _TEXTUAL_APPLICATION or kind.endswith(("+json", "+xml", "+yaml"))
    )


def _looks_like_html(data: bytes) -> bool:
    head = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith((b"<!doctype html", b"<html"))


def _looks_like_text(data: bytes) -> bool:
    if b"\x00" in data[:8192] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    try:
        data[:65536].decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the 64 KiB window is still text.
        return exc.start >= 65536 - 4
    return True


def _described(kind: DocumentKind) -> str:
    return {
        DocumentKind.PDF: "a PDF",
        DocumentKind.DOCX: "a DOCX document",
        DocumentKind.IMAGE: "an image",
    }.get(kind, kind.value.lower())


def sniff(data: bytes, declared: str) -> DocumentKind:
    """The kind of ``data``, uploaded as content type ``declared``.

    A generic type (empty, ``application/octet-stream``) lets the bytes decide. A specific binary type must
    match its bytes (``CorruptDocument`` otherwise), and so must a textual type: PDF or image bytes sent as
    ``text/plain`` are a client's mistake worth naming, not text to decode.
    """
    kind = media_type(declared)
    found = _binary_kind(data)
    if kind in _GENERIC:
        if found is not None:
            return found
        if _looks_like_html(data):
            return DocumentKind.HTML
        if _looks_like_text(data):
            return DocumentKind.TEXT
        raise UnsupportedDocument(
            f"cannot tell what the {kind or 'untyped'} content is; supported: {SUPPORTED}"
        )
    expected: DocumentKind | None = None
    if kind == "application/pdf" or kind == "application/x-pdf":
        expected = DocumentKind.PDF
    elif kind == DOCX_TYPE:
        expected = DocumentKind.DOCX
    elif kind in _IMAGE_TYPES:
        expected = DocumentKind.IMAGE
    if expected is not None:
        if found is not expected:
            raise CorruptDocument(f"declared {kind} but the bytes are not {_described(expected)}")
        return expected
    if kind in _HTML or kind in _MARKDOWN or _is_textual(kind):
        if found is not None:
            raise CorruptDocument(f"declared {kind} but the bytes are {_described(found)}")
        if kind in _HTML:
            return DocumentKind.HTML
        return DocumentKind.MARKDOWN if kind in _MARKDOWN else DocumentKind.TEXT
    raise UnsupportedDocument(f"unsupported content type {kind}; supported: {SUPPORTED}")


def needs_extraction(content_type: str) -> bool:
    """Whether the bytes of this type are not themselves the text to embed (PDF, DOCX, images, HTML), so the
    upload takes the asynchronous path. A generic type counts: its bytes may be any of those."""
    kind = media_type(content_type)
    return (
        kind in _GENERIC
        or kind in _HTML
        or kind in ("application/pdf", "application/x-pdf", DOCX_TYPE)
        or kind.startswith("image/")
    )
