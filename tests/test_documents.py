"""proxy.documents on generated files (tests/support/documents.py), no node: every kind extracted, the
PDF text layer and OCR, page images, the limits, the errors, Tesseract's deadline and absence, and
``ocr_document``'s ranges. OCR output is compared on lower-cased words: OCR is not exact to the character.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
import struct
import time
import zlib
from typing import Any

import pytest
from PIL import Image
from pypdf import PdfReader, PdfWriter

from proxy.documents import (
    INSTALL_HINT,
    CorruptDocument,
    DocumentError,
    DocumentKind,
    DocumentTooComplex,
    EncryptedDocument,
    ImageTooLarge,
    InvalidRange,
    Limits,
    OcrTimeout,
    OcrUnavailable,
    TooManyPages,
    UnsupportedDocument,
    extract,
    needs_extraction,
    ocr_document,
    ocr_image,
    sniff,
    tesseract_available,
)
from proxy.documents import ocr as ocr_module
from tests.support.documents import (
    corrupt_pdf,
    docx_bytes,
    encrypted_pdf,
    form_bomb_pdf,
    html_page,
    page_image,
    scanned_pdf,
    text_image,
    text_pdf,
    tiff_pages,
)

pytestmark = pytest.mark.timeout(300)
needs_ocr = pytest.mark.skipif(
    not tesseract_available(), reason="tesseract is not installed (apt-get install tesseract-ocr)"
)
LIMITS = Limits()
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def merged(*pdfs: bytes) -> bytes:
    writer = PdfWriter()
    for pdf in pdfs:
        writer.append(PdfReader(io.BytesIO(pdf)))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# --------------------------------------------------------------------------------------------- sniff


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (text_pdf(["x"]), DocumentKind.PDF),
        (docx_bytes(["x"]), DocumentKind.DOCX),
        (text_image("x", "PNG"), DocumentKind.IMAGE),
        (text_image("x", "JPEG"), DocumentKind.IMAGE),
        (text_image("x", "BMP"), DocumentKind.IMAGE),
        (text_image("x", "GIF"), DocumentKind.IMAGE),
        (text_image("x", "WEBP"), DocumentKind.IMAGE),
        (tiff_pages(["x"]), DocumentKind.IMAGE),
        (b"<!DOCTYPE html><html><body>hi</body></html>", DocumentKind.HTML),
        (b"BMW makes cars; this text starts like a bitmap's signature.", DocumentKind.TEXT),
    ],
)
@pytest.mark.parametrize("declared", ["", "application/octet-stream"])
def test_the_bytes_decide_a_generic_type(data: bytes, kind: DocumentKind, declared: str) -> None:
    assert sniff(data, declared) is kind


def test_declared_types() -> None:
    assert sniff(b"<p>x</p>", "text/html; charset=utf-8") is DocumentKind.HTML
    assert sniff(b"# x", "text/markdown") is DocumentKind.MARKDOWN
    assert sniff(b"# x", "text/x-markdown") is DocumentKind.MARKDOWN
    assert sniff(b"x", "text/plain") is DocumentKind.TEXT
    assert sniff(b"{}", "application/json") is DocumentKind.TEXT
    assert sniff(text_image("x", "JPEG"), "image/png") is DocumentKind.IMAGE  # an image all the same
    assert sniff(docx_bytes(["x"]), DOCX) is DocumentKind.DOCX


def test_a_specific_type_must_match_its_bytes() -> None:
    with pytest.raises(CorruptDocument, match="declared application/pdf but the bytes are not a PDF"):
        sniff(text_image("x"), PDF)
    with pytest.raises(CorruptDocument, match="not an image"):
        sniff(text_pdf(["x"]), "image/png")
    with pytest.raises(CorruptDocument, match="not a DOCX"):
        sniff(b"PK\x03\x04 not a zip", DOCX)
    with pytest.raises(CorruptDocument, match="declared text/plain but the bytes are a PDF"):
        sniff(text_pdf(["x"]), "text/plain")


def test_unsupported_types_name_the_supported_ones() -> None:
    with pytest.raises(
        UnsupportedDocument, match=r"unsupported content type application/zip.*application/pdf"
    ):
        sniff(b"PK\x03\x04", "application/zip")
    with pytest.raises(UnsupportedDocument, match=r"supported: .*image/png"):
        sniff(bytes(range(256)), "application/octet-stream")


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        (PDF, True),
        (DOCX, True),
        ("image/png", True),
        ("image/jpeg", True),
        ("text/html; charset=utf-8", True),
        ("application/octet-stream", True),
        ("text/plain", False),
        ("text/markdown", False),
        ("application/json", False),
    ],
)
def test_needs_extraction(content_type: str, expected: bool) -> None:
    assert needs_extraction(content_type) is expected


# --------------------------------------------------------------------------------------------- PDF


async def test_pdf_text_layer_per_page() -> None:
    pdf = text_pdf(["First page\nwith two lines", "Second page (with parentheses)", "Third page"])
    result = await extract(pdf, PDF, LIMITS, page_images=False)
    assert result.kind is DocumentKind.PDF
    assert [p.index for p in result.pages] == [0, 1, 2]
    assert [p.text for p in result.pages] == [
        "First page\nwith two lines",
        "Second page (with parentheses)",
        "Third page",
    ]
    assert not any(p.ocr for p in result.pages) and result.ocr_pages == 0
    assert result.text == "\n\n".join(p.text for p in result.pages)
    assert result.images == []
    assert {"prepare_ms", "text_layer_ms", "total_ms"} <= result.timings.keys()


# --- the work a PDF may ask for (proxy.documents.pdfwork) -------------------------------------------------


async def test_a_form_bomb_fails_at_once_naming_the_page_and_the_setting() -> None:
    """A 1.7 KB PDF drawing its leaf form 12^5 times: refused from a static count in milliseconds (pypdf
    alone spends 2.5 ms a drawing, with no bound across pages), by the text layer and by OCR alike."""
    bomb = form_bomb_pdf(4)
    assert len(bomb) < 2500
    for run in (
        extract(bomb, PDF, LIMITS, page_images=True),
        ocr_document(bomb, None, LIMITS, start_page=None, end_page=None),
    ):
        started = time.perf_counter()
        with pytest.raises(DocumentTooComplex) as caught:
            await run
        assert time.perf_counter() - started < 1.0
        assert caught.value.message == "the PDF draws more than 2000 objects on page 1 (document_max_draws)"
        assert caught.value.stage == "EXTRACTING_CONTENT"


async def test_forms_that_draw_themselves_or_nest_too_deep_are_refused() -> None:
    with pytest.raises(DocumentTooComplex, match=r"has a form that draws itself on page 1"):
        await extract(form_bomb_pdf(3, cycle=True), PDF, LIMITS, page_images=False)
    with pytest.raises(DocumentTooComplex, match=r"nests forms more than 12 deep on page 1"):
        await extract(form_bomb_pdf(12, fanout=1), PDF, LIMITS, page_images=False)
    # Within the bounds, nested forms are read as before: 12^2 drawings of "x".
    result = await extract(form_bomb_pdf(1), PDF, LIMITS, page_images=False)
    assert result.text.split() == ["x"] * 144


async def test_the_text_layer_is_bounded_in_time_and_characters() -> None:
    slow = Limits(max_draws=10**9, page_timeout_s=0.3)
    started = time.perf_counter()
    with pytest.raises(
        DocumentTooComplex, match=r"page 1 took longer than 0.3 s to extract .*page_timeout_s"
    ):
        await extract(form_bomb_pdf(3), PDF, slow, page_images=False)
    assert time.perf_counter() - started < 2.0
    whole = Limits(max_draws=10**9, page_timeout_s=60, text_timeout_s=0.3)
    with pytest.raises(DocumentTooComplex, match=r"text of the PDF took longer than 0.3 s .*text_timeout_s"):
        await extract(form_bomb_pdf(3), PDF, whole, page_images=False)
    with pytest.raises(DocumentTooComplex, match=r"page 2 of the PDF has more than 50 .*max_page_chars"):
        await extract(text_pdf(["a" * 40, "b" * 60]), PDF, Limits(max_page_chars=50), page_images=False)
    pages = text_pdf(["a" * 60, "b" * 60, "c" * 60])
    with pytest.raises(DocumentTooComplex, match=r"more than 150 characters of text \(document_max_chars\)"):
        await extract(pages, PDF, Limits(max_page_chars=100, max_chars=150), page_images=False)


@needs_ocr  # pages this short (under MIN_TEXT_LAYER_CHARS) are OCR'd
async def test_pdf_page_images() -> None:
    pdf = text_pdf(["one", "two", "three"])
    result = await extract(pdf, PDF, Limits(page_image_dpi=100), page_images=True)
    assert [image.index for image in result.images] == [0, 1, 2]
    for image in result.images:
        assert image.data.startswith(PNG_SIGNATURE) and image.content_type == "image/png"
        assert image.dpi == 100
        # A4 (595 x 842 points) at 100 dpi: 826.4 x 1169.4 pixels, which PDFium rounds up.
        assert (image.width, image.height) == (827, 1170)
        assert Image.open(io.BytesIO(image.data)).size == (image.width, image.height)
        assert image.sha256 == hashlib.sha256(image.data).hexdigest()
    assert len({image.sha256 for image in result.images}) == 3


async def test_a_huge_page_renders_within_the_pixel_limit() -> None:
    writer = PdfWriter()
    writer.add_blank_page(width=14_400, height=14_400)  # 200 x 200 inches
    out = io.BytesIO()
    writer.write(out)
    limits = Limits(max_image_pixels=2_000_000, ocr_timeout_s=60)
    if not tesseract_available():  # the blank page has no text layer: keep OCR out of this test
        pytest.skip("the blank page is OCR'd: needs tesseract")
    result = await extract(out.getvalue(), PDF, limits, page_images=True)
    (image,) = result.images
    assert image.width * image.height <= 2_000_000
    assert image.dpi < limits.page_image_dpi


@needs_ocr
async def test_a_scanned_pdf_is_ocrd() -> None:
    pages = ["The quick brown fox jumps over the lazy dog", "Invoice 4711 from Lisbon harbour"]
    result = await extract(scanned_pdf(pages), PDF, LIMITS, page_images=False)
    assert [p.ocr for p in result.pages] == [True, True] and result.ocr_pages == 2
    for page, text in zip(result.pages, pages, strict=True):
        assert words(text) <= words(page.text), page.text
    assert {"render_ms", "ocr_ms"} <= result.timings.keys()


@needs_ocr
async def test_only_pages_without_a_text_layer_are_ocrd() -> None:
    pdf = merged(text_pdf(["A page with a real text layer"]), scanned_pdf(["Scanned zebra quartz page"]))
    result = await extract(pdf, PDF, LIMITS, page_images=True)
    assert [p.ocr for p in result.pages] == [False, True] and result.ocr_pages == 1
    assert result.pages[0].text == "A page with a real text layer"
    assert words("Scanned zebra quartz page") <= words(result.pages[1].text)
    assert len(result.images) == 2


async def test_too_many_pages_is_refused_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_ocr(*_: Any, **__: Any) -> Any:
        raise AssertionError("OCR ran on a document over the page limit")

    monkeypatch.setattr(ocr_module, "ocr_image", no_ocr)
    with pytest.raises(TooManyPages, match="3 pages, more than the limit of 2") as raised:
        await extract(scanned_pdf(["a", "b", "c"]), PDF, Limits(max_pages=2), page_images=True)
    assert raised.value.stage == "PREPARING_DOCUMENT"
    with pytest.raises(TooManyPages, match="3 pages"):
        await extract(tiff_pages(["a", "b", "c"]), "image/tiff", Limits(max_pages=2), page_images=False)
    pages = ["page one has text", "page two has text"]
    result = await extract(text_pdf(pages), PDF, Limits(max_pages=2), page_images=False)
    assert [p.text for p in result.pages] == pages


@pytest.mark.parametrize("user_password", ["", "secret"])
async def test_an_encrypted_pdf_is_refused(user_password: str) -> None:
    with pytest.raises(EncryptedDocument, match="encrypted") as raised:
        await extract(encrypted_pdf(user_password=user_password), PDF, LIMITS, page_images=True)
    assert raised.value.stage == "PREPARING_DOCUMENT"


async def test_a_corrupt_pdf_fails_with_a_one_line_reason() -> None:
    data = corrupt_pdf()
    with pytest.raises(CorruptDocument) as raised:
        await extract(data, PDF, LIMITS, page_images=False)
    message = raised.value.message
    assert message.startswith("cannot parse the PDF") and "\n" not in message
    assert "not a pdf" not in message and "\\x" not in message  # the bytes stay out of it
    with pytest.raises(CorruptDocument):
        await extract(b"%PDF-1.4\n", PDF, LIMITS, page_images=False)


async def test_documents_render_side_by_side() -> None:
    """PDFium behind its lock: concurrent extractions (worker threads) give each its own pages."""
    pdfs = [text_pdf([f"document {n} page {p}" for p in range(3)]) for n in range(4)]
    results = await asyncio.gather(
        *(extract(pdf, PDF, Limits(page_image_dpi=50), page_images=True) for pdf in pdfs)
    )
    alone = await extract(pdfs[2], PDF, Limits(page_image_dpi=50), page_images=True)
    assert [i.sha256 for i in results[2].images] == [i.sha256 for i in alone.images]
    assert len({i.sha256 for r in results for i in r.images}) == 12


# --------------------------------------------------------------------------------------------- text kinds


async def test_html_yields_the_readable_text() -> None:
    page = html_page(
        "<h1>Heading</h1><p>Fish &amp; chips&nbsp;for   two<br>next line</p>"
        "<noscript>NOSCRIPTTEXT</noscript><template>TEMPLATETEXT</template>"
        "<ul><li>one</li><li>two</li></ul><pre>keep  this\n  indent</pre>"
    )
    result = await extract(page, "text/html", LIMITS, page_images=True)
    assert result.kind is DocumentKind.HTML and result.images == [] and result.ocr_pages == 0
    assert result.text == (
        "A test page\n\nHeading\n\nFish & chips for two\nnext line\n\none\ntwo\nkeep  this\n  indent"
    )
    for hidden in ("SCRIPTTEXT", "STYLETEXT", "NOSCRIPTTEXT", "TEMPLATETEXT", "charset"):
        assert hidden not in result.text


async def test_html_without_a_closed_head_and_in_its_declared_charset() -> None:
    page = "<html><head><title>Café</title><p>Grüße aus Köln".encode("latin-1")
    result = await extract(page, "text/html; charset=iso-8859-1", LIMITS, page_images=False)
    assert result.text == "Café\n\nGrüße aus Köln"
    meta = b"<html><head><meta charset='windows-1252'></head><body>\x93quoted\x94</body></html>"
    assert (await extract(meta, "text/html", LIMITS, page_images=False)).text == "\u201cquoted\u201d"


async def test_docx_paragraphs_and_table_cells_in_order() -> None:
    data = docx_bytes(["Intro paragraph", "Second paragraph"], table=[["Name", "Role"], ["Ada", "Engineer"]])
    result = await extract(data, DOCX, LIMITS, page_images=True)
    assert result.kind is DocumentKind.DOCX and result.images == []
    assert result.text == "Intro paragraph\nSecond paragraph\nName | Role\nAda | Engineer"
    with pytest.raises(CorruptDocument, match="DOCX"):
        await extract(data[: len(data) // 2], DOCX, LIMITS, page_images=False)


async def test_text_and_markdown_are_decoded() -> None:
    markdown = await extract("# Título\n\n*ok*".encode(), "text/markdown", LIMITS, page_images=False)
    assert (markdown.kind, markdown.text) == (DocumentKind.MARKDOWN, "# Título\n\n*ok*")
    latin = await extract("naïve".encode("latin-1"), "text/plain; charset=latin-1", LIMITS, page_images=False)
    assert latin.text == "naïve" and latin.pages[0].text == "naïve" and not latin.pages[0].ocr
    bom = await extract("\ufeffwith a BOM".encode(), "text/plain", LIMITS, page_images=False)
    assert bom.text == "with a BOM"
    with pytest.raises(CorruptDocument, match="not valid utf-8 text"):
        await extract("naïve".encode("latin-1"), "text/plain", LIMITS, page_images=False)
    with pytest.raises(UnsupportedDocument, match="unknown charset"):
        await extract(b"x", "text/plain; charset=klingon", LIMITS, page_images=False)


# --------------------------------------------------------------------------------------------- images


@needs_ocr
@pytest.mark.parametrize(
    ("fmt", "declared"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("BMP", ""), ("GIF", "image/gif"), ("WEBP", "image/webp")],
)
async def test_images_are_ocrd(fmt: str, declared: str) -> None:
    text = "Invoice number 4711 from Lisbon"
    result = await extract(text_image(text, fmt), declared, LIMITS, page_images=True)
    assert result.kind is DocumentKind.IMAGE and result.ocr_pages == 1
    (page,) = result.pages
    assert page.ocr and words(text) <= words(page.text), page.text
    (image,) = result.images
    assert image.data.startswith(PNG_SIGNATURE)
    assert Image.open(io.BytesIO(image.data)).size == (image.width, image.height)


@needs_ocr
async def test_every_tiff_frame_is_a_page() -> None:
    texts = ["First frame alpha", "Second frame bravo", "Third frame charlie"]
    result = await extract(tiff_pages(texts), "image/tiff", LIMITS, page_images=True)
    assert [p.index for p in result.pages] == [0, 1, 2] and result.ocr_pages == 3
    for page, text in zip(result.pages, texts, strict=True):
        assert words(text) <= words(page.text), page.text
    assert [(i.index, i.width, i.height) for i in result.images] == [(n, 1400, 500) for n in range(3)]


@needs_ocr
async def test_transparent_images_are_read_on_white() -> None:
    image = page_image("Black text on nothing", width=1200, height=300)
    rgba = Image.new("RGBA", image.size, (0, 0, 0, 0))
    rgba.putalpha(Image.eval(image, lambda v: 255 - v))  # black ink where the page was dark, else transparent
    out = io.BytesIO()
    rgba.save(out, "PNG")
    result = await extract(out.getvalue(), "image/png", LIMITS, page_images=False)
    assert words("Black text on nothing") <= words(result.text), result.text


async def test_an_image_over_the_pixel_limit_is_refused_before_decoding() -> None:
    data = text_image("big", "PNG", size=200)
    with pytest.raises(ImageTooLarge, match="more than the limit of 1,000 pixels"):
        await extract(data, "image/png", Limits(max_image_pixels=1_000), page_images=True)
    with pytest.raises(CorruptDocument, match="cannot read the image"):
        await extract(data[:40], "image/png", LIMITS, page_images=False)


def _png_header(width: int, height: int) -> bytes:
    """A PNG that claims ``width`` x ``height`` grey pixels and holds none: a decompression bomb's header."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        PNG_SIGNATURE
        + struct.pack(">I", len(ihdr))
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
        + struct.pack(">I", 0)
        + b"IEND"
        + struct.pack(">I", zlib.crc32(b"IEND"))
    )


