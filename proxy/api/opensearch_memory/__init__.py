"""The ml-commons agentic-memory REST API (``/_plugins/_ml/memory_containers``), served by memproxy.

Handlers are thin: parse the body, call one core operation, render. Literal segments are registered before
``{param}`` ones, as OpenSearch's path trie prefers them. A path under the prefix that no route serves is
answered the way OpenSearch's REST router answers it (400 "no handler found", or 405 with ``Allow``).

Authorization is part of the route table: each route that names a container names the operation it performs
on it (:data:`ACCESS`, GoodMem's space operations with ml-commons' own refusal texts), and :func:`mount`
wraps every such handler so that the check runs before it, whatever the handler does. Routes without a
container (``_create``, ``_search``, ``_memproxy_erase``) need only an authenticated caller, which the
identity middleware established; container ``_search`` is narrowed to what the caller may see by its
handler, and the cross-container erase to the containers whose memories the caller may delete. The
cluster-wide retention routes (``_retention/_dry_run``, ``_retention/_execute``) check for an administrator
themselves.

The ml-commons model APIs (:mod:`.models`: connectors, model groups, models, tasks, predict) are served here
too, from memproxy's model registry, whether or not the cluster has ml-commons of its own. Their rule
(:data:`MODEL_ACCESS`): reads and predict need an authenticated caller, writes (create, register, deploy,
undeploy, delete) an administrator; with ``--auth none`` anyone may do either, as on ml-commons without the
security plugin.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from aiohttp import web

from proxy.api.opensearch_memory import (
    containers,
    embedding_switch,
    erasure,
    memories,
    models,
    retention,
    search,
)
from proxy.api.opensearch_memory.common import Handler, load_container
from proxy.app_keys import IDENTITY, PRINCIPAL
from proxy.core.container_record import ContainerNotFound
from proxy.core.identity import can_access_space, require_admin
from proxy.errors import Forbidden

__all__ = ["ACCESS", "MODEL_ACCESS", "PREFIX", "ROUTES", "mount"]

PREFIX = "/_plugins/_ml/memory_containers"
_C = PREFIX + "/{memory_container_id}"
_LT = _C + "/memories/long-term"

# (methods, path, handler), in resolution order.
ROUTES: Sequence[tuple[tuple[str, ...], str, Handler]] = (
    (("POST",), PREFIX + "/_create", containers.create),
    (("GET", "POST"), PREFIX + "/_search", containers.search),
    (("POST",), PREFIX + "/_memproxy_erase", erasure.erase_everywhere),
    (("GET",), PREFIX + "/_memproxy_erase/{job_id}", erasure.erasure_job),
    (("POST",), PREFIX + "/_retention/_dry_run", retention.dry_run_all),
    (("POST",), PREFIX + "/_retention/_execute", retention.execute),
    (("GET",), _C, containers.get),
    (("PUT",), _C, containers.update),
    (("DELETE",), _C, containers.delete),
    (("POST",), _C + "/_memproxy_erase", erasure.erase_in_container),
    (("POST",), _C + "/_retention/_dry_run", retention.dry_run),
    (("POST",), _C + "/_memproxy_switch_embedding", embedding_switch.start),
    (("GET",), _C + "/_memproxy_switch_embedding", embedding_switch.progress),
    (("DELETE",), _C + "/_memproxy_switch_embedding", embedding_switch.cancel),
    (("POST",), _C + "/memories", memories.add_memory),
    (("POST",), _C + "/memories/sessions", memories.create_session),
    (("GET", "POST"), _LT + "/_semantic_search", search.semantic_search),
    (("GET", "POST"), _LT + "/_hybrid_search", search.hybrid_search),
    (("POST",), _LT + "/_memproxy_add", memories.add_long_term),
    (("POST",), _LT + "/_memproxy_bulk", memories.add_long_term_bulk),
    (("GET",), _C + "/memories/working/{working_memory_id}/_memproxy_inference", memories.get_inference),
    (("GET", "POST"), _C + "/memories/{memory_type}/_search", memories.search_memories),
    (("POST",), _C + "/memories/{memory_type}/_delete_by_query", memories.delete_by_query),
    (("GET",), _C + "/memories/{memory_type}/{memory_id}", memories.get_memory),
    (("PUT",), _C + "/memories/{memory_type}/{memory_id}", memories.update_memory),
    (("DELETE",), _C + "/memories/{memory_type}/{memory_id}", memories.delete_memory),
)


_ADD = ("CREATE_MEMORY", "User doesn't have permissions to add memory to this container")
_SEARCH = ("READ_MEMORY", "User doesn't have permissions to search memories in this container")
_DELETE = ("DELETE_MEMORY", "User doesn't have permissions to delete memories in this container")

_READ_SPACE = ("READ_SPACE", "User doesn't have privilege to perform this operation on this memory container")
_UPDATE_SPACE = ("UPDATE_SPACE", "User doesn't have permissions to update memories in this container")

# (method, path) → (space operation, ml-commons' 403 reason) for every route that names a container.
ACCESS: Mapping[tuple[str, str], tuple[str, str]] = {
    ("GET", _C): _READ_SPACE,
    ("PUT", _C): _UPDATE_SPACE,
    ("DELETE", _C): ("DELETE_SPACE", "Only container owner can delete container"),
    ("POST", _C + "/_memproxy_erase"): _DELETE,
    ("POST", _C + "/_retention/_dry_run"): _SEARCH,
    ("POST", _C + "/_memproxy_switch_embedding"): _UPDATE_SPACE,
    ("GET", _C + "/_memproxy_switch_embedding"): _READ_SPACE,
    ("DELETE", _C + "/_memproxy_switch_embedding"): _UPDATE_SPACE,
    ("POST", _C + "/memories"): _ADD,
    ("POST", _C + "/memories/sessions"): _ADD,
    ("GET", _LT + "/_semantic_search"): _SEARCH,
    ("POST", _LT + "/_semantic_search"): _SEARCH,
    ("GET", _LT + "/_hybrid_search"): _SEARCH,
    ("POST", _LT + "/_hybrid_search"): _SEARCH,
    ("POST", _LT + "/_memproxy_add"): _ADD,
    ("GET", _C + "/memories/working/{working_memory_id}/_memproxy_inference"): _SEARCH,
    ("POST", _LT + "/_memproxy_bulk"): _ADD,
    ("GET", _C + "/memories/{memory_type}/_search"): _SEARCH,
    ("POST", _C + "/memories/{memory_type}/_search"): _SEARCH,
    ("POST", _C + "/memories/{memory_type}/_delete_by_query"): _DELETE,
    ("GET", _C + "/memories/{memory_type}/{memory_id}"): (
        "READ_MEMORY",
        "User doesn't have permissions to get memories in this container",
    ),
    ("PUT", _C + "/memories/{memory_type}/{memory_id}"): (
        "CREATE_MEMORY",
        "User doesn't have permissions to update memories in this container",
    ),
    ("DELETE", _C + "/memories/{memory_type}/{memory_id}"): _DELETE,
}


# (method, path) → models.READ / models.WRITE for every model-API route.
MODEL_ACCESS: Mapping[tuple[str, str], str] = {
    (method, path): access for methods, path, _, access in models.ROUTES for method in methods
}


def _model_guarded(handler: Handler, access: str) -> Handler:
    """``handler`` behind the model-API rule: a write needs an administrator (models are shared by every
    user of memproxy, and registering one makes memproxy call out); a read, any authenticated caller."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        who = request.get(PRINCIPAL)
        if who is not None and access == models.WRITE:  # None: --auth none, all allowed
            require_admin(who, f"{request.method} {request.path}")
        return await handler(request)

    return guarded


