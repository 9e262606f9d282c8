"""Media types of stored content: checked when a memory is written, and turned into safe headers when its
bytes are served.

A memory's ``contentType`` is the caller's text and is sent back as a ``Content-Type`` header on every
download, on memproxy's own origin (the console's). So it is parsed at write as RFC 9110's ``type "/" subtype
*( OWS ";" OWS parameter )`` (tokens, quoted strings, no control character, bounded), and a download is
served so that no stored bytes can act in a browser: ``nosniff`` always, a sandboxing CSP always, and
``attachment`` for every type that is not on a short list of passive ones (text, JSON, raster images).
A record stored before the check with a type that does not parse is served as ``application/octet-stream``.
"""

from __future__ import annotations

import re

from proxy.errors import BadRequest

__all__ = ["MAX_MEDIA_TYPE_CHARS", "check_media_type", "download_headers", "parse_media_type"]

MAX_MEDIA_TYPE_CHARS = 255
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[\t !#-\[\]-~]|\\[\t -~])*"'
_MEDIA_TYPE = re.compile(
    rf"({_TOKEN})/({_TOKEN})((?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|{_QUOTED}))*)[ \t]*;?[ \t]*"
)
# Types a browser shows without running anything in them; everything else is downloaded (attachment).
PASSIVE_TYPES = frozenset(
    {
        "text/plain",
        "text/csv",
        "text/markdown",
        "application/json",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/avif",
        "image/bmp",
    }
)
_FALLBACK = "application/octet-stream"
# Whatever a browser makes of the bytes, they run no script, load nothing and cannot act on the origin.
_SANDBOX = "sandbox; default-src 'none'"


def parse_media_type(text: str) -> str | None:
    """The ``type/subtype`` (lower case) of a well-formed media type, or None."""
    if len(text) > MAX_MEDIA_TYPE_CHARS:
        return None
    match = _MEDIA_TYPE.fullmatch(text.strip(" \t"))
    if match is None:
        return None
    return f"{match.group(1)}/{match.group(2)}".lower()


def check_media_type(text: str, field: str = "contentType") -> str:
    """``text`` if it is a media type memproxy stores, else a 400 saying what one looks like."""
    if parse_media_type(text) is None:
        raise BadRequest(
            f"{field} must be a media type such as text/plain or application/pdf; charset=utf-8 "
            f"(type/subtype and name=value parameters, printable ASCII, at most {MAX_MEDIA_TYPE_CHARS} "
            "characters)"
        )
    return text.strip(" \t")


def download_headers(stored: str) -> dict[str, str]:
    """The headers that serve bytes stored with the media type ``stored``."""
    essence = parse_media_type(stored)
    content_type = stored.strip(" \t") if essence is not None else _FALLBACK
    headers = {
        "Content-Type": content_type,
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": _SANDBOX,
    }
    if essence not in PASSIVE_TYPES:
        headers["Content-Disposition"] = "attachment"
    return headers
