"""The one reader of JSON request bodies, and the one writer of JSON answer text, shared by every API slice.

Reading: the bytes are read (at most ``max_body_bytes``: a bigger body is :class:`PayloadTooLarge`, 413) and
decoded; what a slice then says about an absent or malformed body is its own API's wording (ml-commons'
``json_parse_exception``, GoodMem's message, OpenAI's), so a failure comes back as :class:`MalformedJson` for
the slice to word. Besides syntax, the reader refuses what memproxy could store but never serve back, or could
not even parse safely (docs/security.md, "Input that cannot poison or freeze"):

* an unpaired UTF-16 surrogate anywhere in the document, keys included. No UTF-8 byte sequence decodes to
  one (the bytes are decoded strictly), but JSON's ``"\\ud800"`` escape does, and such a string cannot be
  encoded again: stored, it would fail every answer that lists it;
* nesting deeper than ``max_json_depth`` (the C decoder itself gives up with ``RecursionError`` near the
  interpreter's recursion limit; both are the same 400);
* the non-JSON constants ``NaN`` / ``Infinity`` and numbers too big for a float or an int.

Checks that need a walk over the decoded document run only when a cheap scan of the text says they can
matter (an escape of a surrogate, more brackets than the depth limit), so an ordinary body, however large,
is decoded once and not walked at all; float literals are checked as the decoder reads them.

Writing: :func:`dumps` / :func:`utf8` give JSON text whose lone surrogates are replaced by U+FFFD, so a record
stored before these checks existed (or written straight into the node) never makes an answer fail.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from aiohttp import web

from proxy.app_keys import SETTINGS
from proxy.config import Settings
from proxy.errors import MemproxyError

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_JSON_DEPTH",
    "MalformedJson",
    "PayloadTooLarge",
    "body_too_large",
    "check_text",
    "check_unicode",
    "decode_json",
    "dumps",
    "has_surrogate",
    "longest_text",
    "read_json",
    "scrub",
    "utf8",
]

# The settings' defaults, for callers without an application at hand (unit tests, the OpenAI slice).
DEFAULT_MAX_JSON_DEPTH: int = Settings.max_json_depth
DEFAULT_MAX_BODY_BYTES: int = Settings.max_body_bytes

_SURROGATE = re.compile("[\ud800-\udfff]")
# The JSON escape of a surrogate (\ud800-\udfff). A paired one (an astral character) matches too and only
# costs the walk that then finds nothing.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class MalformedJson(ValueError):
    """The body is not JSON memproxy accepts; ``detail`` says why, and where when it can."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class PayloadTooLarge(MemproxyError):
    """A body, or a text in it, is bigger than a configured bound (the message names it); 413."""

    status = 413
    os_type = "illegal_argument_exception"


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (which no UTF-8 encoder accepts)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def scrub(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text) if has_surrogate(text) else text


def utf8(text: str) -> bytes:
    """``text`` as UTF-8; lone surrogates (only a record stored before the checks can hold one) become
    U+FFFD instead of failing the answer."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return scrub(text).encode("utf-8")


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` (``ensure_ascii=False`` unless told otherwise) with lone surrogates as U+FFFD."""
    kwargs.setdefault("ensure_ascii", False)
    return scrub(json.dumps(obj, **kwargs))


def _path(parent: str, key: str | int) -> str:
    return f"{parent}[{key}]" if isinstance(key, int) else f"{parent}.{key}"


def _bad_text(where: str, what: str = "string") -> MalformedJson:
    return MalformedJson(f"the {what} at {where} is not valid Unicode (an unpaired surrogate)")


def _walk(doc: Any, max_depth: int, *, strings: bool) -> None:
    """Depth, and (when asked) strings, of a decoded document; iterative, so any depth is safe."""
    stack: list[tuple[Any, int, str]] = [(doc, 1, "$")]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, dict):
            if depth > max_depth:
                raise MalformedJson(f"nesting deeper than {max_depth} levels at {where}")
            for key, item in value.items():
                if strings and has_surrogate(key):
                    raise _bad_text(where, "key")
                stack.append((item, depth + 1, _path(where, key) if strings else where))
        elif isinstance(value, list):
            if depth > max_depth:
                raise MalformedJson(f"nesting deeper than {max_depth} levels at {where}")
            for index, item in enumerate(value):
                stack.append((item, depth + 1, _path(where, index) if strings else where))
        elif strings and isinstance(value, str) and has_surrogate(value):
            raise _bad_text(where)


