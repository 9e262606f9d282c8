"""Shared plumbing of the GoodMem handlers: services, the caller, JSON bodies and query parameters.

Every query parameter is accepted in camelCase (Gen A clients) and snake_case (Gen B SDK); label filters as
``label.<key>=v`` and ``label[<key>]=v``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from proxy.app_keys import SERVICES
from proxy.core.goodmem.auth import Principal, authenticate
from proxy.core.services import Services
from proxy.errors import BadRequest

__all__ = [
    "json_body",
    "labels_query",
    "principal",
    "q_bool",
    "q_int",
    "q_str",
    "reply",
    "services",
]

_PRINCIPAL_KEY = "goodmem.principal"
_LABEL_DOT = re.compile(r"^label\.(.+)$")
_LABEL_BRACKET = re.compile(r"^label\[(.+)\]$")


def services(request: web.Request) -> Services:
    return request.app[SERVICES]


async def principal(request: web.Request) -> Principal:
    """The authenticated caller (once per request); 401 without a usable key."""
    cached = request.get(_PRINCIPAL_KEY)
    if isinstance(cached, Principal):
        return cached
    who = await authenticate(services(request), request.headers)
    request[_PRINCIPAL_KEY] = who
    return who


async def json_body(request: web.Request, *, required: bool = True) -> dict[str, Any]:
    """The request's JSON object; an empty body is ``{}`` unless ``required``."""
    raw = await request.read()
    if not raw.strip():
        if required:
            raise BadRequest("A JSON request body is required")
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"Malformed JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object")
    return body


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def q_str(request: web.Request, name: str) -> str | None:
    """A query parameter by its camelCase name, also accepted in snake_case."""
    for key in (name, _snake(name)):
        value = request.query.get(key)
        if value is not None:
            return value
    return None


def q_bool(request: web.Request, name: str, default: bool = False) -> bool:
    value = q_str(request, name)
    if value is None or value == "":
        return default
    low = value.lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise BadRequest(f"{name} must be true or false")


def q_int(request: web.Request, name: str) -> int | None:
    value = q_str(request, name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise BadRequest(f"{name} must be an integer") from None


def labels_query(request: web.Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in request.query.items():
        m = _LABEL_DOT.match(key) or _LABEL_BRACKET.match(key)
        if m:
            out[m.group(1)] = value
    return out


def reply(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps(body, ensure_ascii=False, separators=(",", ":")),
        content_type="application/json",
    )
