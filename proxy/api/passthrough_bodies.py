"""The bodies pass-through reads before forwarding: parsed whole, the way the node parses them, into the
names they reach (:class:`Names`), with the lookups a search body may make refused.

Parsing is strict where the node is lenient, so nothing is read two ways: duplicate keys are refused
(the node refuses them too), an NDJSON body is split on ``\\n`` only (the node's one separator) and may
have no blank line inside (the node takes a blank line for a source: everything after it would shift by
one), a ``_bulk`` action line is exactly one of ``index``/``create``/``update``/``delete`` with the
metadata keys the node knows, and the line after an ``index``/``create``/``update`` action is its
source, whatever it looks like.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from proxy.api import passthrough_routes as kinds
from proxy.errors import BadRequest, Forbidden
from proxy.store.dsl_policy import refuse_lookups

__all__ = ["Names", "lookup_indices", "names_in"]

_BULK_ACTIONS = frozenset({"index", "create", "update", "delete"})
# BulkRequestParser's metadata keys; anything else is a 400 there, and here.
_BULK_META = frozenset(
    {
        "_index",
        "_type",
        "_id",
        "routing",
        "_routing",
        "op_type",
        "version",
        "version_type",
        "if_seq_no",
        "if_primary_term",
        "retry_on_conflict",
        "pipeline",
        "_source",
        "require_alias",
    }
)
_MSEARCH_INDEX_KEYS = ("index", "indices")


@dataclass
class Names:
    """What a body reaches: index expressions it reads or writes, indices it creates, alias names."""

    indices: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)
    searches: list[Any] = field(default_factory=list)  # search-like bodies, for the lookup rules

    def add_indices(self, value: Any, fallback: str | None) -> None:
        """``value``: a name, a comma list or a JSON list (absent: ``fallback``, the path's index; with
        neither the node answers its own 400)."""
        if isinstance(value, list):
            self.indices.extend(str(v) for v in value)
        elif value not in (None, ""):
            self.indices.append(str(value))
        elif fallback is not None:
            self.indices.append(fallback)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BadRequest(f"Duplicate field [{key}] in the request body")
        out[key] = value
    return out


def _json(text: bytes | str, what: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest(f"The request body is not {what}") from None


def parse_body(raw: bytes) -> Any:
    return _json(raw, "JSON") if raw.strip() else {}


def parse_lines(raw: bytes) -> list[Any]:
    lines = raw.split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()  # the final newline (and trailing blank lines, which the node skips too)
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            raise BadRequest(f"Line [{n}] of the request body is blank: send no blank line between lines")
        out.append(_json(line, f"newline-delimited JSON (line [{n}])"))
    return out


def _bulk(lines: list[Any], default: str | None, names: Names) -> None:
    n = 0
    while n < len(lines):
        line = lines[n]
        if not isinstance(line, dict) or len(line) != 1 or next(iter(line)) not in _BULK_ACTIONS:
            raise BadRequest(
                f"Malformed action/metadata line [{n + 1}], expected exactly one of "
                "[create, delete, index, update]"
            )
        ((action, meta),) = line.items()
        if not isinstance(meta, dict):
            raise BadRequest(f"Malformed action/metadata line [{n + 1}], expected an object")
        unknown = sorted(set(meta) - _BULK_META)
        if unknown:
            raise BadRequest(f"Action/metadata line [{n + 1}] contains an unknown parameter [{unknown[0]}]")
        names.add_indices(meta.get("_index"), default)
        n += 1 if action == "delete" else 2  # the source line is whatever follows, by position


def _msearch(lines: list[Any], default: str | None, names: Names) -> None:
    if len(lines) % 2:
        raise BadRequest("A multi-search body is header and body lines in pairs")
    for n in range(0, len(lines), 2):
        header = lines[n]
        if not isinstance(header, dict):
            raise BadRequest(f"Line [{n + 1}] of the multi-search body is not a header object")
        given = [header[k] for k in _MSEARCH_INDEX_KEYS if header.get(k) not in (None, "", [])]
        for value in given:
            names.add_indices(value, None)
        if not given:
            names.add_indices(None, default or "_all")
        names.searches.append(lines[n + 1])


def _docs(body: dict[str, Any], default: str | None, names: Names) -> None:
    docs = body.get("docs")
    for doc in docs if isinstance(docs, list) else ():
        names.add_indices(doc.get("_index") if isinstance(doc, dict) else None, default or "_all")
    if not docs:
        names.add_indices(None, default or "_all")


def _reindex(body: dict[str, Any], names: Names) -> None:
    source, dest = body.get("source"), body.get("dest")
    source = source if isinstance(source, dict) else {}
    dest = dest if isinstance(dest, dict) else {}
    if "remote" in source:
        raise Forbidden(
            "memproxy does not forward a reindex from a remote cluster", os_type="security_exception"
        )
    names.add_indices(source.get("index"), "_all")
    names.add_indices(dest.get("index"), "_all")
    names.searches.append(source)
    _no_index_rewrite(body.get("script"), "a reindex script")


def _no_index_rewrite(value: Any, what: str) -> None:
    """A script or processor that sets ``_index`` sends documents to an index named nowhere else."""
    if value is not None and "_index" in json.dumps(value):
        raise Forbidden(f"memproxy does not forward {what} that names `_index`", os_type="security_exception")


def _alias_spec(spec: dict[str, Any], default: str | None, names: Names, *, adds: bool = True) -> None:
    """One alias action's names; ``adds``: it creates the alias (a removal may name any alias, wildcards
    included: it only acts on the indices it names, which are checked)."""
    for key in ("index", "indices"):
        names.add_indices(spec.get(key), None)
    if default is not None and not any(spec.get(k) for k in ("index", "indices")):
        names.add_indices(default, None)
    for key in ("alias", "aliases") if adds else ():
        value = spec.get(key)
        names.aliases.extend(str(v) for v in (value if isinstance(value, list) else [value]) if v)
    if "filter" in spec:
        names.searches.append({"query": spec["filter"]})


def _actions(body: dict[str, Any], names: Names) -> None:
    actions = body.get("actions")
    for action in actions if isinstance(actions, list) else ():
        for verb, spec in action.items() if isinstance(action, dict) else ():
            if isinstance(spec, dict):
                _alias_spec(spec, None, names, adds=verb == "add")


def _index_body(body: dict[str, Any], names: Names) -> None:
    """Create / clone / split / shrink / rollover: the aliases the new index gets."""
    aliases = body.get("aliases")
    if isinstance(aliases, dict):
        names.aliases.extend(str(a) for a in aliases)
        names.searches.extend(
            {"query": a["filter"]} for a in aliases.values() if isinstance(a, dict) and "filter" in a
        )


def _template(body: dict[str, Any], names: Names) -> None:
    patterns = body.get(
        "index_patterns", body.get("template") if isinstance(body.get("template"), str) else None
    )
    names.new.extend(str(p) for p in (patterns if isinstance(patterns, list) else [patterns]) if p)
    template = body.get("template")
    _index_body(template if isinstance(template, dict) else body, names)


def names_in(kind: str, raw: bytes, default: str | None, *, adds: bool = True) -> Names:
    """Parse a body of ``kind`` (a :mod:`proxy.api.passthrough_routes` body kind); ``default``: the
    path's index expression, used by lines and documents that name none."""
    names = Names()
    if kind == kinds.BULK:
        _bulk(parse_lines(raw), default, names)
        return names
    if kind == kinds.MSEARCH:
        _msearch(parse_lines(raw), default, names)
        return names
    body = parse_body(raw)
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object")
    if kind == kinds.DOCS:
        _docs(body, default, names)
    elif kind == kinds.REINDEX:
        _reindex(body, names)
    elif kind == kinds.ACTIONS:
        _actions(body, names)
    elif kind == kinds.ALIAS:
        _alias_spec(body, default, names, adds=adds)
    elif kind == kinds.INDEX:
        _index_body(body, names)
    elif kind == kinds.TEMPLATE:
        _template(body, names)
    elif kind == kinds.PIPELINE:
        _no_index_rewrite(body, "an ingest pipeline")
    elif kind == kinds.PAINLESS:
        setup = body.get("context_setup")
        names.add_indices(setup.get("index") if isinstance(setup, dict) else None, None)
    else:  # SEARCH
        names.searches.append(body)
    return names


