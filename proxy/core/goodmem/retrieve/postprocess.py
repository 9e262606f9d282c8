"""The ChatPostProcessor (spec §8): rerank → relevance threshold → chronological re-sort → cap → LLM reply.

The vector results are the input; every stage can fail on its own and the failure is an outcome (a
:class:`Problem`), never an exception: a retrieve whose reranker or LLM is unknown, down, slow or talking
nonsense still delivers the vector results (spec §6.3). The GoodMem slice turns outcomes into events.

Prompts are jinja2 templates from the caller (GoodMem documents Pebble, whose ``{{ variable }}`` syntax is
the same), rendered in jinja2's sandbox: a caller cannot reach Python objects through a template, ``range``
is capped and the rendered text is bounded, so a template is no way into the process or a way to exhaust
it. Templates are compiled when the request is validated (:func:`check_template`), so a syntax error is a
400 before streaming.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from jinja2 import Template, TemplateError, TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment

from proxy.core.goodmem.retrieve.rank import RankedChunk
from proxy.core.goodmem.retrieve.request import ChatConfig, RetrieveRequest
from proxy.core.models.registry import ChatModel, RerankModel, UnknownModel
from proxy.errors import DeadlineExceeded, MemproxyError
from proxy.models.provider import ProviderBadAnswer, ProviderRejected

__all__ = [
    "DEFAULT_LLM_TEMP",
    "DEFAULT_MAX_RESULTS",
    "DEFAULT_PROMPT",
    "DEFAULT_SYS_PROMPT",
    "DEFAULT_TOKEN_BUDGET",
    "MAX_TEMPLATE_CHARS",
    "Abstract",
    "PostModels",
    "Problem",
    "Reranked",
    "Selected",
    "check_template",
    "data_section",
    "effective_max_results",
    "render_messages",
    "reply_score",
    "rerank",
    "select",
    "summarize",
    "token_budget",
]

log = logging.getLogger(__name__)

DEFAULT_LLM_TEMP = 0.3
DEFAULT_MAX_RESULTS = 10
DEFAULT_TOKEN_BUDGET = 512
MAX_TEMPLATE_CHARS = 20_000
# Bounds on what a caller's template may produce or loop over (sandbox: no attribute escapes, these: no
# exhaustion). A rendered prompt past the bound is refused rather than cut, so the LLM never sees half of it.
MAX_RENDERED_CHARS = 512 * 1024
MAX_TEMPLATE_RANGE = 1_000

DEFAULT_SYS_PROMPT = (
    "You are an AI assistant helping to synthesize retrieved memory content. Answer the user's query using "
    "only the retrieved data below, citing memories by their number. If the data does not answer the query, "
    "say so."
)
DEFAULT_PROMPT = (
    'User Query: "{{ userQuery }}"\n\nRetrieved Data:\n{{ dataSection }}\n\n'
    "Summarize what the retrieved data says about the query."
)

Stage = Literal["rerank", "summarize"]
ProblemKind = Literal["not_found", "failed", "timeout", "deadline"]


@dataclass(frozen=True)
class Problem:
    """Why a stage did not deliver: ``deadline`` is the caller's ``GoodMem-Timeout-Ms`` running out (the
    stream then fails); ``timeout`` a provider's own timeout (the stream goes on)."""

    stage: Stage
    kind: ProblemKind
    model_id: str
    message: str
    reason: str | None = None


@dataclass(frozen=True)
class Selected:
    """One item of the post-processor's result set and the score it is streamed with."""

    item: RankedChunk
    score: float


@dataclass
class Reranked:
    scores: list[float] | None  # None: not reranked (no reranker, or it failed)
    problems: list[Problem] = field(default_factory=list)


@dataclass
class Abstract:
    text: str | None
    problems: list[Problem] = field(default_factory=list)
    budget: int | None = None


class PostModels(Protocol):
    """What the post-processor asks of memproxy's models (``Retriever`` implements it)."""

    async def rerank_model(self, model_id: str) -> RerankModel: ...

    async def chat_model(self, model_id: str) -> ChatModel: ...

    async def llm_max_tokens(self, model_id: str) -> int | None: ...


# --- templates ------------------------------------------------------------------------------------------


