"""OCR with Debian's ``tesseract`` binary, one subprocess per image (no Python binding: the binary is what
the setup and CI scripts install, and a subprocess can be killed at a deadline where a library call cannot).
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import shutil
import time
from dataclasses import dataclass

from proxy.documents.errors import CorruptDocument, OcrTimeout, OcrUnavailable, UnsupportedDocument, one_line
from proxy.documents.model import OcrCell, OcrResult

__all__ = ["INSTALL_HINT", "Deadline", "ocr_image", "parse_tsv", "tesseract_available"]

TESSERACT = "tesseract"
INSTALL_HINT = (
    "OCR needs Tesseract: install Debian's tesseract-ocr package "
    "(apt-get install tesseract-ocr tesseract-ocr-eng)"
)
_LANGUAGE = re.compile(r"[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*")


@functools.cache
def tesseract_available() -> bool:
    return shutil.which(TESSERACT) is not None


@dataclass
class Deadline:
    """The one OCR time budget of a whole document."""

    budget_s: float
    started: float = 0.0

    def __post_init__(self) -> None:
        self.started = time.monotonic()

    def remaining(self) -> float:
        """Seconds left; ``OcrTimeout`` when none are."""
        left = self.budget_s - (time.monotonic() - self.started)
        if left <= 0:
            raise self.expired()
        return left

    def expired(self) -> OcrTimeout:
        return OcrTimeout(f"OCR did not finish within the document's limit of {self.budget_s:g}s")

    async def ocr(self, png: bytes, lang: str) -> OcrResult:
        """``ocr_image`` with what is left of the budget; running out reads as the document's timeout."""
        try:
            return await ocr_image(png, lang=lang, timeout_s=self.remaining())
        except OcrTimeout as exc:
            raise self.expired() from exc


async def ocr_image(png: bytes, *, lang: str, timeout_s: float) -> OcrResult:
    """Tesseract's lines of text in one image (PNG, or any format Leptonica reads).

    The process is killed when ``timeout_s`` passes (``OcrTimeout``) and when the caller is cancelled.
    """
    if not _LANGUAGE.fullmatch(lang):
        raise UnsupportedDocument(f"invalid OCR language {lang!r}: expected names like eng or eng+deu")
    if timeout_s <= 0:
        raise OcrTimeout("no time left for OCR")
    try:
        proc = await asyncio.create_subprocess_exec(
            TESSERACT,
            "stdin",
            "stdout",
            "-l",
            lang,
            "tsv",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # OpenMP's thread team in libtesseract spins on every core for little gain on one page;
            # memproxy runs pages side by side instead (and shares its cores with the embedder).
            env={**os.environ, "OMP_THREAD_LIMIT": "1"},
        )
    except FileNotFoundError as exc:
        tesseract_available.cache_clear()
        raise OcrUnavailable(INSTALL_HINT) from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(png), timeout_s)
    except TimeoutError as exc:
        raise OcrTimeout(f"OCR of one image ran past {timeout_s:.3g}s and was stopped") from exc
    finally:
        # On a timeout, a cancellation or any other error: never leave Tesseract running.
        if proc.returncode is None:
            proc.kill()
            await asyncio.shield(proc.wait())
    if proc.returncode != 0:
        raise _failure(err.decode("utf-8", "replace"), lang)
    return parse_tsv(out.decode("utf-8", "replace"))


def _failure(stderr: str, lang: str) -> Exception:
    if "Failed loading language" in stderr or "Could not initialize tesseract" in stderr:
        package = "tesseract-ocr-" + lang.split("+")[0].lower()
        return OcrUnavailable(f"OCR language {lang} is not installed (apt-get install {package})")
    lines = [line for line in stderr.splitlines() if line.strip() and "Estimating resolution" not in line]
    return CorruptDocument(
        f"OCR could not read the image: {one_line(lines[-1] if lines else 'no reason given')}"
    )


def parse_tsv(tsv: str) -> OcrResult:
    """Tesseract's TSV (one row per page, block, paragraph, line and word) as text and line cells.

    Text follows Tesseract's own plain-text layout: words of a line joined by spaces, lines by newlines,
    paragraphs by blank lines.
    """
    width = height = 0
    lines: dict[tuple[int, int, int], list[tuple[str, int, int, int, int]]] = {}
    for row in tsv.splitlines()[1:]:
        cols = row.split("\t")
        if len(cols) < 12:
            continue
        level = int(cols[0])
        left, top, w, h = (int(c) for c in cols[6:10])
        if level == 1:
            width, height = max(width, w), max(height, h)
        word = cols[11].strip()
        if level == 5 and word:
            key = (int(cols[2]), int(cols[3]), int(cols[4]))
            lines.setdefault(key, []).append((word, left, top, left + w, top + h))
    cells: list[OcrCell] = []
    paragraphs: list[list[str]] = []
    previous: tuple[int, int] | None = None
    for (block, par, _), words in lines.items():  # TSV rows come in reading order
        text = " ".join(w[0] for w in words)
        bbox = (
            min(w[1] for w in words),
            min(w[2] for w in words),
            max(w[3] for w in words),
            max(w[4] for w in words),
        )
        cells.append(OcrCell(text=text, bbox=bbox))
        if previous != (block, par):
            paragraphs.append([])
            previous = (block, par)
        paragraphs[-1].append(text)
    return OcrResult(
        text="\n\n".join("\n".join(p) for p in paragraphs), cells=cells, width=width, height=height
    )
