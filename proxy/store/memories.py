"""Document-level calls on memory indices (and the container index): index, get, delete, bulk, search.

Every helper returns the node's own response (ml-commons relays most of them verbatim) and raises
:class:`proxy.store.client.OpenSearchError` for node errors; "missing" answers come back as ``None``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from proxy.store.client import OpenSearchError, Store

__all__ = [
    "BulkOp",
    "bulk",
    "delete_by_query",
    "delete_doc",
    "error_type",
    "get_doc",
    "index_doc",
    "is_index_missing",
    "search",
]


def _p(part: str) -> str:
    return quote(part, safe="")


def error_type(exc: OpenSearchError) -> str | None:
    return exc.body.get("type") if isinstance(exc.body, dict) else None


def is_index_missing(exc: OpenSearchError) -> bool:
    return exc.status == 404 and error_type(exc) == "index_not_found_exception"


def _refresh(refresh: bool | str) -> str:
    if isinstance(refresh, str):
        return refresh
    return "true" if refresh else "false"


async def index_doc(
    store: Store,
    index: str,
    doc: Mapping[str, Any],
    *,
    doc_id: str | None = None,
    create: bool = False,
    refresh: bool | str = True,
    if_seq_no: int | None = None,
    if_primary_term: int | None = None,
) -> dict[str, Any]:
    params: dict[str, Any] = {"refresh": _refresh(refresh)}
    if create and doc_id is not None:
        params["op_type"] = "create"
    if if_seq_no is not None and if_primary_term is not None:
        params["if_seq_no"] = if_seq_no
        params["if_primary_term"] = if_primary_term
    if doc_id is None:
        path = f"/{_p(index)}/_doc"
        method = "POST"
    else:
        path = f"/{_p(index)}/_doc/{_p(doc_id)}"
        method = "PUT"
    result: dict[str, Any] = await store.request(method, path, body=dict(doc), params=params)
    return result


async def get_doc(store: Store, index: str, doc_id: str) -> dict[str, Any] | None:
    """The node's GET response (``_source``, ``_seq_no``, ``_primary_term``), or ``None`` when absent."""
    try:
        result: dict[str, Any] = await store.request("GET", f"/{_p(index)}/_doc/{_p(doc_id)}")
    except OpenSearchError as exc:
        if exc.status == 404:
            return None
        raise
    return result if result.get("found") else None


async def delete_doc(store: Store, index: str, doc_id: str, *, refresh: bool | str = False) -> dict[str, Any]:
    try:
        result: dict[str, Any] = await store.request(
            "DELETE", f"/{_p(index)}/_doc/{_p(doc_id)}", params={"refresh": _refresh(refresh)}
        )
    except OpenSearchError as exc:
        # A delete whose document is gone already is a "not_found" result, not an error.
        if exc.status == 404 and isinstance(exc.body, dict) and exc.body.get("result") == "not_found":
            return dict(exc.body)
        raise
    return result


BulkOp = tuple[str, str, str | None, Mapping[str, Any] | None]
"""(action, index, id, document): action is ``index``, ``create`` or ``delete``."""


def _bulk_lines(ops: Iterable[BulkOp]) -> str:
    lines: list[str] = []
    for action, index, doc_id, doc in ops:
        meta: dict[str, Any] = {"_index": index}
        if doc_id is not None:
            meta["_id"] = doc_id
        lines.append(json.dumps({action: meta}, separators=(",", ":")))
        if action != "delete":
            lines.append(json.dumps(doc, separators=(",", ":"), ensure_ascii=False))
    return "\n".join(lines) + "\n"


async def bulk(store: Store, ops: Iterable[BulkOp], *, refresh: bool | str = True) -> dict[str, Any]:
    result: dict[str, Any] = await store.request(
        "POST", "/_bulk", body=_bulk_lines(ops), params={"refresh": _refresh(refresh)}
    )
    return result


async def search(
    store: Store, index: str, body: Mapping[str, Any], *, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    result: dict[str, Any] = await store.request(
        "POST", f"/{_p(index)}/_search", body=dict(body), params=dict(params or {})
    )
    return result


async def delete_by_query(
    store: Store, index: str, query: Mapping[str, Any], *, refresh: bool = True
) -> dict[str, Any]:
    # The node's reindex module runs it natively; conflicts=proceed so a concurrent update does not abort it.
    result: dict[str, Any] = await store.request(
        "POST",
        f"/{_p(index)}/_delete_by_query",
        body={"query": dict(query)},
        params={"refresh": _refresh(refresh), "conflicts": "proceed"},
    )
    return result
