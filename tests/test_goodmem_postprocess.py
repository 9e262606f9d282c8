"""The ChatPostProcessor in-process: selection (threshold, re-sort, cap), prompts in jinja2's sandbox, token
budgets, and the events it adds to a retrieve stream with fake rerankers and LLMs whose answers, failures
and timing the tests set. Every event is checked against both real clients' models.

The same behaviour through the real process, the real node, the local cross-encoder, a TEI double, the
FakeLLM and both SDKs is tests/test_goodmem_postprocess_e2e.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from goodmem.models.retrieve_memory_event import RetrieveMemoryEvent as GenBEvent
from jinja2.sandbox import SecurityError
from multidict import MultiDict, MultiDictProxy

from proxy.api.goodmem.retrieve_body import parse_post_body
from proxy.api.goodmem.retrieve_events import StreamFailure, retrieval_events
from proxy.api.goodmem.retrieve_wire import parse_get_query
from proxy.core.goodmem.records import MemoryRecord
from proxy.core.goodmem.retrieve import ChatConfig, RankedChunk, RetrievalPlan, RetrieveRequest, SpaceKey
from proxy.core.goodmem.retrieve.postprocess import (
    DEFAULT_PROMPT,
    DEFAULT_SYS_PROMPT,
    Selected,
    check_template,
    data_section,
    effective_max_results,
    render_messages,
    select,
    token_budget,
)
from proxy.core.goodmem.retrieve.rank import VectorScore, single, vector_score
from proxy.core.goodmem.retrieve.request import CHAT_POST_PROCESSOR
from proxy.core.models.registry import UnknownModel
from proxy.errors import BadRequest, Overloaded
from proxy.models import ChatResult
from proxy.models.provider import ProviderBadAnswer, ProviderRejected, ProviderTimeout, ProviderUnavailable
from tests.goodmem_helpers import memory_record

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from goodmem_client.streaming import RetrieveMemoryEvent as GenAEvent

S1 = "0192f6a0-0000-7000-8000-000000000001"
RR = "0192f6a0-0000-7000-8000-0000000000a1"
LL = "0192f6a0-0000-7000-8000-0000000000b1"
NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def chunk(
    cid: str, mid: str, score: float, created: int, text: str | None = None, seq: int = 0
) -> RankedChunk:
    source = {
        "memory": text or f"text of {cid}",
        "memory_id": mid,
        "created_time": created,
        "chunk_sequence": seq,
        "owner_id": "u1",
    }
    return RankedChunk(chunk_id=cid, memory_id=mid, space_id=S1, score=score, source=source)


# Vector order c1..c4; m2 is the oldest memory, m1 the newest; m1 has two chunks.
ITEMS = [
    chunk("c1", "m1", 0.9, 3_000, "Berlin office opens at nine.", seq=1),
    chunk("c2", "m2", 0.8, 1_000, "The budget was approved in March."),
    chunk("c3", "m1", 0.7, 3_000, "Berlin office closes at five.", seq=0),
    chunk("c4", "m3", 0.6, 2_000, "Cats sleep all day."),
]
CREATED = {"m1": 3_000, "m2": 1_000, "m3": 2_000}


def request(chat: ChatConfig | None, **kw: Any) -> RetrieveRequest:
    return RetrieveRequest("who approved the budget?", (SpaceKey(S1),), chat=chat, **kw)


# --- selection ------------------------------------------------------------------------------------------


def test_threshold_applies_to_reranker_scores_then_cap() -> None:
    chat = ChatConfig(reranker_id=RR, relevance_threshold=0.5, max_results=2)
    picked = select(ITEMS, [0.2, 0.95, 0.5, 0.7], chat, request(chat), CREATED)
    # Reranker order (c2 0.95, c4 0.7, c3 0.5 kept at the threshold, c1 0.2 dropped), capped to 2.
    assert [(s.item.chunk_id, s.score) for s in picked] == [("c2", 0.95), ("c4", 0.7)]
    uncapped = select(
        ITEMS, [0.2, 0.95, 0.5, 0.7], dataclasses.replace(chat, max_results=10), request(chat), {}
    )
    assert [s.item.chunk_id for s in uncapped] == ["c2", "c4", "c3"]


def test_threshold_is_ignored_without_reranker_scores() -> None:
    chat = ChatConfig(llm_id=LL, relevance_threshold=0.99)
    picked = select(ITEMS, None, chat, request(chat), CREATED)
    assert [(s.item.chunk_id, s.score) for s in picked] == [(i.chunk_id, i.score) for i in ITEMS]


def test_chronological_resort_oldest_first_after_threshold_before_cap() -> None:
    chat = ChatConfig(reranker_id=RR, relevance_threshold=0.3, chronological_resort=True, max_results=2)
    picked = select(ITEMS, [0.9, 0.8, 0.7, 0.1], chat, request(chat), CREATED)
    # Threshold drops c4 (m3); the rest sorted by memory age: m2 (1000), then m1's chunks in rank order.
    assert [s.item.chunk_id for s in picked] == ["c2", "c1"]
    # The record's creation time wins over the chunk's when the memory was loaded.
    picked = select(ITEMS, [0.9, 0.8, 0.7, 0.1], chat, request(chat), {"m1": 1, "m2": 5})
    assert [s.item.chunk_id for s in picked] == ["c1", "c3"]


def test_max_results_defaults() -> None:
    chat = ChatConfig(reranker_id=RR)
    assert effective_max_results(chat, request(chat)) == 10
    assert effective_max_results(chat, request(chat, requested_size=3, requested_size_set=True)) == 3
    assert effective_max_results(dataclasses.replace(chat, max_results=4), request(chat)) == 4
    body = {"message": "m", "spaceKeys": [{"spaceId": S1}], "postProcessor": {"name": CHAT_POST_PROCESSOR}}
    assert parse_post_body(body).requested_size_set is False
    assert parse_post_body({**body, "requestedSize": 0}).requested_size_set is False
    assert parse_post_body({**body, "requestedSize": 7}).requested_size_set is True


def test_token_budget_precedence() -> None:
    chat = ChatConfig(llm_id=LL, gen_token_budget=300)
    assert token_budget(request(chat, output_budget_tokens=64), chat, 200) == 64
    assert token_budget(request(chat), chat, 200) == 300
    assert token_budget(request(chat), ChatConfig(llm_id=LL), 200) == 200
    assert token_budget(request(chat), ChatConfig(llm_id=LL), None) == 512


# --- prompts --------------------------------------------------------------------------------------------


def test_data_section_numbers_memories_oldest_first() -> None:
    section = data_section([Selected(i, i.score) for i in ITEMS], CREATED)
    assert section == (
        "[1] 1970-01-01 00:00 UTC\nThe budget was approved in March.\n\n"
        "[2] 1970-01-01 00:00 UTC\nCats sleep all day.\n\n"
        "[3] 1970-01-01 00:00 UTC\nBerlin office closes at five.\nBerlin office opens at nine."
    )
    assert data_section([], {}) == "(no memories were retrieved)"


def test_default_and_custom_prompts() -> None:
    chat = ChatConfig(llm_id=LL)
    selected = [Selected(ITEMS[1], 0.8)]
    messages = render_messages(chat, request(chat), selected, CREATED, NOW)
    assert messages[0] == {"role": "system", "content": DEFAULT_SYS_PROMPT}
    assert messages[1]["role"] == "user"
    assert messages[1]["content"].startswith(
        'User Query: "who approved the budget?"\n\nRetrieved Data:\n[1] '
    )
    assert "The budget was approved in March." in messages[1]["content"]
    assert DEFAULT_PROMPT.endswith("Summarize what the retrieved data says about the query.")
    custom = ChatConfig(
        llm_id=LL,
        sys_prompt="Today is {{ currentDate }}; {{ memoryCount }} memories.",
        prompt="Q={{ userQuery | upper }} {% for i in range(2) %}#{{ i }}{% endfor %} {{ nothing }}|",
    )
    messages = render_messages(custom, request(custom), selected, CREATED, NOW)
    assert messages == [
        {"role": "system", "content": "Today is 2026-03-01; 1 memories."},
        {"role": "user", "content": "Q=WHO APPROVED THE BUDGET? #0#1 |"},
    ]
    # An empty system prompt sends no system message.
    only_user = ChatConfig(llm_id=LL, sys_prompt="", prompt="{{ userQuery }}")
    assert render_messages(only_user, request(only_user), [], {}, NOW) == [
        {"role": "user", "content": "who approved the budget?"}
    ]


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ userQuery.__class__ }}",
        "{{ userQuery.format.__globals__ }}",
        "{{ cycler.__init__.__globals__.os }}",
    ],
)
def test_templates_cannot_reach_python_objects(template: str) -> None:
    chat = ChatConfig(llm_id=LL, prompt=template)
    try:
        out = render_messages(chat, request(chat), [Selected(ITEMS[0], 1.0)], CREATED, NOW)[-1]["content"]
    except SecurityError:
        return
    assert out == ""  # an unsafe attribute is undefined: it renders as nothing


@pytest.mark.parametrize(
    "template",
    ["{% for i in range(100000) %}{% endfor %}", "{% for i in range(900) %}{{ 'x' * 1000 }}{% endfor %}"],
)
def test_templates_are_bounded(template: str) -> None:
    chat = ChatConfig(llm_id=LL, prompt=template)
    with pytest.raises(OverflowError):
        render_messages(chat, request(chat), [], {}, NOW)


def test_template_syntax_errors_are_400_before_streaming() -> None:
    assert check_template("{{ userQuery }}") is None
    assert "not a valid template" in (check_template("{{ userQuery ") or "")
    body = {
        "message": "m",
        "spaceKeys": [{"spaceId": S1}],
        "postProcessor": {"name": CHAT_POST_PROCESSOR, "config": {"llm_id": LL, "prompt": "{% for %}"}},
    }
    with pytest.raises(BadRequest, match=r"postProcessor.config.prompt is not a valid template"):
        parse_post_body(body)
    with pytest.raises(BadRequest, match="sys_prompt is longer than"):
        parse_post_body(
            {**body, "postProcessor": {"name": CHAT_POST_PROCESSOR, "config": {"sys_prompt": "x" * 20_001}}}
        )


def test_get_forms_of_both_generations_select_the_chat_post_processor() -> None:
    base = [("message", "hi"), ("spaceIds", S1), ("requestedSize", "5")]
    old = parse_get_query(
        MultiDictProxy(
            MultiDict(
                [
                    *base,
                    ("pp_reranker_id", RR),
                    ("pp_llm_id", LL),
                    ("pp_relevance_threshold", "0.25"),
                    ("pp_llm_temp", "0.7"),
                    ("pp_max_results", "3"),
                    ("pp_chronological_resort", "true"),
                    ("pp_prompt", "{{ userQuery }}"),
                    ("pp_gen_token_budget", "99"),
                ]
            )
        )
    )
    openapi = parse_get_query(
        MultiDictProxy(
            MultiDict(
                [
                    *base,
                    ("postProcessorRerankerId", RR),
                    ("postProcessorLlmId", LL),
                    ("postProcessorRelevanceThreshold", "0.25"),
                    ("postProcessorLlmTemp", "0.7"),
                    ("postProcessorMaxResults", "3"),
                    ("postProcessorChronologicalResort", "true"),
                    ("postProcessorPrompt", "{{ userQuery }}"),
                    ("postProcessorGenTokenBudget", "99"),
                ]
            )
        )
    )
    expected = ChatConfig(
        reranker_id=RR,
        llm_id=LL,
        relevance_threshold=0.25,
        chronological_resort=True,
        llm_temp=0.7,
        max_results=3,
        prompt="{{ userQuery }}",
        gen_token_budget=99,
    )
    assert old.chat == openapi.chat == expected
    assert old.requested_size_set and old.requested_size == 5
    with pytest.raises(BadRequest, match="not a valid template"):
        parse_get_query(MultiDictProxy(MultiDict([*base, ("pp_llm_id", LL), ("pp_prompt", "{{")])))


# --- the events -----------------------------------------------------------------------------------------


class FakeReranker:
    def __init__(self, scores: Any = None, error: Exception | None = None, delay: float = 0.0) -> None:
        self.scores, self.error, self.delay = scores, error, delay
        self.calls: list[tuple[str, list[str]]] = []
        self.cancelled = False

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        self.calls.append((query, list(documents)))
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.error is not None:
            raise self.error
        return self.scores if self.scores is not None else [1.0 - i / 10 for i in range(len(documents))][::-1]


class FakeChat:
    def __init__(
        self, text: str = "The committee approved it.", error: Exception | None = None, delay: float = 0.0
    ) -> None:
        self.text, self.error, self.delay = text, error, delay
        self.finish = "stop"
        self.calls: list[dict[str, Any]] = []

    async def complete(self, messages: Sequence[dict[str, Any]], **kw: Any) -> ChatResult:
        self.calls.append({"messages": list(messages), **kw})
        await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return ChatResult(self.text, self.finish, {})


class Models:
    def __init__(self, reranker: FakeReranker | None = None, chat: FakeChat | None = None) -> None:
        self.reranker, self.chat = reranker, chat
        self.max_tokens: int | None = None

    async def rerank_model(self, model_id: str) -> Any:
        if self.reranker is None or model_id != RR:
            raise UnknownModel(model_id, "reranker")
        return self.reranker

    async def chat_model(self, model_id: str) -> Any:
        if self.chat is None or model_id != LL:
            raise UnknownModel(model_id, "llm")
        return self.chat

    async def llm_max_tokens(self, model_id: str) -> int | None:
        return self.max_tokens


def loader(created: Mapping[str, int]) -> Any:
    async def load(ids: list[str]) -> Mapping[str, MemoryRecord]:
        return {i: dataclasses.replace(memory_record(i, S1, actor="u1"), created_at=created[i]) for i in ids}

    return load


def run(
    chat: ChatConfig | None,
    models: Models | None,
    *,
    items: list[RankedChunk] = ITEMS,
    deadline_s: float | None = None,
    convention: VectorScore = "cosine",  # readable vector scores here; the live default has its own test
    **req: Any,
) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        plan = RetrievalPlan(request=request(chat, **req), items=items, result_set_id="R1")
        deadline = None if deadline_s is None else asyncio.get_running_loop().time() + deadline_s
        events = retrieval_events(
            plan, loader(CREATED), deadline=deadline, models=models, convention=convention
        )
        return [e async for e in events]

    events = asyncio.run(go())
    for event in events:
        GenBEvent.model_validate(event)
        GenAEvent.model_validate(event)
    return events


def outline(events: list[dict[str, Any]]) -> list[Any]:
    out: list[Any] = []
    for e in events:
        if "resultSetBoundary" in e:
            b = e["resultSetBoundary"]
            out.append((b["kind"], b["stageName"], b.get("expectedItems")))
        elif "retrievedItem" in e:
            ref = e["retrievedItem"]["chunk"]
            # Scores are sent in single precision: compare them at that precision.
            out.append((ref["chunk"]["chunkId"], ref["memoryIndex"], round(ref["relevanceScore"], 6)))
        elif "memoryDefinition" in e:
            out.append(("def", e["memoryDefinition"]["memoryId"]))
        elif "status" in e:
            out.append(("status", e["status"]["code"]))
        else:
            out.append(("abstract", e["abstractReply"]["text"]))
    return out


def set_ids(events: list[dict[str, Any]]) -> list[str]:
    return [e["resultSetBoundary"]["resultSetId"] for e in events if "resultSetBoundary" in e]


def test_full_pipeline_streams_retrieve_rerank_and_abstract_in_order() -> None:
    reranker = FakeReranker([0.1, 0.9, 0.4, 0.8])
    chat_model = FakeChat()
    chat = ChatConfig(reranker_id=RR, llm_id=LL, relevance_threshold=0.3, max_results=2, llm_temp=0.5)
    events = run(chat, Models(reranker, chat_model))
    assert outline(events) == [
        ("BEGIN", "retrieve", 4),
        ("def", "m1"),
        ("c1", 0, 0.9),
        ("def", "m2"),
        ("c2", 1, 0.8),
        ("c3", 0, 0.7),
        ("def", "m3"),
        ("c4", 2, 0.6),
        ("END", "", None),
        # The rerank set: the reranker's scores, memories defined above keep their index.
        ("BEGIN", "rerank", 2),
        ("c2", 1, 0.9),
        ("c4", 2, 0.8),
        ("END", "", None),
        ("abstract", "The committee approved it."),
    ]
    retrieve_id, _, rerank_id, _ = set_ids(events)
    assert retrieve_id == "R1" and rerank_id != "R1"
    assert events[-1]["abstractReply"] == {
        "text": "The committee approved it.",
        "relevanceScore": single(0.9),
        "resultSetId": rerank_id,
    }
    # The reranker saw the message and the chunk texts in vector order; the LLM the two kept items.
    assert reranker.calls == [("who approved the budget?", [i.source["memory"] for i in ITEMS])]
    [call] = chat_model.calls
    assert call["temperature"] == 0.5 and call["max_tokens"] == 512
    user = call["messages"][-1]["content"]
    assert "The budget was approved in March." in user and "Cats sleep all day." in user
    assert "Berlin" not in user


def test_without_ids_only_feature_disabled() -> None:
    events = run(ChatConfig(max_results=1), Models())
    assert outline(events)[-2:] == [("status", "FEATURE_DISABLED"), ("status", "FEATURE_DISABLED")]
    assert [o[1] for o in outline(events) if o[0] == "BEGIN"] == ["retrieve"]


def test_llm_only_streams_a_postprocess_set_with_vector_scores() -> None:
    chat_model = FakeChat()
    chat = ChatConfig(llm_id=LL, max_results=3, chronological_resort=True)
    events = run(chat, Models(chat=chat_model), requested_size=4, requested_size_set=True)
    out = outline(events)
    assert out[9:] == [
        ("status", "FEATURE_DISABLED"),
        ("BEGIN", "postprocess", 3),
        # re-sorted oldest memory first (m2 < m3 < m1; m1's chunks in rank order), then capped: the
        # documented order puts the re-sort before max_results
        ("c2", 1, 0.8),
        ("c4", 2, 0.6),
        ("c1", 0, 0.9),
        ("END", "", None),
        ("abstract", "The committee approved it."),
    ]
    assert events[-1]["abstractReply"]["resultSetId"] == set_ids(events)[2]
    assert events[-1]["abstractReply"]["relevanceScore"] == single(0.9)
    assert "Berlin office closes" not in chat_model.calls[0]["messages"][-1]["content"]


def test_reranker_only_has_no_abstract() -> None:
    events = run(ChatConfig(reranker_id=RR), Models(FakeReranker([0.5, 0.6, 0.7, 0.8])))
    out = outline(events)
    assert out[9:] == [
        ("BEGIN", "rerank", 4),
        ("c4", 2, 0.8),
        ("c3", 0, 0.7),
        ("c2", 1, 0.6),
        ("c1", 0, 0.5),
        ("END", "", None),
        ("status", "FEATURE_DISABLED"),
    ]


def test_unknown_ids_degrade_and_vector_results_stand() -> None:
    events = run(ChatConfig(reranker_id=LL, llm_id=RR, max_results=1), Models(FakeReranker(), FakeChat()))
    out = outline(events)
    assert out[:9] == outline(run(None, None))
    assert out[9:] == [
        ("status", "NOT_FOUND"),
        ("status", "RERANKING_FAILED"),
        ("status", "NOT_FOUND"),
        ("status", "SUMMARIZATION_FAILED"),
    ]
    statuses = [e["status"] for e in events if "status" in e]
    assert statuses[0] == {
        "code": "NOT_FOUND",
        "message": "Reranker not found",
        "details": {"reranker_id": LL},
    }
    assert statuses[2]["message"] == "LLM not found" and statuses[2]["details"] == {"llm_id": RR}
    assert statuses[3]["details"]["llm_id"] == RR


@pytest.mark.parametrize(
    ("reranker", "reason"),
    [
        (FakeReranker(error=ProviderUnavailable("tei down", provider="tei")), "UNAVAILABLE"),
        (FakeReranker(error=ProviderBadAnswer("not JSON", provider="tei")), "BAD_ANSWER"),
        (FakeReranker(scores=[0.5]), "BAD_ANSWER"),  # one score for four documents
        (FakeReranker(scores=[0.5, float("nan"), 0.1, 0.2]), "BAD_ANSWER"),
        (FakeReranker(error=RuntimeError("boom")), "INTERNAL"),
        (FakeReranker(error=Overloaded("the reranking queue is full")), "RESOURCE_EXHAUSTED"),
        (FakeReranker(error=ProviderRejected("401 invalid key", provider="cohere")), "REJECTED"),
    ],
)
def test_reranker_failures_fall_back_to_vector_results(reranker: FakeReranker, reason: str) -> None:
    chat_model = FakeChat()
    events = run(ChatConfig(reranker_id=RR, llm_id=LL, max_results=2), Models(reranker, chat_model))
    out = outline(events)
    assert out[9:] == [("status", "RERANKING_FAILED"), ("abstract", "The committee approved it.")]
    status = events[9]["status"]
    assert status["details"]["reason"] == reason and status["message"].startswith("Reranking failed: ")
    # No second set: the reply rests on the best two vector hits and links to the retrieve set.
    assert events[-1]["abstractReply"]["resultSetId"] == "R1"
    assert "Berlin office opens" in chat_model.calls[0]["messages"][-1]["content"]


@pytest.mark.parametrize(
    ("error", "finish", "code", "reason"),
    [
        (
            ProviderUnavailable("connection refused", provider="openai"),
            "stop",
            "SUMMARIZATION_FAILED",
            "UNAVAILABLE",
        ),
        (
            ProviderBadAnswer("a chat completion with empty content", provider="openai"),
            "stop",
            "SUMMARIZATION_FAILED",
            "BAD_ANSWER",
        ),
        (ProviderTimeout("no answer in 30 s", provider="openai"), "stop", "SUMMARIZATION_TIMEOUT", "TIMEOUT"),
        (None, "length", "SUMMARIZATION_FAILED", "TOKEN_BUDGET"),
    ],
)
def test_llm_failures_are_statuses_and_the_stream_completes(
    error: Exception | None, finish: str, code: str, reason: str
) -> None:
    chat_model = FakeChat(error=error)
    chat_model.finish = finish
    events = run(ChatConfig(reranker_id=RR, llm_id=LL), Models(FakeReranker(), chat_model))
    assert outline(events)[-1] == ("status", code)
    assert events[-1]["status"]["details"]["reason"] == reason
    assert not any("abstractReply" in e for e in events)
    assert [o[1] for o in outline(events) if o[0] == "BEGIN"] == ["retrieve", "rerank"]


def test_token_budget_from_output_budget_and_llm_default() -> None:
    chat_model = FakeChat()
    models = Models(chat=chat_model)
    models.max_tokens = 77
    run(ChatConfig(llm_id=LL), models)
    run(ChatConfig(llm_id=LL, gen_token_budget=128), models)
    run(ChatConfig(llm_id=LL, gen_token_budget=128), models, output_budget_tokens=32)
    assert [c["max_tokens"] for c in chat_model.calls] == [77, 128, 32]
    assert [c["temperature"] for c in chat_model.calls] == [0.3, 0.3, 0.3]


def test_caller_deadline_in_the_llm_call_fails_the_stream() -> None:
    chat_model = FakeChat(delay=5.0)

    async def go() -> tuple[list[dict[str, Any]], StreamFailure]:
        chat = ChatConfig(reranker_id=RR, llm_id=LL)
        plan = RetrievalPlan(request=request(chat), items=ITEMS, result_set_id="R1")
        deadline = asyncio.get_running_loop().time() + 0.3
        events: list[dict[str, Any]] = []
        with pytest.raises(StreamFailure) as caught:
            async for event in retrieval_events(
                plan, loader(CREATED), deadline=deadline, models=Models(FakeReranker(), chat_model)
            ):
                events.append(event)
        return events, caught.value

    started = asyncio.run(asyncio.wait_for(_timed(go()), 3))
    (events, failure), elapsed = started
    assert elapsed < 2.0
    # Both sets were sent before the LLM call timed out.
    assert [o[1] for o in outline(events) if o[0] == "BEGIN"] == ["retrieve", "rerank"]
    assert failure.code == "DEADLINE_EXCEEDED"
    assert failure.status["status"]["code"] == "SUMMARIZATION_TIMEOUT"
    assert failure.status["status"]["details"]["reason"] == "DEADLINE_EXCEEDED"


def test_caller_deadline_in_the_reranker_fails_the_stream_and_cancels_it() -> None:
    reranker = FakeReranker(delay=5.0)

    async def go() -> StreamFailure:
        chat = ChatConfig(reranker_id=RR)
        plan = RetrievalPlan(request=request(chat), items=ITEMS, result_set_id="R1")
        deadline = asyncio.get_running_loop().time() + 0.2
        with pytest.raises(StreamFailure) as caught:
            async for _ in retrieval_events(
                plan, loader(CREATED), deadline=deadline, models=Models(reranker)
            ):
                pass
        return caught.value

    failure = asyncio.run(go())
    assert failure.status["status"]["code"] == "RERANKING_FAILED"
    assert failure.status["status"]["details"]["reason"] == "DEADLINE_EXCEEDED"
    assert reranker.cancelled


def test_empty_retrieval_still_asks_the_llm() -> None:
    chat_model = FakeChat("Nothing is known about that.")
    events = run(ChatConfig(reranker_id=RR, llm_id=LL), Models(FakeReranker(), chat_model), items=[])
    assert outline(events) == [
        ("BEGIN", "retrieve", 0),
        ("END", "", None),
        ("BEGIN", "rerank", 0),
        ("END", "", None),
        ("abstract", "Nothing is known about that."),
    ]
    assert events[-1]["abstractReply"]["relevanceScore"] == 0.0
    assert "(no memories were retrieved)" in chat_model.calls[0]["messages"][-1]["content"]


def test_fetch_memory_false_keeps_indexes_across_sets() -> None:
    events = run(ChatConfig(reranker_id=RR), Models(FakeReranker([0.1, 0.2, 0.3, 0.4])), fetch_memory=False)
    out = outline(events)
    assert ("def", "m1") not in out
    assert out[6:11] == [
        ("BEGIN", "rerank", 4),
        ("c4", 2, 0.4),
        ("c3", 0, 0.3),
        ("c2", 1, 0.2),
        ("c1", 0, 0.1),
    ]


async def _timed(work: Any) -> tuple[Any, float]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    result = await work
    return result, loop.time() - start


def test_vector_score_conventions_and_single_precision() -> None:
    assert vector_score(0.25, "cosine") == 0.25 and vector_score(0.25, "live") == -0.25
    assert vector_score(0.1, "cosine") == 0.10000000149011612 == single(0.1)
    assert vector_score(0.0, "live") == 0.0 and str(vector_score(0.0, "live")) == "0.0"  # never -0.0
    chat = ChatConfig(llm_id=LL, max_results=2)
    events = run(chat, Models(chat=FakeChat()), convention="live")
    retrieved = [o for o in outline(events)[:9] if len(o) == 3 and o[0].startswith("c")]
    # Live: -cos, best first, i.e. ascending (most negative first); the postprocess set too.
    assert [o[2] for o in retrieved] == [-0.9, -0.8, -0.7, -0.6]
    assert [o[2] for o in outline(events)[11:13]] == [-0.9, -0.8]
    # The reply's score stays on the documented 0..1 scale; reranker scores are never negated.
    assert events[-1]["abstractReply"]["relevanceScore"] == single(0.9)
    reranked = run(ChatConfig(reranker_id=RR), Models(FakeReranker([0.5, 0.6, 0.7, 0.8])), convention="live")
    assert [o[2] for o in outline(reranked)[10:14]] == [0.8, 0.7, 0.6, 0.5]
