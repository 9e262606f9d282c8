"""Timestamps as ml-commons writes them: epoch milliseconds."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    return time.time_ns() // 1_000_000
