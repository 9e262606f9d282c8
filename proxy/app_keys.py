"""Typed state on the aiohttp application (``web.AppKey``), shared by every API's handlers."""

from __future__ import annotations

import asyncio

from aiohttp import web

from proxy.config import Settings
from proxy.core.identity import Identity, Principal
from proxy.core.jobs import JobRunner
from proxy.core.metrics import Metrics
from proxy.core.services import Services
from proxy.embedding import EmbedderRegistry
from proxy.store.client import Store

__all__ = [
    "DRAINING",
    "EMBEDDERS",
    "IDENTITY",
    "JOBS",
    "METRICS",
    "PRINCIPAL",
    "REQUEST_ID",
    "SERVICES",
    "SETTINGS",
    "STARTED_AT",
    "STORE",
]

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", Store)
EMBEDDERS = web.AppKey("embedders", EmbedderRegistry)
STARTED_AT = web.AppKey("started_at", float)
# The store and the embedders together, as every core operation takes them (set once both are up).
SERVICES = web.AppKey("services", Services)
# Keys, users, grants and the instance record: who callers are, for every API (set after the services).
IDENTITY = web.AppKey("identity", Identity)
# The durable job queue and this process's workers (docs/jobs.md): ``app[JOBS].queue`` enqueues and reads
# jobs, ``app[JOBS].register(kind, handler)`` adds a kind (set last, after every API's own state).
JOBS = web.AppKey("jobs", JobRunner)
# This application's Prometheus registry and metrics (proxy.core.metrics; set in make_app, so the metrics
# middleware counts every request, and wired to the store, embedders, caches and jobs once they are up).
METRICS = web.AppKey("metrics", Metrics)
# Set once this process is stopping (proxy.serve): health answers 503 so a load balancer sends no more, and
# every response closes its connection, so the client's next request reaches another process.
DRAINING = web.AppKey("draining", asyncio.Event)
# The id of one request (accepted from X-Request-Id or made), set by the request-id middleware; echoed on the
# response, sent to OpenSearch as X-Opaque-Id and written on log lines (proxy.observability).
REQUEST_ID = web.RequestKey("request_id", str)
# The authenticated caller of one request, set by the identity middleware (absent: anonymous, which only
# public routes and ``--auth none`` allow).
PRINCIPAL = web.RequestKey("principal", Principal)
