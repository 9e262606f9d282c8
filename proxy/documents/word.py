"""DOCX: paragraphs and table cells in document order, with python-docx."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator

import docx
from docx.document import Document
from docx.opc.exceptions import PackageNotFoundError
from docx.table import Table, _Cell
from docx.text.paragraph import Paragraph
from lxml.etree import LxmlError

from proxy.documents.errors import CorruptDocument, reason

__all__ = ["docx_text"]

# A DOCX is a zip: python-docx inflates its XML parts whole, so a small upload can ask for gigabytes.
MAX_UNCOMPRESSED = 256 * 1024 * 1024


def _check_archive(data: bytes) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            total = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise CorruptDocument(f"cannot open the DOCX archive: {reason(exc)}") from exc
    if total > MAX_UNCOMPRESSED:
        raise CorruptDocument(
            f"the DOCX would inflate to {total:,} bytes, more than the limit of {MAX_UNCOMPRESSED:,}"
        )


def _blocks(container: Document | _Cell) -> Iterator[str]:
    for item in container.iter_inner_content():
        if isinstance(item, Paragraph):
            yield item.text
        elif isinstance(item, Table):
            yield from _table(item)


def _table(table: Table) -> Iterator[str]:
    """One line per row, cells separated by " | "; a merged cell (python-docx repeats it) counted once;
    nested tables after their row."""
    for row in table.rows:
        seen: list[object] = []  # lxml elements compare by identity
        cells: list[str] = []
        nested: list[str] = []
        for cell in row.cells:
            if cell._tc in seen:
                continue
            seen.append(cell._tc)
            cells.append(" ".join(p.text.strip() for p in cell.paragraphs if p.text.strip()))
            for inner in cell.tables:
                nested.extend(_table(inner))
        yield " | ".join(cells)
        yield from nested


def docx_text(data: bytes) -> str:
    _check_archive(data)
    try:
        document = docx.Document(io.BytesIO(data))
        blocks = list(_blocks(document))
    except (PackageNotFoundError, KeyError, ValueError, LxmlError, zipfile.BadZipFile, OSError) as exc:
        raise CorruptDocument(f"cannot read the DOCX document: {reason(exc)}") from exc
    return "\n".join(b.strip() for b in blocks if b.strip())