def _refuse_constant(name: str) -> Any:
    raise MalformedJson(f"{name} is not a JSON value")


def _finite_float(literal: str) -> float:
    # Called by the decoder for float literals only (ints overflow nothing; a huge one is int()'s ValueError).
    value = float(literal)
    if not math.isfinite(value):
        raise MalformedJson(f"the number {literal[:40]} is out of range")
    return value


def _as_text(raw: bytes | str) -> str:
    if isinstance(raw, str):
        if has_surrogate(raw):
            raise MalformedJson("not valid Unicode (an unpaired surrogate)")
        return raw
    encoding = json.detect_encoding(raw)
    try:
        # Strict decoding: json.loads(bytes) would decode with "surrogatepass" and let the UTF-8 form of a
        # surrogate through.
        return raw.decode(encoding)
    except UnicodeDecodeError:
        raise MalformedJson("not UTF-8" if encoding.startswith("utf-8") else f"not {encoding}") from None


def decode_json(raw: bytes | str, *, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Any:
    """The decoded document; :class:`MalformedJson` for anything the module docstring refuses."""
    text = _as_text(raw)
    try:
        doc = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise MalformedJson(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise MalformedJson(f"nesting deeper than {max_depth} levels") from None
    except ValueError as exc:  # an integer beyond int()'s digit limit
        if isinstance(exc, MalformedJson):
            raise
        raise MalformedJson(f"a number is out of range: {exc}") from None
    strings = _SURROGATE_ESCAPE.search(text) is not None
    if strings or text.count("[") + text.count("{") > max_depth:
        _walk(doc, max_depth, strings=strings)
    return doc


def check_unicode(doc: Any, where: str = "$") -> None:
    """:class:`MalformedJson` when any string or key of ``doc`` holds a lone surrogate: for text that did not
    come through :func:`decode_json` (a multipart part's headers, a charset-decoded upload)."""
    stack: list[tuple[Any, str]] = [(doc, where)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str):
            if has_surrogate(value):
                raise _bad_text(at)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and has_surrogate(key):
                    raise _bad_text(at, "key")
                stack.append((item, _path(at, key)))
        elif isinstance(value, list | tuple):
            stack.extend((item, _path(at, i)) for i, item in enumerate(value))


def check_text(text: str, what: str) -> str:
    """``text`` when it is valid Unicode; else :class:`MalformedJson` naming ``what``."""
    if has_surrogate(text):
        raise _bad_text(what, "text")
    return text


def longest_text(doc: Any) -> tuple[str, int]:
    """Where the longest string of ``doc`` is, and its length in characters (``("$", 0)`` when none)."""
    best = ("$", 0)
    stack: list[tuple[Any, str]] = [(doc, "$")]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str):
            if len(value) > best[1]:
                best = (at, len(value))
        elif isinstance(value, dict):
            stack.extend((item, _path(at, key)) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, _path(at, i)) for i, item in enumerate(value))
    return best


def _settings(request: web.Request) -> Settings | None:
    return request.app.get(SETTINGS)


def body_too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The request body is larger than {limit} bytes, the most memproxy accepts (max_body_bytes)"
    )


async def read_json(request: web.Request) -> Any | None:
    """The decoded body, or ``None`` when the body is empty (only whitespace)."""
    settings = _settings(request)
    limit = settings.max_body_bytes if settings is not None else DEFAULT_MAX_BODY_BYTES
    if request.content_length is not None and request.content_length > limit:
        raise body_too_large(limit)
    raw = await request.read()  # aiohttp stops reading at client_max_size (413) when it is set lower
    if len(raw) > limit:
        raise body_too_large(limit)
    if not raw.strip():
        return None
    return decode_json(
        raw, max_depth=settings.max_json_depth if settings is not None else DEFAULT_MAX_JSON_DEPTH
    )
