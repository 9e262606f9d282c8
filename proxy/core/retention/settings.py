"""The retention cluster settings (``plugins.ml_commons.memory.*``), which memproxy keeps itself.

The node has no ml-commons, so it does not know them: ``PUT /_cluster/settings`` through memproxy takes these
keys out of the body (the rest goes to the node), validates them like OpenSearch's typed settings and keeps
them in ``memproxy-settings``; ``GET /_cluster/settings`` shows them merged into the node's. Transient values
win over persistent ones, as on the node. ``--memory-retention`` makes ``retention_enabled`` default to true.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.errors import BadRequest
from proxy.store.client import NodeConflict, Store
from proxy.store.settings import SettingsDocs

__all__ = [
    "PREFIX",
    "SETTING_KEYS",
    "RetentionConfig",
    "RetentionSettings",
    "parse_setting",
]

PREFIX = "plugins.ml_commons.memory."
_DOC_ID = "cluster-settings"
_SECTIONS = ("persistent", "transient")


@dataclass(frozen=True)
class _Rule:
    default: int | bool
    minimum: int = 0
    maximum: int = 2**31 - 1
    off: bool = False  # -1 is allowed and means "none"


_RULES: dict[str, _Rule] = {
    "retention_enabled": _Rule(False),
    "retention_job_interval_hours": _Rule(24, 1, 168),
    "retention_job_throttle_seconds": _Rule(0, 0, 3600),
    "orphan_ttl_days": _Rule(7, 1, 36500),
    "working_memory_ttl_days": _Rule(-1, 1, 36500, off=True),
    "default_session_retention_days": _Rule(-1, 1, 36500, off=True),
    "default_session_max_count": _Rule(-1, 1, off=True),
    "default_long_term_max_count": _Rule(-1, 1, off=True),
    "default_history_max_count": _Rule(-1, 1, off=True),
}
SETTING_KEYS = tuple(PREFIX + name for name in _RULES)


def _render(value: int | bool) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def parse_setting(key: str, value: Any) -> str:
    """The value as the node would store it (a string), or the node's 400 ``illegal_argument_exception``."""
    rule = _RULES[key.removeprefix(PREFIX)]
    text = _render(value) if isinstance(value, bool | int) else value
    if not isinstance(text, str) or isinstance(value, float):
        raise BadRequest(
            f"Failed to parse value [{value}] for setting [{key}]", os_type="illegal_argument_exception"
        )
    if isinstance(rule.default, bool):
        if text not in ("true", "false"):
            raise BadRequest(
                f"Failed to parse value [{text}] as only [true] or [false] are allowed.",
                os_type="illegal_argument_exception",
            )
        return text
    try:
        number = int(text.strip())
    except ValueError:
        raise BadRequest(
            f"Failed to parse value [{text}] for setting [{key}]", os_type="illegal_argument_exception"
        ) from None
    if rule.off and number == -1:
        return "-1"
    if number < rule.minimum:
        lowest = f"-1 or >= {rule.minimum}" if rule.off else f">= {rule.minimum}"
        raise BadRequest(
            f"Failed to parse value [{text}] for setting [{key}] must be {lowest}",
            os_type="illegal_argument_exception",
        )
    if number > rule.maximum:
        raise BadRequest(
            f"Failed to parse value [{text}] for setting [{key}] must be <= {rule.maximum}",
            os_type="illegal_argument_exception",
        )
    return str(number)


@dataclass(frozen=True)
class RetentionSettings:
    """The effective values (transient over persistent over the defaults)."""

    enabled: bool = False
    interval_hours: int = 24
    throttle_seconds: int = 0
    orphan_ttl_days: int = 7
    working_memory_ttl_days: int = -1
    default_session_retention_days: int = -1
    default_session_max_count: int = -1
    default_long_term_max_count: int = -1
    default_history_max_count: int = -1

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> RetentionSettings:
        def num(name: str) -> int:
            return int(values[PREFIX + name])

        return cls(
            enabled=values[PREFIX + "retention_enabled"] == "true",
            interval_hours=num("retention_job_interval_hours"),
            throttle_seconds=num("retention_job_throttle_seconds"),
            orphan_ttl_days=num("orphan_ttl_days"),
            working_memory_ttl_days=num("working_memory_ttl_days"),
            default_session_retention_days=num("default_session_retention_days"),
            default_session_max_count=num("default_session_max_count"),
            default_long_term_max_count=num("default_long_term_max_count"),
            default_history_max_count=num("default_history_max_count"),
        )


class RetentionConfig:
    """The stored retention settings of the cluster (one document, every process reads it afresh)."""

    def __init__(self, store: Store, *, enabled_by_flag: bool = False) -> None:
        self.docs = SettingsDocs(store)
        self.enabled_by_flag = enabled_by_flag

    def defaults(self) -> dict[str, str]:
        out = {PREFIX + name: _render(rule.default) for name, rule in _RULES.items()}
        if self.enabled_by_flag:
            out[PREFIX + "retention_enabled"] = "true"
        return out

    async def stored(self) -> dict[str, dict[str, str]]:
        """``{"persistent": {key: value}, "transient": {...}}`` as set through ``PUT /_cluster/settings``."""
        source = (await self.docs.read(_DOC_ID)).source
        return {
            s: {k: str(v) for k, v in (source.get(s) or {}).items() if k in SETTING_KEYS} for s in _SECTIONS
        }

    async def current(self) -> RetentionSettings:
        stored = await self.stored()
        return RetentionSettings.from_values(
            {**self.defaults(), **stored["persistent"], **stored["transient"]}
        )

    async def apply(self, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        """Set (a string) or reset (None) keys per section; retried when another process wrote meanwhile."""
        for attempt in range(5):
            read = await self.docs.read(_DOC_ID)
            source = {s: dict(read.source.get(s) or {}) for s in _SECTIONS}
            for section, values in changes.items():
                for key, value in values.items():
                    if value is None:
                        source[section].pop(key, None)
                    else:
                        source[section][key] = value
            try:
                await self.docs.write(_DOC_ID, {"kind": "cluster_settings", **source}, read)
                return
            except NodeConflict:
                if attempt == 4:
                    raise
