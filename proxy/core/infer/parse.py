"""Reading what an LLM answered: a JSON object found in free text, and ml-commons' ``llm_result_path``.

Models asked for "one line of JSON" still wrap it in code fences, prefix it with prose, or add a trailing
remark; the object is looked for defensively (fenced blocks first, then every ``{`` from the left), and an
answer without one is an ``InferError`` with what was received, never a guess.
"""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.errors import MemproxyError

__all__ = ["InferError", "json_object", "read_path"]

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_PATH_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[['\"]([^'\"]+)['\"]\]")


class InferError(MemproxyError):
    """Extraction could not go on (an unusable LLM answer, a custom prompt ml-commons would refuse)."""

    status = 502


def json_object(text: str, key: str) -> dict[str, Any]:
    """The first JSON object in ``text`` that has ``key``."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for start in (i for i, ch in enumerate(candidate) if ch == "{"):
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except ValueError:
                continue
            if isinstance(value, dict) and key in value:
                return value
    snippet = text.strip().replace("\n", " ")[:200]
    raise InferError(f"the LLM answer holds no JSON object with {key!r}: {snippet!r}")


def read_path(document: Any, path: str) -> Any:
    """``$.a.b[0]['c']`` applied to ``document`` (the subset of JSONPath ``llm_result_path`` uses)."""
    if not path.startswith("$"):
        raise InferError(f"llm_result_path must start with $: {path!r}")
    value, rest = document, path[1:]
    while rest:
        step = _PATH_STEP.match(rest)
        if step is None:
            raise InferError(f"llm_result_path {path!r} is not a supported JSONPath")
        name, index, quoted = step.groups()
        try:
            value = value[int(index)] if index is not None else value[name or quoted]
        except (KeyError, IndexError, TypeError):
            raise InferError(f"the LLM answer has nothing at llm_result_path {path}") from None
        rest = rest[step.end() :]
    return value