def _guarded(handler: Handler, op: str, refusal: str) -> Handler:
    """``handler`` behind the container check: the caller must be allowed ``op`` on the named container.
    A container that does not exist is left to the handler, which answers ml-commons' own 404."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        who = request.get(PRINCIPAL)
        if who is not None:  # None: --auth none, where ml-commons without security allows everything
            try:
                container = await load_container(request, cached=True)
            except ContainerNotFound:
                return await handler(request)
            if not await can_access_space(request.app[IDENTITY], who, container, op):
                raise Forbidden(refusal)
        return await handler(request)

    return guarded


def _pattern(path: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", path)
    regex = "".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts if p)
    return re.compile(f"^{regex}$")


def _literals(path: str) -> tuple[bool, ...]:
    return tuple(not segment.startswith("{") for segment in path.split("/"))


_PATTERNS = [(methods, _pattern(path), _literals(path)) for methods, path, _ in ROUTES] + [
    (methods, _pattern(path), _literals(path)) for methods, path, _, _ in models.ROUTES
]


def _allowed(path: str) -> list[str]:
    """The methods of the route OpenSearch's path trie picks: at each segment a literal beats a parameter,
    so ``DELETE …/_create`` is a wrong method on ``_create``, not a delete of a container named so."""
    matches = [(literals, methods) for methods, pattern, literals in _PATTERNS if pattern.match(path)]
    best = max((literals for literals, _ in matches), default=None)
    allowed: list[str] = []
    for literals, methods in matches:
        if literals == best:
            allowed.extend(m for m in methods if m not in allowed)
    return allowed


async def _router_fallback(request: web.Request) -> web.Response:
    """What OpenSearch's RestController says when no handler takes the request."""
    uri, method = request.raw_path, request.method
    allowed = _allowed(request.path)
    if allowed and method != "OPTIONS":
        reason = (
            f"Incorrect HTTP method for uri [{uri}] and method [{method}], allowed: [{', '.join(allowed)}]"
        )
        body = {"error": reason, "status": 405}
        return web.Response(
            status=405,
            text=json.dumps(body),
            content_type="application/json",
            headers={"Allow": ",".join(allowed)},
        )
    if allowed:
        return web.Response(status=200, headers={"Allow": ",".join(allowed)})
    body_text = json.dumps({"error": f"no handler found for uri [{uri}] and method [{method}]"})
    return web.Response(status=400, text=body_text, content_type="application/json")


def mount(app: web.Application) -> None:
    """Add the routes; call before the pass-through catch-all so they win."""
    for methods, path, handler in ROUTES:
        for method in methods:
            access = ACCESS.get((method, path))
            if access is None and "{memory_container_id}" in path:
                raise RuntimeError(f"{method} {path} names a container but no access rule")
            app.router.add_route(method, path, _guarded(handler, *access) if access else handler)
        if "{" not in path:
            # Other methods on a literal path must not fall through to a "{memory_container_id}" route.
            app.router.add_route("*", path, _router_fallback)
    for methods, path, handler, rule in models.ROUTES:
        for method in methods:
            app.router.add_route(method, path, _model_guarded(handler, rule))
        if "{" not in path:
            app.router.add_route("*", path, _router_fallback)
    app.router.add_route("*", PREFIX, _router_fallback)
    app.router.add_route("*", PREFIX + "/{tail:.*}", _router_fallback)
