"""Document extraction throughput on this machine: pages/s for PDFs with a text layer, for OCR of scanned
pages, and for rendering page images; no node, no proxy (``proxy.documents`` alone).

The pages are dense and realistic: ``--lines`` memory-like sentences per A4 page in 11-point Helvetica.
The scanned PDF is the same pages rendered to greyscale images at ``--scan-dpi`` (what a scanner gives)
saved as an image-only PDF, so OCR reads exactly the text the text-layer run extracts; its word recall
against that text is reported next to its speed. OCR runs at memproxy's ``ocr_dpi`` with 1 and with 2
pages side by side (``Limits.ocr_workers``); each measurement is repeated ``--repeat`` times and the median
kept (the spread is in the JSON). Next to wall-clock pages/s, CPU seconds per page (this process's threads
plus the Tesseract processes) say what a page costs independently of what else the machine runs.

    .venv/bin/python -m scripts.bench.documents
"""

from __future__ import annotations

import argparse
import asyncio
import io
import re
import resource
import statistics
import time
from collections.abc import Sequence
from typing import Any

import pypdfium2 as pdfium
from PIL import Image

from proxy.documents import Extraction, Limits, extract, ocr_document
from scripts.bench.common import format_table, machine_info, results_name, synthetic_texts, write_results
from tests.support.documents import text_pdf

PDF = "application/pdf"


def dense_pdf(pages: int, lines: int, seed: int) -> tuple[bytes, list[str]]:
    """An A4 PDF with a text layer, ``lines`` sentences per page (11 pt), and the pages' texts."""
    texts = synthetic_texts(pages * lines, seed)
    page_texts = ["\n".join(texts[p * lines : (p + 1) * lines]) for p in range(pages)]
    return text_pdf(page_texts, font_size=11, leading=14, left=50, top=800), page_texts


def scanned(pdf: bytes, dpi: int) -> bytes:
    """``pdf``'s pages as greyscale images at ``dpi`` in an image-only PDF."""
    document = pdfium.PdfDocument(pdf)
    try:
        images: list[Image.Image] = []
        for index in range(len(document)):
            page = document[index]
            bitmap = page.render(scale=dpi / 72, grayscale=True)
            images.append(bitmap.to_pil().convert("L"))
            bitmap.close()
            page.close()
    finally:
        document.close()
    out = io.BytesIO()
    images[0].save(out, "PDF", save_all=True, append_images=images[1:], resolution=float(dpi))
    return out.getvalue()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def word_recall(found: str, truth: str) -> float:
    """The share of the source's words (with multiplicity) that OCR found."""
    have: dict[str, int] = {}
    for word in _words(found):
        have[word] = have.get(word, 0) + 1
    hits = 0
    expected = _words(truth)
    for word in expected:
        if have.get(word, 0) > 0:
            have[word] -= 1
            hits += 1
    return hits / len(expected) if expected else 1.0


