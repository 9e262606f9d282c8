"""The one JSON encoder of ``_bulk`` bodies: every memory written goes through it, vector and all.

``json.dumps`` spends ~150 µs on one 384-d memory document here, ~8 % of the proxy's CPU while a GoodMem
``batchCreate`` ingests (docs/benchmarks.md, issue 28); orjson writes the same JSON 20 times faster. Its
floats are the shortest round-trip form, as ``repr`` gives, so the node parses exactly the same numbers.

What orjson refuses and ``json`` writes — integers beyond 64 bits, strings with lone surrogates (both are
refused at the wire edge, ``proxy.api.body``, so only a bug gets here) — falls back to ``json`` so that the
node, not the encoder, answers for them, as before. Non-finite floats, which the wire edge also refuses,
would be written as ``null`` where ``json`` wrote the invalid ``NaN``.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["compact_json"]


def compact_json(obj: Any) -> str:
    """``obj`` as compact JSON (no spaces, non-ASCII kept), one NDJSON line's worth."""
    try:
        return orjson.dumps(obj).decode()
    except orjson.JSONEncodeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
