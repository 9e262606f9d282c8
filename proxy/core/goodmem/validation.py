"""Small validators shared by the GoodMem operations; each failure is a 400 with GoodMem-style wording."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from proxy.errors import BadRequest

__all__ = [
    "apply_labels",
    "check_labels",
    "check_name",
    "check_uuid",
]

_LABEL_KEY = re.compile(r"^[a-z0-9._-]+$")
MAX_LABELS = 20


def check_uuid(value: Any, field: str) -> str:
    """A canonical UUID string, or 400 'Invalid UUID format'."""
    if not isinstance(value, str):
        raise BadRequest(f"Invalid {field}: expected a UUID string")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise BadRequest(f"Invalid UUID format for {field}: {value!r}") from None


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


def apply_labels(
    current: Mapping[str, str], replace: Any, merge: Any, *, strict_keys: bool = False
) -> dict[str, str]:
    """``replaceLabels`` (an empty map clears) xor ``mergeLabels`` (upsert)."""
    if replace is not None and merge is not None:
        raise BadRequest("replaceLabels and mergeLabels are mutually exclusive")
    if replace is not None:
        return check_labels(replace, "replaceLabels", strict_keys=strict_keys)
    if merge is not None:
        merged = {**current, **check_labels(merge, "mergeLabels", strict_keys=strict_keys)}
        return check_labels(merged, "labels", strict_keys=strict_keys)
    return dict(current)
