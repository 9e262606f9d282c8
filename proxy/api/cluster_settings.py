"""``GET`` and ``PUT /_cluster/settings`` through memproxy: the ml-commons memory retention settings
(:data:`proxy.core.retention.settings.SETTING_KEYS`) are memproxy's, everything else is the node's.

A PUT takes those keys out of ``persistent`` and ``transient`` (flat or nested, ``null`` resets), validates
them first (the node's 400 ``illegal_argument_exception``), forwards the rest of the body to the node and,
once the node accepted it (or when nothing was left for it), keeps them; the answer is the node's with them
merged in, or what the node answers to a settings update. A GET shows them merged into the node's answer
(``include_defaults`` adds their defaults, ``flat_settings`` is honoured).

Who may change them: a caller allowed to pass through (:func:`proxy.api.passthrough.check_caller`) who
memproxy itself knows to be an administrator (a GoodMem administrator, or a cluster user with
``all_access``), or anyone under ``--auth none``. A cluster user without ``all_access`` may still change the
node's own settings when the cluster lets them: memproxy cannot ask the cluster about keys it does not know.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from proxy.api import body as body_reader
from proxy.api.passthrough import caller_headers, check_caller
from proxy.app_keys import PRINCIPAL, SERVICES, STORE
from proxy.core.retention.settings import SETTING_KEYS, parse_setting
from proxy.errors import Forbidden
from proxy.store.forward import forward

__all__ = ["PATH", "get_settings", "put_settings"]

PATH = "/_cluster/settings"
_SECTIONS = ("persistent", "transient")


def _json(answer: Any) -> web.Response:
    return web.Response(body=body_reader.utf8(body_reader.dumps(answer)), content_type="application/json")


def _flat(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            out.update(_flat(item, name + "."))
        else:
            out[name] = item
    return out


def _nest(target: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = target
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def _merged(section: Any, values: Mapping[str, str], flat: bool) -> dict[str, Any]:
    out = dict(section) if isinstance(section, Mapping) else {}
    for key, value in sorted(values.items()):
        if flat:
            out[key] = value
        else:
            _nest(out, key, value)
    return out


def _is_flat(request: web.Request) -> bool:
    return request.query.get("flat_settings", "false").lower() in ("", "true")


async def _node(request: web.Request, body: bytes | None) -> tuple[int, bytes, Mapping[str, str]]:
    _, _, query = request.raw_path.partition("?")
    headers = dict(caller_headers(request) or request.headers)
    headers.pop("Content-Length", None)
    if body is not None:
        headers["Content-Type"] = "application/json"
    upstream = await forward(
        request.app[STORE], request.method, PATH + (f"?{query}" if query else ""), headers, body
    )
    try:
        data = b"".join([chunk async for chunk in upstream.chunks()])
        return upstream.status, data, upstream.headers
    finally:
        upstream.release()


def _relay(status: int, data: bytes, headers: Mapping[str, str]) -> web.Response:
    kept = {k: v for k, v in headers.items() if k.lower() not in ("content-length", "content-encoding")}
    return web.Response(status=status, body=data, headers=kept)


async def get_settings(request: web.Request) -> web.StreamResponse:
    check_caller(request)
    status, data, headers = await _node(request, None)
    if status != 200:
        return _relay(status, data, headers)
    try:
        answer = json.loads(data)
    except ValueError:
        return _relay(status, data, headers)
    config = request.app[SERVICES].retention
    stored = await config.stored()
    flat = _is_flat(request)
    for section in _SECTIONS:
        answer[section] = _merged(answer.get(section), stored[section], flat)
    if request.query.get("include_defaults", "false").lower() in ("", "true"):
        unset = {k: v for k, v in config.defaults().items() if not any(k in stored[s] for s in _SECTIONS)}
        answer["defaults"] = _merged(answer.get("defaults"), unset, flat)
    return _json(answer)


async def put_settings(request: web.Request) -> web.StreamResponse:
    check_caller(request)
    raw = await request.read()
    try:
        body = json.loads(raw) if raw.strip() else None
    except ValueError:
        body = None
    ours: dict[str, dict[str, str | None]] = {}
    rest: dict[str, Any] = dict(body) if isinstance(body, dict) else {}
    for section in _SECTIONS:
        values = rest.get(section)
        if not isinstance(values, Mapping):
            continue
        flat = _flat(values)
        mine = {k: v for k, v in flat.items() if k in SETTING_KEYS}
        if not mine:
            continue
        ours[section] = {k: None if v is None else parse_setting(k, v) for k, v in mine.items()}
        rest[section] = {k: v for k, v in flat.items() if k not in SETTING_KEYS}
    if not ours:
        return _relay(*await _node(request, raw or None))
    who = request.get(PRINCIPAL)
    if who is not None and not who.is_admin:
        raise Forbidden(
            f"no permissions for [cluster:admin/settings/update] and User [name={who.user_id}]: memproxy "
            "keeps the plugins.ml_commons.memory retention settings and lets only an administrator "
            "change them",
            os_type="security_exception",
        )
    answer: dict[str, Any] = {"acknowledged": True, "persistent": {}, "transient": {}}
    if any(rest.get(s) for s in _SECTIONS) or any(k not in _SECTIONS for k in rest):
        sent = {k: v for k, v in rest.items() if k not in _SECTIONS or v}
        status, data, headers = await _node(request, json.dumps(sent).encode())
        if status != 200:
            return _relay(status, data, headers)
        answer = json.loads(data)
    await request.app[SERVICES].retention.apply(ours)
    flat_keys = _is_flat(request)
    for section in _SECTIONS:
        set_now = {k: v for k, v in ours.get(section, {}).items() if v is not None}
        answer[section] = _merged(answer.get(section), set_now, flat_keys)
    return _json(answer)
