"""Serving stored bytes (a memory's original content, a page image) as GoodMem does: one byte ``Range``
(206; malformed or unsatisfiable: 416), a strong ``ETag`` checked by ``If-Match`` (412), and HEAD (aiohttp
answers it from the GET handler without the body). Every reply carries ``download_headers``: nosniff, a
sandboxing CSP, and ``attachment`` for active types (proxy/core/goodmem/media.py)."""

from __future__ import annotations

import re

from aiohttp import web

from proxy.core.goodmem.media import download_headers
from proxy.errors import PreconditionFailed, RangeNotSatisfiable

__all__ = ["byte_range", "bytes_reply"]

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def _etag_matches(header: str, etag: str | None) -> bool:
    """RFC 9110 strong comparison: ``*`` matches any current content; a weak tag never matches."""
    if etag is None:
        return False
    tags = [t.strip() for t in header.split(",")]
    return "*" in tags or f'"{etag}"' in tags


def byte_range(header: str, length: int) -> tuple[int, int]:
    """The inclusive ``(first, last)`` byte of one ``bytes=`` range over ``length`` bytes."""
    match = _RANGE.match(header.strip().replace(" ", ""))
    unsatisfiable = RangeNotSatisfiable(
        f"Range {header[:100]!r} cannot be satisfied: the content has {length} bytes and one byte range "
        "(bytes=FIRST-LAST, bytes=FIRST- or bytes=-SUFFIX) is supported",
        headers={"Content-Range": f"bytes */{length}"},
    )
    if match is None or match.group(1) == match.group(2) == "":
        raise unsatisfiable
    first_text, last_text = match.groups()
    if first_text == "":  # a suffix: the last N bytes
        suffix = int(last_text)
        if suffix == 0 or length == 0:
            raise unsatisfiable
        return max(0, length - suffix), length - 1
    first = int(first_text)
    last = int(last_text) if last_text else length - 1
    if first >= length or last < first:
        raise unsatisfiable
    return first, min(last, length - 1)


def bytes_reply(request: web.Request, data: bytes, content_type: str, etag: str | None) -> web.Response:
    headers = {**download_headers(content_type), "Accept-Ranges": "bytes"}
    if etag:
        headers["ETag"] = f'"{etag}"'
    if_match = request.headers.get("If-Match")
    if if_match is not None and not _etag_matches(if_match, etag):
        raise PreconditionFailed(
            "If-Match does not match the content's ETag (it changed, or the tag is weak)"
        )
    range_header = request.headers.get("Range")
    if range_header is None:
        return web.Response(body=data, headers=headers)
    first, last = byte_range(range_header, len(data))
    headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
    return web.Response(status=206, body=data[first : last + 1], headers=headers)
