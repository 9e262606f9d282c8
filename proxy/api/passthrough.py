"""Every request that is not memproxy's own goes to OpenSearch, streamed both ways, under a policy.

**Who may pass through.** The identity middleware has run: a caller here is anonymous (only under
``--auth none``), a GoodMem principal, or a cluster user. A GoodMem principal must be an administrator: the
cluster knows nothing of GoodMem users, so forwarding a non-admin's request would hand them the cluster's
whole data. Their memproxy credential is stripped before forwarding (the cluster must never see a memproxy
key). A cluster user's request goes with their own ``Authorization`` header and the cluster decides. The
proxy never adds credentials or a client certificate of its own (``Store.passthrough_http`` has none).

**What nobody may reach.** memproxy's private indices (:data:`PRIVATE_INDICES`: API keys, users, grants,
the instance record, embedder records, memory records, and the container index, whose ``owner`` and
``backend_roles`` are authorization data) are closed to pass-through for everyone, read or write. The
request is decided on its canonical path and matched against an allowlist of endpoints
(:mod:`proxy.api.passthrough_routes`; anything else is refused), whose placeholders say which segments are
index expressions, new index names and alias names:

- an index expression is refused when a name in it could be private (date math included), or when the
  cluster resolves it (wildcards, aliases, exclusions, date math; ``_resolve/index``) to a private index;
- a new index, an alias being created and a template's index pattern are refused when they could be a
  private name;
- the bodies that name indices (``_bulk``, ``_mget``, ``_msearch``, ``_reindex``, alias actions, index
  creation, templates, ...) are parsed whole (:mod:`proxy.api.passthrough_bodies`) and every name in
  them checked; their body must then be plain JSON (no ``Content-Encoding``, no CBOR/SMILE/YAML, no
  ``source`` query parameter) so what is inspected is what the node reads; in search-like bodies the
  indices their lookups read (:func:`~proxy.api.passthrough_bodies.lookup_indices`) are checked too;
- metadata views (``_cat/indices``, ``_mapping``, ``_settings``, ``_cluster/state``, ...) hide the private
  indices: a wildcard gets them excluded, an index-less form is forwarded onto :data:`PUBLIC`;
- index-less searches and index-less settings / mapping writes are refused: name the indices.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import AsyncIterator, Iterable
from functools import cache
from typing import Any

from aiohttp import web

from proxy.api.passthrough_bodies import lookup_indices, names_in
from proxy.api.passthrough_routes import Match, canonical_segments, encode_path, match
from proxy.app_keys import PRINCIPAL, STORE
from proxy.errors import BadGateway, BadRequest, Forbidden
from proxy.store.containers import CONTAINER_INDEX
from proxy.store.forward import UpstreamResponse, forward, resolve_indices
from proxy.store.goodmem import PRIVATE_INDEX_PATTERNS

__all__ = ["PRIVATE_INDICES", "PUBLIC", "caller_headers", "check_caller", "passthrough"]

# memproxy's own indices: never reachable through pass-through, by anyone.
PRIVATE_INDICES = (*PRIVATE_INDEX_PATTERNS, CONTAINER_INDEX)
_EXCLUDED = ",".join(f"-{p}" for p in PRIVATE_INDICES)
# Every index but memproxy's own: what an index-less metadata view is forwarded onto.
PUBLIC = f"*,{_EXCLUDED}"
_PLAIN_JSON = ("", "application/json", "application/x-ndjson")
# The node reads a path parameter from the query string when the path lacks it (`/_mapping?index=x` is
# `/x/_mapping`, `/_bulk?index=x` defaults every line to x). `index` is then checked like the path's;
# the other names only the path may carry.
_PATH_ONLY_PARAMS = frozenset({"new_index", "target", "name", "alias"})


def _globs_overlap(a: str, b: str) -> bool:
    """Whether some name matches both ``*``-patterns ``a`` and ``b`` (a plain name is a pattern too)."""

    @cache
    def rest(i: int, j: int) -> bool:
        if i == len(a) or j == len(b):
            return set(a[i:] + b[j:]) <= {"*"}
        if a[i] == "*" or b[j] == "*":
            star_a = a[i] == "*" and (rest(i + 1, j) or rest(i, j + 1))
            return star_a or (b[j] == "*" and (rest(i, j + 1) or rest(i + 1, j)))
        return a[i] == b[j] and rest(i + 1, j + 1)

    return rest(0, 0)


def _as_pattern(name: str) -> str:
    """The names ``name`` may stand for: date math ``<static{math}>`` is ``static*``."""
    if name.startswith("<") and name.endswith(">"):
        static, *_ = name[1:-1].split("{", 1)
        return static.replace("\\", "") + "*"
    return name


def _could_be_private(name: str) -> bool:
    return any(_globs_overlap(_as_pattern(name), pattern) for pattern in PRIVATE_INDICES)


def _named_private(expression: str) -> bool:
    """A private index named outright, or by date math (``-name`` excludes it; wildcards are left to the
    cluster, which resolves them against what exists, exclusions included)."""
    names = [part.strip() for part in expression.split(",") if part.strip()]
    return any(not n.startswith("-") and "*" not in n and _could_be_private(n) for n in names)


def _filtered(expression: str) -> str:
    """A metadata view's index expression with the private indices taken out of its wildcards."""
    if expression == "_all":
        return PUBLIC
    return f"{expression},{_EXCLUDED}" if "*" in expression else expression


