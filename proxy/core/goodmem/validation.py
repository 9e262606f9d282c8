"""GoodMem's rules for names and labels; each failure is a 400 in GoodMem's wording (the wire names)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.errors import BadRequest

__all__ = ["MAX_LABELS", "LabelChange", "check_labels", "check_name"]

_LABEL_KEY = re.compile(r"^[a-z0-9._-]+$")
MAX_LABELS = 20


def check_name(value: Any, field: str = "name") -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{field} is required and must be a non-empty string")
    if len(value) > 255:
        raise BadRequest(f"{field} must be at most 255 characters")
    return value


def check_labels(labels: Any, field: str = "labels", *, strict_keys: bool = False) -> dict[str, str]:
    """Labels: string → string, at most 20, keys/values ≤ 255 chars; Gen B's key charset when
    ``strict_keys``."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise BadRequest(f"{field} must be an object of string values")
    if len(labels) > MAX_LABELS:
        raise BadRequest(f"{field} may hold at most {MAX_LABELS} entries")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not key or len(key) > 255:
            raise BadRequest(f"{field} keys must be 1..255 characters")
        if strict_keys and not _LABEL_KEY.match(key):
            raise BadRequest(f"{field} key {key!r} may only contain [a-z0-9._-]")
        if not isinstance(value, str) or len(value) > 255:
            raise BadRequest(f"{field} values must be strings of at most 255 characters")
        out[key] = value
    return out


@dataclass(frozen=True)
class LabelChange:
    """An update's ``replaceLabels`` (an empty map clears) xor ``mergeLabels`` (upsert); neither: keep."""

    replace: dict[str, str] | None = None
    merge: dict[str, str] | None = None

    @classmethod
    def parse(cls, replace: Any, merge: Any, *, strict_keys: bool = False) -> LabelChange:
        if replace is not None and merge is not None:
            raise BadRequest("replaceLabels and mergeLabels are mutually exclusive")
        if replace is not None:
            return cls(replace=check_labels(replace, "replaceLabels", strict_keys=strict_keys))
        if merge is not None:
            return cls(merge=check_labels(merge, "mergeLabels", strict_keys=strict_keys))
        return cls()

    def apply(self, current: Mapping[str, str], *, strict_keys: bool = False) -> dict[str, str]:
        if self.replace is not None:
            return dict(self.replace)
        if self.merge is not None:
            return check_labels({**current, **self.merge}, "labels", strict_keys=strict_keys)
        return dict(current)
