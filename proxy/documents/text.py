"""Documents whose bytes are text: decoding (plain text, Markdown, HTML) and HTML's readable text."""

from __future__ import annotations

import codecs
import re
from html.parser import HTMLParser

from proxy.documents.errors import CorruptDocument, UnsupportedDocument, reason
from proxy.documents.kinds import charset_of

__all__ = ["decode", "html_text"]

_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def decode(data: bytes, content_type: str, *, html: bool = False) -> str:
    """The text of ``data``: a byte-order mark wins, then the content type's charset, then (HTML only) a
    ``<meta charset>`` near the top, then UTF-8. Bytes the charset cannot decode → ``CorruptDocument``."""
    charset = None
    for bom, name in _BOMS:
        if data.startswith(bom):
            charset, data = name, data[len(bom) :] if name == "utf-8" else data
            break
    charset = charset or charset_of(content_type)
    if charset is None and html:
        found = _META_CHARSET.search(data[:2048])
        charset = found.group(1).decode("ascii").lower() if found else None
    charset = charset or "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError as exc:
        raise UnsupportedDocument(f"unknown charset {charset[:40]!r}") from exc
    try:
        return data.decode(charset)
    except UnicodeDecodeError as exc:
        raise CorruptDocument(f"the content is not valid {charset} text (byte {exc.start})") from exc
    except (ValueError, LookupError) as exc:
        raise CorruptDocument(f"cannot decode the content as {charset}: {reason(exc)}") from exc


# Elements whose text is not the page's (head's metadata, scripts, templates); <title> is kept.
_HIDDEN = {"script", "style", "noscript", "template", "head", "svg", "iframe", "object"}
_BLOCKS = {
    "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "dialog", "div", "dl",
    "dt", "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "html", "legend", "li",
    "main", "nav", "ol", "pre", "section", "summary", "table", "tbody", "tfoot", "thead", "tr", "ul",
}  # fmt: skip
_PARAGRAPHS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "title"}
_CELLS = {"td", "th"}
_HEAD_CONTENT = {"title", "meta", "link", "style", "script", "base", "noscript", "template"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

# Breaks are collected as markers and resolved at the end, so that nested blocks (<li><p>, </div><div>)
# give one line break, not one per tag: a run of markers and spaces becomes a blank line when it holds a
# paragraph edge or two <br>, else one newline.
_LINE, _PARA, _BR = "\ue010", "\ue011", "\ue012"
_BREAKS = re.compile(f"[ {_LINE}{_PARA}{_BR}]*[{_LINE}{_PARA}{_BR}][ {_LINE}{_PARA}{_BR}]*")
# <pre>'s whitespace travels as private-use characters through the collapsing and is restored after it.
_PRE_KEEP = str.maketrans({" ": "\ue000", "\t": "\ue001", "\n": "\ue002"})
_PRE_RESTORE = str.maketrans({"\ue000": " ", "\ue001": "\t", "\ue002": "\n"})


def _break(run: re.Match[str]) -> str:
    text = run.group()
    return "\n\n" if _PARA in text or text.count(_BR) > 1 else "\n"


class _Readable(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden: list[str] = []  # open hidden elements, innermost last
        self.in_title = False
        self.pre = 0

    def _edge(self, tag: str) -> None:
        if tag in _PARAGRAPHS:
            self.parts.append(_PARA)
        elif tag in _BLOCKS:
            self.parts.append(_LINE)
        elif tag in _CELLS:
            self.parts.append(" ")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif "head" in self.hidden and tag not in _HEAD_CONTENT:
            # An unclosed <head> ends where the body's first element starts, as browsers read it.
            del self.hidden[self.hidden.index("head") :]
        if tag in _HIDDEN:
            self.hidden.append(tag)
        if tag == "pre":
            self.pre += 1
        if tag == "br":
            self.parts.append(_BR)
        self._edge(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in self.hidden:
            del self.hidden[len(self.hidden) - 1 - self.hidden[::-1].index(tag) :]
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        self._edge(tag)

    def handle_data(self, data: str) -> None:
        if self.hidden and not self.in_title:
            return
        self.parts.append(data.translate(_PRE_KEEP) if self.pre else re.sub(r"\s+", " ", data))


def html_text(markup: str) -> str:
    """The readable text of an HTML page: scripts, styles, templates and the head (but its title) dropped;
    block elements and ``<br>`` become line breaks, paragraphs and headings blank lines; entities decoded;
    runs of whitespace collapsed (kept inside ``<pre>``)."""
    parser = _Readable()
    parser.feed(markup)
    parser.close()
    text = _BREAKS.sub(_break, "".join(parser.parts))
    text = re.sub(" {2,}", " ", text).strip().translate(_PRE_RESTORE)
    return text
