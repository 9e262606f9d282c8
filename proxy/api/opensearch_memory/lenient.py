"""Reading ml-commons request bodies the way its XContent parsers do.

ml-commons skips unknown keys, reads scalars leniently (``"5"`` is a fine integer, ``5`` a fine string) and
answers a wrong token with ``parsing_exception`` ``Failed to parse object: expecting token of type [A] but
found [B]``. Nulls count as absent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from proxy.errors import BadRequest

T = TypeVar("T")

__all__ = [
    "as_bool",
    "as_float",
    "as_int",
    "as_object",
    "as_str",
    "as_str_list",
    "coerce_string_map",
    "optional",
    "scalar_string_map",
    "token_error",
    "token_name",
]


def token_name(value: Any) -> str:
    if value is None:
        return "VALUE_NULL"
    if isinstance(value, bool):
        return "VALUE_BOOLEAN"
    if isinstance(value, int | float):
        return "VALUE_NUMBER"
    if isinstance(value, str):
        return "VALUE_STRING"
    if isinstance(value, Mapping):
        return "START_OBJECT"
    return "START_ARRAY"


def token_error(expected: str, value: Any) -> BadRequest:
    return BadRequest(
        f"Failed to parse object: expecting token of type [{expected}] but found [{token_name(value)}]",
        os_type="parsing_exception",
    )


def as_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    raise token_error("VALUE_STRING", value)


def as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise token_error("VALUE_NUMBER", value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            try:
                number = float(value.strip())
            except ValueError:
                raise BadRequest(f'For input string: "{value}"', os_type="number_format_exception") from None
            if math.isfinite(number):
                return int(number)
            raise BadRequest(f'For input string: "{value}"', os_type="number_format_exception") from None
    raise token_error("VALUE_NUMBER", value)


def as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise token_error("VALUE_NUMBER", value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise BadRequest(f'For input string: "{value}"', os_type="number_format_exception") from None
    raise token_error("VALUE_NUMBER", value)


def as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in {"true", "false"}:
        return value == "true"
    if isinstance(value, str):
        raise BadRequest(
            f"Failed to parse value [{value}] as only [true] or [false] are allowed.",
            os_type="illegal_argument_exception",
        )
    raise token_error("VALUE_BOOLEAN", value)


def as_object(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    raise token_error("START_OBJECT", value)


def as_str_list(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise token_error("START_ARRAY", value)
    return [as_str(v) for v in value]


def _compact_json(value: Any) -> str:
    # Jackson's compact form, no HTML escaping: what ml-commons' StringUtils writes for non-string values.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def coerce_string_map(value: Any) -> dict[str, str]:
    """ml-commons' add-memory maps: strings kept, anything else replaced by its compact JSON text."""
    return {str(k): v if isinstance(v, str) else _compact_json(v) for k, v in as_object(value).items()}


def scalar_string_map(value: Any) -> dict[str, str]:
    """A map whose values must be scalars (create-session namespace, search namespace/tags), as strings."""
    out: dict[str, str] = {}
    for key, v in as_object(value).items():
        if isinstance(v, Mapping | list):
            raise token_error("VALUE_STRING", v)
        out[str(key)] = "null" if v is None else as_str(v)
    return out


def optional(body: Mapping[str, Any], key: str, parse: Callable[[Any], T]) -> T | None:
    """``parse(body[key])``, or ``None`` when the key is absent or null (ml-commons skips nulls)."""
    return parse(body[key]) if body.get(key) is not None else None
