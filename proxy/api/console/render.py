"""The console's state on its sub-application and its one way to answer: a jinja2 template, autoescaped."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import jinja2
from aiohttp import web

from proxy import __version__
from proxy.api.body import utf8
from proxy.app_keys import SETTINGS

__all__ = ["CONSOLE_STATE", "ConsoleState", "pretty_json", "render", "without_userinfo"]

HERE = Path(__file__).resolve().parent


def without_userinfo(url: str) -> str:
    """A URL without the ``user:password@`` it may carry (the cluster's, a model endpoint's)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def from_epoch_ms(value: Any) -> str:
    """Epoch milliseconds (how memproxy stores times) as UTC ISO 8601; anything else as given."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, tz=UTC).isoformat(timespec="seconds")
    return "" if value is None else str(value)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every value is escaped unless a template says otherwise (none does)
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pretty"] = pretty_json
    env.filters["ms"] = from_epoch_ms
    return env


@dataclass(frozen=True)
class ConsoleState:
    """The templates, and the secret of this process that the CSRF tokens are derived with."""

    env: jinja2.Environment = field(default_factory=_environment)
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    @staticmethod
    def of(request: web.Request) -> ConsoleState:
        return request.config_dict[CONSOLE_STATE]


CONSOLE_STATE = web.AppKey("console_state", ConsoleState)


def render(
    request: web.Request, template: str, context: Mapping[str, Any] | None = None, *, status: int = 200
) -> web.Response:
    """The page ``template`` with ``context``, plus what every page shows (the cluster, the CSRF token)."""
    settings = request.config_dict[SETTINGS]
    page = {
        "version": __version__,
        "cluster_url": without_userinfo(settings.opensearch_url),
        "csrf": request.get("console_csrf"),
        "signed_in": request.get("console_csrf") is not None,
        "path": request.path,
        **(context or {}),
    }
    html = ConsoleState.of(request).env.get_template(template).render(page)
    # A stored name or text may hold a lone surrogate: shown as U+FFFD, never a failed page.
    return web.Response(status=status, body=utf8(html), content_type="text/html", charset="utf-8")
