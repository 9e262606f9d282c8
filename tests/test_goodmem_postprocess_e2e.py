"""The ChatPostProcessor end to end: the real ``python -m proxy`` on the real node, models named at start-up
(the tiny local cross-encoder, a TEI ``/rerank`` double, the FakeLLM, a slow OpenAI-compatible double), and
both SDKs unmodified: ``goodmem`` (Gen B, POST with its flat post-processor keywords) and ``goodmem-client``
(Gen A, GET with ``pp_*`` parameters, NDJSON and SSE).

Oracles: the TEI double's scores are word overlap (recomputed here), the cross-encoder's are computed with
plain transformers (tests/test_local_reranker.py), and the abstract text is the FakeLLM's deterministic
answer to the prompt it recorded, which is checked against the template rendered here.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from aiohttp import web
from goodmem import Goodmem
from goodmem.models.llm_sampling_params import LLMSamplingParams
from goodmem.models.retrieve_memory_event import RetrieveMemoryEvent

from tests.conftest import ProxyProcess
from tests.goodmem_helpers import root_api_key
from tests.support.fake_llm import FakeLLM
from tests.test_local_reranker import _oracle, _write_cross_encoder

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import goodmem_client
    from goodmem_client.streaming import MemoryStreamClient

pytestmark = pytest.mark.node

CHAT = "com.goodmem.retrieval.postprocess.ChatPostProcessorFactory"
# GoodMem validates post-processor ids as UUIDs; start-up ids may be any string, so these are UUIDs.
CE = "0192f6a0-0000-7000-8000-0000000000c1"
TEI = "0192f6a0-0000-7000-8000-0000000000c2"
TEI_GARBAGE = "0192f6a0-0000-7000-8000-0000000000c3"
LLM = "0192f6a0-0000-7000-8000-0000000000d1"
SLOW = "0192f6a0-0000-7000-8000-0000000000d2"

TEXTS = [  # created in this order, so oldest first
    "The 2024 budget was approved by the finance committee in March.",
    "Cats sleep for most of the day and love warm windowsills.",
    "Budget approvals require two signatures from the finance team.",
    "The Berlin office opens at nine and the budget meeting is on Monday.",
]
QUERY = "who approved the budget"


def overlap(query: str, text: str) -> float:
    """The TEI double's score: the share of the query's words found in the text."""
    q = set(re.findall(r"\w+", query.lower()))
    t = set(re.findall(r"\w+", text.lower()))
    return len(q & t) / len(q)


class Doubles:
    """A TEI reranker (``POST /rerank``), a garbage one (``POST /garbage/rerank``) and a slow OpenAI chat
    server (``POST /v1/chat/completions`` after ``delay`` seconds) on one port, in a background thread."""

    def __init__(self) -> None:
        self.delay = 5.0
        self.rerank_calls: list[dict[str, Any]] = []
        self.chat_started = threading.Event()
        self.chat_cancelled = threading.Event()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            app = web.Application()
            app.router.add_post("/rerank", self._rerank)
            app.router.add_post("/garbage/rerank", self._garbage)
            app.router.add_post("/v1/chat/completions", self._slow_chat)
            runner = web.AppRunner(app, handler_cancellation=True)
            self._loop.run_until_complete(runner.setup())
            self._loop.run_until_complete(web.SockSite(runner, sock).start())
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(runner.cleanup())

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _rerank(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.rerank_calls.append(body)
        scored = [{"index": i, "score": overlap(body["query"], t)} for i, t in enumerate(body["texts"])]
        # TEI answers best first; the client must put the scores back in document order.
        return web.json_response(sorted(scored, key=lambda s: -s["score"]))

    async def _garbage(self, request: web.Request) -> web.Response:
        await request.read()
        return web.json_response([{"index": 0, "score": "high"}])

    async def _slow_chat(self, request: web.Request) -> web.Response:
        await request.read()
        self.chat_started.set()
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.chat_cancelled.set()
            raise
        message = {"role": "assistant", "content": "slow answer"}
        return web.json_response({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


@dataclass
class World:
    url: str
    key: str
    gm: Goodmem
    space: str
    memories: list[str]
    created: list[int]
    llm: FakeLLM
    doubles: Doubles
    ce_dir: Path


@pytest.fixture(scope="module")
def world(opensearch_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    ce_dir = _write_cross_encoder(tmp_path_factory.mktemp("pp") / "ce")
    doubles = Doubles()
    llm = FakeLLM().start()
    proxy = ProxyProcess(
        opensearch_url,
        [
            "--reranker",
            f"{CE}={ce_dir}",
            "--reranker",
            f"{TEI}={doubles.url}#provider=tei",
            "--reranker",
            f"{TEI_GARBAGE}={doubles.url}#provider=tei,path=/garbage/rerank",
            "--llm",
            f"{LLM}={llm.url}#provider=openai,model=fake-llm",
            "--llm",
            f"{SLOW}={doubles.url}#provider=openai,model=slow",
            "--model-max-retries",
            "0",
            # float32, so the cross-encoder's scores match the plain-transformers oracle closely; one thread,
            # so the query vector is bit for bit the second process's (cosine_gm)
            "--embed-dtype",
            "float32",
            "--embed-threads",
            "1",
        ],
    )
    try:
        key = root_api_key(proxy.url, opensearch_url)
        gm = Goodmem(base_url=proxy.url, api_key=key)
        embedder = gm.embedders.list()[0].embedder_id
        space = gm.spaces.create(
            name=f"pp-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": embedder}]
        ).space_id
        memories, created = [], []
        for text in TEXTS:
            m = gm.memories.create(space_id=space, original_content=text)
            memories.append(m.memory_id)
            created.append(gm.memories.get(id=m.memory_id).created_at)
            time.sleep(0.01)  # distinct creation times
        yield World(proxy.url, key, gm, space, memories, created, llm, doubles, ce_dir)
        gm.spaces.delete(id=space)
        gm.close()
    finally:
        proxy.stop()
        llm.stop()
        doubles.stop()


def stages(events: list[RetrieveMemoryEvent]) -> list[tuple[str, str, list[tuple[str, int, float]]]]:
    """Each result set: (stage, id, [(chunk text, memoryIndex, score)])."""
    out: list[tuple[str, str, list[tuple[str, int, float]]]] = []
    for e in events:
        b = e.result_set_boundary
        if b and b.kind == "BEGIN":
            out.append((b.stage_name, b.result_set_id, []))
        if e.retrieved_item and e.retrieved_item.chunk:
            ref = e.retrieved_item.chunk
            assert ref.result_set_id == out[-1][1]
            # Gen B parses the chunk into a model, Gen A leaves it a dict
            text = ref.chunk["chunkText"] if isinstance(ref.chunk, dict) else ref.chunk.chunk_text
            out[-1][2].append((text, ref.memory_index, ref.relevance_score))
    return out


def kinds(events: list[Any]) -> list[str]:
    names = ("result_set_boundary", "memory_definition", "retrieved_item", "abstract_reply", "status")
    return [next(n for n in names if getattr(e, n) is not None) for e in events]


def memory_list(events: list[RetrieveMemoryEvent]) -> list[str]:
    return [e.memory_definition.memory_id for e in events if e.memory_definition]


def test_tei_reranker_and_llm_with_the_gen_b_sdk(world: World) -> None:
    world.llm.reset()
    prompt = "Query: {{ userQuery }}\nSummarize these {{ memoryCount }} memories:\n{{ dataSection }}"
    events = world.gm.memories.retrieve(
        message=QUERY,
        space_ids=[world.space],
        requested_size=4,
        reranker_id=TEI,
        relevance_threshold=0.5,
        max_results=2,
        llm_id=LLM,
        llm_temp=0.7,
        sys_prompt="You answer from memories only.",
        prompt=prompt,
        gen_token_budget=200,
        stream=False,
    )
    order = kinds(events)
    # The seed's order: the retrieve set, the rerank set, then the abstract reply, last.
    assert order[0] == "result_set_boundary" and order[-1] == "abstract_reply"
    assert "status" not in order
    (s1, id1, retrieved), (s2, id2, reranked) = stages(events)
    assert (s1, s2) == ("retrieve", "rerank") and id1 != id2
    assert sorted(t for t, _, _ in retrieved) == sorted(TEXTS)
    # Reranker scores (word overlap), best first, threshold 0.5 then cap 2.
    expected = sorted(((t, overlap(QUERY, t)) for t in TEXTS), key=lambda p: -p[1])
    expected = [p for p in expected if p[1] >= 0.5][:2]
    assert [(t, s) for t, _, s in reranked] == expected  # quarters: exact in any precision
    # memoryIndex points into the one client-side list built from the retrieve set's definitions.
    defs = memory_list(events)
    assert len(defs) == 4
    for text, index, _ in reranked:
        assert world.memories[TEXTS.index(text)] == defs[index]
    # The TEI double got the query and the four chunk texts.
    assert world.doubles.rerank_calls[-1]["query"] == QUERY
    assert sorted(world.doubles.rerank_calls[-1]["texts"]) == sorted(TEXTS)
    # The LLM got the rendered templates, the temperature and the budget; its answer is the reply.
    [call] = world.llm.prompts
    assert call.body["temperature"] == 0.7 and call.body["max_tokens"] == 200
    assert call.body["model"] == "fake-llm"
    system, user = call.body["messages"]
    assert system == {"role": "system", "content": "You answer from memories only."}
    kept = sorted((TEXTS.index(t) for t, _ in expected))  # oldest first in the data section
    section = "\n\n".join(
        f"[{n}] {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(world.created[i] / 1000))}\n{TEXTS[i]}"
        for n, i in enumerate(kept, start=1)
    )
    assert user == {
        "role": "user",
        "content": f"Query: {QUERY}\nSummarize these 2 memories:\n{section}",
    }
    reply = events[-1].abstract_reply
    assert reply is not None
    assert reply.text == call.answer and reply.text.startswith("Summary: Query: who approved the budget")
    assert reply.result_set_id == id2
    assert reply.relevance_score == pytest.approx(expected[0][1])


def test_local_cross_encoder_scores_and_chronological_resort(world: World) -> None:
    events = world.gm.memories.retrieve(
        message=QUERY,
        space_ids=[world.space],
        requested_size=4,
        reranker_id=CE,
        chronological_resort=True,
        max_results=3,
        stream=False,
    )
    (_, _, _), (stage, _, reranked) = stages(events)
    assert stage == "rerank"
    oracle = dict(zip(TEXTS, _oracle(world.ce_dir, QUERY, TEXTS), strict=True))
    for text, _, score in reranked:
        assert score == pytest.approx(oracle[text], abs=1e-4)
    # Re-sorted oldest first, then capped: the three oldest memories, whatever their scores.
    assert [t for t, _, _ in reranked] == TEXTS[:3]
    assert [e.status.code for e in events if e.status] == ["FEATURE_DISABLED"]  # no LLM


def test_gen_a_get_form_ndjson_and_sse(world: World) -> None:
    cfg = goodmem_client.Configuration(host=world.url)
    cfg.api_key = {"ApiKeyAuth": world.key}
    client = MemoryStreamClient(goodmem_client.ApiClient(cfg))
    runs = {}
    for fmt in ("ndjson", "sse"):
        world.llm.reset()
        events = list(
            client.retrieve_memory_stream_chat(
                message=QUERY,
                space_ids=[world.space],
                requested_size=4,
                format=fmt,
                pp_reranker_id=TEI,
                pp_llm_id=LLM,
                pp_max_results=2,
                pp_chronological_resort=False,
                pp_llm_temp=0.1,
            )
        )
        assert world.llm.prompts[0].body["temperature"] == 0.1
        stage_list = [(s, [t for t, _, _ in items]) for s, _, items in stages(events)]  # type: ignore[arg-type]
        reply = [e.abstract_reply for e in events if e.abstract_reply]
        assert len(reply) == 1 and reply[0].text.startswith("Summary: ")
        runs[fmt] = (kinds(events), stage_list, reply[0].text)
    assert runs["ndjson"] == runs["sse"]
    _, stage_list, _ = runs["sse"]
    assert [s for s, _ in stage_list] == ["retrieve", "rerank"]
    assert (
        stage_list[1][1]
        == [t for t, _ in sorted(((t, overlap(QUERY, t)) for t in TEXTS), key=lambda p: -p[1])][:2]
    )


def test_get_openapi_names_and_post_body(world: World) -> None:
    params = {
        "message": QUERY,
        "spaceIds": world.space,
        "postProcessorRerankerId": TEI,
        "postProcessorMaxResults": "1",
    }
    resp = httpx.get(
        world.url + "/v1/memories:retrieve", params=params, headers={"x-api-key": world.key}, timeout=60
    )
    lines = [json.loads(line) for line in resp.text.splitlines()]
    bounds = [e["resultSetBoundary"] for e in lines if "resultSetBoundary" in e]
    assert [(b["kind"], b["stageName"]) for b in bounds] == [
        ("BEGIN", "retrieve"),
        ("END", ""),
        ("BEGIN", "rerank"),
        ("END", ""),
    ]
    assert bounds[2]["expectedItems"] == 1
    # Gen A's POST helper with a config dict (the JSON body of the seed).
    cfg = goodmem_client.Configuration(host=world.url)
    cfg.api_key = {"ApiKeyAuth": world.key}
    events = list(
        MemoryStreamClient(goodmem_client.ApiClient(cfg)).retrieve_memory_stream(
            message=QUERY,
            space_ids=[world.space],
            post_processor_name=CHAT,
            post_processor_config={"reranker_id": TEI, "max_results": 2, "llm_id": LLM},
        )
    )
    assert [e.result_set_boundary.stage_name for e in events if e.result_set_boundary][::2] == [
        "retrieve",
        "rerank",
    ]
    assert events[-1].abstract_reply is not None


def test_unknown_ids_and_failing_models_degrade(world: World) -> None:
    ghost_r, ghost_l = str(uuid.uuid4()), str(uuid.uuid4())
    events = world.gm.memories.retrieve(
        message=QUERY, space_ids=[world.space], reranker_id=ghost_r, llm_id=ghost_l, stream=False
    )
    statuses = [(e.status.code, (e.status.details or {})) for e in events if e.status]
    assert [c for c, _ in statuses] == ["NOT_FOUND", "RERANKING_FAILED", "NOT_FOUND", "SUMMARIZATION_FAILED"]
    assert statuses[0][1] == {"reranker_id": ghost_r} and statuses[2][1] == {"llm_id": ghost_l}
    [(stage, _, items)] = stages(events)
    assert stage == "retrieve" and len(items) == 4  # the vector results stand
    # A reranker that answers garbage, an LLM that answers 500: statuses, vector results, no 500.
    world.llm.fail_next(500, "the fake LLM is down")
    events = world.gm.memories.retrieve(
        message=QUERY, space_ids=[world.space], reranker_id=TEI_GARBAGE, llm_id=LLM, stream=False
    )
    statuses = [(e.status.code, (e.status.details or {}).get("reason")) for e in events if e.status]
    assert statuses == [("RERANKING_FAILED", "BAD_ANSWER"), ("SUMMARIZATION_FAILED", "UNAVAILABLE")]
    assert [s for s, _, _ in stages(events)] == ["retrieve"]
    assert not any(e.abstract_reply for e in events)


def test_deadline_covers_the_llm_call(world: World) -> None:
    world.doubles.delay = 30.0
    world.doubles.chat_cancelled.clear()
    started = time.monotonic()
    resp = httpx.post(
        world.url + "/v1/memories:retrieve",
        json={
            "message": QUERY,
            "spaceKeys": [{"spaceId": world.space}],
            "postProcessor": {"name": CHAT, "config": {"reranker_id": TEI, "llm_id": SLOW}},
        },
        headers={"x-api-key": world.key, "Accept": "text/event-stream", "GoodMem-Timeout-Ms": "3000"},
        timeout=60,
    )
    assert time.monotonic() - started < 10
    frames = [f for f in resp.text.split("\n\n") if f]
    names = [f.split("\n")[0] for f in frames]
    datas = [json.loads(f.split("\n")[1][len("data: ") :]) for f in frames]
    assert names[-1] == "event: error"
    assert datas[-1]["code"] == "DEADLINE_EXCEEDED"
    assert datas[-2]["status"]["code"] == "SUMMARIZATION_TIMEOUT"
    assert datas[-2]["status"]["details"]["reason"] == "DEADLINE_EXCEEDED"
    stage_names = [d["resultSetBoundary"]["stageName"] for d in datas if "resultSetBoundary" in d]
    assert stage_names == ["retrieve", "", "rerank", ""]  # both sets were sent before the LLM ran out
    assert world.doubles.chat_cancelled.wait(10)  # the pending LLM call was abandoned


def test_client_disconnect_cancels_the_llm_call(world: World) -> None:
    world.doubles.delay = 30.0
    world.doubles.chat_started.clear()
    world.doubles.chat_cancelled.clear()
    body = {
        "message": QUERY,
        "spaceKeys": [{"spaceId": world.space}],
        "postProcessor": {"name": CHAT, "config": {"llm_id": SLOW}},
    }
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST", world.url + "/v1/memories:retrieve", json=body, headers={"x-api-key": world.key}
        ) as resp,
    ):
        in_set = False
        for line in resp.iter_lines():
            in_set = in_set or "postprocess" in line
            if in_set and '"kind":"END"' in line:
                # Inside the loop body the response is still open (leaving the loop closes it).
                assert world.doubles.chat_started.wait(10)
                break
        assert in_set
    # The connection is closed: memproxy cancels the LLM call, which the double sees.
    assert world.doubles.chat_cancelled.wait(10)


# --- the vector stage's score convention --------------------------------------------------------------------


@pytest.fixture(scope="module")
def cosine_gm(world: World, opensearch_url: str) -> Iterator[Goodmem]:
    """A second memproxy on the same node and data, sending cosines (``--goodmem-vector-score cosine``)."""
    proxy = ProxyProcess(
        opensearch_url,
        [
            "--goodmem-vector-score",
            "cosine",
            "--reranker",
            f"{TEI}={world.doubles.url}#provider=tei",
            "--embed-dtype",
            "float32",  # the same query vector as the first process's: float32 and one thread, as there
            "--embed-threads",  # (a float32 forward's last bits follow its thread count, docs/embedding.md)
            "1",
        ],
    )
    gm = Goodmem(base_url=proxy.url, api_key=world.key)
    try:
        yield gm
    finally:
        gm.close()
        proxy.stop()


def scored(events: list[RetrieveMemoryEvent], stage: str) -> list[tuple[str, float]]:
    [(_, _, items)] = [s for s in stages(events) if s[0] == stage]
    return [(text, score) for text, _, score in items]


def test_live_score_convention_by_default_cosine_as_a_setting(world: World, cosine_gm: Goodmem) -> None:
    """The SDK's own view of both settings: what goodmem-llamaindex does with the score (negate it into
    ``node.score``, built for live servers' negative inner product; ``SimilarityPostprocessor`` keeps nodes
    scoring at least 0.3) replayed on the events. tests/test_goodmem_llamaindex.py runs the package itself."""
    kw: dict[str, Any] = {"message": QUERY, "space_ids": [world.space], "requested_size": 4, "stream": False}
    live = scored(world.gm.memories.retrieve(**kw), "retrieve")
    cos = scored(cosine_gm.memories.retrieve(**kw), "retrieve")
    # Same order (best first) under both; live = -cos exactly (both in single precision).
    assert [t for t, _ in live] == [t for t, _ in cos]
    assert [s for _, s in live] == [-s for _, s in cos]
    assert [s for _, s in live] == sorted(s for _, s in live) and live[0][1] < -0.3
    assert all(float(np.float32(s)) == s for _, s in live)  # single precision
    node_scores_live = [-s for _, s in live]
    node_scores_cos = [-s for _, s in cos]
    assert [t for (t, _), n in zip(live, node_scores_live, strict=True) if n >= 0.3]  # the best hits kept
    assert not [n for n in node_scores_cos if n >= 0.3]  # the cosine setting inverts them: nothing kept
    # The integration's ranking by node.score puts the best document first only with the live default.
    assert max(zip(node_scores_live, [t for t, _ in live], strict=True))[1] == live[0][0]
    # Reranker-stage scores are the reranker's own under both settings.
    kw["reranker_id"] = TEI
    assert scored(world.gm.memories.retrieve(**kw), "rerank") == scored(
        cosine_gm.memories.retrieve(**kw), "rerank"
    )


def test_reranker_and_llm_registered_through_the_goodmem_api(world: World) -> None:
    """The done-when case: a reranker and an LLM created with ``/v1/rerankers`` and ``/v1/llms`` (Gen B SDK),
    then used by id; the LLM's own ``defaultSamplingParams.maxTokens`` is the budget when none is asked."""
    rer = world.gm.rerankers.create(
        display_name="pp-tei", provider_type="TEI", endpoint_url=world.doubles.url, model_identifier="tei"
    )
    made = world.gm.llms.create(
        display_name="pp-llm",
        provider_type="OPENAI",
        endpoint_url=world.llm.base_url,
        model_identifier="fake-llm",
        api_key="sk-pp-test",
        default_sampling_params=LLMSamplingParams(max_tokens=77),
    )
    try:
        world.llm.reset()
        events = world.gm.memories.retrieve(
            message=QUERY,
            space_ids=[world.space],
            reranker_id=rer.reranker_id,
            llm_id=made.llm.llm_id,
            max_results=1,
            stream=False,
        )
        assert [s for s, _, _ in stages(events)] == ["retrieve", "rerank"]
        assert scored(events, "rerank") == [(TEXTS[0], 0.75)]
        [call] = world.llm.prompts
        assert call.body["max_tokens"] == 77 and call.body["temperature"] == 0.3
        assert call.path == "/v1/chat/completions"
        reply = events[-1].abstract_reply
        assert reply is not None and reply.text == call.answer
        assert [e.status.code for e in events if e.status] == []
    finally:
        world.gm.rerankers.delete(id=rer.reranker_id)
        world.gm.llms.delete(id=made.llm.llm_id)
