"""The durable job queue's documents: ``memproxy-jobs``, private (the pass-through refuses it).

Every URL and query body of the queue is here; the queue itself (claims, leases, retries) is
:mod:`proxy.core.jobs`. A job changes hands only through :meth:`JobDocs.update` with the version the writer
read (``if_seq_no``/``if_primary_term``): of two processes that claim, renew or finish one job at once,
exactly one write succeeds and the other gets :class:`~proxy.store.client.NodeConflict`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.store.client import (
    IndexMissing,
    NodeConflict,
    NodeNotFound,
    Store,
    url,
)
from proxy.store.ensured import EnsuredIndices
from proxy.store.memories import delete_by_query, search
from proxy.store.query import Range, Terms, all_of
from proxy.store.query_dsl import compile_filter
from proxy.store.templates import render_index_body
from proxy.store.versioned import Versioned

__all__ = ["JOBS", "JobDocs"]

log = logging.getLogger(__name__)

JOBS = "memproxy-jobs"


def _versioned(hit: Mapping[str, Any]) -> Versioned:
    return Versioned(str(hit["_id"]), hit.get("_source") or {}, hit.get("_seq_no"), hit.get("_primary_term"))


def _hits(res: Mapping[str, Any]) -> list[Versioned]:
    return [_versioned(h) for h in res.get("hits", {}).get("hits", [])]


class JobDocs:
    """The job documents of one index (``index``: another name for tests; it should match ``memproxy-jobs*``
    so that the pass-through keeps refusing it)."""

    def __init__(self, store: Store, index: str = JOBS) -> None:
        self.store = store
        self.index = index
        self._indices = EnsuredIndices(store, lambda _: render_index_body("jobs"))

    async def ensure(self) -> None:
        await self._indices.ensure(self.index)

    async def create(self, job_id: str, doc: Mapping[str, Any]) -> bool:
        """Write a new job; False (and nothing written) when ``job_id`` exists already."""
        await self.ensure()
        try:
            await self.store.request(
                "PUT",
                url(self.index, "_doc", job_id),
                body=dict(doc),
                params={"op_type": "create", "refresh": "true"},
            )
        except NodeConflict:
            return False
        return True

    async def get(self, job_id: str) -> Versioned | None:
        """The job with its version (a realtime read), or None."""
        try:
            res = await self.store.request("GET", url(self.index, "_doc", job_id))
        except NodeNotFound:  # the document, or the whole index
            return None
        if not isinstance(res, dict) or not res.get("found"):
            return None
        return _versioned(res)

    async def mget(self, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Sources by id for the jobs that exist (a realtime read)."""
        if not job_ids:
            return {}
        try:
            res = await self.store.request(
                "POST", url(self.index, "_mget"), body={"ids": list(dict.fromkeys(job_ids))}
            )
        except NodeNotFound:  # no job was ever enqueued
            return {}
        return {d["_id"]: d["_source"] for d in res.get("docs", []) if d.get("found")}

    async def update(
        self,
        job_id: str,
        fields: Mapping[str, Any],
        *,
        seq_no: int | None,
        primary_term: int | None,
        refresh: bool = True,
    ) -> tuple[int, int]:
        """Change ``fields`` of the job if it is still at (``seq_no``, ``primary_term``); its new version.
        Raises :class:`NodeConflict` when someone else wrote it since. ``refresh``: searches (other
        processes' claims, counts) see the change at once; a lease renewal needs no such thing."""
        params: dict[str, Any] = {"refresh": "true" if refresh else "false"}
        if seq_no is not None and primary_term is not None:
            params |= {"if_seq_no": seq_no, "if_primary_term": primary_term}
        res = await self.store.request(
            "POST", url(self.index, "_update", job_id), body={"doc": dict(fields)}, params=params
        )
        return int(res["_seq_no"]), int(res["_primary_term"])

    async def due(
        self, kinds: Sequence[str], now_ms: int, size: int, *, one_per_owner: bool = False
    ) -> list[Versioned]:
        """Jobs of ``kinds`` that may be claimed now, oldest due first: PENDING ones whose backoff is over,
        and RUNNING ones whose lease has expired (their process died or lost the node). ``one_per_owner``:
        only the oldest of each ``owner_id`` (a collapse), so that one owner's backlog cannot hide others'."""
        if not kinds:
            return []
        body: dict[str, Any] = {
            "size": size,
            "seq_no_primary_term": True,
            "query": {
                "bool": {
                    "filter": [{"terms": {"kind": list(kinds)}}],
                    "should": [
                        {
                            "bool": {
                                "filter": [
                                    {"term": {"state": "PENDING"}},
                                    {"range": {"not_before": {"lte": now_ms}}},
                                ]
                            }
                        },
                        {
                            "bool": {
                                "filter": [
                                    {"term": {"state": "RUNNING"}},
                                    {"range": {"lease_expires_at": {"lt": now_ms}}},
                                ]
                            }
                        },
                    ],
                    "minimum_should_match": 1,
                }
            },
            "sort": [{"not_before": {"order": "asc"}}, {"created_at": {"order": "asc"}}],
        }
        if one_per_owner:
            body["collapse"] = {"field": "owner_id"}
        try:
            return _hits(await search(self.store, self.index, body))
        except IndexMissing:
            return []

    async def by_subject(self, subject: str, size: int = 100) -> list[Versioned]:
        """The jobs working for ``subject``, newest first."""
        body = {
            "size": size,
            "seq_no_primary_term": True,
            "query": {"bool": {"filter": [{"term": {"subject": subject}}]}},
            "sort": [{"created_at": {"order": "desc"}}],
        }
        try:
            return _hits(await search(self.store, self.index, body))
        except IndexMissing:
            return []

    async def latest(self, state: str, size: int) -> list[Versioned]:
        """The ``size`` jobs of ``state`` that changed last."""
        body = {
            "size": size,
            "query": {"bool": {"filter": [{"term": {"state": state}}]}},
            "sort": [{"updated_at": {"order": "desc"}}],
        }
        try:
            return _hits(await search(self.store, self.index, body))
        except IndexMissing:
            return []

    async def finished(
        self, states: Sequence[str], before_ms: int, size: int, after: Sequence[Any] | None = None
    ) -> list[Versioned]:
        """Up to ``size`` jobs in ``states`` that finished before ``before_ms``, oldest first, from just after
        the sort values ``after`` (the last one's ``sort``). Ties go by sequence number, unique in the job
        index's one shard and fixed once a job has ended (``_id`` would load fielddata into the heap)."""
        selection = all_of([Terms("state", tuple(states)), Range("finished_at", lt=before_ms)])
        body: dict[str, Any] = {
            "size": size,
            "query": compile_filter(selection),
            "sort": [{"finished_at": {"order": "asc"}}, {"_seq_no": {"order": "asc"}}],
            "_source": ["attempts", "subject", "finished_at"],
            "seq_no_primary_term": True,
        }
        if after is not None:
            body["search_after"] = list(after)
        try:
            return _hits(await search(self.store, self.index, body))
        except IndexMissing:
            return []

    async def delete_ids(self, job_ids: Sequence[str]) -> int:
        """Delete these jobs; how many there were."""
        if not job_ids:
            return 0
        result = await delete_by_query(
            self.store, self.index, Terms("_id", tuple(job_ids)), refresh=True, ignore_missing=True
        )
        return int(result.get("deleted") or 0)

    async def of_kind(
        self, kind: str, fields: Sequence[str], size: int, after: int | None = None
    ) -> list[Versioned]:
        """Up to ``size`` jobs of ``kind`` (any state) with only ``fields`` of their source, in
        sequence-number order from just after ``after`` (the last one's ``seq_no``), over the index's one
        shard: a job written during the scan gets a higher number, so the scan still reaches it."""
        body: dict[str, Any] = {
            "size": size,
            "query": {"bool": {"filter": [{"term": {"kind": kind}}]}},
            "sort": [{"_seq_no": {"order": "asc"}}],
            "_source": list(fields),
            "seq_no_primary_term": True,
            "track_total_hits": False,
        }
        if after is not None:
            body["search_after"] = [after]
        try:
            return _hits(await search(self.store, self.index, body))
        except IndexMissing:
            return []

    async def count_by_state(self) -> dict[str, int]:
        """How many jobs are in each state ({} when there is no job index yet)."""
        body = {"size": 0, "aggs": {"states": {"terms": {"field": "state", "size": 16}}}}
        try:
            res = await search(self.store, self.index, body)
        except IndexMissing:
            return {}
        buckets = res.get("aggregations", {}).get("states", {}).get("buckets", [])
        return {str(b["key"]): int(b["doc_count"]) for b in buckets}
