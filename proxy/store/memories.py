"""Document calls on any index memproxy owns: the general document contract of the store.

Every function takes the store and an index name (the memory indices, the container index, GoodMem's), builds
its path with :func:`proxy.store.client.url` and its body here or in :mod:`proxy.store.query_dsl`, and
returns the node's own answer, which ml-commons relays verbatim for most of its routes. The contract, for
every caller:

* a missing **document** is an answer, not an error: :func:`get_doc` gives ``None``, :func:`delete_doc` the
  node's ``"result": "not_found"`` answer;
* a missing **index** raises :class:`proxy.store.client.IndexMissing` (a ``NotFound``) wherever the node does
  not create one (reads, deletes, searches), so a caller that treats it as empty says so with
  ``except IndexMissing``; ``delete_by_query(..., ignore_missing=True)`` asks the node to skip it instead;
* a write that loses a race (``create`` on an existing id, a stale ``if_seq_no``) raises
  :class:`proxy.store.client.NodeConflict` (a ``Conflict``);
* any other node error is the typed :class:`proxy.store.client.OpenSearchError` of its status.

``routing`` (a container id, or several for a search) is the container the call stays within: the store
sends it as the node's ``routing`` where the index takes it (:mod:`proxy.store.layout`), so a container's
calls touch one shard; answers never show ``_routing``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from proxy.store.client import IndexMissing, NodeConflict, NodeNotFound, Store, url
from proxy.store.encoding import compact_json
from proxy.store.layout import CONTAINER_FIELD, strip_routing
from proxy.store.query import Filter
from proxy.store.query_dsl import compile_filter, container_term

__all__ = [
    "BulkOp",
    "bulk",
    "count",
    "delete_by_query",
    "delete_by_query_deadline",
    "delete_doc",
    "get_doc",
    "index_doc",
    "matching_ids",
    "search",
    "search_deadline",
    "update_doc",
]


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def search_deadline(store: Store) -> dict[str, str]:
    """The parameters every search memproxy sends carries (``--search-timeout-s``): ``timeout`` (the node
    stops collecting and answers what it has, ``timed_out: true``) and ``cancel_after_time_interval`` (the
    node cancels the search task, so nothing keeps running after memproxy has answered). Empty when the
    setting is 0."""
    seconds = store.settings.search_timeout_s
    if not seconds or seconds <= 0:
        return {}
    value = _duration(float(seconds))
    return {"timeout": value, "cancel_after_time_interval": value}


def delete_by_query_deadline(store: Store) -> dict[str, str]:
    """``_delete_by_query`` takes no ``cancel_after_time_interval``; its scroll searches get
    ``search_timeout`` instead."""
    seconds = store.settings.search_timeout_s
    return {"search_timeout": _duration(float(seconds))} if seconds and seconds > 0 else {}


def _refresh(refresh: bool | str) -> str:
    if isinstance(refresh, str):
        return refresh
    return "true" if refresh else "false"


async def _routing(store: Store, index: str, routing: str | Iterable[str] | None) -> dict[str, str]:
    return await store.layouts.params(index, routing) if routing is not None else {}


async def index_doc(
    store: Store,
    index: str,
    doc: Mapping[str, Any],
    *,
    routing: str | None = None,
    doc_id: str | None = None,
    create: bool = False,
    refresh: bool | str = True,
    if_seq_no: int | None = None,
    if_primary_term: int | None = None,
) -> dict[str, Any]:
    """Write ``doc`` (a new id when ``doc_id`` is ``None``); the node's index answer (``_id``, ``_seq_no``…).

    ``create`` refuses to replace an existing ``doc_id`` and ``if_seq_no``/``if_primary_term`` a changed one,
    both with ``NodeConflict``. ``routing`` defaults to the document's container.
    """
    container = doc.get(CONTAINER_FIELD)
    params: dict[str, Any] = {"refresh": _refresh(refresh)}
    params.update(
        await _routing(store, index, routing or (container if isinstance(container, str) else None))
    )
    if create and doc_id is not None:
        params["op_type"] = "create"
    if if_seq_no is not None and if_primary_term is not None:
        params["if_seq_no"] = if_seq_no
        params["if_primary_term"] = if_primary_term
    if doc_id is None:
        try:
            result: dict[str, Any] = await store.request(
                "POST", url(index, "_doc"), body=dict(doc), params=params
            )
        except NodeConflict as exc:
            result = await _own_auto_id_write(store, index, exc, refresh)
    else:
        result = await store.request("PUT", url(index, "_doc", doc_id), body=dict(doc), params=params)
    return strip_routing(result)


_AUTO_ID_EXISTS = re.compile(r"^\[([^\]]+)\]: version conflict, document already exists")


async def _own_auto_id_write(
    store: Store, index: str, exc: NodeConflict, refresh: bool | str
) -> dict[str, Any]:
    """The answer to a write without an id that the node refused as "already exists". The node chose the
    id, so only this very write can hold it: an attempt of it that the cluster retried inside itself while
    a node went away (a primary that failed over under it) was carried out already. That is a success, and
    its id is in the refusal; anything else is the conflict it says it is."""
    reason = exc.body.get("reason") if isinstance(exc.body, Mapping) else None
    found = _AUTO_ID_EXISTS.match(reason) if isinstance(reason, str) else None
    if found is None or exc.os_type != "version_conflict_engine_exception":
        raise exc
    if _refresh(refresh) != "false":
        await store.request("POST", url(index, "_refresh"))
    return {"_index": index, "_id": found.group(1), "result": "created"}


async def get_doc(
    store: Store, index: str, doc_id: str, *, routing: str | None = None
) -> dict[str, Any] | None:
    """The node's GET answer (``_source``, ``_seq_no``, ``_primary_term``), or ``None`` when the document is
    absent; ``IndexMissing`` when the index is."""
    params = await _routing(store, index, routing)
    try:
        result: dict[str, Any] = strip_routing(
            await store.request("GET", url(index, "_doc", doc_id), params=params or None)
        )
    except IndexMissing:
        raise
    except NodeNotFound:
        return None
    return result if result.get("found") else None


async def update_doc(
    store: Store,
    index: str,
    doc_id: str,
    fields: Mapping[str, Any],
    *,
    upsert: Mapping[str, Any] | None = None,
    refresh: bool | str = True,
    routing: str | None = None,
) -> dict[str, Any]:
    """Set ``fields`` on a stored document; ``upsert`` is written instead when there is none (else a missing
    document is ``NodeNotFound``). The node's update answer."""
    body: dict[str, Any] = {"doc": dict(fields)}
    if upsert is not None:
        body["upsert"] = dict(upsert)
        container = upsert.get(CONTAINER_FIELD)
        routing = routing or (container if isinstance(container, str) else None)
    params = {"refresh": _refresh(refresh), **await _routing(store, index, routing)}
    result: dict[str, Any] = await store.request(
        "POST", url(index, "_update", doc_id), body=body, params=params
    )
    return strip_routing(result)


