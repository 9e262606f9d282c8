"""What pass-through forwards: the canonical path of a request and the allowlist of cluster endpoints.

**The canonical path.** OpenSearch splits the raw path on ``/`` and percent-decodes each segment on its
own (``%2F`` stays inside a segment: ``/i/_doc/a%2Fb`` is document ``a/b``; ``+`` stays a plus); it does
not resolve ``.`` or ``..``, and an HTTP client or a URL library in between may. So the policy decides on
the decoded segments, refuses ``.``/``..`` and empty segments (a single trailing ``/`` is dropped, as the
node drops it), and the request is forwarded on exactly those segments, re-encoded: what was checked is
what the node routes.

**The allowlist.** :data:`ENDPOINTS` names every endpoint memproxy forwards, the way OpenSearch's REST
handlers register them: methods, a path pattern and what its placeholders are:

- ``{index}`` an index expression the request reads or writes (resolved on the cluster, refused when it
  reaches a private index);
- ``{new}`` the name of an index the request creates (``PUT /{new}``, clone / split / shrink / rollover
  targets): refused when it could be a private name, date math included;
- ``{alias}`` an alias name: refused when it could be a private name;
- ``{*}`` any other segment (a document id, a task id, a metric); ``{**}`` the rest of the path.

Each endpoint also says how its body is inspected (:mod:`proxy.api.passthrough_bodies`), whether it is a
metadata *view* (wildcards get the private indices excluded; an index-less form is rewritten onto every
non-private index) and, for the endpoints memproxy knows and refuses, why. Anything else is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote, unquote_to_bytes

from proxy.errors import BadRequest

__all__ = ["ENDPOINTS", "Endpoint", "Match", "canonical_segments", "encode_path", "match"]

_R = ("GET", "HEAD")
_W = ("PUT", "POST")
_ALL = ("GET", "HEAD", "PUT", "POST", "DELETE")

# Body kinds (see passthrough_bodies.targets): None streams the body through unread.
SEARCH, BULK, MSEARCH, DOCS, REINDEX, ACTIONS, ALIAS, INDEX, TEMPLATE, PAINLESS, PIPELINE = (
    "search",
    "bulk",
    "msearch",
    "docs",
    "reindex",
    "actions",
    "alias",
    "index",
    "template",
    "painless",
    "pipeline",
)


@dataclass(frozen=True)
class Endpoint:
    methods: tuple[str, ...]
    pattern: tuple[str, ...]
    body: str | None = None
    view: bool = False  # a metadata view: private indices are filtered out of it
    rewrite: tuple[str, ...] | None = None  # index-less view: forwarded as this, ``{public}`` filled in
    refused: str | None = None  # known, and refused for this reason
    # Task listings: a task's description is the request it runs, and memproxy's own requests (an API-key
    # look-up, a tenant's filtered search) run as tasks too. So descriptions never pass: ``detailed`` is
    # refused, and a single task's answer is forwarded without one.
    tasks: bool = False
    # Node statistics: ``level=indices`` / ``shards`` would list memproxy's own indices among the rest.
    node_level: bool = False


def _ep(
    methods: tuple[str, ...],
    pattern: str,
    body: str | None = None,
    *,
    view: bool = False,
    rewrite: str | None = None,
    refused: str | None = None,
    tasks: bool = False,
    node_level: bool = False,
) -> Endpoint:
    split = tuple(s for s in pattern.split("/") if s)
    again = tuple(s for s in rewrite.split("/") if s) if rewrite else None
    return Endpoint(methods, split, body, view or bool(rewrite), again, refused, tasks, node_level)


def _views(path: str, rewrite: str, methods: tuple[str, ...] = _R) -> list[Endpoint]:
    """A metadata view with and without its index expression (``path`` holds ``{index}``)."""
    indexless = path.replace("/{index}", "")
    return [_ep(methods, path, view=True), _ep(methods, indexless, rewrite=rewrite)]


_NAME_THE_INDICES = (
    "it would search every index, memproxy's own among them: name the indices "
    "(for example `*,-memproxy-*,-.plugins-ml-am-memory-container`)"
)
_OWN_CONTEXTS = "it would close or list memproxy's own point-in-time and scroll contexts"
_UNCHECKABLE = "its targets cannot be checked against memproxy's own indices"

ENDPOINTS: tuple[Endpoint, ...] = (
    _ep(_R, "/"),
    # Documents.
    _ep(_ALL, "/{index}/_doc/{*}"),
    _ep(("POST",), "/{index}/_doc"),
    _ep(_W, "/{index}/_create/{*}"),
    _ep(("POST",), "/{index}/_update/{*}"),
    _ep(_R, "/{index}/_source/{*}"),
    _ep((*_R, "POST"), "/{index}/_termvectors"),
    _ep((*_R, "POST"), "/{index}/_termvectors/{*}"),
    _ep((*_R, "POST"), "/_mget", DOCS),
    _ep((*_R, "POST"), "/{index}/_mget", DOCS),
    _ep((*_R, "POST"), "/_mtermvectors", DOCS),
    _ep((*_R, "POST"), "/{index}/_mtermvectors", DOCS),
    _ep(_W, "/_bulk", BULK),
    _ep(_W, "/{index}/_bulk", BULK),
    # Searches: the body is read for lookups; index-less forms would search everything.
    _ep((*_R, "POST"), "/{index}/_search", SEARCH),
    _ep((*_R, "POST"), "/{index}/_count", SEARCH),
    _ep((*_R, "POST"), "/{index}/_explain/{*}", SEARCH),
    _ep((*_R, "POST"), "/{index}/_validate/query", SEARCH),
    _ep((*_R, "POST"), "/{index}/_rank_eval", SEARCH),
    _ep((*_R, "POST"), "/{index}/_search/template", SEARCH),
    _ep((*_R, "POST"), "/{index}/_field_caps", SEARCH, view=True),
    _ep((*_R, "POST"), "/_field_caps", SEARCH, rewrite="/{public}/_field_caps"),
    _ep((*_R, "POST"), "/{index}/_search_shards", view=True),
    _ep((*_R, "POST"), "/_search_shards", rewrite="/{public}/_search_shards"),
    _ep(("POST",), "/{index}/_delete_by_query", SEARCH),
    _ep(("POST",), "/{index}/_update_by_query", SEARCH),
    *(
        _ep((*_R, "POST"), path, refused=_NAME_THE_INDICES)
        for path in ("/_search", "/_count", "/_validate/query", "/_rank_eval", "/_search/template")
    ),
    _ep((*_R, "POST"), "/_msearch", MSEARCH),
    _ep((*_R, "POST"), "/{index}/_msearch", MSEARCH),
    _ep((*_R, "POST"), "/_msearch/template", MSEARCH),
    _ep((*_R, "POST"), "/{index}/_msearch/template", MSEARCH),
    _ep((*_R, "POST"), "/_render/template", SEARCH),
    _ep((*_R, "POST"), "/_render/template/{*}", SEARCH),
    _ep(("POST",), "/_reindex", REINDEX),
    *(
        _ep(("POST",), f"/{task}/{{*}}/_rethrottle")
        for task in ("_reindex", "_update_by_query", "_delete_by_query")
    ),
    # Contexts a checked search opened: scrolls and points in time, by id.
    _ep(("GET", "POST", "DELETE"), "/_search/scroll"),
    _ep(("GET", "POST", "DELETE"), "/_search/scroll/{*}"),
    _ep(("DELETE",), "/_search/scroll/_all", refused=_OWN_CONTEXTS),
    _ep(("POST",), "/{index}/_search/point_in_time"),
    _ep(("DELETE",), "/_search/point_in_time"),
    _ep(("GET", "DELETE"), "/_search/point_in_time/_all", refused=_OWN_CONTEXTS),
    _ep(_R, "/_cat/pit_segments"),
    _ep(_R, "/_cat/pit_segments/_all", refused=_OWN_CONTEXTS),
    # Pipelines, scripts, analysis.
    _ep(_R, "/_search/pipeline"),
    _ep(("GET", "HEAD", "PUT", "DELETE"), "/_search/pipeline/{*}", SEARCH),
    _ep(_R, "/_ingest/pipeline"),
    _ep(("GET", "HEAD", "PUT", "DELETE"), "/_ingest/pipeline/{*}", PIPELINE),
    _ep((*_R, "POST"), "/_ingest/pipeline/_simulate", PIPELINE),
    _ep((*_R, "POST"), "/_ingest/pipeline/{*}/_simulate", PIPELINE),
    _ep(_R, "/_ingest/processor/grok"),
    _ep(("GET", "PUT", "POST", "DELETE"), "/_scripts/{*}", SEARCH),
    _ep(_W, "/_scripts/{*}/{*}", SEARCH),
    _ep((*_R, "POST"), "/_scripts/painless/_execute", PAINLESS),
    _ep(_R, "/_script_context"),
    _ep(_R, "/_script_language"),
    _ep((*_R, "POST"), "/_analyze"),
    _ep((*_R, "POST"), "/{index}/_analyze"),
    # Indices: create, delete, open, close, maintain.
    _ep(("GET", "HEAD", "DELETE"), "/{index}"),
    _ep(("PUT",), "/{new}", INDEX),
    *(_ep(("POST",), f"/{{index}}/{op}") for op in ("_close", "_open")),
    _ep(("PUT",), "/{index}/_block/{*}"),
    *(_ep(_W, f"/{{index}}/{op}/{{new}}", INDEX) for op in ("_clone", "_split", "_shrink")),
    _ep(("POST",), "/{index}/_rollover", INDEX),
    _ep(("POST",), "/{index}/_rollover/{new}", INDEX),
    *(
        endpoint
        for op in ("_refresh", "_flush", "_forcemerge", "_cache/clear", "_upgrade")
        for endpoint in _views(f"/{{index}}/{op}", f"/{{public}}/{op}", ("GET", "POST"))
    ),
    *(
        endpoint
        for op in ("_segments", "_recovery", "_shard_stores", "_stats", "_mapping", "_settings", "_alias")
        for endpoint in _views(f"/{{index}}/{op}", f"/{{public}}/{op}")
    ),
    *_views("/{index}/_stats/{*}", "/{public}/_stats/{1}"),
    *_views("/{index}/_settings/{*}", "/{public}/_settings/{1}"),
    *_views("/{index}/_mapping/field/{*}", "/{public}/_mapping/field/{2}"),
    *_views("/{index}/_alias/{alias}", "/{public}/_alias/{1}"),
    _ep(_W, "/{index}/_settings"),
    _ep(_W, "/{index}/_mapping"),
    _ep(_W, "/_settings", refused="it would reconfigure every index, memproxy's own among them"),
    _ep(_W, "/_mapping", refused="it would change the mapping of every index, memproxy's own among them"),
    # Aliases: every index and alias name, in the path and in the body.
    _ep(_W, "/{index}/_alias", ALIAS),
    _ep(_W, "/{index}/_aliases", ALIAS),
    _ep((*_W, "DELETE"), "/{index}/_alias/{alias}", ALIAS),
    _ep((*_W, "DELETE", "GET", "HEAD"), "/{index}/_aliases/{alias}", ALIAS),
    _ep(_W, "/_alias", ALIAS),
    _ep(_W, "/_alias/{alias}", ALIAS),
    _ep(_W, "/_aliases/{alias}", ALIAS),
    _ep(("POST",), "/_aliases", ACTIONS),
    _ep(_R, "/_aliases", rewrite="/{public}/_alias"),
    _ep(_R, "/_resolve/index/{index}", view=True),
    # Templates shape indices when they are created: none may match a private name.
    *(
        endpoint
        for kind in ("_index_template", "_template", "_component_template")
        for endpoint in (
            _ep(_R, f"/{kind}"),
            _ep((*_ALL,), f"/{kind}/{{*}}", TEMPLATE),
        )
    ),
    _ep(("POST",), "/_index_template/_simulate", TEMPLATE),
    _ep(("POST",), "/_index_template/_simulate/{*}", TEMPLATE),
    _ep(("POST",), "/_index_template/_simulate_index/{*}", TEMPLATE),
    _ep(_R, "/_data_stream"),
    _ep(_R, "/_data_stream/_stats", view=True),
    _ep(("GET", "HEAD", "DELETE"), "/_data_stream/{index}"),
    _ep(("PUT",), "/_data_stream/{new}"),
    _ep(_R, "/_data_stream/{index}/_stats", view=True),
    _ep(_R, "/_dangling"),
    _ep(_R, "/_remote/info"),
    # Listings: the ones that list indices are views.
    _ep(_R, "/_cat"),
    *(
        endpoint
        for view in ("indices", "count", "shards", "segments", "recovery", "segment_replication")
        for endpoint in _views(f"/_cat/{view}/{{index}}", f"/_cat/{view}/{{public}}")
    ),
    # Aliases: by alias name, so memproxy's own aliases are excluded as a view's indices are.
    *_views("/_cat/aliases/{index}", "/_cat/aliases/{public}"),
    _ep(_R, "/_cat/tasks", tasks=True),
    *(
        _ep(_R, f"/_cat/{view}{tail}")
        for view in (
            "allocation",
            "cluster_manager",
            "master",
            "fielddata",
            "health",
            "nodeattrs",
            "nodes",
            "pending_tasks",
            "plugins",
            "repositories",
            "templates",
            "thread_pool",
        )
        for tail in ("", "/{*}")
    ),
    _ep(_R, "/_list"),
    *(
        endpoint
        for view in ("indices", "shards")
        for endpoint in _views(f"/_list/{view}/{{index}}", f"/_list/{view}/{{public}}")
    ),
    # The cluster and its nodes and tasks.
    *_views("/_cluster/health/{index}", "/_cluster/health"),
    _ep(_R, "/_cluster/state", rewrite="/_cluster/state/_all/{public}"),
    _ep(_R, "/_cluster/state/{*}", rewrite="/_cluster/state/{2}/{public}"),
    _ep(_R, "/_cluster/state/{*}/{index}", view=True),
    _ep(("GET", "PUT"), "/_cluster/settings"),
    _ep(_R, "/_cluster/stats"),
    _ep(_R, "/_cluster/stats/{**}"),
    _ep(_R, "/_cluster/pending_tasks"),
    _ep(_R, "/_nodes", node_level=True),
    _ep(_R, "/_nodes/{**}", node_level=True),
    _ep(_R, "/_tasks", tasks=True),
    _ep(_R, "/_tasks/{*}", tasks=True),
    _ep(("POST",), "/_tasks/_cancel"),
    _ep(("POST",), "/_tasks/{*}/_cancel"),
    # ml-commons outside the memory containers memproxy serves (those use memproxy's own indices).
    _ep(_ALL, "/_plugins/_ml/memory_containers/{**}", refused="memproxy serves the memory containers"),
    _ep(_ALL, "/_plugins/_ml/memory/{**}", refused="memproxy serves the memory containers"),
    _ep(_ALL, "/_plugins/_ml/{**}"),
    # The security plugin's own API acts on its own index, never on memproxy's: forwarded with the caller's
    # own credentials (a GoodMem caller's go nowhere), the cluster decides (authinfo, roles, users).
    _ep(_ALL, "/_plugins/_security/{**}"),
    _ep(_ALL, "/_opendistro/_security/{**}"),
    # k-NN's statistics, and the warm-up of named indices.
    _ep(_R, "/_plugins/_knn/stats"),
    _ep(_R, "/_plugins/_knn/stats/{*}"),
    _ep(_R, "/_plugins/_knn/{*}/stats"),
    _ep(_R, "/_plugins/_knn/{*}/stats/{*}"),
    _ep(_R, "/_plugins/_knn/warmup/{index}"),
    # Known, and not forwarded.
    *(
        _ep(_ALL, f"{prefix}/{{**}}", refused=_UNCHECKABLE)
        for prefix in (
            "/_plugins/_sql",
            "/_plugins/_ppl",
            "/_plugins/_query",
            "/_plugins/_asynchronous_search",
        )
    ),
    _ep(_ALL, "/_snapshot/{**}", refused=_UNCHECKABLE + " (a snapshot copies them, a restore writes them)"),
)


@dataclass(frozen=True)
class Match:
    endpoint: Endpoint
    segments: tuple[str, ...]  # the canonical, decoded path
    names: dict[str, list[str]] = field(default_factory=dict)  # placeholder kind → the segments in it


def canonical_segments(raw_path: str) -> tuple[str, ...]:
    """The decoded path segments OpenSearch will route (``raw_path`` without the query string)."""
    parts = raw_path.split("/")
    if parts[:1] != [""]:
        raise BadRequest("The request path must start with `/`")
    parts = parts[1:]
    if parts[-1:] == [""]:
        parts = parts[:-1]  # a trailing slash: the node routes `/i/_doc/1/` as `/i/_doc/1`
    out = []
    for part in parts:
        try:
            decoded = unquote_to_bytes(part).decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest("The request path is not UTF-8 once percent-decoded") from None
        if decoded in ("", ".", ".."):
            raise BadRequest(
                "memproxy forwards no path with empty, `.` or `..` segments (encoded or not): the node "
                "would not route it as written"
            )
        out.append(decoded)
    return tuple(out)


def encode_path(segments: tuple[str, ...] | list[str]) -> str:
    """The path to forward: every segment percent-encoded on its own, so ``/`` and ``%`` inside a
    segment stay inside it and nothing can be re-normalised on the way."""
    return "/" + "/".join(quote(s, safe="!$&'()*+,;=:@-._~<>{}|") for s in segments)


def _fits(pattern: str, segment: str) -> bool:
    if pattern in ("{index}", "{new}"):
        # Index names never start with `_`; `_all` is the one expression that does.
        return not segment.startswith("_") or (pattern == "{index}" and segment == "_all")
    if pattern in ("{alias}", "{*}"):
        return True
    return pattern == segment


def _match_one(endpoint: Endpoint, segments: tuple[str, ...]) -> dict[str, list[str]] | None:
    pattern = endpoint.pattern
    rest = pattern[-1:] == ("{**}",)
    fixed = pattern[:-1] if rest else pattern
    if len(segments) < len(fixed) + (1 if rest else 0) or (not rest and len(segments) != len(fixed)):
        return None
    names: dict[str, list[str]] = {}
    for p, s in zip(fixed, segments, strict=False):
        if not _fits(p, s):
            return None
        if p in ("{index}", "{new}", "{alias}"):
            names.setdefault(p, []).append(s)
    return names


def _specificity(endpoint: Endpoint) -> tuple[int, ...]:
    # Literal segments win over placeholders, position by position, as in the node's path trie.
    return tuple(0 if p.startswith("{") else 1 for p in endpoint.pattern) + (
        (0,) if endpoint.pattern[-1:] == ("{**}",) else (1,)
    )


_ORDERED = sorted(ENDPOINTS, key=_specificity, reverse=True)


def match(method: str, segments: tuple[str, ...]) -> Match | None:
    """The allowlisted endpoint ``method`` + ``segments`` is (None: not one memproxy forwards)."""
    for endpoint in _ORDERED:
        if method.upper() not in endpoint.methods:
            continue
        names = _match_one(endpoint, segments)
        if names is not None:
            return Match(endpoint, segments, names)
    return None
