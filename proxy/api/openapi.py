"""``GET /_memproxy/openapi.json``: the OpenAPI 3.1 document of every API memproxy serves, generated.

Each slice declares its operations next to its routes (``proxy/api/<slice>/schema.py``): a table from
(method, OpenAPI path) to an :class:`Operation` naming the pydantic models of its query, body and answers.
The document is built from those tables and ``app.router``: only routes that exist are described (a table
entry without a route is a bug the tests catch), and a route that no table declares is listed under
``x-memproxy-undeclared`` rather than silently left out. The pass-through catch-all, the slices' own
fallbacks (``*`` routes) and aiohttp's automatic ``HEAD`` routes are not operations of their own.

Request bodies are described by ``model_json_schema(mode="validation")``, answers by ``mode="serialization"``;
every error status is answered in its API's error shape (proxy.api.errors).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from proxy import __version__

__all__ = [
    "MEMPROXY_API",
    "PATH",
    "Api",
    "OpenSearchError",
    "Operation",
    "Raw",
    "build_document",
    "route_paths",
    "routes_for",
    "served_routes",
    "undeclared_routes",
]

PATH = "/_memproxy/openapi.json"

Key = tuple[str, str]  # (METHOD, OpenAPI path)


@dataclass(frozen=True)
class Raw:
    """An answer that is not one JSON model: its media types, each with a JSON schema (``{}``: any body)."""

    content: Mapping[str, Mapping[str, Any]]
    description: str = ""


Answer = type[BaseModel] | Raw | None  # None: no body (204)


@dataclass(frozen=True)
class Operation:
    summary: str
    # Status → the model of the answer; every API error status is added from the API's table.
    responses: Mapping[int, Answer]
    body: type[BaseModel] | None = None
    body_required: bool = True
    # Other request media types than JSON (multipart upload), each with its schema.
    body_other: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The query parameters: each field of the model (by its alias) is one parameter.
    query: type[BaseModel] | None = None
    # Extra request headers: name → schema.
    headers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Schemas of path parameters other than a non-empty string.
    path_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    public: bool = False  # no credential needed (identity.PUBLIC_ROUTES)
    description: str = ""


@dataclass(frozen=True)
class Api:
    """One API's operations, with its tag, error model and the error statuses every operation may answer."""

    tag: str
    error: type[BaseModel]
    error_statuses: tuple[int, ...]
    operations: Mapping[Key, Operation]


class OpenSearchError(BaseModel):
    """OpenSearch's error envelope (every path outside ``/v1/`` and ``/openai/``): ``error`` is an object with
    ``type`` and ``reason`` (and ``root_cause``), or a sentence for the REST router's own refusals; the
    router leaves ``status`` out of a few of those."""

    model_config = ConfigDict(extra="allow")
    error: dict[str, Any] | str
    status: int | None = None


