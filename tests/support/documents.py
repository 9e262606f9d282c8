"""Small documents the tests generate: PDFs with and without a text layer, images with text, TIFF, DOCX,
HTML, an encrypted and a corrupt PDF. Text drawn into images uses Pillow's bundled font (FreeType, shipped
in Pillow's wheels), so OCR tests need no font package: CI installs none beyond Debian's base.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence

from docx import Document
from PIL import Image, ImageDraw, ImageFont
from pypdf import PdfWriter

__all__ = [
    "corrupt_pdf",
    "docx_bytes",
    "encrypted_pdf",
    "form_bomb_pdf",
    "html_page",
    "page_image",
    "scanned_pdf",
    "text_image",
    "text_pdf",
    "tiff_pages",
]

# A4 at 72 points per inch.
_PAGE_W, _PAGE_H = 595, 842


def _pdf_string(text: str) -> bytes:
    """A PDF literal string in WinAnsi (Helvetica's encoding); characters outside it become "?"."""
    raw = text.encode("cp1252", "replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def text_pdf(
    pages: Sequence[str], *, font_size: int = 14, leading: int = 18, left: int = 56, top: int = 780
) -> bytes:
    """A PDF with a real text layer: one Helvetica content stream per page, a line of text per line of the
    page's string (``font_size`` points, ``leading`` apart, from ``left``, ``top``), written object by object
    with a correct cross-reference table."""
    objects: list[bytes] = []  # object n is objects[n - 1]
    font = 3
    kids = [4 + 2 * i for i in range(len(pages))]
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(
        b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % k for k in kids) + b"] /Count %d >>" % len(pages)
    )
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    for index, text in enumerate(pages):
        lines = [b"BT /F1 %d Tf %d TL %d %d Td" % (font_size, leading, left, top)]
        for line in text.splitlines() or [""]:
            lines.append(_pdf_string(line) + b" Tj T*")
        lines.append(b"ET")
        stream = b"\n".join(lines)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] " % (_PAGE_W, _PAGE_H)
            + b"/Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>" % (font, 5 + 2 * index)
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def page_image(text: str, *, width: int = 1700, height: int = 2200, size: int = 48) -> Image.Image:
    """A white page (A4-ish at 200 dpi) with ``text`` in black, wrapped, big and clear enough for OCR."""
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    font = _font(size)
    y = size * 2
    for paragraph in text.splitlines() or [""]:
        for line in textwrap.wrap(paragraph, width=max(10, (width - 4 * size) // (size // 2 + 1))) or [""]:
            draw.text((size * 2, y), line, font=font, fill=0)
            y += int(size * 1.6)
    return image


def scanned_pdf(pages: Sequence[str]) -> bytes:
    """An image-only PDF (what a scanner produces): each page a picture of its text, no text layer."""
    images = [page_image(text).convert("RGB") for text in pages]
    out = io.BytesIO()
    images[0].save(out, "PDF", save_all=True, append_images=images[1:], resolution=200.0)
    return out.getvalue()


def text_image(text: str, fmt: str = "PNG", *, size: int = 48) -> bytes:
    """``text`` drawn on a white image just big enough for it, as ``fmt`` (PNG, JPEG, BMP, GIF, WEBP...)."""
    font = _font(size)
    lines = text.splitlines() or [""]
    width = max(int(font.getlength(line)) for line in lines) + 4 * size
    height = int(len(lines) * size * 1.6) + 3 * size
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((2 * size, int(1.5 * size + i * size * 1.6)), line, font=font, fill="black")
    out = io.BytesIO()
    image.save(out, fmt, **({"quality": 95} if fmt.upper() in ("JPEG", "WEBP") else {}))
    return out.getvalue()


def tiff_pages(texts: Sequence[str]) -> bytes:
    """A multi-page TIFF, one page per text."""
    images = [page_image(text, width=1400, height=500) for text in texts]
    out = io.BytesIO()
    images[0].save(out, "TIFF", save_all=True, append_images=images[1:], compression="tiff_lzw")
    return out.getvalue()


def docx_bytes(paragraphs: Sequence[str], table: Sequence[Sequence[str]] | None = None) -> bytes:
    """A DOCX with ``paragraphs``, then ``table`` (rows of cells) if given."""
    document = Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=max(len(row) for row in table))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def html_page(
    body: str,
    *,
    title: str = "A test page",
    script: str = "var secret = 'SCRIPTTEXT';",
    style: str = "body { color: STYLETEXT; }",
) -> bytes:
    """An HTML page with a head (title, style, meta), a script, and ``body`` as its body's markup."""
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{title}</title><style>{style}</style><script>{script}</script></head>"
        f"<body>{body}<script>{script}</script></body></html>"
    ).encode()


def encrypted_pdf(text: str = "Secret page", user_password: str = "") -> bytes:
    """A PDF with a text layer, encrypted (with an empty user password by default: it opens without one)."""
    writer = PdfWriter(clone_from=io.BytesIO(text_pdf([text])))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def corrupt_pdf() -> bytes:
    """A PDF header followed by garbage: no objects, no cross-reference table."""
    return b"%PDF-1.7\n" + bytes(range(256)) * 8 + b"\nthis is not a pdf\n"


def form_bomb_pdf(levels: int, fanout: int = 12, *, cycle: bool = False) -> bytes:
    """The "billion laughs" of PDF, written by hand (about 1-2 KB): a leaf form showing one character,
    ``levels`` forms each drawing the one below ``fanout`` times, and a page drawing the top one ``fanout``
    times: fanout^(levels+1) drawings of the leaf. ``cycle``: the leaf draws the top form instead (a form
    that, through the others, draws itself)."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    def form(resources: bytes, content: bytes) -> bytes:
        return (
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 100 100] /Resources << %s >> /Length %d >>\n"
            % (
                resources,
                len(content),
            )
            + b"stream\n%s\nendstream" % content
        )

    draws = b" ".join([b"/X Do"] * fanout)
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    top = 2 + levels  # the number the top form will get
    if cycle:
        below = add(form(b"/XObject << /X %d 0 R >>" % top, b"/X Do"))
    else:
        below = add(form(b"/Font << /F1 %d 0 R >>" % font, b"BT /F1 12 Tf 10 10 Td (x) Tj ET"))
    for _ in range(levels):
        below = add(form(b"/XObject << /X %d 0 R >>" % below, draws))
    contents = add(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(draws), draws))
    pages = len(objects) + 2
    page = add(
        b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 200 200] /Resources << /XObject << /X %d 0 R >> >> "
        b"/Contents %d 0 R >>" % (pages, below, contents)
    )
    add(b"<< /Type /Pages /Kids [%d 0 R] /Count 1 >>" % page)
    catalog = add(b"<< /Type /Catalog /Pages %d 0 R >>" % pages)
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        catalog,
        xref,
    )
    return bytes(out)
