"""The inspection console: server-rendered pages over the core, at ``/_memproxy/console`` (docs/console.md).

It is a sub-application so that its own middleware (sign-in from its cookie, the administrator rule, CSRF,
HTML error pages) wraps its pages alone; the application's middlewares (errors, input guard, identity) still
run first, and the identity middleware leaves the console's paths to it.
"""

from __future__ import annotations

from aiohttp import web

from proxy.api.console.access import console_middleware
from proxy.api.console.render import CONSOLE_STATE, HERE, ConsoleState
from proxy.api.console.routes import routes
from proxy.api.identity import CONSOLE_PREFIX

__all__ = ["mount"]


def mount(app: web.Application) -> None:
    """Add the console under ``/_memproxy/console`` (before the pass-through catch-all)."""
    console = web.Application(middlewares=[console_middleware])
    console[CONSOLE_STATE] = ConsoleState()
    console.add_routes(routes)
    console.router.add_static("/static", HERE / "static")
    app.add_subapp(CONSOLE_PREFIX, console)
