"""Bounds on the work one PDF may ask for: the "billion laughs" of PDF.

A form XObject is a content stream that a page (or another form) draws with ``/Name Do``. A 2 KB file
whose forms each draw the one below twelve times, a few levels deep, asks for 12^levels drawings of a
single leaf: pypdf re-interprets the leaf's stream on every one (about 2.5 ms each; it stops at 5 000 per
page but a document has hundreds of pages) and PDFium renders each. So before a page's text is extracted or
the page rendered:

* :func:`check_draws` counts the drawings a page makes, through nested forms, statically: each distinct
  stream is read once and its count memoised, so counting costs what the file's size does, not what the
  drawings would. More than ``max_draws`` drawings, forms nested deeper than ``max_form_depth``, or a form
  that draws itself, and the document fails with a reason naming the page and the setting.
* :class:`TextBudget` bounds the extraction itself: the time of one page (``page_timeout_s``) and of the
  whole text layer (``text_timeout_s``), checked before every operator pypdf interprets on the worker
  thread that extracts, and the characters of a page and of the document.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pypdf import PageObject
from pypdf.generic import DictionaryObject, IndirectObject, StreamObject

from proxy.documents.errors import DocumentTooComplex
from proxy.documents.model import Limits

__all__ = ["DrawCounts", "TextBudget", "check_draws"]

# ``/Name Do``: the draw operator and its operand. A false match (the same bytes inside a string) can only
# over-count, never let a drawing through uncounted.
_DO = re.compile(rb"/([^\s/\[\]()<>{}%]+)\s*Do(?![^\s/\[\]()<>{}%])")


@dataclass
class DrawCounts:
    """What the distinct forms of one document draw: (drawings, nesting below), by form."""

    done: dict[Any, tuple[int, int]] = field(default_factory=dict)
    active: set[Any] = field(default_factory=set)


def check_draws(page: PageObject, index: int, limits: Limits, counts: DrawCounts | None = None) -> int:
    """The drawings page ``index`` makes (through nested forms); DocumentTooComplex beyond the limits.
    ``counts``: share one across the pages of a document, so each form is read once."""
    contents = page.get_contents()
    if contents is None:
        return 0
    walk = _Walk(limits, index, counts or DrawCounts())
    draws, _ = walk.stream(page.get("/Resources"), contents.get_data(), 0)
    return draws


class _Walk:
    def __init__(self, limits: Limits, page: int, counts: DrawCounts) -> None:
        self.limits = limits
        self.page = page
        self.counts = counts

    def _too_complex(self, what: str, setting: str) -> DocumentTooComplex:
        return DocumentTooComplex(f"the PDF {what} on page {self.page + 1} ({setting})")

    def stream(self, resources: Any, data: bytes, depth: int) -> tuple[int, int]:
        """(drawings, nesting) of one content stream whose names resolve in ``resources``."""
        names = Counter(m.group(1) for m in _DO.finditer(data))
        if not names:
            return 0, 0
        resources = resources.get_object() if resources is not None else None
        xobjects = resources.get("/XObject") if isinstance(resources, DictionaryObject) else None
        xobjects = xobjects.get_object() if xobjects is not None else None
        draws = height = 0
        for name, times in names.items():
            # dict.get: the entry as stored (an indirect reference, the form's identity), not resolved.
            ref = dict.get(xobjects, f"/{name.decode('latin-1')}") if isinstance(xobjects, dict) else None
            below, nested = self.form(ref, resources, depth + 1) if ref is not None else (0, 0)
            draws += times * (1 + below)
            height = max(height, nested)
            if draws > self.limits.max_draws:
                raise self._too_complex(
                    f"draws more than {self.limits.max_draws} objects", "document_max_draws"
                )
        return draws, height

    def form(self, ref: Any, inherited: Any, depth: int) -> tuple[int, int]:
        """(drawings, nesting) of drawing XObject ``ref``: 0 for an image, its stream's for a form."""
        key = (ref.idnum, ref.generation) if isinstance(ref, IndirectObject) else id(ref)
        if key in self.counts.done:
            draws, height = self.counts.done[key]
        else:
            obj = ref.get_object()
            if not isinstance(obj, StreamObject) or obj.get("/Subtype") != "/Form":
                return 0, 0
            if key in self.counts.active:
                raise self._too_complex("has a form that draws itself", "document_max_form_depth")
            self.counts.active.add(key)
            try:
                # A form without /Resources uses its drawer's (PDF 1.1 style).
                draws, below = self.stream(obj.get("/Resources", inherited), obj.get_data(), depth)
            finally:
                self.counts.active.discard(key)
            height = below + 1
            self.counts.done[key] = (draws, height)
        if depth - 1 + height > self.limits.max_form_depth:
            raise self._too_complex(
                f"nests forms more than {self.limits.max_form_depth} deep", "document_max_form_depth"
            )
        return draws, height


class TextBudget:
    """The time of one page's text extraction and the characters of a page and of the document: pypdf
    calls :meth:`operator` before each operator and :meth:`text` with each piece of text; past a bound the
    extraction is stopped (pypdf swallows some exceptions of nested forms, so :meth:`check` re-raises what
    was recorded once the page returns)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.chars = 0
        self.page = 0
        self.page_chars = 0
        self.deadline = 0.0
        self.document_deadline = time.monotonic() + limits.text_timeout_s
        self.exceeded: DocumentTooComplex | None = None

    def start(self, page: int) -> None:
        self.page = page
        self.page_chars = 0
        self.deadline = time.monotonic() + self.limits.page_timeout_s

    def operator(self, *_: Any) -> None:
        if self.exceeded is None and (now := time.monotonic()) > min(self.deadline, self.document_deadline):
            if now > self.document_deadline:
                self._exceed(
                    f"the text of the PDF took longer than {self.limits.text_timeout_s:g} s to extract "
                    f"(document_text_timeout_s; at page {self.page + 1})"
                )
            else:
                self._exceed(
                    f"the text of page {self.page + 1} took longer than {self.limits.page_timeout_s:g} s "
                    "to extract (document_page_timeout_s)"
                )
        if self.exceeded is not None:
            raise self.exceeded

    def text(self, text: str, *_: Any) -> None:
        self.page_chars += len(text)
        self.chars += len(text)
        if self.page_chars > self.limits.max_page_chars:
            self._exceed(
                f"page {self.page + 1} of the PDF has more than {self.limits.max_page_chars} characters "
                "of text (document_max_page_chars)"
            )
        elif self.chars > self.limits.max_chars:
            self._exceed(
                f"the PDF has more than {self.limits.max_chars} characters of text (document_max_chars)"
            )

    def check(self) -> None:
        if self.exceeded is not None:
            raise self.exceeded

    def _exceed(self, message: str) -> None:
        if self.exceeded is None:
            self.exceeded = DocumentTooComplex(message)