def _capped_range(*args: int) -> range:
    r = range(*args)
    if len(r) > MAX_TEMPLATE_RANGE:
        raise OverflowError(f"range() in a prompt template is limited to {MAX_TEMPLATE_RANGE} items")
    return r


_ENV = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True)
_ENV.globals["range"] = _capped_range


@functools.lru_cache(maxsize=256)
def _compiled(text: str) -> Template:
    # Callers send the same few templates again and again; compiling one costs more than rendering it.
    return _ENV.from_string(text)


def check_template(text: str) -> str | None:
    """The problem with a prompt template (None when it compiles): a syntax error or its size."""
    if len(text) > MAX_TEMPLATE_CHARS:
        return f"is longer than {MAX_TEMPLATE_CHARS} characters"
    try:
        _compiled(text)
    except TemplateSyntaxError as exc:
        return f"is not a valid template (line {exc.lineno}: {exc.message})"
    return None


def _render(text: str, variables: Mapping[str, Any]) -> str:
    out: list[str] = []
    size = 0
    for piece in _compiled(text).generate(**variables):
        size += len(piece)
        if size > MAX_RENDERED_CHARS:
            raise OverflowError(f"the rendered prompt is longer than {MAX_RENDERED_CHARS} characters")
        out.append(piece)
    return "".join(out)


# --- selection: threshold, chronological re-sort, cap ---------------------------------------------------


def effective_max_results(chat: ChatConfig, req: RetrieveRequest) -> int:
    """``max_results``; else the request's own positive ``requestedSize``; else 10 (Gen B SDK docs)."""
    if chat.max_results is not None:
        return chat.max_results
    if req.requested_size_set:
        return req.requested_size
    return DEFAULT_MAX_RESULTS


def created_at(item: RankedChunk, created: Mapping[str, int]) -> int:
    """A memory's creation time: its record's when it was loaded, else the chunk's own (the same instant
    for GoodMem memories; a long-term memory of the OpenSearch API has only the latter)."""
    if item.memory_id in created:
        return created[item.memory_id]
    return int(item.source.get("created_time") or 0)


def select(
    items: Sequence[RankedChunk],
    scores: Sequence[float] | None,
    chat: ChatConfig,
    req: RetrieveRequest,
    created: Mapping[str, int],
) -> list[Selected]:
    """The documented order: rerank (``scores``: the reranker's, else the vector ones stand) → threshold
    (only on reranker scores) → chronological re-sort (oldest first; ties keep rank order) → cap."""
    if scores is not None:
        ranked = sorted(
            (Selected(item, score) for item, score in zip(items, scores, strict=True)),
            key=lambda s: -s.score,
        )
        if chat.relevance_threshold is not None:
            ranked = [s for s in ranked if s.score >= chat.relevance_threshold]
    else:
        ranked = [Selected(item, item.score) for item in items]
    if chat.chronological_resort:
        ranked.sort(key=lambda s: created_at(s.item, created))
    return ranked[: effective_max_results(chat, req)]


def reply_score(selected: Sequence[Selected], reranked: bool) -> float:
    """``abstractReply.relevanceScore``: the best score the reply rests on, on a 0..1 scale as both clients
    document it (reranker scores as they are, vector cosines clamped); 0 when it rests on nothing."""
    if not selected:
        return 0.0
    best = max(s.score if reranked else s.item.score for s in selected)
    return min(1.0, max(0.0, float(best)))


# --- prompts --------------------------------------------------------------------------------------------


def _when(ms: int) -> str:
    if ms <= 0:
        return "unknown time"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def data_section(selected: Sequence[Selected], created: Mapping[str, int]) -> str:
    """The ``dataSection`` variable: one numbered entry per memory, oldest first, with its creation time
    and the texts of its selected chunks (in chunk order)."""
    by_memory: dict[str, list[RankedChunk]] = {}
    for s in selected:
        by_memory.setdefault(s.item.memory_id, []).append(s.item)
    ordered = sorted(by_memory.values(), key=lambda chunks: created_at(chunks[0], created))
    entries = []
    for n, chunks in enumerate(ordered, start=1):
        chunks = sorted(chunks, key=lambda c: int(c.source.get("chunk_sequence") or 0))
        texts = "\n".join(str(c.source.get("memory") or "") for c in chunks)
        entries.append(f"[{n}] {_when(created_at(chunks[0], created))}\n{texts}")
    return "\n\n".join(entries) if entries else "(no memories were retrieved)"