@pytest.mark.parametrize("limit", [60_000_000, 10**12])
async def test_a_bomb_header_is_refused_without_decoding(limit: int) -> None:
    """20 000 x 20 000 pixels (400 MP) claimed by a 50-byte file: refused by memproxy's limit, or by Pillow's
    own check when the limit is set above it, never decoded."""
    with pytest.raises(ImageTooLarge):
        await extract(
            _png_header(20_000, 20_000), "image/png", Limits(max_image_pixels=limit), page_images=True
        )


# --------------------------------------------------------------------------------------------- Tesseract


def _tesseract_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[asyncio.subprocess.Process]:
    """The Tesseract processes ``ocr_image`` starts."""
    started: list[asyncio.subprocess.Process] = []
    real = asyncio.create_subprocess_exec

    async def spy(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        proc = await real(*args, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setattr(ocr_module.asyncio, "create_subprocess_exec", spy)
    return started


def _busy_page() -> bytes:
    out = io.BytesIO()
    page_image(
        "\n".join(f"line {n} of a page that keeps Tesseract busy for a while" for n in range(40))
    ).save(out, "PNG")
    return out.getvalue()


@needs_ocr
async def test_ocr_timeout_kills_tesseract(spawned: list[asyncio.subprocess.Process]) -> None:
    with pytest.raises(OcrTimeout, match="stopped"):
        await ocr_image(_busy_page(), lang="eng", timeout_s=0.05)
    (proc,) = spawned
    assert proc.returncode is not None and not _tesseract_alive(proc.pid)


@needs_ocr
async def test_cancelling_ocr_kills_tesseract(spawned: list[asyncio.subprocess.Process]) -> None:
    task = asyncio.create_task(ocr_image(_busy_page(), lang="eng", timeout_s=60))
    while not spawned:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert spawned[0].returncode is not None and not _tesseract_alive(spawned[0].pid)


@needs_ocr
async def test_cancelling_an_extraction_kills_its_tesseracts(
    spawned: list[asyncio.subprocess.Process],
) -> None:
    text = "\n".join(f"line {n} of a page that keeps Tesseract busy for a while" for n in range(40))
    task = asyncio.create_task(
        extract(scanned_pdf([text] * 4), PDF, Limits(ocr_workers=2), page_images=False)
    )
    while len(spawned) < 2:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert spawned and not any(_tesseract_alive(proc.pid) for proc in spawned)


@needs_ocr
async def test_the_ocr_budget_is_for_the_whole_document(spawned: list[asyncio.subprocess.Process]) -> None:
    with pytest.raises(OcrTimeout, match=r"document's limit of 0\.2s") as raised:
        await extract(scanned_pdf(["a"] * 6), PDF, Limits(ocr_timeout_s=0.2), page_images=False)
    assert raised.value.stage == "EXTRACTING_CONTENT"
    assert not any(_tesseract_alive(proc.pid) for proc in spawned)


@needs_ocr
async def test_ocr_lines_and_boxes() -> None:
    result = await ocr_image(text_image("first line here\nsecond line there"), lang="eng", timeout_s=60)
    assert [c.text.lower() for c in result.cells] == ["first line here", "second line there"]
    assert all(c.category == "TEXT" for c in result.cells)
    (l1, t1, r1, b1), (_, t2, _, _) = result.cells[0].bbox, result.cells[1].bbox
    assert 0 <= l1 < r1 <= result.width and 0 <= t1 < b1 <= t2 <= result.height


@needs_ocr
async def test_a_missing_language_names_its_package() -> None:
    with pytest.raises(OcrUnavailable, match="apt-get install tesseract-ocr-xxx"):
        await ocr_image(text_image("x"), lang="xxx", timeout_s=30)
    with pytest.raises(UnsupportedDocument, match="invalid OCR language"):
        await ocr_image(text_image("x"), lang="-c foo", timeout_s=30)


async def test_ocr_unavailable_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    tesseract_available.cache_clear()
    try:
        assert not tesseract_available()
        with pytest.raises(OcrUnavailable) as raised:
            await extract(text_image("x"), "image/png", LIMITS, page_images=False)
        assert raised.value.message == INSTALL_HINT
        assert "apt-get install tesseract-ocr" in raised.value.message
        # A PDF with a text layer never needs it.
        text = "A page with a text layer"
        assert (await extract(text_pdf([text]), PDF, LIMITS, page_images=False)).text == text
    finally:
        tesseract_available.cache_clear()


# --------------------------------------------------------------------------------------------- ocr_document


@needs_ocr
async def test_ocr_document_ranges() -> None:
    texts = ["Page zero apple", "Page one banana", "Page two cherry"]
    pdf = scanned_pdf(texts)
    whole = await ocr_document(pdf, None, Limits(ocr_dpi=150), start_page=None, end_page=None)
    assert whole.detected_format == "PDF" and [p.index for p in whole.pages] == [0, 1, 2]
    middle = await ocr_document(pdf, "PDF", LIMITS, start_page=1, end_page=1)
    (page,) = middle.pages
    assert page.index == 1 and page.error is None and page.result is not None
    assert words(texts[1]) <= words(page.result.text)
    # 8.5 x 11 in at 300 dpi (PDFium rounds the 3300.1 pixels up)
    assert (page.width_px, page.height_px, page.dpi) == (2550, 3301, 300)
    assert page.total_ms >= page.ocr_ms > 0 and middle.wall_ms >= page.total_ms
    clamped = await ocr_document(pdf, "AUTO", Limits(ocr_dpi=150), start_page=2, end_page=99)
    assert [p.index for p in clamped.pages] == [2]
    with pytest.raises(InvalidRange, match="startPage 3"):
        await ocr_document(pdf, None, LIMITS, start_page=3, end_page=None)
    with pytest.raises(InvalidRange, match="startPage -1"):
        await ocr_document(pdf, None, LIMITS, start_page=-1, end_page=None)
    with pytest.raises(InvalidRange, match="endPage 0 is before startPage 1"):
        await ocr_document(pdf, None, LIMITS, start_page=1, end_page=0)
    with pytest.raises(TooManyPages):
        await ocr_document(pdf, None, Limits(max_pages=2), start_page=None, end_page=None)


@needs_ocr
async def test_ocr_document_images_and_formats() -> None:
    tiff = await ocr_document(
        tiff_pages(["alpha one", "bravo two"]), None, LIMITS, start_page=1, end_page=None
    )
    assert tiff.detected_format == "TIFF" and [p.index for p in tiff.pages] == [1]
    assert tiff.pages[0].result is not None and words("bravo two") <= words(tiff.pages[0].result.text)
    jpeg = await ocr_document(
        text_image("hello world", "JPEG"), "jpeg", LIMITS, start_page=None, end_page=None
    )
    assert jpeg.detected_format == "JPEG" and len(jpeg.pages) == 1
    with pytest.raises(CorruptDocument, match="format PDF was given but the bytes are PNG"):
        await ocr_document(text_image("x"), "PDF", LIMITS, start_page=None, end_page=None)
    with pytest.raises(UnsupportedDocument, match="not GIF"):
        await ocr_document(text_image("x", "GIF"), None, LIMITS, start_page=None, end_page=None)
    with pytest.raises(EncryptedDocument):
        await ocr_document(encrypted_pdf(), None, LIMITS, start_page=None, end_page=None)


@needs_ocr
async def test_ocr_document_out_of_time_fails_pages_not_the_request() -> None:
    result = await ocr_document(
        scanned_pdf(["a", "b", "c"]), None, Limits(ocr_timeout_s=0.05), start_page=None, end_page=None
    )
    assert [p.index for p in result.pages] == [0, 1, 2]
    assert all(p.result is None and p.error and "OCR" in p.error for p in result.pages)


def test_errors_are_one_line_with_a_stage() -> None:
    error = CorruptDocument("first\nsecond   third")
    assert error.message == "first second third" and str(error) == error.message
    assert error.stage == "PREPARING_DOCUMENT"
    assert OcrTimeout("x").stage == "EXTRACTING_CONTENT"
    assert DocumentError("x", stage="GENERATING_PAGE_IMAGES").stage == "GENERATING_PAGE_IMAGES"
    assert issubclass(InvalidRange, DocumentError) and issubclass(ImageTooLarge, DocumentError)