class Health(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: Literal["ok", "degraded", "draining"]
    proxy: dict[str, Any]
    cluster: dict[str, Any]
    jobs: dict[str, Any]
    settings: dict[str, Any]


class Document(BaseModel):
    """An OpenAPI 3.1 document."""

    model_config = ConfigDict(extra="allow")
    openapi: str
    info: dict[str, Any]
    paths: dict[str, Any]


MEMPROXY_API = Api(
    tag="memproxy",
    error=OpenSearchError,
    error_statuses=(400, 503),
    operations={
        ("GET", "/_memproxy/health"): Operation(
            "The proxy's state and the cluster's (503 while this process is stopping)",
            {200: Health, 503: Health},
            public=True,
        ),
        ("GET", PATH): Operation("This document", {200: Document}, public=True),
        ("GET", "/metrics"): Operation(
            "Prometheus metrics (administrators; --metrics-public opens it to anyone)",
            {
                200: Raw({"text/plain": {"type": "string"}}, "The Prometheus text exposition format"),
                401: OpenSearchError,
                403: OpenSearchError,
            },
        ),
    },
)


# --- the router ------------------------------------------------------------------------------------------

# A path parameter restricted to literal alternatives, ``{kind:rerankers|llms}``, in the compiled pattern.
_ALTERNATION = re.compile(r"\(\?P<(\w+)>((?:[\w-]+\|)+[\w-]+)\)")


def route_paths(resource: web.AbstractResource) -> list[str]:
    """The OpenAPI paths of one aiohttp resource: its canonical path, with each parameter limited to literal
    alternatives expanded into one path per alternative (OpenAPI paths have no regular expressions)."""
    canonical = resource.canonical
    info = resource.get_info()
    pattern = info.get("pattern")
    if pattern is None:
        return [canonical]
    paths = [canonical]
    for name, alternatives in _ALTERNATION.findall(pattern.pattern):
        paths = [p.replace("{" + name + "}", alt) for p in paths for alt in alternatives.split("|")]
    return paths


# The inspection console's pages are HTML for people, not an API.
_NOT_API = ("/_memproxy/console",)
# The node's own API, which memproxy forwards and only amends (proxy.api.cluster_settings keeps the ml-commons
# retention settings): like the pass-through catch-all, not an operation of memproxy's documents.
_NODE_API = ("/_cluster/settings",)


def served_routes(app: web.Application) -> Iterator[Key]:
    """The (method, OpenAPI path) of every API route the router serves."""
    for route in app.router.routes():
        method, resource = route.method.upper(), route.resource
        if method in ("*", "HEAD") or resource is None or "{tail}" in resource.canonical:
            continue
        if resource.canonical.startswith(_NOT_API) or resource.canonical in _NODE_API:
            continue
        for path in route_paths(resource):
            yield method, path


def undeclared_routes(app: web.Application, apis: Sequence[Api]) -> list[Key]:
    """The served (method, path) pairs no API's table declares, in router order."""
    declared = {key for api in apis for key in api.operations}
    return [key for key in dict.fromkeys(served_routes(app)) if key not in declared]


# --- the document ----------------------------------------------------------------------------------------

_SECURITY_SCHEMES = {
    "apiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
        "description": "A GoodMem API key (POST /v1/system/init answers the root key once).",
    },
    "bearer": {"type": "http", "scheme": "bearer", "description": "A GoodMem API key as a bearer token."},
    "basic": {
        "type": "http",
        "scheme": "basic",
        "description": "A GoodMem API key as the password (any user name), or the cluster's own credentials "
        "when it runs the security plugin.",
    },
}
_SECURITY: list[dict[str, list[str]]] = [{"apiKey": []}, {"bearer": []}, {"basic": []}]

_REASONS = {
    200: "OK",
    201: "Created",
    204: "No content",
    207: "Some items failed",
    400: "Bad request",
    401: "No usable credential",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Payload too large",
    415: "Unsupported media type",
    429: "Too many requests",
    499: "Client closed the request",
    500: "Internal error",
    502: "Bad gateway",
    503: "Unavailable",
    504: "Deadline exceeded",
}