def template_variables(
    req: RetrieveRequest, selected: Sequence[Selected], created: Mapping[str, int], now: dt.datetime
) -> dict[str, Any]:
    """The four variables every template receives: ``userQuery`` and ``dataSection`` (documented),
    ``memoryCount`` and ``currentDate`` (memproxy's choice for the two UNCONFIRMED ones)."""
    return {
        "userQuery": req.message,
        "dataSection": data_section(selected, created),
        "memoryCount": len({s.item.memory_id for s in selected}),
        "currentDate": now.strftime("%Y-%m-%d"),
    }


def render_messages(
    chat: ChatConfig,
    req: RetrieveRequest,
    selected: Sequence[Selected],
    created: Mapping[str, int],
    now: dt.datetime | None = None,
) -> list[dict[str, str]]:
    """The chat messages: the rendered ``sys_prompt`` (system) and ``prompt`` (user)."""
    variables = template_variables(req, selected, created, now or dt.datetime.now(dt.UTC))
    system = _render(chat.sys_prompt if chat.sys_prompt is not None else DEFAULT_SYS_PROMPT, variables)
    user = _render(chat.prompt if chat.prompt is not None else DEFAULT_PROMPT, variables)
    messages = [{"role": "system", "content": system}] if system.strip() else []
    messages.append({"role": "user", "content": user})
    return messages


def token_budget(req: RetrieveRequest, chat: ChatConfig, llm_default: int | None) -> int:
    """First positive of ``outputBudget.tokens``, ``gen_token_budget``, the LLM's default max tokens, 512."""
    for value in (req.output_budget_tokens, chat.gen_token_budget, llm_default):
        if value is not None and value > 0:
            return value
    return DEFAULT_TOKEN_BUDGET


# --- the stages -----------------------------------------------------------------------------------------


async def _within(deadline: float | None, work: Callable[[], Awaitable[Any]]) -> Any:
    """``work()`` bounded by the caller's deadline; raises ``_CallerDeadline`` when that ran out."""
    budget = asyncio.timeout_at(deadline)
    try:
        async with budget:
            return await work()
    except TimeoutError:
        if budget.expired():
            raise _CallerDeadline from None
        raise


class _CallerDeadline(Exception):
    pass


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, MemproxyError):
        return exc.message
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def rerank(
    models: PostModels | None,
    chat: ChatConfig,
    query: str,
    items: Sequence[RankedChunk],
    deadline: float | None,
) -> Reranked:
    """The reranker's score of every item (same order), or the problem that stopped it."""
    model_id = chat.reranker_id
    if model_id is None:
        return Reranked(None)
    try:
        if models is None:
            raise UnknownModel(model_id, "reranker")
        model = await _within(deadline, lambda: models.rerank_model(model_id))
    except UnknownModel:
        return Reranked(None, [Problem("rerank", "not_found", model_id, "Reranker not found")])
    except _CallerDeadline:
        return Reranked(None, [_deadline("rerank", model_id)])
    except Exception as exc:  # a reranker that cannot be set up fails its stage, not the stream
        log.warning("retrieve: reranker %s unavailable: %s", model_id, _error_text(exc))
        return Reranked(None, [Problem("rerank", "failed", model_id, _error_text(exc))])
    if not items:
        return Reranked([])
    texts = [str(item.source.get("memory") or "") for item in items]
    try:
        scores = await _within(deadline, lambda: model.rerank(query, texts))
    except _CallerDeadline:
        return Reranked(None, [_deadline("rerank", model_id)])
    except Exception as exc:
        log.warning("retrieve: reranker %s failed: %s", model_id, _error_text(exc))
        return Reranked(None, [Problem("rerank", "failed", model_id, _error_text(exc), _reason(exc))])
    if (
        not isinstance(scores, list)
        or len(scores) != len(items)
        or not all(isinstance(s, int | float) and math.isfinite(s) for s in scores)
    ):
        count = len(scores) if isinstance(scores, list) else "no list of"
        message = f"the reranker answered {count} scores for {len(items)} documents, or a score is not finite"
        return Reranked(None, [Problem("rerank", "failed", model_id, message, "BAD_ANSWER")])
    return Reranked([float(s) for s in scores])


