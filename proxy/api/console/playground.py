"""The search playground: one search, run by the very core functions the APIs call, inside a capture of
every request the store sends, so the page shows the hits and the exact OpenSearch requests behind them.

- ``semantic``: ml-commons ``long-term/_semantic_search`` (:func:`proxy.core.search.vector_search`);
- ``hybrid``: ml-commons ``long-term/_hybrid_search`` (:func:`proxy.core.search.hybrid_search_result`);
- ``retrieve``: GoodMem ``memories:retrieve`` planning (:meth:`Retriever.plan`) over one space.

namespace, tags, ``min_score`` and a Query-DSL filter are the ml-commons searches' options; a GoodMem filter
expression is retrieve's. A refused search shows the error body its API would answer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.api.console.views import HitView, MemoryView, RequestView
from proxy.api.errors import goodmem_error_body, opensearch_error_body
from proxy.config import Settings
from proxy.core.container_record import Container
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.retrieve import Retriever, RetrieveRequest, SpaceKey
from proxy.core.goodmem.retrieve.rank import vector_score
from proxy.core.goodmem.retrieve.request import MAX_REQUESTED_SIZE
from proxy.core.identity import Identity, Principal
from proxy.core.query import VectorSearch
from proxy.core.search import SearchResult, hybrid_search_result, vector_search
from proxy.core.services import Services
from proxy.errors import BadRequest, MemproxyError
from proxy.store.client import SentRequest, capture_requests
from proxy.store.query import Filter, RawDsl, all_of, term_map

__all__ = ["MODES", "Outcome", "Playground", "PlaygroundQuery", "parse_query"]

Mode = Literal["semantic", "hybrid", "retrieve"]
MODES: tuple[Mode, ...] = ("semantic", "hybrid", "retrieve")
DEFAULT_K = 10


@dataclass(frozen=True)
class PlaygroundQuery:
    """The playground form, as typed (so the page can show it again) and as parsed."""

    container_id: str = ""
    mode: Mode = "semantic"
    query: str = ""
    k: int = DEFAULT_K
    namespace: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    min_score: float | None = None
    # Drawn on the score curve only: GoodMem applies relevance_threshold after a reranker, which the
    # playground does not run.
    relevance_threshold: float | None = None
    dsl_filter: dict[str, Any] | None = None
    goodmem_filter: str = ""
    form: dict[str, str] = field(default_factory=dict)


def _pairs(text: str, what: str) -> dict[str, str]:
    """``key=value`` lines (blank lines skipped) → a dict."""
    pairs: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise BadRequest(f"{what}, line {n}: write key=value")
        pairs[key.strip()] = value.strip()
    return pairs


def _number(text: str, what: str) -> float | None:
    if not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"{what} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise BadRequest(f"{what} must be a finite number")
    return value


def parse_query(form: Mapping[str, Any]) -> PlaygroundQuery:
    """The playground form; 400 with a message for what the form itself gets wrong."""
    typed = {k: str(form.get(k) or "") for k in FORM_FIELDS}
    mode = typed["mode"] or "semantic"
    if mode not in MODES:
        raise BadRequest(f"Unknown search mode: {mode}")
    try:
        k = int(typed["k"]) if typed["k"].strip() else DEFAULT_K
    except ValueError:
        raise BadRequest(f"k must be an integer, got {typed['k']!r}") from None
    min_score = _number(typed["min_score"], "min_score")
    threshold = _number(typed["relevance_threshold"], "relevance_threshold")
    dsl: dict[str, Any] | None = None
    if typed["dsl_filter"].strip():
        try:
            parsed = json.loads(typed["dsl_filter"])
        except ValueError as exc:
            raise BadRequest(f"The Query-DSL filter is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise BadRequest("The Query-DSL filter must be a JSON object")
        dsl = parsed
    query = PlaygroundQuery(
        container_id=typed["container"].strip(),
        mode=mode,  # type: ignore[arg-type]
        query=typed["query"],
        k=k,
        namespace=_pairs(typed["namespace"], "namespace"),
        tags=_pairs(typed["tags"], "tags"),
        min_score=min_score,
        relevance_threshold=threshold,
        dsl_filter=dsl,
        goodmem_filter=typed["goodmem_filter"].strip(),
        form=typed,
    )
    _check_options(query)
    return query


FORM_FIELDS = (
    "container",
    "mode",
    "query",
    "k",
    "namespace",
    "tags",
    "min_score",
    "relevance_threshold",
    "dsl_filter",
    "goodmem_filter",
)


def _check_options(q: PlaygroundQuery) -> None:
    if not q.container_id:
        raise BadRequest("Choose a container")
    if q.mode == "retrieve":
        given = [
            n
            for n, v in (("namespace", q.namespace), ("tags", q.tags), ("a Query-DSL filter", q.dsl_filter))
            if v
        ]
        given += ["min_score"] if q.min_score is not None else []
        if given:
            raise BadRequest(
                f"GoodMem retrieve takes a GoodMem filter expression, not {', '.join(given)}: "
                "those are the ml-commons searches' options"
            )
    elif q.goodmem_filter:
        raise BadRequest(
            "A GoodMem filter expression is GoodMem retrieve's option: for semantic and hybrid search, "
            "use namespace, tags or a Query-DSL filter"
        )
    elif q.relevance_threshold is not None:
        raise BadRequest(
            "relevance_threshold is GoodMem retrieve's option: for semantic and hybrid search, use min_score"
        )


@dataclass(frozen=True)
class ErrorView:
    """A refused search: the status and message, and the body the search's own API would answer."""

    status: int
    message: str
    api: str
    body: dict[str, Any]


