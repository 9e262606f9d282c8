"""One check for every Query DSL body, against the allowlist in :mod:`proxy.store.dsl_grammar`.

Memory searches run in indices that several tenants share, scoped by a filter memproxy adds around the
caller's ``query`` (:func:`proxy.store.query_dsl.add_filter`). That scope holds only if nothing in the body
reads documents outside the query: :func:`check_search_body` (a whole ``_search`` body) and
:func:`check_query` (one query clause: a ``_delete_by_query`` query, a semantic-search ``filter``) accept
only what the grammar names, scripts only with ``--allow-scripts`` and never a stored one, and refuse the rest
with a 400 naming it. :func:`refuse_lookups` is the narrower rule for bodies an administrator forwards to the
cluster: any DSL, but no lookup that reads an index the caller may not read.

The walk is iterative (an explicit stack; a path is spelled only for the 400), so a body of any depth costs
neither the interpreter's stack nor quadratic time, and bodies deeper than :data:`MAX_DEPTH` are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from proxy.errors import BadRequest
from proxy.store.dsl_grammar import (
    AGGREGATIONS,
    AGGS,
    CLAUSES,
    DATA,
    NAMED,
    QUERY,
    REFUSED_WHY,
    SCALAR,
    SCRIPT,
    SEARCH_BODY,
    Fields,
    ListOf,
    MapOf,
    Obj,
    OneOrList,
    Refused,
    Schema,
    Scripted,
    Shape,
)

__all__ = ["MAX_DEPTH", "SCRIPTS_REFUSED", "DslRefused", "check_query", "check_search_body", "refuse_lookups"]

# Far above any query a person writes (the JSON reader stops at 64 already), far below the node's own limit.
MAX_DEPTH = 200

SCRIPTS_REFUSED = (
    "Scripts are not allowed in a query sent to memproxy: found [{key}] at [{path}]. A script runs on the "
    "cluster for every document it visits, and memproxy refuses them in caller-supplied Query DSL unless it "
    "is started with --allow-scripts (MEMPROXY_ALLOW_SCRIPTS=true)"
)
FORWARDED = "a request to the cluster"
NOT_LISTED = "it is not on memproxy's allowlist of Query DSL for memory searches (docs/security.md)"

# A path as a linked list: (parent, step); a step is a key or a list position.
Path = tuple[Any, str | int] | None


class DslRefused(BadRequest):
    """A caller's DSL names something the allowlist does not: 400 ``illegal_argument_exception``.
    ``name`` is what was refused (``global``, ``script``, ``indexed_shape``), ``path`` where."""

    def __init__(self, message: str, *, name: str, path: str) -> None:
        super().__init__(message, os_type="illegal_argument_exception")
        self.name = name
        self.path = path


def spell(path: Path) -> str:
    steps: list[str | int] = []
    while path is not None:
        path, step = path
        steps.append(step)
    parts: list[str] = []
    for step in reversed(steps):
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif step != "":
            parts.append(f".{step}" if parts else step)
    where = "".join(parts)
    return where if len(where) <= 200 else "…" + where[-200:]


def _last(path: Path) -> str:
    return str(path[1]) if path is not None else ""


def _refuse(
    name: str, kind: str, path: Path, why: str | None = None, *, context: str = "a memory search"
) -> DslRefused:
    where = spell(path)
    reason = why or REFUSED_WHY.get(name, NOT_LISTED)
    return DslRefused(
        f"[{name}] {kind} is not allowed in {context} (at [{where or name}]): {reason}",
        name=name,
        path=where,
    )


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


class _Checker:
    def __init__(self, allow_scripts: bool) -> None:
        self.allow_scripts = allow_scripts

    def gate(self, path: Path) -> None:
        if not self.allow_scripts:
            key = _last(path)
            raise DslRefused(SCRIPTS_REFUSED.format(key=key, path=spell(path)), name=key, path=spell(path))

    def run(self, value: Any, schema: Schema, path: Path) -> None:
        stack: list[tuple[Any, Schema, Path, int]] = [(value, schema, path, 0)]
        while stack:
            node, kind, at, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise _refuse("depth", "nesting", at, f"a body may nest at most {MAX_DEPTH} levels")
            for child, child_kind, step in self.children(node, kind, at):
                # A step "" re-reads the same value under another schema: the path does not grow.
                stack.append((child, child_kind, (at, step) if step != "" else at, depth + 1))

    def children(self, node: Any, kind: Schema, at: Path) -> Iterator[tuple[Any, Schema, str | int]]:
        """The parts of ``node`` still to check, with their schemas; raises for what ``kind`` refuses."""
        if isinstance(kind, str):
            yield from self.named(node, kind, at)
        elif isinstance(kind, Obj):
            spec = _object(node, at)
            for key, value in spec.items():
                if key not in kind.keys:
                    where = f"option of [{_last(at)}]" if at is not None else "search body key"
                    raise _refuse(str(key), where, (at, key))
                yield value, kind.keys[key], key
            refused = kind.check(spec) if kind.check else None
            if refused:
                raise _refuse(refused[0], f"value of [{_last(at)}]", (at, refused[0]), refused[1])
        elif isinstance(kind, Fields):
            for key, value in _object(node, at).items():
                yield value, kind.extra.get(key, kind.value), key
        elif isinstance(kind, ListOf | OneOrList):
            items = node if isinstance(node, list) else None
            if items is None and isinstance(kind, ListOf):
                raise _refuse(_last(at), "value", at, "an array is expected here")
            if items is None:
                yield node, kind.item, ""
            else:
                yield from ((item, kind.item, i) for i, item in enumerate(items))
        elif isinstance(kind, MapOf):
            yield from ((value, kind.item, key) for key, value in _object(node, at).items())
        elif isinstance(kind, Shape):
            shape = (
                kind.array
                if isinstance(node, list)
                else kind.obj
                if isinstance(node, Mapping)
                else kind.scalar
            )
            if shape is None:
                raise _refuse(_last(at), "value", at, "this kind of JSON value is not accepted here")
            yield node, shape, ""
        elif isinstance(kind, Scripted):
            self.gate(at)
            yield node, kind.inner, ""
        elif isinstance(kind, Refused):
            raise _refuse(kind.what, "lookup", at, kind.why)
        else:  # pragma: no cover - the grammar's own types only
            raise TypeError(f"not a schema: {kind!r}")

    def named(self, node: Any, kind: str, at: Path) -> Iterator[tuple[Any, Schema, str | int]]:
        if kind == DATA:
            return
        if kind == SCALAR:
            if not _is_scalar(node):
                raise _refuse(_last(at), "value", at, "a single value is expected here")
        elif kind == QUERY:
            spec = _object(node, at)
            if len(spec) != 1:
                raise _refuse(_last(at), "query", at, "a query is an object of exactly one clause")
            name, body = next(iter(spec.items()))
            if name not in CLAUSES:
                raise _refuse(str(name), "query", (at, name))
            yield body, CLAUSES[name], name
        elif kind == AGGS:
            yield from ((value, "agg", name) for name, value in _object(node, at).items())
        elif kind == "agg":
            for key, value in _object(node, at).items():
                if key in ("aggs", "aggregations"):
                    yield value, AGGS, key
                elif key == "meta":
                    continue
                elif key in AGGREGATIONS:
                    yield value, AGGREGATIONS[key], key
                else:
                    raise _refuse(str(key), "aggregation", (at, key))
        elif kind == SCRIPT:
            self.gate(at)
            yield node, SCRIPT_VALUE, ""
        else:
            yield node, NAMED[kind], ""


def _stored_script(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    return ("id", "a stored script cannot be checked; send its source") if "id" in spec else None


SCRIPT_VALUE = Shape(
    scalar=SCALAR,
    obj=Obj(
        {"source": DATA, "lang": DATA, "params": DATA, "options": DATA, "id": DATA}, check=_stored_script
    ),
)


def _object(node: Any, at: Path) -> Mapping[str, Any]:
    if not isinstance(node, Mapping):
        raise _refuse(_last(at) or "body", "value", at, "an object is expected here")
    return node


def check_search_body(body: Mapping[str, Any], *, allow_scripts: bool) -> None:
    """Raise :class:`DslRefused` unless every key of the ``_search`` body is on the allowlist. A key whose
    value is ``null`` is read by the node as absent (``"query": null`` searches everything in scope), so
    it is not checked."""
    given = {key: value for key, value in body.items() if value is not None}
    _Checker(allow_scripts).run(given, SEARCH_BODY, None)


def check_query(query: Mapping[str, Any], *, allow_scripts: bool, path: str = "query") -> None:
    """Raise :class:`DslRefused` unless ``query`` (one clause) is on the allowlist."""
    _Checker(allow_scripts).run(query, QUERY, (None, path))


# --- forwarded bodies: lookups only --------------------------------------------------------------------

_LOOKUP_KEYS = (("index", "id"), ("_index", "_id"))


def _lookup_index(parent_key: str, node: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Whether ``node`` (found under ``parent_key``) makes the node fetch a document, and of which index
    (``None``: the searched index itself, which the pass-through already allowed)."""
    if parent_key in ("indexed_shape", "percolate") and ("id" in node or "index" in node):
        return True, node.get("index")
    if parent_key in ("like", "unlike", "") and ("_id" in node or "_index" in node):
        return True, node.get("_index")
    for index_key, id_key in _LOOKUP_KEYS:
        if id_key in node and (index_key in node or "path" in node):
            return True, node.get(index_key)
    return False, None


