"""The aiohttp application: state, lifecycle and routes.

Setup and teardown live in ``cleanup_ctx`` (store first, so embedders can fail start-up cleanly after it);
routes are mounted API by API, and the pass-through catch-all comes last so memproxy's own routes win.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from proxy.api import admin, cluster_settings, console, goodmem, health, openai, openapi, opensearch_memory
from proxy.api.admin.schema import ADMIN_API
from proxy.api.errors import error_middleware
from proxy.api.goodmem.schema import GOODMEM_API
from proxy.api.guards import input_guard_middleware
from proxy.api.identity import identity_middleware, log_auth_mode
from proxy.api.metrics import metrics_ctx, metrics_middleware
from proxy.api.metrics import routes as metrics_routes
from proxy.api.openai.schema import OPENAI_API
from proxy.api.opensearch_memory.model_schema import MODEL_API
from proxy.api.opensearch_memory.schema import MEMORY_API
from proxy.api.passthrough import passthrough
from proxy.api.request_ids import echo_request_id, request_id_middleware
from proxy.app_keys import DRAINING, EMBEDDERS, IDENTITY, JOBS, METRICS, SERVICES, SETTINGS, STARTED_AT, STORE
from proxy.config import Settings
from proxy.core.cache import Caches
from proxy.core.embedding_switch_jobs import register_embedding_switch
from proxy.core.erasure import register_erasure
from proxy.core.identity import Identity
from proxy.core.infer.jobs import register_infer
from proxy.core.jobs import JobQueue, JobRunner
from proxy.core.metrics import Metrics
from proxy.core.models import KIND, CallLimits, ModelRegistry, StartupModel
from proxy.core.models.startup import parse_model_flag
from proxy.core.recall_canary import RecallCanary
from proxy.core.retention.job import register_retention
from proxy.core.services import Services
from proxy.embedding import EmbedderRegistry, EmbedderSpec
from proxy.embedding.errors import ModelLoadError
from proxy.embedding.rerank import LocalReranker
from proxy.errors import MemproxyError
from proxy.store.client import Store
from proxy.store.jobs import JobDocs
from proxy.store.models import ModelDocs
from proxy.store.private import ensure_private_indices

__all__ = ["OPENAPI_APIS", "make_app"]

# The APIs /_memproxy/openapi.json describes, each from its slice's declared wire models.
OPENAPI_APIS = (openapi.MEMPROXY_API, ADMIN_API, MEMORY_API, MODEL_API, GOODMEM_API, OPENAI_API)

log = logging.getLogger(__name__)


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    app[STORE] = Store(app[SETTINGS])
    yield
    await app[STORE].close()


async def _embedders_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    # Remote embedders (ID=URL#...) join the model registry with the services; local ones load here.
    specs = [
        EmbedderSpec(id=i.split("=", 1)[0].strip(), path=i.split("=", 1)[1].strip())
        for i in settings.embedders
        if not i.split("=", 1)[1].strip().startswith(("http://", "https://"))
    ]
    try:
        registry = EmbedderRegistry.from_specs(specs, settings.engine_options())
        await registry.start()
    except (ValueError, ModelLoadError) as exc:  # the operator's flag, said in a line, not a traceback
        raise SystemExit(f"memproxy: {exc}") from None
    app[EMBEDDERS] = registry
    for info in registry.infos():
        log.info(
            "embedder %s (%s, %d-d) on %s/%s", info.id, info.name, info.dimension, info.device, info.dtype
        )
    yield
    await registry.close()


async def _services_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    startup: list[StartupModel] = []
    local_rerankers: dict[str, LocalReranker] = {}
    try:
        flags: list[tuple[KIND, tuple[str, ...]]] = [
            ("embedder", settings.embedders),
            ("reranker", settings.rerankers),
        ]
        for kind, entries in flags:
            for entry in entries:
                parsed = parse_model_flag(entry, kind, os.environ)
                if isinstance(parsed, StartupModel):
                    startup.append(parsed)
                elif kind == "reranker":
                    reranker = LocalReranker.load(
                        parsed.path, settings.engine_options(), reranker_id=parsed.model_id
                    )
                    await reranker.start()
                    local_rerankers[parsed.model_id] = reranker
        startup += [parse_model_flag(e, "llm", os.environ) for e in settings.llms]  # type: ignore[misc]
        secret_key = settings.secret_key
        source = "MEMPROXY_SECRET_KEY"
        if secret_key is None and settings.secret_key_file:
            secret_key = Path(settings.secret_key_file).read_text()
            source = settings.secret_key_file
        registry = ModelRegistry(
            ModelDocs(app[STORE]),
            app[EMBEDDERS],
            rerankers=local_rerankers,
            startup=startup,
            secret_key=secret_key,
            secret_source=source,
            limits=CallLimits(
                settings.model_timeout_s, settings.model_max_retries, settings.model_max_concurrency
            ),
            ttl_s=settings.cache_ttl_s,
            trusted_endpoints=settings.trusted_model_endpoints,
            forbidden_endpoints=settings.opensearch_hosts,
            allow_private_endpoints=settings.allow_private_model_endpoints,
        )
    except (ValueError, OSError, ModelLoadError) as exc:
        for reranker in local_rerankers.values():
            await reranker.close()
        raise SystemExit(f"memproxy: {exc}") from None
    for model in startup:
        log.info("%s %s at %s (%s)", model.kind, model.model_id, model.call.endpoint_url, model.call.wire)
    for reranker_id in local_rerankers:
        log.info("reranker %s (local cross-encoder)", reranker_id)
    app[SERVICES] = Services(
        store=app[STORE],
        embedders=app[EMBEDDERS],
        caches=Caches.with_ttl(settings.cache_ttl_s),
        models=registry,
        canary=RecallCanary(settings.recall_canary_rate) if settings.recall_canary_rate > 0 else None,
        memory_retention=settings.memory_retention,
    )
    try:
        await ensure_private_indices(app[STORE])
    except MemproxyError as exc:
        # Each is created on first use too; until then an index-less view with allow_no_indices=false 404s.
        log.warning("memproxy's private indices could not all be created at start-up (%s)", exc)
    yield
    await registry.close()
    for reranker in local_rerankers.values():
        await reranker.close()


async def _identity_ctx(app: web.Application) -> AsyncIterator[None]:
    identity = Identity.create(app[STORE], app[SERVICES].caches)
    app[IDENTITY] = identity
    log_auth_mode(app[SETTINGS].auth)
    yield
    await identity.close()  # cancels its background work (lastUsedAt refreshes)


async def _jobs_ctx(app: web.Application) -> AsyncIterator[None]:
    # The queue exists before any API's own state, so each slice can register its job kinds as it starts.
    settings = app[SETTINGS]
    queue = JobQueue(JobDocs(app[STORE]), max_attempts=settings.jobs_max_attempts)
    retention_days = settings.jobs_retention_days
    app[JOBS] = JobRunner(
        queue,
        workers=settings.jobs_workers,
        lease_s=settings.jobs_lease_s,
        poll_s=settings.jobs_poll_s,
        retention_s=retention_days * 86_400 if retention_days > 0 else None,
        # One owner holds at most this many of the workers, so another tenant's job always finds one.
        max_per_owner=settings.jobs_max_per_owner or max(1, settings.jobs_workers // 2),
    )
    # The core's own job kinds; each API slice registers its own in its cleanup_ctx.
    register_infer(app[JOBS], app[SERVICES])
    register_erasure(app[JOBS], app[SERVICES])
    register_retention(app[JOBS], app[SERVICES])
    register_embedding_switch(app[JOBS], app[SERVICES])
    yield


async def _canary_ctx(app: web.Application) -> AsyncIterator[None]:
    # The recall canary's one background task: it reruns sampled searches exactly, off the request path,
    # until shutdown cancels it (before the store it searches through closes).
    canary = app[SERVICES].canary
    task = asyncio.create_task(canary.run(), name="recall-canary") if canary is not None else None
    if task is not None:
        task.add_done_callback(_canary_ended)
    yield
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # the cancellation asked for just above
            await task


def _canary_ended(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the recall canary stopped", exc_info=task.exception())


async def _job_workers_ctx(app: web.Application) -> AsyncIterator[None]:
    # Last: handlers run on every slice's state, so the workers start after it and stop (handing their
    # running jobs back) before any of it closes.
    app[JOBS].start()
    yield
    await app[JOBS].close()


async def _close_when_draining(request: web.Request, response: web.StreamResponse) -> None:
    # A stopping process answers the request in hand and says "Connection: close": the client opens its next
    # connection to a process that stays, instead of finding this one gone (proxy.serve.worker).
    # aiohttp has written the Connection header into the response's headers before this hook runs.
    # config_dict, not request.app: a route of a sub-application (the console's) sees its own app there.
    if request.config_dict[DRAINING].is_set():
        response.force_close()
        response.headers["Connection"] = "close"


def make_app(settings: Settings) -> web.Application:
    # The request id and the metrics wrap everything, so every answer (a rendered error included) carries
    # the id and is counted with the status the caller got; the error middleware comes next, so every
    # refusal below it is rendered in its API's shape; the input guard refuses unreadable headers and
    # oversized bodies before identity looks anything up; identity runs before every handler, the
    # pass-through catch-all included.
    app = web.Application(
        middlewares=[
            request_id_middleware,
            metrics_middleware,
            error_middleware,
            input_guard_middleware,
            identity_middleware,
        ],
        client_max_size=settings.max_body_bytes,
    )
    app.on_response_prepare.append(echo_request_id)
    app.on_response_prepare.append(_close_when_draining)
    app[DRAINING] = asyncio.Event()
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app[STARTED_AT] = time.monotonic()
    app.cleanup_ctx.append(_store_ctx)
    app.cleanup_ctx.append(_embedders_ctx)
    app.cleanup_ctx.append(_services_ctx)
    app.cleanup_ctx.append(_identity_ctx)
    app.cleanup_ctx.append(_jobs_ctx)
    app.cleanup_ctx.append(metrics_ctx)
    app.cleanup_ctx.append(_canary_ctx)
    app.add_routes(health.routes)
    app.add_routes(openapi.routes_for(OPENAPI_APIS))
    app.add_routes(metrics_routes)
    opensearch_memory.mount(app)
    goodmem.setup(app)  # its routes, and its state as a cleanup_ctx after the services
    openai.mount(app)
    admin.mount(app)
    console.mount(app)
    app.cleanup_ctx.append(_job_workers_ctx)
    # memproxy keeps the ml-commons retention settings itself (proxy.api.cluster_settings).
    app.router.add_route("GET", cluster_settings.PATH, cluster_settings.get_settings)
    app.router.add_route("PUT", cluster_settings.PATH, cluster_settings.put_settings)
    app.router.add_route("*", "/{tail:.*}", passthrough)
    return app