async def delete_doc(
    store: Store, index: str, doc_id: str, *, refresh: bool | str = False, routing: str | None = None
) -> dict[str, Any]:
    """The node's delete answer; a document gone already gives the node's ``"result": "not_found"`` answer."""
    params = {"refresh": _refresh(refresh), **await _routing(store, index, routing)}
    try:
        result: dict[str, Any] = strip_routing(
            await store.request("DELETE", url(index, "_doc", doc_id), params=params)
        )
    except NodeNotFound as exc:
        if isinstance(exc.body, dict) and exc.body.get("result") == "not_found":
            return dict(strip_routing(exc.body))
        raise
    return result


BulkOp = tuple[str, str, str | None, Mapping[str, Any] | None]
"""(action, index, id, document): action is ``index``, ``create`` or ``delete``; a delete's document, if
given, is not sent: its container routes the delete."""


def _bulk_lines(ops: Iterable[BulkOp], routed: Mapping[str, bool], routing: str | None) -> str:
    lines: list[str] = []
    for action, index, doc_id, doc in ops:
        meta: dict[str, Any] = {"_index": index}
        if doc_id is not None:
            meta["_id"] = doc_id
        container = (doc or {}).get(CONTAINER_FIELD)
        item_routing = container if isinstance(container, str) and container else routing
        if item_routing and "," not in item_routing and routed.get(index):
            meta["routing"] = item_routing
        lines.append(compact_json({action: meta}))
        if action != "delete":
            lines.append(compact_json(doc))
    return "\n".join(lines) + "\n"