@dataclass
class Outcome:
    """What the page shows after a search."""

    hits: list[HitView] = field(default_factory=list)
    requests: list[RequestView] = field(default_factory=list)
    total: int | None = None
    error: ErrorView | None = None
    notes: list[str] = field(default_factory=list)


def _ml_filter(q: PlaygroundQuery) -> Filter:
    """The filter tree ml-commons' search routes build from the same options."""
    clauses: list[Filter | None] = [
        *term_map("namespace", q.namespace or None),
        *term_map("tags", q.tags or None),
    ]
    if q.dsl_filter is not None:
        clauses.append(RawDsl(q.dsl_filter))
    return all_of(clauses)


class Playground:
    """Runs playground searches for one application (its services, identity and retrieval settings)."""

    def __init__(self, svc: Services, identity: Identity, settings: Settings) -> None:
        self.svc = svc
        self.retriever = Retriever(GoodMem.create(svc, identity))
        self.settings = settings

    async def run(self, principal: Principal, container: Container, q: PlaygroundQuery) -> Outcome:
        outcome = Outcome()
        sent: list[SentRequest] = []
        try:
            with capture_requests() as sent:
                if q.mode == "retrieve":
                    await self._retrieve(principal, container, q, outcome)
                else:
                    await self._ml_search(container, q, outcome)
        except MemproxyError as exc:
            goodmem = q.mode == "retrieve"
            outcome.error = ErrorView(
                status=exc.status,
                message=exc.message,
                api="GoodMem" if goodmem else "ml-commons (OpenSearch)",
                body=goodmem_error_body(exc) if goodmem else opensearch_error_body(exc),
            )
        outcome.requests = [RequestView.of(s) for s in sent]
        return outcome

    async def _ml_search(self, container: Container, q: PlaygroundQuery, outcome: Outcome) -> None:
        search = VectorSearch(
            container=container, k=q.k, query_text=q.query, filter=_ml_filter(q), min_score=q.min_score
        )
        result: SearchResult
        if q.mode == "hybrid":
            result = await hybrid_search_result(self.svc, search)
        else:
            result = await vector_search(self.svc, search)
        outcome.total = result.total
        outcome.hits = [
            HitView(h.score, MemoryView.of({"_id": h.id, "_index": h.index, "_source": h.source}))
            for h in result.hits
        ]

    async def _retrieve(
        self, principal: Principal, container: Container, q: PlaygroundQuery, outcome: Outcome
    ) -> None:
        if not q.query.strip():
            raise BadRequest("message must not be empty")
        if not 1 <= q.k <= MAX_REQUESTED_SIZE:
            raise BadRequest(f"requestedSize must be between 1 and {MAX_REQUESTED_SIZE}")
        request = RetrieveRequest(
            message=q.query,
            space_keys=(SpaceKey(container.id, filter=q.goodmem_filter or None),),
            requested_size=q.k,
            requested_size_set=True,
        )
        async with self.retriever.slots.hold(principal.user_id):
            plan = await self.retriever.plan(principal, request)
        convention = self.settings.goodmem_vector_score
        outcome.total = len(plan.items)
        outcome.hits = [
            HitView(
                vector_score(item.score, convention),  # type: ignore[arg-type]
                MemoryView.of({"_id": item.chunk_id, "_index": "", "_source": item.source}),
                detail=f"cosine {item.score:.4f} · memory {item.memory_id}",
                cosine=item.score,
            )
            for item in plan.items
        ]
        outcome.notes = [f"space {n.space_id}: {type(n).__name__}" for n in plan.notes]
