"""The opt-in recency decay both APIs accept: a half-life, parsed, and the request's time as the age's origin.

The formula and its reasons are in docs/opensearch-api.md ("Recency decay"); the store builds the DSL
(:func:`proxy.store.query_dsl.recency_decayed`).
"""

from __future__ import annotations

import re
from typing import Any

from proxy.core.clock import now_ms
from proxy.errors import BadRequest
from proxy.store.query import Recency

__all__ = ["MAX_HALF_LIFE_MS", "parse_half_life", "recency_from"]

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*$")
# A century: any longer half-life decays nothing a memory store could hold, and it keeps the node's
# ``scale`` far from overflow.
MAX_HALF_LIFE_MS = 100 * 365 * _UNIT_MS["d"]


def parse_half_life(value: Any, where: str) -> int:
    """A positive duration in milliseconds: ``"30d"``, ``"12h"``, ``"90m"``, ``"45s"``, ``"500ms"``,
    ``"2w"`` (a number and a unit), or a bare positive number of milliseconds. 400 naming ``where``
    otherwise."""
    problem = f'{where} must be a positive duration such as "30d", "12h" or "90m" (units ms, s, m, h, d, w)'
    if isinstance(value, bool):
        raise BadRequest(problem)
    if isinstance(value, int | float):
        millis = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        millis = float(match.group(1)) * _UNIT_MS[match.group(2)]
    else:
        raise BadRequest(problem)
    if not 1 <= millis <= MAX_HALF_LIFE_MS:
        raise BadRequest(f"{problem}, between 1ms and 100 years")
    return int(millis)


def recency_from(half_life: Any, where: str) -> Recency:
    """The decay of one request: its half-life, and now (the request's time) as the age's origin."""
    return Recency(half_life_ms=parse_half_life(half_life, where), now_ms=now_ms())
