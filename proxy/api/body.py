"""The one reader of JSON request bodies, shared by every API slice.

It reads the bytes and decodes them; what a slice then says about an absent or malformed body is its own
API's wording (ml-commons' ``json_parse_exception``, GoodMem's message, OpenAI's), so a failure comes back
as :class:`MalformedJson` for the slice to word.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

__all__ = ["MalformedJson", "decode_json", "read_json"]


class MalformedJson(ValueError):
    """The body is not JSON; ``detail`` says where, as the decoder saw it."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


def decode_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise MalformedJson(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except UnicodeDecodeError:
        raise MalformedJson("not UTF-8") from None


async def read_json(request: web.Request) -> Any | None:
    """The decoded body, or ``None`` when the body is empty (only whitespace)."""
    raw = await request.read()
    return decode_json(raw) if raw.strip() else None
