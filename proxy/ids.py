"""UUIDs, the ids both client families accept: the one check every layer uses."""

from __future__ import annotations

import uuid
from typing import Any

__all__ = ["is_uuid"]


def is_uuid(value: Any) -> bool:
    """Whether ``value`` is a string ``uuid.UUID`` reads (any of its spellings)."""
    if not isinstance(value, str):
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