def refuse_lookups(body: Any, *, may_read: Callable[[str], bool] = lambda _index: False) -> None:
    """Raise :class:`DslRefused` when a forwarded body has a lookup reading an index ``may_read`` refuses.

    A lookup is anything that makes the node fetch a stored document while searching: a terms lookup
    (``{index, id, path}``), ``geo_shape``/``shape`` ``indexed_shape``, ``more_like_this`` ``like``/``unlike``
    documents (``{_index, _id}``), ``percolate`` by ``index``/``id``; any other object naming an index and an
    id is taken as one too, and a ``wrapper`` query (encoded, so unchecked) is refused. A lookup that names no
    index reads the searched index, which the caller was already allowed. Aggregations, scripts and every
    other clause are the administrator's to use."""
    stack: list[tuple[Any, str, Path, int]] = [(body, "", None, 0)]
    while stack:
        node, key, at, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _refuse(
                "depth", "nesting", at, f"a body may nest at most {MAX_DEPTH} levels", context=FORWARDED
            )
        if isinstance(node, list):
            stack.extend((item, key, (at, i), depth + 1) for i, item in enumerate(node))
            continue
        if not isinstance(node, Mapping):
            continue
        if "wrapper" in node and isinstance(node["wrapper"], Mapping):
            raise _refuse("wrapper", "query", (at, "wrapper"), context=FORWARDED)
        found, index = _lookup_index(key, node)
        if found and index is not None and not all(may_read(n) for n in str(index).split(",")):
            why = f"it reads index [{index}], which may not be read through a lookup"
            raise _refuse("lookup", "query", at, why, context=FORWARDED)
        stack.extend((value, str(k), (at, k), depth + 1) for k, value in node.items())