def _deadline(stage: Stage, model_id: str) -> Problem:
    what = "reranking" if stage == "rerank" else "generating the abstract reply"
    return Problem(
        stage,
        "deadline",
        model_id,
        f"Deadline exceeded (GoodMem-Timeout-Ms) while {what}",
        "DEADLINE_EXCEEDED",
    )


def _reason(exc: BaseException) -> str:
    """A failure's ``details.reason``: what an operator needs to know first."""
    if isinstance(exc, ProviderBadAnswer):
        return "BAD_ANSWER"
    if isinstance(exc, ProviderRejected):
        return "REJECTED"
    if isinstance(exc, MemproxyError):
        if exc.status == 429:
            return "RESOURCE_EXHAUSTED"  # a provider's 429 after retries, or a local queue that is full
        if exc.status == 504:
            return "TIMEOUT"
        return "UNAVAILABLE" if exc.status >= 500 else "REJECTED"
    return "INTERNAL"


async def summarize(
    models: PostModels | None,
    chat: ChatConfig,
    req: RetrieveRequest,
    selected: Sequence[Selected],
    created: Mapping[str, int],
    deadline: float | None,
) -> Abstract:
    """The LLM's abstract reply over the selected items, or the problem that stopped it."""
    model_id = chat.llm_id
    if model_id is None:
        return Abstract(None)
    try:
        if models is None:
            raise UnknownModel(model_id, "llm")
        model = await _within(deadline, lambda: models.chat_model(model_id))
    except UnknownModel:
        return Abstract(None, [Problem("summarize", "not_found", model_id, "LLM not found")])
    except _CallerDeadline:
        return Abstract(None, [_deadline("summarize", model_id)])
    except Exception as exc:
        log.warning("retrieve: LLM %s unavailable: %s", model_id, _error_text(exc))
        return Abstract(None, [Problem("summarize", "failed", model_id, _error_text(exc), _reason(exc))])
    try:
        default_tokens = await _within(deadline, lambda: models.llm_max_tokens(model_id))
    except _CallerDeadline:
        return Abstract(None, [_deadline("summarize", model_id)])
    except Exception as exc:  # only a default: without it the budget falls back to 512
        log.warning("retrieve: LLM %s default max tokens unknown: %s", model_id, _error_text(exc))
        default_tokens = None
    budget = token_budget(req, chat, default_tokens)
    try:
        # Rendering is CPU work on a caller's template: off the event loop, within the caller's deadline.
        messages = await _within(
            deadline, lambda: asyncio.to_thread(render_messages, chat, req, selected, created)
        )
    except _CallerDeadline:
        return Abstract(None, [_deadline("summarize", model_id)], budget)
    except (TemplateError, OverflowError, TypeError, ValueError) as exc:
        message = f"the prompt template could not be rendered: {_error_text(exc)}"
        return Abstract(None, [Problem("summarize", "failed", model_id, message, "TEMPLATE")], budget)
    temperature = chat.llm_temp if chat.llm_temp is not None else DEFAULT_LLM_TEMP
    try:
        result = await _within(
            deadline, lambda: model.complete(messages, temperature=temperature, max_tokens=budget)
        )
    except _CallerDeadline:
        return Abstract(None, [_deadline("summarize", model_id)], budget)
    except DeadlineExceeded as exc:  # the provider's own timeout (--model-timeout-s), not the caller's
        return Abstract(
            None, [Problem("summarize", "timeout", model_id, _error_text(exc), "TIMEOUT")], budget
        )
    except Exception as exc:
        log.warning("retrieve: LLM %s failed: %s", model_id, _error_text(exc))
        return Abstract(
            None, [Problem("summarize", "failed", model_id, _error_text(exc), _reason(exc))], budget
        )
    if result.finish_reason == "length":
        message = (
            f"the reply did not fit the token budget of {budget} tokens (raise outputBudget.tokens or "
            "gen_token_budget)"
        )
        return Abstract(None, [Problem("summarize", "failed", model_id, message, "TOKEN_BUDGET")], budget)
    return Abstract(result.text.strip(), [], budget)