# ---- The lookup rules for forwarded search bodies -------------------------------------------------
# A lookup makes the node fetch a document by index and id while it runs the query, and its value can come
# back (in hits or in an error); it would read memproxy's own indices whatever the path named. The rule is
# the DSL validator's (proxy.store.dsl_policy.refuse_lookups); what only forwarded bodies have is a search
# template, whose query may come as a string.


def _template_sources(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, child in value.items():
            if key == "source" and isinstance(child, str):
                yield child
            else:
                yield from _template_sources(child)
    elif isinstance(value, list):
        for child in value:
            yield from _template_sources(child)


# Words of the lookups in a mustache template that is not JSON until it is rendered, so cannot be parsed.
_LOOKUP_WORDS = ("indexed_shape", "indexedShape", "percolate", "more_like_this", "mlt")


def lookup_indices(body: Any) -> list[str]:
    """The index expressions the lookups of a forwarded body read, to be checked as the path's are (an
    administrator may look up their own indices, never memproxy's). A ``wrapper`` query (encoded, so
    unchecked) is refused (400), and so is a template's ``source`` that is not JSON and mentions a lookup;
    one that is JSON is read like the body."""
    named: list[str] = []

    def record(index: str) -> bool:
        named.append(index)
        return True

    refuse_lookups(body, may_read=record)
    for source in _template_sources(body):
        try:
            template = json.loads(source)
        except ValueError:
            if any(word in source for word in _LOOKUP_WORDS) or ('"terms"' in source and '"index"' in source):
                raise BadRequest(
                    "memproxy does not forward a search template that cannot be read as JSON and mentions a "
                    "lookup: it could read a document of an index the request does not name"
                ) from None
            continue
        named.extend(lookup_indices(template))
    return named
