"""GoodMem's own indices (keys, users, grants, embedder records, memory records) and the calls on them.

:class:`GoodMemIndices` is one per application (it remembers which indices it has made sure of): indices are
created lazily on first use, from ``index_templates/goodmem_*.json.j2``; when one already exists its mapping
is extended additively (so a newer template applies to an index created by an older proxy). Every write that a
later read must see says ``refresh=true``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.errors import Conflict
from proxy.filters import render_metadata_mapping
from proxy.store.client import OpenSearchError, Store, url
from proxy.store.containers import CONTAINER_INDEX
from proxy.store.ensured import EnsuredIndices
from proxy.store.memories import bulk, delete_by_query_deadline, search
from proxy.store.query import Exists, Filter, Not, Or, Range, Term, Terms, all_of
from proxy.store.query_dsl import compile_filter
from proxy.store.templates import MemoryLayout, render_index_body

__all__ = [
    "APIKEYS",
    "EMBEDDERS",
    "GRANTS",
    "LONG_TERM_PATTERN",
    "MEMORIES",
    "PAGES",
    "PRIVATE_INDEX_PATTERNS",
    "SYSTEM",
    "USERS",
    "GoodMemIndices",
    "SpaceOrder",
]

log = logging.getLogger(__name__)

APIKEYS = "memproxy-goodmem-apikeys"
USERS = "memproxy-goodmem-users"
SYSTEM = "memproxy-goodmem-system"
EMBEDDERS = "memproxy-goodmem-embedders"
GRANTS = "memproxy-goodmem-grants"
MEMORIES = "memproxy-goodmem-memories"
PAGES = "memproxy-goodmem-pages"
# Every index of memproxy's own records (keys, users, grants, ...; later jobs and models): pass-through
# never reaches them (proxy.api.passthrough).
PRIVATE_INDEX_PATTERNS = ("memproxy-goodmem-*", "memproxy-jobs*", "memproxy-models*", "memproxy-settings*")
# Every container's long-term index (system and non-system prefixes); hidden ones need expand_wildcards=all.
LONG_TERM_PATTERN = ".plugins-ml-am-*-memory-long-term,*-memory-long-term"

_TEMPLATES = {
    APIKEYS: "goodmem_apikeys",
    USERS: "goodmem_users",
    SYSTEM: "goodmem_system",
    EMBEDDERS: "goodmem_embedders",
    GRANTS: "goodmem_grants",
    MEMORIES: "goodmem_memories",
    PAGES: "goodmem_pages",
}
_WILDCARD_PARAMS = {"expand_wildcards": "all", "ignore_unavailable": "true", "allow_no_indices": "true"}


def _body(index: str, layout: MemoryLayout) -> dict[str, Any]:
    # Memory records carry the same filterable ``metadata_index`` as chunks, so list filters match retrieve's.
    mapping = render_metadata_mapping() if index == MEMORIES else None
    return render_index_body(_TEMPLATES[index], metadata_mapping=mapping, layout=layout)


def _query(where: Filter) -> dict[str, Any]:
    return compile_filter(where) or {"match_all": {}}


@dataclass(frozen=True)
class SpaceOrder:
    """The order of a space's memories: by ``field`` (a field both kinds of memory share), then by
    ``created_time`` the same way, then by ``memory_id`` (a record's), then by index and sequence number
    (what tells long-term documents without a record apart). The order is total, so a page can start after
    the sort values of the previous page's last memory (``search_after``), at any depth.

    A sequence number is unique within a shard: when the long-term index has several (``single_shard``
    false), ``_id`` ends the order too. ``_id`` is not used otherwise, since sorting on it loads the field
    into the node's heap (deprecated fielddata)."""

    field: str
    descending: bool = True
    single_shard: bool = True

    def spec(self) -> list[dict[str, Any]]:
        direction = "desc" if self.descending else "asc"
        unmapped = "keyword" if "time" not in self.field else "date"
        keys = [
            {self.field: {"order": direction, "unmapped_type": unmapped}},
            {"created_time": {"order": direction, "unmapped_type": "date"}},
            {"memory_id": {"order": "asc", "unmapped_type": "keyword"}},
            {"_index": {"order": "asc"}},
            {"_seq_no": {"order": "asc"}},
        ]
        return keys if self.single_shard else [*keys, {"_id": {"order": "asc"}}]

    def accepts(self, values: Any) -> bool:
        """Whether ``values`` can be a hit's sort values in this order (a page token's, say, which the
        node would otherwise refuse as "all shards failed"): times are epoch milliseconds (a missing one
        sorts as a number too), keywords strings or null (missing), the index a string, the sequence number
        an integer, and ``_id`` a string."""
        if not isinstance(values, list) or len(values) != len(self.spec()):
            return False
        first, created, memory_id, index, seq_no, *doc_id = values
        first_ok = _is_millis(first) if "time" in self.field else first is None or isinstance(first, str)
        return (
            first_ok
            and _is_millis(created)
            and (memory_id is None or isinstance(memory_id, str))
            and isinstance(index, str)
            and _is_millis(seq_no)
            and all(isinstance(v, str) for v in doc_id)
        )


def _is_millis(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _hits(res: Mapping[str, Any]) -> list[dict[str, Any]]:
    hits: list[dict[str, Any]] = res.get("hits", {}).get("hits", [])
    return hits


class GoodMemIndices:
    """The GoodMem indices of one store, each made sure of (created or its mapping extended) once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._indices = EnsuredIndices(store, lambda index: _body(index, store.memory_layout))
        # When the core's periodic upkeep last ran in this process (monotonic seconds, by job name).
        self.maintenance: dict[str, float] = {}

    async def ensure(self, index: str) -> None:
        """Create ``index`` from its template once per process; extend the mapping of an existing one."""
        await self._indices.ensure(index)

    # --- documents by id ------------------------------------------------------------------------------

    async def get(self, index: str, doc_id: str) -> dict[str, Any] | None:
        """The document's ``_source``, or None when it (or the index) does not exist."""
        try:
            res = await self.store.request("GET", url(index, "_doc", doc_id))
        except OpenSearchError as exc:
            if exc.status == 404:
                return None
            raise
        if not isinstance(res, dict) or not res.get("found"):
            return None
        source: dict[str, Any] = res.get("_source") or {}
        return source

    async def mget(self, index: str, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Sources by id for the ids that exist."""
        if not ids:
            return {}
        await self.ensure(index)
        res = await self.store.request("POST", url(index, "_mget"), body={"ids": list(dict.fromkeys(ids))})
        return {d["_id"]: d["_source"] for d in res.get("docs", []) if d.get("found")}

    async def put(
        self,
        index: str,
        doc_id: str,
        body: Mapping[str, Any],
        *,
        create: bool = False,
        conflict_message: str = "Resource already exists",
    ) -> None:
        """Write a document (refreshed); ``create=True`` refuses to overwrite (409 ``conflict_message``)."""
        await self.ensure(index)
        params: dict[str, Any] = {"refresh": "true"}
        if create:
            params["op_type"] = "create"
        try:
            await self.store.request("PUT", url(index, "_doc", doc_id), body=dict(body), params=params)
        except OpenSearchError as exc:
            if exc.status == 409:
                raise Conflict(conflict_message) from None
            raise

    async def create_many(
        self, index: str, docs: Sequence[tuple[str, Mapping[str, Any]]], *, refresh: bool = True
    ) -> list[dict[str, Any]]:
        """Create documents (id, source) in one ``_bulk``; each one's outcome (``status``, ``error``, and
        ``_seq_no``/``_primary_term`` when created) in order."""
        await self.ensure(index)
        res = await bulk(
            self.store, [("create", index, doc_id, dict(src)) for doc_id, src in docs], refresh=refresh
        )
        return [next(iter(item.values())) for item in res.get("items", [])]

    async def update_fields(self, index: str, doc_id: str, fields: Mapping[str, Any]) -> None:
        """A partial update of an existing document (not refreshed: for bookkeeping such as lastUsedAt)."""
        await self.store.request("POST", url(index, "_update", doc_id), body={"doc": dict(fields)})

    async def delete(self, index: str, doc_id: str) -> bool:
        """Delete one document (refreshed); False when it was not there."""
        try:
            res = await self.store.request("DELETE", url(index, "_doc", doc_id), params={"refresh": "true"})
        except OpenSearchError as exc:
            if exc.status == 404:
                return False
            raise
        return bool(isinstance(res, dict) and res.get("result") == "deleted")

    # --- queries --------------------------------------------------------------------------------------

    async def search(
        self,
        index: str,
        where: Filter,
        *,
        size: int,
        start: int = 0,
        sort: Sequence[str] = (),
        fields: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """The hits of one search: ``size`` documents from ``start`` matching ``where``, ascending by each
        of ``sort`` in turn, with only ``fields`` of their sources when given."""
        await self.ensure(index)
        body: dict[str, Any] = {"size": size, "query": _query(where)}
        if start:
            body["from"] = start
        if sort:
            body["sort"] = [{name: "asc"} for name in sort]
        if fields is not None:
            body["_source"] = list(fields)
        return _hits(await search(self.store, index, body))

    async def search_all(
        self, index: str, where: Filter, *, key: str, fields: Sequence[str] | None = None, batch: int = 1000
    ) -> list[dict[str, Any]]:
        """Every matching document, ``batch`` at a time in the order of ``key`` (a unique keyword field)
        through ``search_after``: no 10 000-hit window, for the lists that must be complete (a caller's
        grants, their keys)."""
        await self.ensure(index)
        out: list[dict[str, Any]] = []
        body: dict[str, Any] = {"size": batch, "query": _query(where), "sort": [{key: "asc"}]}
        if fields is not None:
            body["_source"] = list(fields)
        while True:
            hits = _hits(await search(self.store, index, body))
            out.extend(hits)
            if len(hits) < batch:
                return out
            body["search_after"] = hits[-1]["sort"]

    async def count(self, index: str, where: Filter) -> int:
        await self.ensure(index)
        res = await self.store.request("POST", url(index, "_count"), body={"query": _query(where)})
        return int(res.get("count", 0))

    async def delete_by_query(self, index: str, where: Filter) -> int:
        """Delete every matching document (refreshed, conflicts skipped); the number deleted."""
        await self.ensure(index)
        res = await self.store.request(
            "POST",
            url(index, "_delete_by_query"),
            body={"query": _query(where)},
            params={"refresh": "true", "conflicts": "proceed", **delete_by_query_deadline(self.store)},
        )
        return int(res.get("deleted", 0))

    async def space_memories(
        self,
        space_id: str,
        long_term_index: str | None,
        *,
        status: str | None = None,
        metadata: Filter | None = None,
        size: int,
        order: SpaceOrder,
        after: Sequence[Any] | None = None,
        include_content: bool = False,
        ids_only: bool = False,
    ) -> list[dict[str, Any]]:
        """The memories of one space, in one search: its memory records and the documents of its long-term
        index that have no record (written through the OpenSearch API; always COMPLETED, as they are
        embedded when written), filtered by ``status`` and ``metadata``, in ``order``, from just after the
        sort values ``after`` (hits carry ``_index`` and their ``sort`` values). Without vectors or
        ``metadata_index``, and without the content unless ``include_content``; ``ids_only`` keeps just the
        fields that identify a memory."""
        await self.ensure(MEMORIES)
        records = all_of(
            [
                Term("_index", MEMORIES),
                Term("space_id", space_id),
                Term("processing_status", status) if status else None,
                metadata,
            ]
        )
        branches = [records]
        if long_term_index is not None and status in (None, "COMPLETED"):
            long_term = all_of(
                [
                    Term("_index", long_term_index),
                    Term("memory_container_id", space_id),
                    metadata,
                    Not(Exists("memory_id")),
                ]
            )
            branches.append(long_term)
        body: dict[str, Any] = {"size": size, "query": _query(Or(tuple(branches))), "sort": order.spec()}
        if after is not None:
            body["search_after"] = list(after)
        if ids_only:
            body["_source"] = ["memory_id", "space_id", "memory_container_id", "created_time"]
        else:
            excludes = ["memory_embedding*", "metadata_index"]
            if not include_content:
                excludes.append("original_content_b64")
            body["_source"] = {"excludes": excludes}
        indices = [MEMORIES, long_term_index] if long_term_index else [MEMORIES]
        res = await search(
            self.store,
            ",".join(indices),
            body,
            params={"ignore_unavailable": "true", "expand_wildcards": "all"},
        )
        return _hits(res)

    async def long_term_without_record(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Long-term documents of any container that have no GoodMem record (written through the OpenSearch
        API), by id, without their vectors; {} when the search fails."""
        if not ids:
            return {}
        body = {
            "size": len(ids),
            "_source": {"excludes": ["memory_embedding*"]},
            "query": {
                "bool": {
                    "filter": [{"ids": {"values": list(ids)}}],
                    "must_not": [{"exists": {"field": "memory_id"}}],
                }
            },
        }
        try:
            res = await search(self.store, LONG_TERM_PATTERN, body, params=_WILDCARD_PARAMS)
        except OpenSearchError:
            return {}
        return {h["_id"]: h["_source"] for h in _hits(res)}

    async def taken_by_long_term(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` name a long-term document of any container, as its id or as the ``memory_id`` of
        a chunk. A failed search raises: an id is taken until shown free."""
        if not ids:
            return set()
        wanted = list(dict.fromkeys(ids))
        body = {
            # Hits: documents whose id is wanted (one per index at most); the aggregation: chunk owners.
            "size": min(10_000, 10 * len(wanted)),
            "_source": False,
            "query": _query(Or((Terms("_id", tuple(wanted)), Terms("memory_id", tuple(wanted))))),
            "post_filter": _query(Terms("_id", tuple(wanted))),
            "aggs": {"owners": {"terms": {"field": "memory_id", "include": wanted, "size": len(wanted)}}},
        }
        res = await search(self.store, LONG_TERM_PATTERN, body, params=_WILDCARD_PARAMS)
        owners = res.get("aggregations", {}).get("owners", {}).get("buckets", [])
        found = {str(h["_id"]) for h in _hits(res)} | {str(b["key"]) for b in owners}
        return found & set(wanted)

    async def delete_chunks_of(self, memory_ids: Sequence[str]) -> int:
        """Delete the chunks of these GoodMem memories from every long-term index (refreshed); how many."""
        if not memory_ids:
            return 0
        res = await self.store.request(
            "POST",
            url(LONG_TERM_PATTERN, "_delete_by_query"),
            body={"query": _query(Terms("memory_id", tuple(memory_ids)))},
            params={
                **_WILDCARD_PARAMS,
                "refresh": "true",
                "conflicts": "proceed",
                **delete_by_query_deadline(self.store),
            },
        )
        return int(res.get("deleted", 0))

    # --- page images ----------------------------------------------------------------------------------

    async def put_pages(self, docs: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Write page-image documents (id, source), overwriting, all or nothing from the caller's view: a
        failed item raises (the job that writes them is retried whole)."""
        if not docs:
            return
        await self.ensure(PAGES)
        res = await bulk(self.store, [("index", PAGES, doc_id, dict(src)) for doc_id, src in docs])
        outcomes = [next(iter(item.values())) for item in res.get("items", [])]
        failed = [o for o in outcomes if int(o.get("status", 500)) >= 300]
        if failed:
            raise OpenSearchError(int(failed[0]["status"]), {"error": failed[0].get("error")})

    async def pages(
        self,
        memory_id: str,
        *,
        start_page: int | None = None,
        end_page: int | None = None,
        dpi: int | None = None,
        content_type: str | None = None,
        size: int,
        start: int = 0,
        with_image: bool = False,
    ) -> list[dict[str, Any]]:
        """A memory's page-image documents (sources), by page then dpi, filtered; the image bytes only when
        ``with_image``."""
        await self.ensure(PAGES)
        where = all_of(
            [
                Term("memory_id", memory_id),
                Range("page_index", gte=start_page, lte=end_page)
                if start_page is not None or end_page is not None
                else None,
                Term("dpi", dpi) if dpi is not None else None,
                Term("content_type", content_type) if content_type else None,
            ]
        )
        body: dict[str, Any] = {
            "size": size,
            "query": _query(where),
            "sort": [{"page_index": "asc"}, {"dpi": "asc"}, {"content_type": "asc"}],
        }
        if start:
            body["from"] = start
        if not with_image:
            body["_source"] = {"excludes": ["image_b64"]}
        return [h["_source"] for h in _hits(await search(self.store, PAGES, body))]

    async def delete_pages_of(self, memory_ids: Sequence[str]) -> int:
        """Delete every page image of these memories (refreshed); how many."""
        if not memory_ids:
            return 0
        await self.ensure(PAGES)
        return await self.delete_by_query(PAGES, Terms("memory_id", tuple(memory_ids)))

    async def containers_using_embedder(self, embedder_id: str) -> int:
        """How many containers (spaces) embed with ``embedder_id`` first; 0 when that cannot be told."""
        try:
            res = await self.store.request(
                "POST",
                url(CONTAINER_INDEX, "_count"),
                body={"query": {"term": {"configuration.embedding_model_id": embedder_id}}},
                params={"ignore_unavailable": "true"},
            )
        except OpenSearchError:
            return 0
        return int(res.get("count", 0))
