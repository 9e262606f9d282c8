"""``GET /metrics``: the Prometheus text exposition, and the middleware that counts and times requests.

The metrics themselves (names, the per-application registry, what is read at scrape time) are
:mod:`proxy.core.metrics`; docs/observability.md lists them.

**Labels are bounded.** A request is labelled by the pattern of the route that matched
(``/v1/spaces/{id}``), ``passthrough`` for everything forwarded to the cluster, never by its raw path: paths
carry ids and names without limit, and a metric per id would exhaust Prometheus and disclose the ids.
Methods outside HTTP's usual few count as ``other`` for the same reason.

**Access.** ``/metrics`` needs an administrator (a GoodMem admin or root key, or a cluster user with an
admin role), as the other admin-only routes do; ``--metrics-public`` serves it to anyone (the identity
middleware then lets it through without a credential). Under ``--auth none`` it is as open as pass-through,
which already hands anyone the whole cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from proxy.api.passthrough import passthrough
from proxy.app_keys import EMBEDDERS, JOBS, METRICS, PRINCIPAL, SERVICES, SETTINGS, STORE
from proxy.core.identity import require_admin
from proxy.core.metrics import CONTENT_TYPE
from proxy.errors import Unauthenticated

__all__ = ["METRICS_PATH", "metrics_ctx", "metrics_middleware", "request_labels", "routes"]

METRICS_PATH = "/metrics"
# How long a scrape waits for the job counts (one aggregation on the node) before leaving them out.
_JOB_COUNTS_TIMEOUT_S = 2.0
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# A client that went away before its answer (nginx's convention): counted, as it cost work.
_CLIENT_CLOSED = 499

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

routes = web.RouteTableDef()


def request_labels(request: web.Request) -> tuple[str, str, str, str]:
    """(route, method, api, operation) of a request, from the route that matched it, never its path."""
    method = request.method if request.method in _METHODS else "other"
    route = request.match_info.route
    resource = route.resource
    if route.handler is passthrough:
        return "passthrough", method, "passthrough", f"{method} passthrough"
    pattern = resource.canonical if resource is not None else "unmatched"
    if pattern == "/v1" or pattern.startswith("/v1/"):
        api = "goodmem"
    elif pattern == "/openai" or pattern.startswith("/openai/"):
        api = "openai"
    elif pattern.startswith("/_plugins/_ml"):
        api = "ml-commons"
    else:
        api = "memproxy"  # health, /metrics, the console
    return pattern, method, api, f"{method} {pattern}"


@web.middleware
async def metrics_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Outside the error middleware, so the status counted is the one the caller got, errors included.
    began = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:  # a redirect the error middleware lets through
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = _CLIENT_CLOSED
        raise
    finally:
        route, method, api, operation = request_labels(request)
        request.config_dict[METRICS].observe_request(
            route=route,
            method=method,
            status=status,
            api=api,
            operation=operation,
            seconds=time.perf_counter() - began,
        )


@routes.get(METRICS_PATH)
async def metrics(request: web.Request) -> web.Response:
    principal = request.get(PRINCIPAL)
    settings = request.app[SETTINGS]
    if not settings.metrics_public:
        if principal is not None:
            require_admin(principal, "reading /metrics")
        elif settings.auth != "none":  # the identity middleware refuses these first; never rely on it alone
            raise Unauthenticated("reading /metrics requires an administrator's credential")
    registry = request.config_dict[METRICS]
    await registry.refresh_jobs(_JOB_COUNTS_TIMEOUT_S)
    return web.Response(body=registry.render(), headers={"Content-Type": CONTENT_TYPE})


async def metrics_ctx(app: web.Application) -> AsyncIterator[None]:
    """Points the metrics at the store, embedders, caches and jobs once they exist (after the jobs'
    context), and away from them before any of them closes."""
    app[METRICS].watch(
        store=app[STORE],
        embedders=app[EMBEDDERS],
        caches=app[SERVICES].caches,
        jobs=app[JOBS],
        canary=app[SERVICES].canary,
    )
    yield
    app[METRICS].unwatch(app[STORE])
