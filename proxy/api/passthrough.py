"""Every request that is not memproxy's own goes to OpenSearch, streamed both ways, under a policy.

**Who may pass through.** The identity middleware has run: a caller here is anonymous (only under
``--auth none``), a GoodMem principal, or a cluster user. A GoodMem principal must be an administrator: the
cluster knows nothing of GoodMem users, so forwarding a non-admin's request would hand them the cluster's
whole data. Their memproxy credential is stripped before forwarding (the cluster must never see a memproxy
key). A cluster user's request goes with their own ``Authorization`` header and the cluster decides. The
proxy never adds credentials or a client certificate of its own (``Store.passthrough_http`` has none).

**What nobody may reach.** memproxy's private indices (:data:`PRIVATE_INDICES`: API keys, users, grants,
the instance record, embedder records, memory records, and the container index, whose ``owner`` and
``backend_roles`` are authorization data) are closed to pass-through for everyone, read or write:

- an index expression in the path (``/{expr}/...``) is refused when a name in it is private, or when the
  cluster resolves it (wildcards, aliases, exclusions, date math; ``_resolve/index``) to a private index;
- routes that read or write documents of indices named elsewhere are inspected: ``_bulk``, ``_mget``,
  ``_msearch``, ``_msearch/template``, ``_mtermvectors`` (per-line or per-doc ``_index``), ``_reindex``
  (source and destination), ``_aliases`` (every action's indices); their body must then be plain JSON
  (no ``Content-Encoding``, no CBOR/SMILE/YAML, no ``source`` query parameter) so what is inspected is what
  the node reads;
- routes that search every index when none is named (``/_search``, ``/_count``, ...) are refused: name
  the indices (``*,-memproxy-*`` works);
- routes whose targets cannot be inspected are refused outright: SQL and PPL, asynchronous search,
  snapshot restore.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

from aiohttp import web

from proxy.app_keys import PRINCIPAL, STORE
from proxy.errors import BadRequest, Forbidden
from proxy.store.containers import CONTAINER_INDEX
from proxy.store.forward import forward, resolve_indices
from proxy.store.goodmem import PRIVATE_INDEX_PATTERNS

__all__ = ["PRIVATE_INDICES", "passthrough", "targets_of"]

# memproxy's own indices: never reachable through pass-through, by anyone.
PRIVATE_INDICES = (*PRIVATE_INDEX_PATTERNS, CONTAINER_INDEX)

# First path segment → routes that act on every index when no index is named.
_ALL_INDICES = frozenset(
    {
        "_search",
        "_count",
        "_field_caps",
        "_validate",
        "_rank_eval",
        "_search_shards",
        "_delete_by_query",
        "_update_by_query",
        "_explain",
        "_termvectors",
    }
)
# Routes that name their indices in the body, line by line or per document.
_BODY_ROUTES = frozenset({"_bulk", "_mget", "_msearch", "_mtermvectors", "_reindex", "_aliases"})
_REFUSED_PREFIXES = (
    ("_sql",),
    ("_ppl",),
    ("_plugins", "_sql"),
    ("_plugins", "_ppl"),
    ("_plugins", "_query"),
    ("_opendistro", "_sql"),
    ("_opendistro", "_ppl"),
    ("_plugins", "_asynchronous_search"),
    ("_opendistro", "_asynchronous_search"),
)
_PLAIN_JSON = ("", "application/json", "application/x-ndjson")


def _is_private(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in PRIVATE_INDICES)


def _named_private(expression: str) -> bool:
    """A private index named outright (``-name`` excludes it; wildcards are left to the cluster, which
    resolves them against what exists, exclusions included)."""
    names = [part.strip() for part in expression.split(",") if part.strip()]
    return any(not n.startswith("-") and "*" not in n and _is_private(n) for n in names)


def targets_of(segments: list[str], body: Any, default_index: str | None) -> list[str]:
    """The index expressions a body route names (``default_index``: the path's, used by lines without
    one). A route that names none and has no default targets every index (``_all``)."""
    route = segments[0] if segments else ""
    fallback = default_index or "_all"
    out: list[str] = []
    if route in ("_bulk",):
        for line in body:
            if isinstance(line, dict) and len(line) == 1:
                (meta,) = line.values()
                if isinstance(meta, dict):
                    out.append(str(meta.get("_index") or fallback))
    elif route in ("_msearch",):
        for n, line in enumerate(body):
            if n % 2 == 0 and isinstance(line, dict):
                index = line.get("index")
                out.extend([str(i) for i in index] if isinstance(index, list) else [str(index or fallback)])
    elif route in ("_mget", "_mtermvectors"):
        docs = body.get("docs") if isinstance(body, dict) else None
        for doc in docs or ():
            if isinstance(doc, dict):
                out.append(str(doc.get("_index") or fallback))
        if not docs:
            out.append(fallback)
    elif route == "_reindex":
        source = body.get("source", {}) if isinstance(body, dict) else {}
        dest = body.get("dest", {}) if isinstance(body, dict) else {}
        index = source.get("index") if isinstance(source, dict) else None
        out.extend([str(i) for i in index] if isinstance(index, list) else [str(index or fallback)])
        out.append(str(dest.get("index") or fallback) if isinstance(dest, dict) else fallback)
    elif route == "_aliases":
        actions = body.get("actions") if isinstance(body, dict) else None
        for action in actions if isinstance(actions, list) else ():
            for spec in action.values() if isinstance(action, dict) else ():
                for key in ("index", "indices", "alias", "aliases"):
                    value = spec.get(key) if isinstance(spec, dict) else None
                    if isinstance(value, list):
                        out.extend(str(v) for v in value)
                    elif value:
                        out.append(str(value))
    return out or [fallback]


def _segments(path: str) -> list[str]:
    # Empty segments (``//index``) are dropped as the node's router drops them.
    return [s for s in path.split("/") if s]


def _parse_lines(raw: bytes) -> list[Any]:
    try:
        return [json.loads(line) for line in raw.splitlines() if line.strip()]
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("The request body is not newline-delimited JSON") from None


def _parse_body(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("The request body is not JSON") from None


async def _check_private(request: web.Request, expressions: Iterable[str]) -> None:
    refused = Forbidden(
        "memproxy's own indices (API keys, users, grants, containers) cannot be reached through "
        "pass-through; name other indices (for example `*,-memproxy-*`)",
        os_type="security_exception",
    )
    for expression in set(expressions):
        if _named_private(expression):
            raise refused
        resolvable = "*" if expression == "_all" else expression
        if any(_is_private(name) for name in await resolve_indices(request.app[STORE], resolvable)):
            raise refused


def _caller_headers(request: web.Request) -> dict[str, str] | None:
    """The headers to forward without the caller's memproxy credential (None: forward them as they are)."""
    who = request.get(PRINCIPAL)
    if who is None or who.from_cluster:
        return None  # anonymous under --auth none, or the caller's own cluster credentials
    return {k: v for k, v in request.headers.items() if k.lower() not in ("authorization", "x-api-key")}