def cpu_seconds() -> float:
    """CPU time of this process (its worker threads included) and of its finished children (Tesseract)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


async def timed(
    data: bytes, limits: Limits, *, page_images: bool, repeat: int
) -> tuple[list[float], list[float], Extraction]:
    """Wall and CPU seconds of each of ``repeat`` extractions, and the last result."""
    runs: list[float] = []
    cpu: list[float] = []
    result: Extraction | None = None
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), cpu_seconds()
        result = await extract(data, PDF, limits, page_images=page_images)
        runs.append(time.perf_counter() - start)
        cpu.append(cpu_seconds() - start_cpu)
    assert result is not None
    return runs, cpu, result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    text_doc, page_texts = dense_pdf(args.pages, args.lines, seed=7)
    scan_pdf, scan_truth = dense_pdf(args.ocr_pages, args.lines, seed=11)
    scan_doc = scanned(scan_pdf, args.scan_dpi)
    base = Limits(max_pages=max(args.pages, args.ocr_pages), ocr_timeout_s=3600)
    rows: list[dict[str, Any]] = []
    raw: dict[str, Any] = {}

    runs, cpu, result = await timed(text_doc, base, page_images=False, repeat=args.repeat)
    assert result.ocr_pages == 0 and result.pages[0].text.splitlines()[0] == page_texts[0].splitlines()[0]
    raw["text_layer_s"], raw["text_layer_cpu_s"] = runs, cpu
    rows.append(_row("text-layer PDF extraction", args.pages, runs, cpu, chars=len(result.text)))

    runs, cpu, result = await timed(text_doc, base, page_images=True, repeat=args.repeat)
    raw["page_images_s"], raw["page_images_cpu_s"] = runs, cpu
    raw["page_images_ms"] = result.timings["page_images_ms"]
    png_bytes = sum(len(i.data) for i in result.images)
    rows.append(
        _row(
            f"text layer + page images at {base.page_image_dpi} dpi",
            args.pages,
            runs,
            cpu,
            note=f"{png_bytes / len(result.images) / 1024:.0f} KiB PNG/page",
        )
    )
    images_only = result.timings["page_images_ms"] / 1000
    rows.append(
        _row(
            f"page images alone (render + PNG) at {base.page_image_dpi} dpi", args.pages, [images_only], None
        )
    )

    for workers in args.ocr_workers:
        limits = Limits(
            max_pages=base.max_pages, ocr_timeout_s=3600, ocr_workers=workers, ocr_dpi=args.ocr_dpi
        )
        runs, cpu, result = await timed(scan_doc, limits, page_images=False, repeat=args.repeat)
        assert result.ocr_pages == args.ocr_pages, result.ocr_pages
        recall = statistics.mean(
            word_recall(page.text, truth) for page, truth in zip(result.pages, scan_truth, strict=True)
        )
        raw[f"ocr_workers_{workers}_s"], raw[f"ocr_workers_{workers}_cpu_s"] = runs, cpu
        raw[f"ocr_workers_{workers}_timings"] = result.timings
        rows.append(
            _row(
                f"scanned PDF, OCR at {args.ocr_dpi} dpi, {workers} page(s) at a time",
                args.ocr_pages,
                runs,
                cpu,
                note=f"word recall {recall:.3f}",
            )
        )
    start, start_cpu = time.perf_counter(), cpu_seconds()
    document = await ocr_document(scan_doc, None, Limits(ocr_timeout_s=3600), start_page=None, end_page=None)
    wall, used = time.perf_counter() - start, cpu_seconds() - start_cpu
    assert all(page.result is not None for page in document.pages)
    rows.append(_row("POST /v1/ocr:document path (ocr_document)", args.ocr_pages, [wall], [used]))
    print(format_table(rows))
    return {
        "benchmark": "documents",
        "args": vars(args),
        "machine": machine_info(),
        "table": rows,
        "raw": raw,
    }


def _row(
    what: str,
    pages: int,
    runs: Sequence[float],
    cpu: Sequence[float] | None,
    chars: int | None = None,
    note: str = "",
) -> dict[str, Any]:
    """Medians: wall pages/s (what a caller sees on this machine, as loaded as it was) and CPU seconds per
    page (what a page costs, whatever else runs)."""
    median = statistics.median(runs)
    return {
        "what": what,
        "pages": pages,
        "runs": len(runs),
        "median s": median,
        "pages/s": pages / median,
        "ms/page": median * 1000 / pages,
        "CPU s/page": statistics.median(cpu) / pages if cpu else None,
        "note": note or (f"{chars / pages:.0f} chars/page" if chars else ""),
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pages", type=int, default=200, help="pages of the text-layer PDF")
    p.add_argument("--ocr-pages", type=int, default=8, help="pages of the scanned PDF")
    p.add_argument("--lines", type=int, default=50, help="sentences per page")
    p.add_argument("--scan-dpi", type=int, default=200, help="resolution of the scanned page images")
    p.add_argument("--ocr-dpi", type=int, default=Limits().ocr_dpi, help="memproxy's OCR rendering dpi")
    p.add_argument("--ocr-workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)
    if args.quick:
        args.pages, args.ocr_pages, args.repeat = min(args.pages, 20), min(args.ocr_pages, 2), 1
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    data = asyncio.run(run(args))
    print(f"wrote {write_results(results_name('documents', args.tag, args.quick), data)}")


if __name__ == "__main__":
    main()
