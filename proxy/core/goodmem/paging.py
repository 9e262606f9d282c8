"""Opaque pagination tokens (URL-safe base64 without padding, as GoodMem's) and the page result."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from proxy.errors import BadRequest

__all__ = ["Page", "clamp", "decode_offset", "decode_token", "encode_offset", "encode_token"]


@dataclass
class Page:
    items: list[Any] = field(default_factory=list)
    next_token: str | None = None


def encode_token(state: dict[str, Any]) -> str:
    raw = json.dumps(state, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str | None) -> dict[str, Any]:
    """The state inside a token; {} for none; 400 for one this server did not issue."""
    if not token:
        return {}
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        state = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("Invalid nextToken") from None
    if not isinstance(state, dict):
        raise BadRequest("Invalid nextToken")
    return state


def encode_offset(offset: int, **extra: Any) -> str:
    return encode_token({"o": offset, **extra})


def decode_offset(token: str | None) -> int:
    offset = decode_token(token).get("o", 0)
    if not isinstance(offset, int) or offset < 0:
        raise BadRequest("Invalid nextToken")
    return offset


def clamp(value: int | None, default: int, high: int) -> int:
    """GoodMem clamps maxResults into [1, high] rather than rejecting it."""
    if value is None:
        return default
    return max(1, min(int(value), high))