async def passthrough(request: web.Request) -> web.StreamResponse:
    who = request.get(PRINCIPAL)
    if who is not None and not who.from_cluster and not who.is_admin:
        raise Forbidden(
            "Forwarding requests to the cluster requires an administrator's API key or your own cluster "
            "credentials",
            os_type="security_exception",
        )
    segments = _segments(request.path)
    route = segments[0] if segments else ""
    if any(tuple(segments[: len(p)]) == p for p in _REFUSED_PREFIXES) or (
        route == "_snapshot" and segments[-1:] == ["_restore"]
    ):
        raise Forbidden(
            f"memproxy does not forward {request.path}: its targets cannot be checked against memproxy's "
            "own indices",
            os_type="security_exception",
        )
    # ``_all`` is the one index expression that starts with an underscore.
    default_index = route if route == "_all" or (route and not route.startswith("_")) else None
    if default_index is not None:
        await _check_private(request, [default_index])
        route = segments[1] if len(segments) > 1 else ""
        tail = segments[1:]
    else:
        tail = segments
    scroll = route == "_search" and tail[1:2] == ["scroll"]  # continues a search that was checked
    if default_index is None and route in _ALL_INDICES and not scroll:
        await _check_private(request, ["_all"])

    headers = _caller_headers(request)
    body: AsyncIterator[bytes] | bytes | None
    if route in _BODY_ROUTES:
        body = await _inspected_body(request, tail, default_index)
    else:
        body = request.content.iter_any() if request.body_exists else None
    # request.raw_path keeps the client's own percent-encoding and query string byte for byte.
    upstream = await forward(
        request.app[STORE], request.method, request.raw_path, headers or request.headers, body
    )
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


async def _inspected_body(request: web.Request, tail: list[str], default_index: str | None) -> bytes:
    """The whole body of a route that names indices in it, once they were checked."""
    if request.headers.get("Content-Encoding", "identity").lower() not in ("", "identity"):
        raise BadRequest("memproxy inspects this route's body: send it uncompressed")
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if content_type not in _PLAIN_JSON:
        raise BadRequest("memproxy inspects this route's body: send it as JSON")
    if "source" in request.query:
        raise BadRequest("memproxy inspects this route's body: send it as the body, not as `source`")
    raw = await request.read()
    route = tail[0] if tail else ""
    parsed = _parse_lines(raw) if route in ("_bulk", "_msearch") else _parse_body(raw)
    await _check_private(request, targets_of(tail, parsed, default_index))
    return raw