def _refused(message: str) -> Forbidden:
    return Forbidden(message, os_type="security_exception")


_PRIVATE = (
    "memproxy's own indices (API keys, users, grants, containers) cannot be reached through "
    "pass-through; name other indices (for example `*,-memproxy-*`)"
)


async def _check_private(request: web.Request, expressions: Iterable[str]) -> None:
    for expression in set(expressions):
        if _named_private(expression):
            raise _refused(_PRIVATE)
        resolvable = "*" if expression == "_all" else expression
        if any(_is_private(name) for name in await resolve_indices(request.app[STORE], resolvable)):
            raise _refused(_PRIVATE)


def _is_private(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in PRIVATE_INDICES)


def _check_new_names(names: Iterable[str], what: str) -> None:
    for name in names:
        if _could_be_private(name):
            raise _refused(
                f"memproxy does not forward {what} [{name}]: it could be one of memproxy's own names"
            )


def caller_headers(request: web.Request) -> dict[str, str] | None:
    """The headers to forward without the caller's memproxy credential (None: forward them as they are)."""
    who = request.get(PRINCIPAL)
    if who is None or who.from_cluster:
        return None  # anonymous under --auth none, or the caller's own cluster credentials
    return {k: v for k, v in request.headers.items() if k.lower() not in ("authorization", "x-api-key")}


async def _checked_path(request: web.Request, found: Match) -> tuple[list[str], str | None]:
    """The segments to forward once every name in the path was checked, and the path's index."""
    endpoint, segments = found.endpoint, found.segments
    forwarded, default = list(segments), None
    smuggled = sorted(_PATH_ONLY_PARAMS.intersection(request.query))
    if smuggled:
        raise BadRequest(
            f"memproxy does not forward the query parameter [{smuggled[0]}]: the node would read it as a "
            "path parameter; put it in the path"
        )
    given = request.query.getall("index", [])
    if given:
        if len(given) > 1 or "{index}" in endpoint.pattern:
            raise BadRequest("Name the index once: in the path, or in the `index` query parameter")
        await _check_private(request, given)
        default = given[0]  # as the node reads it: the path is then not rewritten
    creating = request.method.upper() in ("PUT", "POST")
    for n, (placeholder, segment) in enumerate(zip(endpoint.pattern, segments, strict=False)):
        if placeholder == "{index}":
            forwarded[n] = _filtered(segment) if endpoint.view else segment
            default = default or forwarded[n]
            await _check_private(request, [forwarded[n]])
        elif placeholder == "{new}":
            _check_new_names([segment], "the new index")
        elif placeholder == "{alias}" and creating:
            _check_new_names([segment], "the alias")
    if endpoint.rewrite is not None and not given and request.query.get("help") not in ("", "true"):
        # (`help` lists a view's columns and takes no index: the node refuses one.)
        forwarded = [
            PUBLIC if part == "{public}" else segments[int(part[1:-1])] if part[1:-1].isdigit() else part
            for part in endpoint.rewrite
        ]
        if PUBLIC in forwarded:
            await _check_private(request, [PUBLIC])  # a wildcard may reach an alias of a private index
    return forwarded, default


def check_caller(request: web.Request) -> None:
    """Who may pass through at all: anyone under ``--auth none``, a cluster user, a GoodMem administrator."""
    who = request.get(PRINCIPAL)
    if who is not None and not who.from_cluster and not who.is_admin:
        raise Forbidden(
            "Forwarding requests to the cluster requires an administrator's API key or your own cluster "
            "credentials",
            os_type="security_exception",
        )


