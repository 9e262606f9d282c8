"""``GET /_memproxy/health``: the proxy's own state and the cluster's, in one JSON document.

The route is public (load balancers, probes), so what it shows anonymously is counts and configuration,
never tenant data: the last failed jobs (their memory ids, their error texts) are shown to an administrator
only (or to anyone under ``--auth none``, where everyone may read everything anyway).

A process that is stopping (SIGTERM; docs/operations.md) answers ``503`` with ``"status": "draining"``: it
still finishes what it holds, but a load balancer's readiness probe takes it out of rotation."""

from __future__ import annotations

import os
import time

from aiohttp import web

from proxy import __version__
from proxy.app_keys import DRAINING, EMBEDDERS, JOBS, PRINCIPAL, SERVICES, SETTINGS, STARTED_AT, STORE
from proxy.errors import MemproxyError

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/_memproxy/health")
async def health(request: web.Request) -> web.Response:
    app = request.app
    try:
        cluster = await app[STORE].cluster_health()
        cluster_view = {
            "status": cluster.get("status"),
            "cluster_name": cluster.get("cluster_name"),
            "number_of_nodes": cluster.get("number_of_nodes"),
        }
        status = "ok" if cluster.get("status") in {"green", "yellow"} else "degraded"
    except MemproxyError as exc:
        cluster_view = {"status": "unavailable", "error": exc.message}
        status = "degraded"
    cluster_view["url"] = app[SETTINGS].opensearch_url
    try:
        # Durable jobs (docs/jobs.md): counts by state, the last failures, this process's workers.
        jobs = await app[JOBS].health()
    except MemproxyError as exc:
        jobs = {"error": exc.message}
    principal = request.get(PRINCIPAL)
    if not (app[SETTINGS].auth == "none" or (principal is not None and principal.is_admin)):
        failures = jobs.pop("recent_failures", None)
        if isinstance(failures, list):
            jobs["recent_failures_count"] = len(failures)
    draining = app[DRAINING].is_set()
    body = {
        "status": "draining" if draining else status,
        "proxy": {
            "name": "memproxy",
            "version": __version__,
            # Which process answered (several serve one port under --workers; job leases name it too).
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - app[STARTED_AT], 3),
            "embedders": [
                {
                    "id": i.id,
                    "name": i.name,
                    # The other names a container's embedding_model_id may give this model (the docs' short
                    # all-minilm-l6-v2 among them): without them the answer shows only an id nobody types.
                    "aliases": [n for n in app[EMBEDDERS].names(i.id) if n != i.id],
                    "dimension": i.dimension,
                    "device": i.device,
                    "dtype": i.dtype,
                }
                for i in app[EMBEDDERS].infos()
            ],
            # The local models' intra-op threads: "auto" follows the cores the rest of the machine leaves
            # free (proxy/embedding/cpu.py), "fixed" is --embed-threads.
            "embed_threads": app[EMBEDDERS].threads_view(),
            # Models from start-up flags (runtime ones are listed by each API's own routes); no keys.
            "models": [
                {
                    "id": m.model_id,
                    "kind": m.kind,
                    "provider": m.call.chat_provider if m.kind == "llm" else m.call.wire,
                    "endpoint": m.call.endpoint_url,
                }
                for m in app[SERVICES].models.startup.values()
            ]
            + [{"id": i, "kind": "reranker", "provider": "local"} for i in app[SERVICES].models.rerankers],
        },
        "cluster": cluster_view,
        "jobs": jobs,
        "settings": app[SETTINGS].masked(),
    }
    return web.json_response(body, status=503 if draining else 200)