class _Components:
    """Every model the document names, in the mode it is named in, rendered once into
    ``components.schemas``; until then a reference is a placeholder holding the model's index."""

    def __init__(self) -> None:
        self._models: dict[tuple[type[BaseModel], JsonSchemaMode], int] = {}

    def ref(self, model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
        index = self._models.setdefault((model, mode), len(self._models))
        return {_PLACEHOLDER: index}

    def render(self, node: Any) -> tuple[Any, dict[str, Any]]:
        """``node`` with every placeholder replaced by its ``$ref``, and the schemas they refer to."""
        keys, top = models_json_schema(
            list(self._models), ref_template="#/components/schemas/{model}", by_alias=True
        )
        refs = {index: keys[key]["$ref"] for key, index in self._models.items()}

        def fix(value: Any) -> Any:
            if isinstance(value, dict):
                if _PLACEHOLDER in value:
                    return {"$ref": refs[value[_PLACEHOLDER]]}
                return {k: fix(v) for k, v in value.items()}
            if isinstance(value, list):
                return [fix(v) for v in value]
            return value

        return fix(node), top.get("$defs", {})


_PLACEHOLDER = "x-memproxy-model"


def _parameters(path: str, op: Operation, components: _Components) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in re.findall(r"\{(\w+)\}", path):
        schema = dict(op.path_params.get(name, {"type": "string", "minLength": 1}))
        out.append({"name": name, "in": "path", "required": True, "schema": schema})
    if op.query is not None:
        query = op.query.model_json_schema(by_alias=True, mode="validation")
        required = set(query.get("required", ()))
        for name, prop in query.get("properties", {}).items():
            prop = {k: v for k, v in prop.items() if k not in ("title", "default")}
            description = prop.pop("description", None)
            param: dict[str, Any] = {
                "name": name,
                "in": "query",
                "required": name in required,
                "schema": prop,
            }
            if description:
                param["description"] = description
            out.append(param)
    for name, header in op.headers.items():
        out.append({"name": name, "in": "header", "required": False, "schema": dict(header)})
    return out


def _response(status: int, answer: Answer, components: _Components) -> dict[str, Any]:
    if isinstance(answer, Raw):
        content = {media: {"schema": dict(schema)} for media, schema in answer.content.items()}
        return {"description": answer.description or _REASONS.get(status, str(status)), "content": content}
    out: dict[str, Any] = {"description": _REASONS.get(status, str(status))}
    if answer is not None:
        out["content"] = {"application/json": {"schema": components.ref(answer, "serialization")}}
    return out


def _operation(method: str, path: str, api: Api, op: Operation, components: _Components) -> dict[str, Any]:
    operation_id = re.sub(r"[^A-Za-z0-9]+", "_", f"{method.lower()}{path}").strip("_")
    out: dict[str, Any] = {"tags": [api.tag], "summary": op.summary, "operationId": operation_id}
    if op.description:
        out["description"] = op.description
    parameters = _parameters(path, op, components)
    if parameters:
        out["parameters"] = parameters
    if op.body is not None or op.body_other:
        content: dict[str, Any] = {}
        if op.body is not None:
            content["application/json"] = {"schema": components.ref(op.body, "validation")}
        for media, schema in op.body_other.items():
            content[media] = {"schema": dict(schema)}
        out["requestBody"] = {"required": op.body_required, "content": content}
    responses = {str(s): _response(s, a, components) for s, a in sorted(op.responses.items())}
    for status in api.error_statuses:
        if op.public and status in (401, 403):
            continue
        responses.setdefault(str(status), _response(status, api.error, components))
    out["responses"] = responses
    if op.public:
        out["security"] = []
    return out


def build_document(app: web.Application, apis: Sequence[Api]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``app``: every declared operation that the router serves."""
    served = set(served_routes(app))
    components = _Components()
    paths: dict[str, dict[str, Any]] = {}
    for api in apis:
        for (method, path), op in api.operations.items():
            if (method, path) not in served:
                continue  # declared but not mounted (tests/test_openapi.py says which)
            paths.setdefault(path, {})[method.lower()] = _operation(method, path, api, op, components)
    rendered_paths, schemas = components.render(dict(sorted(paths.items())))
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "memproxy",
            "version": __version__,
            "description": "The ml-commons agentic-memory API and the GoodMem API over one OpenSearch store. "
            "Generated from memproxy's wire models.",
        },
        "tags": [{"name": api.tag} for api in apis],
        "paths": rendered_paths,
        "components": {"schemas": schemas, "securitySchemes": _SECURITY_SCHEMES},
        "security": _SECURITY,
        "x-memproxy-undeclared": [f"{m} {p}" for m, p in undeclared_routes(app, apis)],
    }
    return document


def routes_for(apis: Iterable[Api]) -> web.RouteTableDef:
    """The route of the document, built from the router as it is when asked (every route is in it by then)."""
    tables = list(apis)
    routes = web.RouteTableDef()

    @routes.get(PATH)
    async def openapi(request: web.Request) -> web.Response:
        return web.json_response(build_document(request.app, tables))

    return routes
