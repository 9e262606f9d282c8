"""A container's ``configuration.retention_policy``: parsed, merged on update, and the effective policy.

Wire shape (ml-commons 3.8)::

    "retention_policy": {"sessions": {"retention_days": 30, "max_count": 1000},
                         "long-term": {"retention_days": 90}, "history": {"max_count": 5000}}

``retention_days`` applies to sessions and long-term memory, ``max_count`` to all three. On update each type
and each field merges on its own (a field or a type sent as ``null`` is removed); ``"retention_policy": null``
opts the container out, cluster defaults included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.core.retention.settings import RetentionSettings
from proxy.errors import BadRequest

__all__ = [
    "OPT_OUT_KEY",
    "POLICY_TYPES",
    "defaults_policy",
    "effective_policy",
    "merge_policy",
    "parse_policy",
]

# Kept on the container document beside its configuration (GET does not show it): the container said
# ``"retention_policy": null``, so the cluster defaults do not apply to it either.
OPT_OUT_KEY = "memproxy_retention_opt_out"

POLICY_TYPES = ("sessions", "long-term", "history")
_FIELDS = {
    "sessions": ("retention_days", "max_count"),
    "long-term": ("retention_days", "max_count"),
    "history": ("max_count",),
}
Policy = dict[str, dict[str, int | None] | None]


def _positive(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"retention_policy.{where} must be a positive integer, got [{value}]")
    return value


def parse_policy(raw: Any) -> Policy | None:
    """The typed policy as sent (``None``: the container opts out); a ``null`` type or field is kept as
    ``None`` so that an update can remove it. Unknown keys and non-positive numbers are a 400."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise BadRequest("retention_policy must be an object")
    out: Policy = {}
    for memory_type, spec in raw.items():
        if memory_type not in POLICY_TYPES:
            raise BadRequest(
                f"Unknown retention_policy memory type [{memory_type}]; expected one of: "
                + ", ".join(POLICY_TYPES)
            )
        if spec is None:
            out[memory_type] = None
            continue
        if not isinstance(spec, Mapping):
            raise BadRequest(f"retention_policy.{memory_type} must be an object")
        fields: dict[str, int | None] = {}
        for name, value in spec.items():
            if name not in _FIELDS[memory_type]:
                raise BadRequest(
                    f"Unknown retention_policy field [{name}] for {memory_type}; expected: "
                    + ", ".join(_FIELDS[memory_type])
                )
            fields[name] = None if value is None else _positive(value, f"{memory_type}.{name}")
        out[memory_type] = fields
    return out


def _clean(policy: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for memory_type in POLICY_TYPES:
        fields = {k: v for k, v in (policy.get(memory_type) or {}).items() if v is not None}
        if fields:
            out[memory_type] = {k: fields[k] for k in _FIELDS[memory_type] if k in fields}
    return out


def merge_policy(current: Mapping[str, Any] | None, update: Policy | None) -> dict[str, dict[str, int]]:
    """The stored policy after an update (an empty result: no policy)."""
    if update is None:
        return {}
    merged: dict[str, dict[str, Any]] = {
        t: dict(v) for t, v in (current or {}).items() if isinstance(v, dict)
    }
    for memory_type, fields in update.items():
        if fields is None:
            merged.pop(memory_type, None)
            continue
        target = merged.setdefault(memory_type, {})
        for name, value in fields.items():
            if value is None:
                target.pop(name, None)
            else:
                target[name] = value
    return _clean(merged)


def defaults_policy(settings: RetentionSettings) -> dict[str, dict[str, int]]:
    """The cluster defaults as a policy (types whose defaults are all -1 left out)."""
    raw = {
        "sessions": {
            "retention_days": settings.default_session_retention_days,
            "max_count": settings.default_session_max_count,
        },
        "long-term": {"max_count": settings.default_long_term_max_count},
        "history": {"max_count": settings.default_history_max_count},
    }
    return _clean({t: {k: v for k, v in f.items() if v > 0} for t, f in raw.items()})


def effective_policy(
    stored: Mapping[str, Any] | None, opted_out: bool, settings: RetentionSettings
) -> tuple[str, dict[str, dict[str, int]]]:
    """(policy_source, policy): the container's own, else the cluster defaults (unless it opted out)."""
    own = _clean(stored or {})
    if own:
        return "container", own
    if opted_out:
        return "opted_out", {}
    defaults = defaults_policy(settings)
    return ("cluster_default", defaults) if defaults else ("none", {})