async def bulk(
    store: Store, ops: Iterable[BulkOp], *, refresh: bool | str = True, routing: str | None = None
) -> dict[str, Any]:
    """One ``_bulk``; the node's answer: ``items`` say what each operation did, ``errors`` if any failed.
    Each item is routed by its document's container, else by ``routing`` (a delete has no document)."""
    ops = list(ops)
    routed = {index: await store.layouts.routed(index) for index in {op[1] for op in ops}}
    result: dict[str, Any] = await store.request(
        "POST", url("_bulk"), body=_bulk_lines(ops, routed, routing), params={"refresh": _refresh(refresh)}
    )
    return result


async def search(
    store: Store,
    index: str,
    body: Mapping[str, Any],
    *,
    params: Mapping[str, Any] | None = None,
    routing: str | Iterable[str] | None = None,
) -> dict[str, Any]:
    """One ``_search`` of ``index`` (an index expression: a name, a pattern, a comma-separated list) with a
    body the store built (:mod:`proxy.store.query_dsl`); the node's answer. Every search memproxy sends goes
    through here and carries :func:`search_deadline`: ``timeout`` in the body (opensearch-py would take a
    ``timeout`` parameter for its own), ``cancel_after_time_interval`` as a parameter; a caller's own body
    ``timeout`` is replaced. :mod:`proxy.store.search` runs the searches of the core."""
    deadline = search_deadline(store)
    sent = dict(body)
    if "timeout" in deadline:
        sent["timeout"] = deadline["timeout"]
    query = {**(params or {}), **await _routing(store, index, routing)}
    if "cancel_after_time_interval" in deadline:
        query["cancel_after_time_interval"] = deadline["cancel_after_time_interval"]
    result: dict[str, Any] = await store.request("POST", url(index, "_search"), body=sent, params=query)
    return strip_routing(result)


async def count(
    store: Store,
    index: str,
    selection: Filter,
    *,
    routing: str | Iterable[str] | None = None,
    ignore_missing: bool = False,
) -> int:
    """How many documents of ``index`` match ``selection`` (``ignore_missing``: a missing index counts 0)."""
    query = compile_filter(selection) or {"match_all": {}}
    params = await _routing(store, index, routing)
    if ignore_missing:
        params = {**params, "ignore_unavailable": "true", "allow_no_indices": "true"}
    result = await store.request("POST", url(index, "_count"), body={"query": query}, params=params or None)
    return int(result.get("count", 0))


async def matching_ids(
    store: Store,
    index: str,
    selection: Filter,
    *,
    size: int,
    routing: str | Iterable[str] | None = None,
    fields: tuple[str, ...] = (),
) -> list[tuple[str, dict[str, Any]]]:
    """Up to ``size`` documents ``selection`` matches, as (id, the ``fields`` of its source), in no defined
    order; none when the index is missing. For loops that delete what they found and ask again (so no
    page token is needed: a round never sees what an earlier one deleted)."""
    body: dict[str, Any] = {
        "size": size,
        "query": compile_filter(selection) or {"match_all": {}},
        "_source": list(fields) if fields else False,
        "track_total_hits": False,
    }
    params = {"ignore_unavailable": "true", "allow_no_indices": "true"}
    try:
        result = await search(store, index, body, params=params, routing=routing)
    except IndexMissing:
        return []
    return [(str(h["_id"]), dict(h.get("_source") or {})) for h in result.get("hits", {}).get("hits", [])]


async def delete_by_query(
    store: Store,
    index: str,
    selection: Filter,
    *,
    container_id: str | None = None,
    routing: Iterable[str] | None = None,
    refresh: bool = True,
    ignore_missing: bool = False,
) -> dict[str, Any]:
    """Delete the documents ``selection`` matches (within one container when ``container_id`` is given); the
    node's answer (``deleted``, ``failures``…). ``routing``: the containers a ``selection`` that scopes
    several containers itself stays within (routing only; the scope is the selection's).

    The node's reindex module runs it natively; ``conflicts=proceed``: a concurrent update does not abort it.
    ``ignore_missing`` makes a missing index delete nothing instead of raising ``IndexMissing``.
    """
    query = compile_filter(selection) or {"match_all": {}}
    if container_id is not None:
        query = {"bool": {"must": [query], "filter": [container_term(container_id)]}}
    params = {"refresh": _refresh(refresh), "conflicts": "proceed", **delete_by_query_deadline(store)}
    params.update(await _routing(store, index, container_id if container_id is not None else routing))
    if ignore_missing:
        params.update({"ignore_unavailable": "true", "allow_no_indices": "true"})
    result: dict[str, Any] = await store.request(
        "POST", url(index, "_delete_by_query"), body={"query": query}, params=params
    )
    return result
