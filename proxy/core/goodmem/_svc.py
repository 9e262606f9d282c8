"""What GoodMem core operations take first: the shared ``Services`` (store + embedders); ids and clocks."""

from __future__ import annotations

import os
import time
import uuid

from proxy.core.services import Services as Svc

__all__ = ["Svc", "new_id", "now_ms"]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_id() -> str:
    """A version-7 UUID (time-ordered, like the ids live GoodMem servers issue)."""
    ms = now_ms() & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms << 80) | (0x7 << 76) | ((rand >> 64) & 0xFFF) << 64 | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))