async def passthrough(request: web.Request) -> web.StreamResponse:
    check_caller(request)
    raw_path, _, query = request.raw_path.partition("?")
    found = match(request.method, canonical_segments(raw_path))
    if found is None:
        raise _refused(
            f"memproxy does not forward {request.method} {request.path}: it is not on memproxy's "
            "pass-through allowlist of cluster endpoints"
        )
    if found.endpoint.refused:
        raise _refused(f"memproxy does not forward {request.method} {request.path}: {found.endpoint.refused}")
    forwarded, default = await _checked_path(request, found)
    if found.endpoint.tasks:
        _check_task_listing(request)
    if found.endpoint.node_level and request.query.get("level", "node").strip().lower() not in ("node", ""):
        raise _refused(
            "memproxy does not forward node statistics by index or shard: they would list memproxy's own "
            "indices; ask for `level=node`, or for `/{index}/_stats` of the indices you name"
        )

    headers = caller_headers(request)
    body: AsyncIterator[bytes] | bytes | None
    if found.endpoint.body is not None:
        body = await _inspected_body(request, found.endpoint.body, default)
    else:
        body = request.content.iter_any() if request.body_exists else None
    target = encode_path(forwarded) + (f"?{query}" if query else "")
    if found.endpoint.tasks:
        # The answer is rewritten (descriptions out), so it comes back uncompressed.
        headers = {k: v for k, v in (headers or request.headers).items() if k.lower() != "accept-encoding"}
    upstream = await forward(request.app[STORE], request.method, target, headers or request.headers, body)
    if found.endpoint.tasks and 200 <= upstream.status < 300 and request.method.upper() == "GET":
        return await _without_descriptions(upstream)
    try:
        response = web.StreamResponse(
            status=upstream.status, reason=upstream.reason, headers=upstream.headers
        )
        if "Content-Length" not in upstream.headers:
            response.enable_chunked_encoding()
        await response.prepare(request)
        async for chunk in upstream.chunks():
            await response.write(chunk)
        await response.write_eof()
        return response
    finally:
        upstream.release()


async def _inspected_body(request: web.Request, kind: str, default_index: str | None) -> bytes:
    """The whole body of an endpoint whose body names indices or holds a query, once it was checked."""
    if request.headers.get("Content-Encoding", "identity").lower() not in ("", "identity"):
        raise BadRequest("memproxy inspects this route's body: send it uncompressed")
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if content_type not in _PLAIN_JSON:
        raise BadRequest("memproxy inspects this route's body: send it as JSON")
    if "source" in request.query:
        raise BadRequest("memproxy inspects this route's body: send it as the body, not as `source`")
    raw = await request.read()
    names = names_in(kind, raw, default_index, adds=request.method.upper() in ("PUT", "POST"))
    looked_up = [index for search in names.searches for index in lookup_indices(search)]
    _check_new_names(names.new, "the index name or pattern")
    _check_new_names(names.aliases, "the alias")
    await _check_private(request, [*names.indices, *looked_up])
    return raw


_TASK_DETAIL = (
    "memproxy does not forward task descriptions: they hold the requests the tasks run, memproxy's own "
    "among them; list the tasks without `detailed`"
)


def _check_task_listing(request: web.Request) -> None:
    """``detailed`` (descriptions in a listing) only as false; answers only as JSON or the cat table."""
    detailed = request.query.get("detailed")
    if detailed is not None and detailed.strip().lower() != "false":
        raise _refused(_TASK_DETAIL)
    fmt = request.query.get("format")
    if fmt is not None and fmt.strip().lower() not in ("json", "text", "txt"):
        raise BadRequest("memproxy forwards task answers as JSON (or the cat table): leave out `format`")


def _strip_descriptions(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_descriptions(v) for k, v in value.items() if k != "description"}
    if isinstance(value, list):
        return [_strip_descriptions(v) for v in value]
    return value


async def _without_descriptions(upstream: UpstreamResponse) -> web.Response:
    """A task answer (JSON) without any ``description``: a single task's answer carries one whether or not
    ``detailed`` was asked for. The cat table (text) lists none without ``detailed``."""
    try:
        raw = b"".join([chunk async for chunk in upstream.chunks()])
    finally:
        upstream.release()
    content_type = upstream.headers.get("Content-Type", "")
    if "json" not in content_type:
        return web.Response(status=upstream.status, body=raw, content_type=content_type.split(";")[0] or None)
    try:
        answer = json.loads(raw)
    except ValueError as exc:
        raise BadGateway("The cluster's task answer was not JSON") from exc
    return web.json_response(_strip_descriptions(answer), status=upstream.status)
