"""ml-commons 3.9's retention routes: the dry run of one container (or of every container) and ``_execute``.

The dry run needs the right to read the container's memories; the cluster-wide dry run and ``_execute``
act on every tenant's containers and need an administrator (anyone under ``--auth none``)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.api.opensearch_memory.common import json_response, load_container, services
from proxy.app_keys import JOBS, PRINCIPAL
from proxy.core.clock import now_ms
from proxy.core.identity import require_admin
from proxy.core.retention.job import all_containers, trigger
from proxy.core.retention.plan import ContainerPlan, plan_container
from proxy.core.retention.settings import RetentionSettings

__all__ = ["dry_run", "dry_run_all", "execute"]

_DISABLED = (
    "memory retention is not enabled (plugins.ml_commons.memory.retention_enabled is false): nothing is "
    "deleted until it is"
)


def _view(plan: ContainerPlan, settings: RetentionSettings) -> dict[str, Any]:
    view = plan.view()
    if not settings.enabled:
        view["warnings"] = [_DISABLED, *view["warnings"]]
    return view


def _admin_only(request: web.Request) -> None:
    who = request.get(PRINCIPAL)
    if who is not None:
        require_admin(who, f"{request.method} {request.path}")


async def dry_run(request: web.Request) -> web.Response:
    """``POST …/{memory_container_id}/_retention/_dry_run``: what a run now would delete there."""
    container = await load_container(request)
    svc = services(request)
    settings = await svc.retention.current()
    return json_response(_view(await plan_container(svc, container, settings), settings))


async def dry_run_all(request: web.Request) -> web.Response:
    """``POST …/memory_containers/_retention/_dry_run``: the dry run of every container."""
    _admin_only(request)
    svc = services(request)
    settings = await svc.retention.current()
    plans = [_view(await plan_container(svc, c, settings), settings) for c in await all_containers(svc)]
    return json_response({"evaluated_at": now_ms(), "containers": plans})


async def execute(request: web.Request) -> web.Response:
    """``POST …/memory_containers/_retention/_execute``: ``{"status": "triggered" | "already_running" |
    "retention_disabled"}``; the run itself is a job (docs/jobs.md, kind ``retention``)."""
    _admin_only(request)
    return json_response({"status": await trigger(services(request), request.app[JOBS].queue)})
