"""GoodMem retrieve, pure parts: request parsing, headers, framing, ranking and event assembly.

Events are checked against both real clients' own models (``goodmem`` 0.1.43 and ``goodmem-client``
1.5.14), so a shape either would reject fails here, not in production.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Mapping
from typing import Any

import pytest
from goodmem.models.retrieve_memory_event import RetrieveMemoryEvent as GenBEvent
from multidict import CIMultiDict, MultiDict, MultiDictProxy

from proxy.api.goodmem.retrieve import parse_stream_terminal, parse_timeout_ms
from proxy.api.goodmem.retrieve_body import parse_post_body
from proxy.api.goodmem.retrieve_events import (
    EventAssembler,
    StreamFailure,
    post_processor_statuses,
    request_statuses,
    retrieval_events,
)
from proxy.api.goodmem.retrieve_wire import parse_get_query
from proxy.api.goodmem.streaming import (
    completed_record,
    error_record,
    ndjson_line,
    negotiate_format,
    sse_frame,
)
from proxy.core.goodmem.records import MemoryRecord
from proxy.core.goodmem.retrieve import (
    ChatConfig,
    HnswOptions,
    RankedChunk,
    RetrievalPlan,
    RetrieveRequest,
    SpaceKey,
)
from proxy.core.goodmem.retrieve.rank import WeightedHits, cosine_from_os_score, fuse_space, merge_spaces
from proxy.core.goodmem.retrieve.request import CHAT_POST_PROCESSOR, query_text
from proxy.errors import BadRequest
from tests.goodmem_helpers import memory_record

with warnings.catch_warnings():  # goodmem-client announces its own deprecation on import
    warnings.simplefilter("ignore", DeprecationWarning)
    from goodmem_client.streaming import MemoryStreamClient
    from goodmem_client.streaming import RetrieveMemoryEvent as GenAEvent

S1 = "0192f6a0-0000-7000-8000-000000000001"
S2 = "0192f6a0-0000-7000-8000-000000000002"
E1 = "0192f6a0-0000-7000-8000-0000000000e1"


def body(**extra: Any) -> dict[str, Any]:
    return {"message": "who approved the budget?", "spaceKeys": [{"spaceId": S1}], **extra}


# --- headers ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "fmt"),
    [
        (None, "ndjson"),
        ("", "ndjson"),
        ("*/*", "ndjson"),
        ("application/json", "ndjson"),
        ("application/x-ndjson", "ndjson"),
        ("text/event-stream", "sse"),
        ("Text/Event-Stream; charset=utf-8", "sse"),
        ("application/x-ndjson, text/event-stream", "sse"),
        ("application/x-ndjson;q=1, text/event-stream;q=0.5", "ndjson"),
        ("text/event-stream;q=0", "ndjson"),
    ],
)
def test_negotiate_format(accept: str | None, fmt: str) -> None:
    assert negotiate_format(accept) == fmt


@pytest.mark.parametrize("value", ["1", "30000", "86400000", " 250 "])
def test_timeout_header_valid(value: str) -> None:
    assert parse_timeout_ms(CIMultiDict({"GoodMem-Timeout-Ms": value})) == int(value)


@pytest.mark.parametrize(
    "value", ["0", "-5", "+5", "1.5", "1e3", "86400001", "", "abc", "0x10", "99999999999999"]
)
def test_timeout_header_invalid(value: str) -> None:
    with pytest.raises(BadRequest):
        parse_timeout_ms(CIMultiDict({"goodmem-timeout-ms": value}))


def test_timeout_header_absent_and_duplicate() -> None:
    assert parse_timeout_ms(CIMultiDict()) is None
    dup: CIMultiDict[str] = CIMultiDict([("GoodMem-Timeout-Ms", "5"), ("goodmem-timeout-ms", "6")])
    with pytest.raises(BadRequest, match="once"):
        parse_timeout_ms(dup)


def test_stream_terminal_header() -> None:
    assert parse_stream_terminal(CIMultiDict()) is False
    assert parse_stream_terminal(CIMultiDict({"GoodMem-Stream-Terminal": "true"})) is True
    assert parse_stream_terminal(CIMultiDict({"goodmem-stream-terminal": "TRUE"})) is True
    assert parse_stream_terminal(CIMultiDict({"GoodMem-Stream-Terminal": "false"})) is False
    with pytest.raises(BadRequest):
        parse_stream_terminal(CIMultiDict({"GoodMem-Stream-Terminal": "yes"}))


# --- framing ----------------------------------------------------------------------------------------------


def test_ndjson_line_is_one_compact_line() -> None:
    line = ndjson_line({"status": {"code": "X", "message": "a\nb ü"}})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line == '{"status":{"code":"X","message":"a\\nb ü"}}\n'.encode()


def test_sse_frame_shape_and_old_client_parser() -> None:
    event = {
        "retrievedItem": {"chunk": {"resultSetId": "r", "chunk": {}, "memoryIndex": 0, "relevanceScore": 0.5}}
    }
    frame = sse_frame("item", event).decode()
    assert (
        frame == 'event: item\ndata: {"retrievedItem":{"chunk":{"resultSetId":"r","chunk":{},'
        '"memoryIndex":0,"relevanceScore":0.5}}}\n\n'
    )
    client = MemoryStreamClient.__new__(MemoryStreamClient)
    parsed = client._parse_sse_event(frame.strip())
    assert parsed is not None and parsed.retrieved_item is not None
    assert client._parse_sse_event(sse_frame("close", completed_record()).decode().strip()) is None


def test_terminal_records_are_ignored_by_both_clients() -> None:
    for record in (completed_record(), error_record("DEADLINE_EXCEEDED", "late")):
        assert not set(record) & {
            "resultSetBoundary",
            "memoryDefinition",
            "retrievedItem",
            "abstractReply",
            "status",
        }
        gen_b = GenBEvent.model_validate(record)
        assert all(getattr(gen_b, f) is None for f in ("result_set_boundary", "retrieved_item", "status"))
        GenAEvent.model_validate(record)


# --- POST body ----------------------------------------------------------------------------------------------


def test_post_defaults() -> None:
    req = parse_post_body(body())
    assert req.requested_size == 20
    assert (req.fetch_memory, req.fetch_memory_content) == (True, False)
    assert req.space_keys == (SpaceKey(S1),)
    assert req.hnsw is None and req.chat is None


def test_post_full_request() -> None:
    req = parse_post_body(
        body(
            spaceKeys=[
                {
                    "spaceId": S1,
                    "filter": "CAST(val('$.a') AS TEXT) = 'x'",
                    "embedderWeights": [{"embedderId": E1, "weight": -1.5}],
                },
                {"spaceId": S2},
            ],
            requestedSize=0,
            fetchMemoryContent=True,
            context=[{"text": "focus"}, {"binary": {"contentType": "image/png", "data": "aGk="}}],
            hnsw={
                "efSearch": 200,
                "iterativeScan": "ITERATIVE_SCAN_RELAXED_ORDER",
                "maxScanTuples": 20000,
                "scanMemMultiplier": 2.5,
            },
            postProcessor={
                "name": CHAT_POST_PROCESSOR,
                "config": {"max_results": 3, "chronological_resort": False},
            },
            outputBudget={"tokens": 512},
            logging={"enabled": False},
            unknownField=1,
        )
    )
    assert req.requested_size == 20
    assert req.space_keys[0].embedder_weights is not None
    assert req.space_keys[0].embedder_weights[0].weight == -1.5
    assert req.space_keys[0].filter == "CAST(val('$.a') AS TEXT) = 'x'"
    assert req.context_texts == ("focus",) and req.binary_context_count == 1
    assert req.hnsw == HnswOptions(200, "ITERATIVE_SCAN_RELAXED_ORDER", 20000, 2.5)
    assert req.chat == ChatConfig(max_results=3, chronological_resort=False)
    assert req.output_budget_tokens == 512
    assert query_text(req) == "who approved the budget?\nfocus"


def test_post_snake_case_is_accepted() -> None:
    req = parse_post_body(
        {"message": "m", "space_keys": [{"space_id": S1}], "requested_size": 3, "fetch_memory": False}
    )
    assert req.requested_size == 3 and req.fetch_memory is False


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        ({"message": ""}, "message"),
        ({"message": "x" * 10001}, "message"),
        ({"message": 5}, "message"),
        ({"spaceKeys": []}, "spaceKeys"),
        ({"spaceKeys": [{"spaceId": "not a uuid!"}]}, "UUID"),
        ({"spaceKeys": [{}]}, "spaceId"),
        ({"requestedSize": -1}, "requestedSize"),
        ({"requestedSize": 1.5}, "requestedSize"),
        ({"requestedSize": "5"}, "requestedSize"),
        ({"requestedSize": 10001}, "requestedSize"),
        ({"fetchMemory": False, "fetchMemoryContent": True}, "fetchMemoryContent"),
        ({"fetchMemory": "yes"}, "fetchMemory"),
        ({"hnsw": {"efSearch": 0}}, "efSearch"),
        ({"hnsw": {"efSearch": 1001}}, "efSearch"),
        ({"hnsw": {"iterativeScan": "SOMETIMES"}}, "iterativeScan"),
        ({"hnsw": {"maxScanTuples": 0}}, "maxScanTuples"),
        ({"hnsw": {"scanMemMultiplier": 0.5}}, "scanMemMultiplier"),
        ({"context": [{"text": "a", "binary": {"contentType": "x", "data": ""}}]}, "exactly one"),
        ({"context": [{"binary": {"contentType": "", "data": ""}}]}, "contentType"),
        ({"context": [{"binary": {"contentType": "image/png", "data": "%%%"}}]}, "base64"),
        ({"postProcessor": {"name": "com.example.Nope"}}, "post-processor"),
        ({"postProcessor": {"name": ""}}, "postProcessor.name"),
        ({"postProcessor": {"name": CHAT_POST_PROCESSOR, "config": {"llm_temp": 3}}}, "llm_temp"),
        ({"postProcessor": {"name": CHAT_POST_PROCESSOR, "config": {"max_results": 0}}}, "max_results"),
        ({"postProcessor": {"name": CHAT_POST_PROCESSOR, "config": {"reranker_id": "r1"}}}, "reranker_id"),
        ({"postProcessor": {"name": CHAT_POST_PROCESSOR, "config": {"bogus": 1}}}, "bogus"),
        ({"outputBudget": {"tokens": 0}}, "outputBudget"),
        ({"spaceKeys": [{"spaceId": S1, "embedderWeights": [{"embedderId": E1, "weight": "x"}]}]}, "weight"),
        ({"spaceKeys": [{"spaceId": S1, "filter": 7}]}, "filter"),
    ],
)
def test_post_validation_errors(patch: dict[str, Any], fragment: str) -> None:
    with pytest.raises(BadRequest, match=fragment):
        parse_post_body(body(**patch))


def test_post_body_must_be_object() -> None:
    with pytest.raises(BadRequest):
        parse_post_body([1, 2])


def test_blank_filter_means_no_filter() -> None:
    assert parse_post_body(body(spaceKeys=[{"spaceId": S1, "filter": "  "}])).space_keys[0].filter is None


# --- GET query ----------------------------------------------------------------------------------------------


def query(pairs: list[tuple[str, str]]) -> MultiDictProxy[str]:
    return MultiDictProxy(MultiDict(pairs))


def test_get_old_client_wire_form() -> None:
    # GET /v1/memories:retrieve?message=hi+there&spaceIds=a%2Cb&requestedSize=5&pp_reranker_id=…
    req = parse_get_query(
        query(
            [
                ("message", "hi there"),
                ("spaceIds", f"{S1},{S2}"),
                ("requestedSize", "5"),
                ("fetchMemory", "false"),
                ("pp_reranker_id", E1),
                ("pp_max_results", "3"),
                ("pp_chronological_resort", "false"),
                ("filter", "x = 1"),
            ]
        )
    )
    assert [k.space_id for k in req.space_keys] == [S1, S2]
    assert all(k.filter == "x = 1" for k in req.space_keys)
    assert req.requested_size == 5 and req.fetch_memory is False
    assert req.chat == ChatConfig(reranker_id=E1, max_results=3, chronological_resort=False)


def test_get_openapi_names_and_repeated_space_ids() -> None:
    req = parse_get_query(
        query(
            [
                ("message", "m"),
                ("spaceIds", S1),
                ("spaceIds", S2),
                ("postProcessorLlmTemp", "0.5"),
                ("postProcessorRelevanceThreshold", "0.7"),
            ]
        )
    )
    assert len(req.space_keys) == 2
    assert req.chat == ChatConfig(llm_temp=0.5, relevance_threshold=0.7)


@pytest.mark.parametrize(
    "pairs",
    [
        [("spaceIds", S1)],
        [("message", "m")],
        [("message", "m"), ("spaceIds", S1), ("requestedSize", "-2")],
        [("message", "m"), ("spaceIds", S1), ("requestedSize", "two")],
        [("message", "m"), ("spaceIds", S1), ("fetchMemory", "maybe")],
        [("message", "m"), ("spaceIds", S1), ("pp_llm_temp", "hot")],
        [("message", "m"), ("spaceIds", S1), ("pp_llm_id", "x"), ("postProcessorLlmId", "y")],
        [("message", "m"), ("spaceIds", "bad id!")],
    ],
)
def test_get_validation_errors(pairs: list[tuple[str, str]]) -> None:
    with pytest.raises(BadRequest):
        parse_get_query(query(pairs))


# --- statuses -----------------------------------------------------------------------------------------------


def test_post_processor_statuses_match_live_wording() -> None:
    assert post_processor_statuses(None) == []
    events = post_processor_statuses(ChatConfig())
    assert events == [
        {
            "status": {
                "code": "FEATURE_DISABLED",
                "message": "Reranking disabled: no reranker configured.",
                "details": {"feature": "reranking", "required_param": "reranker_id"},
            }
        },
        {
            "status": {
                "code": "FEATURE_DISABLED",
                "message": "Abstract reply generation disabled",
                "details": {"feature": "summarization", "required_param": "llm_id"},
            }
        },
    ]
    # With ids the stages run (tests/test_goodmem_postprocess.py); nothing is disabled.
    assert post_processor_statuses(ChatConfig(reranker_id=E1, llm_id=E1)) == []
    assert [e["status"]["details"]["feature"] for e in post_processor_statuses(ChatConfig(llm_id=E1))] == [
        "reranking"
    ]
    for event in events:
        GenBEvent.model_validate(event)


def test_pgvector_knobs_are_answered_not_dropped() -> None:
    req = RetrieveRequest("m", (SpaceKey(S1),), hnsw=HnswOptions(ef_search=50))
    assert request_statuses(req) == []
    req = RetrieveRequest(
        "m",
        (SpaceKey(S1),),
        hnsw=HnswOptions(iterative_scan="ITERATIVE_SCAN_STRICT_ORDER", max_scan_tuples=5),
    )
    [status] = request_statuses(req)
    assert status["status"]["code"] == "FEATURE_DISABLED"
    assert status["status"]["details"]["ignored"] == "iterativeScan,maxScanTuples"
    GenBEvent.model_validate(status)


# --- ranking ------------------------------------------------------------------------------------------------


def test_cosine_from_lucene_score() -> None:
    assert cosine_from_os_score(1.0) == 1.0
    assert cosine_from_os_score(0.5) == 0.0
    assert cosine_from_os_score(0.96) == pytest.approx(0.92)


def test_fuse_single_embedder_is_its_cosine() -> None:
    assert fuse_space([WeightedHits(2.0, {"a": 0.9, "b": 0.1})]) == {"a": 0.9, "b": 0.1}


def test_fuse_weighted_mean_and_negative_weights() -> None:
    fused = fuse_space(
        [
            WeightedHits(1.0, {"a": 0.9, "b": 0.5}),
            WeightedHits(3.0, {"a": 0.1, "b": 0.7, "c": 0.8}),
            WeightedHits(-1.0, {"a": 0.2, "b": 0.9, "d": 0.99}),
            WeightedHits(0.0, {"e": 1.0}),
        ]
    )
    # Candidates come from positive weights only; a negative weight penalises, zero is ignored.
    assert set(fused) == {"a", "b", "c"}
    assert fused["a"] == pytest.approx((0.9 + 0.3 - 0.2) / 5)
    assert fused["b"] == pytest.approx((0.5 + 2.1 - 0.9) / 5)
    assert fused["c"] == pytest.approx((0.0 + 2.4 - 0.0) / 5)
    assert fuse_space([WeightedHits(0.0, {"a": 1.0})]) == {}
    assert fuse_space([WeightedHits(-1.0, {"a": 1.0})]) == {}


def chunk(cid: str, mid: str, score: float, space: str = S1, **src: Any) -> RankedChunk:
    source = {"memory": f"text of {cid}", "memory_id": mid, "created_time": 1000, "owner_id": "u1", **src}
    return RankedChunk(chunk_id=cid, memory_id=mid, space_id=space, score=score, source=source)


def test_merge_spaces_best_first_dedup_and_cap() -> None:
    s1 = [chunk("c1", "m1", 0.9), chunk("c2", "m1", 0.4)]
    s2 = [chunk("c3", "m2", 0.7, S2), chunk("c1", "m1", 0.95)]
    merged = merge_spaces([s1, s2], 3)
    assert [(c.chunk_id, c.score) for c in merged] == [("c1", 0.95), ("c3", 0.7), ("c2", 0.4)]
    assert [c.chunk_id for c in merge_spaces([s1, s2], 1)] == ["c1"]
    tied = merge_spaces([[chunk("x", "m", 0.5)], [chunk("y", "m", 0.5)]], 5)
    assert [c.chunk_id for c in tied] == ["x", "y"]


# --- event assembly -----------------------------------------------------------------------------------------


def memory(mid: str, space: str = S1) -> MemoryRecord:
    return memory_record(mid, space, actor="u1")


ITEMS = [chunk("c1", "m1", 0.9), chunk("c2", "m2", 0.8), chunk("c3", "m1", 0.7), chunk("c4", "m3", 0.6)]


def collect(plan: RetrievalPlan, loader: Any, deadline: float | None = None) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        return [e async for e in retrieval_events(plan, loader, deadline=deadline)]

    return asyncio.run(run())


def loader_for(known: set[str], calls: list[list[str]] | None = None) -> Any:
    async def load(ids: list[str]) -> Mapping[str, MemoryRecord]:
        if calls is not None:
            calls.append(list(ids))
        return {i: memory(i) for i in ids if i in known}

    return load


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [next(iter(e)) for e in events]


def test_event_order_definitions_and_memory_index() -> None:
    plan = RetrievalPlan(request=RetrieveRequest("m", (SpaceKey(S1),)), items=ITEMS, result_set_id="R1")
    calls: list[list[str]] = []
    events = collect(plan, loader_for({"m1", "m2", "m3"}, calls))
    assert kinds(events) == [
        "resultSetBoundary",
        "memoryDefinition",
        "retrievedItem",
        "memoryDefinition",
        "retrievedItem",
        "retrievedItem",
        "memoryDefinition",
        "retrievedItem",
        "resultSetBoundary",
    ]
    assert events[0] == {
        "resultSetBoundary": {
            "resultSetId": "R1",
            "kind": "BEGIN",
            "stageName": "retrieve",
            "expectedItems": 4,
        }
    }
    assert events[-1] == {"resultSetBoundary": {"resultSetId": "R1", "kind": "END", "stageName": ""}}
    defs = [e["memoryDefinition"]["memoryId"] for e in events if "memoryDefinition" in e]
    refs = [e["retrievedItem"]["chunk"] for e in events if "retrievedItem" in e]
    assert defs == ["m1", "m2", "m3"]
    assert [defs[r["memoryIndex"]] for r in refs] == [r["chunk"]["memoryId"] for r in refs]
    assert [r["memoryIndex"] for r in refs] == [0, 1, 0, 2]
    # The live convention by default: -cos in single precision, streamed best first (most negative first).
    assert [r["relevanceScore"] for r in refs] == [
        -0.8999999761581421,
        -0.800000011920929,
        -0.699999988079071,
        -0.6000000238418579,
    ]
    assert all(r["resultSetId"] == "R1" for r in refs)
    assert refs[0]["chunk"]["chunkText"] == "text of c1" and refs[0]["chunk"]["vectorStatus"] == "COMPLETED"
    assert calls == [["m1", "m2", "m3"]]
    # Both clients accept every event.
    for event in events:
        GenBEvent.model_validate(event)
        GenAEvent.model_validate(event)


def test_fetch_memory_false_keeps_would_be_indexes() -> None:
    req = RetrieveRequest("m", (SpaceKey(S1),), fetch_memory=False)
    calls: list[list[str]] = []
    events = collect(RetrievalPlan(request=req, items=ITEMS), loader_for(set(), calls))
    assert "memoryDefinition" not in kinds(events)
    assert [e["retrievedItem"]["chunk"]["memoryIndex"] for e in events if "retrievedItem" in e] == [
        0,
        1,
        0,
        2,
    ]
    assert calls == []


def test_missing_memory_is_reported_and_its_chunks_left_out() -> None:
    events = collect(
        RetrievalPlan(request=RetrieveRequest("m", (SpaceKey(S1),)), items=ITEMS), loader_for({"m1", "m3"})
    )
    statuses = [e["status"] for e in events if "status" in e]
    assert [s["code"] for s in statuses] == ["MEMORY_LOAD_FAILED"]
    refs = [e["retrievedItem"]["chunk"] for e in events if "retrievedItem" in e]
    assert [r["chunk"]["chunkId"] for r in refs] == ["c1", "c3", "c4"]
    assert [r["memoryIndex"] for r in refs] == [0, 0, 1]


def test_empty_result_still_has_boundaries_and_statuses_around_it() -> None:
    req = RetrieveRequest("m", (SpaceKey(S1),), chat=ChatConfig(), hnsw=HnswOptions(max_scan_tuples=3))
    events = collect(RetrievalPlan(request=req, items=[]), loader_for(set()))
    assert kinds(events) == ["status", "resultSetBoundary", "resultSetBoundary", "status", "status"]
    assert events[1]["resultSetBoundary"]["expectedItems"] == 0


def test_loads_in_batches() -> None:
    items = [chunk(f"c{i}", f"m{i}", 1 - i / 100) for i in range(70)]
    calls: list[list[str]] = []
    collect(
        RetrievalPlan(request=RetrieveRequest("m", (SpaceKey(S1),)), items=items), loader_for(set(), calls)
    )
    assert [len(c) for c in calls] == [32, 32, 6]


def test_deadline_while_loading_is_a_stream_failure() -> None:
    async def slow(ids: list[str]) -> Mapping[str, MemoryRecord]:
        await asyncio.sleep(5)
        return {}

    async def run() -> tuple[list[dict[str, Any]], StreamFailure]:
        seen: list[dict[str, Any]] = []
        deadline = asyncio.get_running_loop().time() + 0.05
        plan = RetrievalPlan(request=RetrieveRequest("m", (SpaceKey(S1),)), items=ITEMS)
        with pytest.raises(StreamFailure) as info:
            async for event in retrieval_events(plan, slow, deadline=deadline):
                seen.append(event)
        return seen, info.value

    seen, failure = asyncio.run(run())
    assert kinds(seen) == ["resultSetBoundary"]
    assert failure.code == "DEADLINE_EXCEEDED"
    assert failure.status["status"]["code"] == "MEMORY_LOAD_FAILED"
    GenBEvent.model_validate(failure.status)


def test_events_serialise_as_ndjson_for_both_clients() -> None:
    plan = RetrievalPlan(request=RetrieveRequest("m", (SpaceKey(S1),), chat=ChatConfig()), items=ITEMS[:2])
    raw = b"".join(ndjson_line(e) for e in collect(plan, loader_for({"m1", "m2"})))
    lines = raw.decode().splitlines()
    assert all(json.loads(line) for line in lines)
    parsed = [GenBEvent.model_validate_json(line) for line in lines]
    assert sum(1 for p in parsed if p.retrieved_item) == 2


def test_assembler_reuses_index_per_memory() -> None:
    assembler = EventAssembler("R", fetch_memory=True)
    first = assembler.item_events(chunk("a", "m", 0.5), memory("m"))
    second = assembler.item_events(chunk("b", "m", 0.4), memory("m"))
    assert kinds(first) == ["memoryDefinition", "retrievedItem"]
    assert kinds(second) == ["retrievedItem"]
    assert second[0]["retrievedItem"]["chunk"]["memoryIndex"] == 0
