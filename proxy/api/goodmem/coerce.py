"""The GoodMem wire format's scalars: every boolean, integer and number of a request is read here.

Query strings and JSON differ, and so do two families of query parameter:

* the list endpoints' parameters are lenient (``true``/``1``/``yes``, an empty value means "not given", any
  integer Python reads), as GoodMem's gateway;
* retrieve's GET form is strict (``true``/``false`` only, decimal integers only), as its documentation says.

JSON values keep their JSON type: a boolean must be ``true``/``false``; an integer may be written ``5.0`` but
not ``5.5`` or ``true``. Every failure is a 400 naming the field.
"""

from __future__ import annotations

import math
import re
from typing import Any, overload

from proxy.errors import BadRequest

__all__ = ["json_bool", "json_int", "json_number", "query_bool", "query_int"]

_LENIENT_TRUE = ("true", "1", "yes")
_LENIENT_FALSE = ("false", "0", "no")
_DECIMAL = re.compile(r"-?[0-9]+")


def query_bool(text: str | None, what: str, default: bool, *, strict: bool = False) -> bool:
    """A query-string boolean; ``strict``: only ``true``/``false`` (any case, trimmed)."""
    if text is None or (text == "" and not strict):
        return default
    low = text.strip().lower() if strict else text.lower()
    if low in (("true",) if strict else _LENIENT_TRUE):
        return True
    if low in (("false",) if strict else _LENIENT_FALSE):
        return False
    raise BadRequest(f"{what} must be true or false")


def query_int(text: str | None, what: str, *, strict: bool = False) -> int | None:
    """A query-string integer (None when absent, or empty unless ``strict``); ``strict``: decimal only."""
    if text is None or (text == "" and not strict):
        return None
    if strict and not _DECIMAL.fullmatch(text.strip()):
        raise BadRequest(f"{what} must be an integer")
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"{what} must be an integer") from None


@overload
def json_bool(value: Any, what: str, default: bool) -> bool: ...


@overload
def json_bool(value: Any, what: str, default: None) -> bool | None: ...


def json_bool(value: Any, what: str, default: bool | None) -> bool | None:
    """A JSON boolean; absent (None) is ``default``."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise BadRequest(f"{what} must be a boolean")


def json_int(value: Any, what: str, *, message: str | None = None, whole_floats: bool = True) -> int | None:
    """A JSON integer (``5.0`` reads as 5 unless not ``whole_floats``); absent (None) is None. ``message``
    replaces the default one."""
    if value is None:
        return None
    if whole_floats and isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(message or f"{what} must be an integer")
    return value


def json_number(value: Any, what: str, *, finite: bool = True, message: str | None = None) -> float | None:
    """A JSON number (not a boolean), finite unless told otherwise; absent (None) is None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or (finite and not math.isfinite(value)):
        raise BadRequest(message or f"{what} must be a number")
    return float(value)
