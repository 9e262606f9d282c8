"""The remote model clients (proxy/models) against real HTTP servers speaking each provider's wire format.

The servers are test doubles at the network edge only: in-process aiohttp servers (``Double``) that answer
real JSON over real HTTP in the shapes the providers document (docs/models.md), and ``FakeLLM`` for chat.
Everything under test (retries, timeouts, the semaphore, parsing, error mapping) runs unchanged.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.errors import DeadlineExceeded, MemproxyError, Overloaded, Unavailable
from proxy.models import (
    CHAT_PROVIDERS,
    ChatClient,
    ProviderBadAnswer,
    ProviderClient,
    ProviderOverloaded,
    ProviderRejected,
    ProviderSettings,
    ProviderTimeout,
    ProviderUnavailable,
    RemoteEmbedder,
    RemoteReranker,
)
from proxy.models.provider import _retry_after, api_path
from tests.support.fake_llm import FakeLLM

KEY = "sk-test-SECRET-0123456789"


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


Answer = Callable[[Seen, int], Awaitable[web.StreamResponse]]


@dataclass
class Double:
    """A provider double: records every request, answers with ``answer(seen, call_number)``."""

    answer: Answer
    seen: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.text()
        seen = Seen(request.path, dict(request.headers), json.loads(raw) if raw else None)
        self.seen.append(seen)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self.answer(seen, len(self.seen))
        finally:
            self.in_flight -= 1


@asynccontextmanager
async def serve(answer: Answer) -> AsyncIterator[Double]:
    double = Double(answer)
    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", double.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    double.url = str(server.make_url("")).rstrip("/")
    try:
        yield double
    finally:
        await server.close()


@asynccontextmanager
async def client_for(url: str, **settings: Any) -> AsyncIterator[ProviderClient]:
    settings.setdefault("backoff_base_s", 0.01)
    client = ProviderClient(ProviderSettings(base_url=url, **settings))
    try:
        yield client
    finally:
        await client.close()


def reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    async def answer(seen: Seen, n: int) -> web.StreamResponse:
        return web.json_response(body, status=status, headers=headers)

    return answer


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeLLM]:
    with FakeLLM() as llm:
        yield llm


# --- paths ----------------------------------------------------------------------------------------------


def test_api_path_keeps_the_base_path_once() -> None:
    assert api_path("https://api.openai.com", "/v1", "chat/completions") == "/v1/chat/completions"
    assert api_path("https://api.openai.com/v1/", "/v1", "/chat/completions") == "/chat/completions"
    assert api_path("https://openrouter.ai/api/v1", "/api/v1", "/chat/completions") == "/chat/completions"
    assert api_path("http://tei:8080", "", "embed") == "/embed"


def test_retry_after_forms() -> None:
    soon = email.utils.formatdate(time.time() + 2, usegmt=True)
    assert _retry_after("1.5", 10) == 1.5
    assert _retry_after("3600", 10) == 10
    assert _retry_after("-4", 10) == 0
    assert 0 < (_retry_after(soon, 10) or 0) <= 2
    assert _retry_after("soon, maybe", 10) is None
    assert _retry_after(None, 10) is None


def test_settings_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        ProviderSettings("http://x", max_concurrency=0)
    with pytest.raises(ValueError, match="timeout_s"):
        ProviderSettings("http://x", timeout_s=0)


# --- chat -----------------------------------------------------------------------------------------------


async def test_chat_against_fake_llm(fake_llm: FakeLLM) -> None:
    fake_llm.reset()
    async with client_for(fake_llm.url, api_key=KEY) as client:
        result = await ChatClient(client).complete(
            [{"role": "user", "content": "hello there"}], model="gpt-x", temperature=0.0, max_tokens=50
        )
    assert result.text == "OK"
    assert result.finish_reason == "stop"
    assert result.usage["total_tokens"] > 0
    [prompt] = fake_llm.prompts
    assert prompt.path == "/v1/chat/completions"
    assert prompt.body["temperature"] == 0.0 and prompt.body["max_tokens"] == 50
    assert "response_format" not in prompt.body


async def test_chat_json_mode_against_fake_llm(fake_llm: FakeLLM) -> None:
    fake_llm.reset()
    async with client_for(fake_llm.url + "/v1", provider="vllm") as client:
        result = await ChatClient(client).complete(
            [{"role": "user", "content": "hello"}], model="m", json_output=True
        )
    assert json.loads(result.text) == {"response": "OK"}
    assert fake_llm.prompts[0].body["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize("provider", sorted(CHAT_PROVIDERS))
async def test_json_mode_is_sent_only_where_supported(provider: str) -> None:
    answer = {"choices": [{"message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}]}
    async with serve(reply(answer)) as double, client_for(double.url, provider=provider) as client:
        chat = ChatClient(client)
        await chat.complete([{"role": "user", "content": "x"}], model="m", json_output=True)
        await chat.complete([{"role": "user", "content": "x"}], model="m")
    sent_json, sent_plain = (s.body for s in double.seen)
    expected = {"type": "json_object"} if CHAT_PROVIDERS[provider].json_mode else None
    assert sent_json.get("response_format") == expected
    assert "response_format" not in sent_plain
    assert double.seen[0].path == CHAT_PROVIDERS[provider].base_path + "/chat/completions"
    assert CHAT_PROVIDERS[provider].json_mode == (provider != "generic")


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ({"id": "x"}, "without choices"),
        ({"choices": []}, "without choices"),
        ({"choices": [{"finish_reason": "stop"}]}, "has no message"),
        ({"choices": [{"message": {"content": ""}}]}, "empty content"),
        ({"choices": [{"message": {"content": None}}]}, "empty content"),
        (["not", "an", "object"], "not a JSON object"),
    ],
)
async def test_chat_wrong_shapes_are_refused(answer: Any, words: str) -> None:
    async with serve(reply(answer)) as double, client_for(double.url) as client:
        with pytest.raises(ProviderBadAnswer, match=words) as caught:
            await ChatClient(client).complete([{"role": "user", "content": "x"}], model="m")
    assert caught.value.status == 502


# --- embeddings -----------------------------------------------------------------------------------------


def _vec(text: str) -> list[float]:
    return [float(len(text)), 1.0, -1.0]


async def _openai_embeddings(seen: Seen, n: int) -> web.StreamResponse:
    data = [
        {"object": "embedding", "index": i, "embedding": _vec(t)} for i, t in enumerate(seen.body["input"])
    ]
    # The spec orders data by index but does not promise it: answer reversed, the client must reorder.
    return web.json_response({"object": "list", "data": data[::-1], "model": seen.body["model"]})


async def _tei_embed(seen: Seen, n: int) -> web.StreamResponse:
    return web.json_response([_vec(t) for t in seen.body["inputs"]])


async def test_openai_embeddings_ordered_by_index_and_batched() -> None:
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    async with serve(_openai_embeddings) as double, client_for(double.url, provider="vllm") as client:
        embedder = RemoteEmbedder(client, wire="openai", model="e5", dimension=3, batch_size=2)
        vectors = await embedder.embed(texts)
    assert vectors == [_vec(t) for t in texts]
    assert [s.body for s in double.seen] == [
        {"model": "e5", "input": ["a", "bb"]},
        {"model": "e5", "input": ["ccc", "dddd"]},
        {"model": "e5", "input": ["eeeee"]},
    ]
    assert {s.path for s in double.seen} == {"/v1/embeddings"}


async def test_tei_embed() -> None:
    async with serve(_tei_embed) as double, client_for(double.url, provider="tei") as client:
        vectors = await RemoteEmbedder(client, wire="tei", dimension=3).embed(["x", "yy"])
    assert vectors == [_vec("x"), _vec("yy")]
    assert double.seen[0].path == "/embed" and double.seen[0].body == {"inputs": ["x", "yy"]}


async def _cohere_embed(seen: Seen, n: int) -> web.StreamResponse:
    # Cohere v2 /v2/embed: vectors under embeddings.<type> for each requested embedding type.
    return web.json_response(
        {
            "id": "e1",
            "embeddings": {"float": [_vec(t) for t in seen.body["texts"]]},
            "texts": seen.body["texts"],
        }
    )


async def test_cohere_embed_v2() -> None:
    async with serve(_cohere_embed) as double, client_for(double.url, provider="cohere") as client:
        embedder = RemoteEmbedder(client, wire="cohere", model="embed-english-v3.0", dimension=3)
        vectors = await embedder.embed(["x", "yy"])
        await embedder.embed(["what is x?"], query=True)
    assert vectors == [_vec("x"), _vec("yy")]
    assert double.seen[0].path == "/v2/embed"
    assert double.seen[0].body == {
        "model": "embed-english-v3.0",
        "texts": ["x", "yy"],
        "input_type": "search_document",
        "embedding_types": ["float"],
    }
    # A search query is embedded as one: Cohere's v3 models are asymmetric.
    assert double.seen[1].body["input_type"] == "search_query"


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ([[1.0, 2.0]], "1 embeddings for 2 inputs"),
        ([[1.0, 2.0], [1.0]], "embedding 1 of dimension 1, expected 2"),
        ([[1.0, 2.0], ["a", "b"]], "embedding 1 that is not a non-empty list of finite numbers"),
        ({"embeddings": []}, "not a list but dict"),
    ],
)
async def test_tei_wrong_answers_are_refused(answer: Any, words: str) -> None:
    async with serve(reply(answer)) as double, client_for(double.url, provider="tei") as client:
        with pytest.raises(ProviderBadAnswer, match=words):
            await RemoteEmbedder(client, wire="tei", dimension=2).embed(["x", "y"])


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ({"object": "list"}, "without a data list"),
        ({"data": [{"index": 0}]}, "without an embedding"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]}, "indices"),
    ],
)
async def test_openai_wrong_answers_are_refused(answer: Any, words: str) -> None:
    async with serve(reply(answer)) as double, client_for(double.url) as client:
        with pytest.raises(ProviderBadAnswer, match=words):
            await RemoteEmbedder(client, wire="openai", model="m").embed(["x", "y"])


# --- rerank ---------------------------------------------------------------------------------------------


def _score(query: str, doc: str) -> float:
    return len(doc) / 10


def _ranked(docs: list[str], query: str) -> list[tuple[int, float]]:
    """Sorted by relevance, most relevant first: the order every provider answers in."""
    return sorted(((i, _score(query, d)) for i, d in enumerate(docs)), key=lambda p: -p[1])


async def _rerank_server(seen: Seen, n: int) -> web.StreamResponse:
    body = seen.body
    if seen.path == "/rerank":  # TEI
        return web.json_response([{"index": i, "score": s} for i, s in _ranked(body["texts"], body["query"])])
    results = [{"index": i, "relevance_score": s} for i, s in _ranked(body["documents"], body["query"])]
    if "top_n" in body:  # Cohere, Jina, vLLM
        return web.json_response({"id": "r1", "results": results[: body["top_n"]], "meta": {}})
    return web.json_response({"object": "list", "data": results, "model": body["model"]})  # Voyage


RERANK_REQUESTS = {
    "tei": ("/rerank", {"query", "texts"}),
    "cohere": ("/v1/rerank", {"model", "query", "documents", "top_n"}),
    "jina": ("/v1/rerank", {"model", "query", "documents", "top_n"}),
    "vllm": ("/v1/rerank", {"model", "query", "documents", "top_n"}),
    "voyage": ("/v1/rerank", {"model", "query", "documents"}),
}


@pytest.mark.parametrize("wire", sorted(RERANK_REQUESTS))
async def test_rerank_scores_follow_the_callers_order(wire: Any) -> None:
    docs = ["short", "a much longer document", "mid length", "x"]
    async with serve(_rerank_server) as double, client_for(double.url, provider=wire) as client:
        scores = await RemoteReranker(client, wire=wire, model="rr").rerank("q", docs)
    assert scores == [_score("q", d) for d in docs]
    path, keys = RERANK_REQUESTS[wire]
    assert double.seen[0].path == path and set(double.seen[0].body) == keys
    if "top_n" in keys:
        assert double.seen[0].body["top_n"] == len(docs)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ({"results": [{"index": 0, "relevance_score": 0.5}]}, r"no rerank score for documents \[1\]"),
        ({"results": [{"index": 0, "relevance_score": 0.5}, {"index": 0, "relevance_score": 0.1}]}, "twice"),
        ({"results": [{"index": 5, "relevance_score": 0.5}]}, "index 5 for 2 documents"),
        ({"results": [{"index": 0, "score": 0.5}]}, "without a numeric 'relevance_score'"),
        ({"data": []}, "not an object with a 'results' list"),
    ],
)
async def test_rerank_wrong_answers_are_refused(answer: Any, words: str) -> None:
    async with serve(reply(answer)) as double, client_for(double.url, provider="cohere") as client:
        with pytest.raises(ProviderBadAnswer, match=words):
            await RemoteReranker(client, wire="cohere", model="m").rerank("q", ["a", "b"])


# --- retries, timeouts, concurrency ---------------------------------------------------------------------


async def test_429_then_200_honours_retry_after() -> None:
    async def answer(seen: Seen, n: int) -> web.StreamResponse:
        if n == 1:
            return web.json_response({"message": "slow down"}, status=429, headers={"Retry-After": "0.4"})
        return await _tei_embed(seen, n)

    # A large backoff base: a quick retry can only come from Retry-After... and the wait must be its 0.4 s.
    async with serve(answer) as double, client_for(double.url, backoff_base_s=30) as client:
        started = time.monotonic()
        assert await RemoteEmbedder(client, wire="tei").embed(["a"]) == [_vec("a")]
        elapsed = time.monotonic() - started
    assert len(double.seen) == 2
    assert 0.4 <= elapsed < 5


async def test_retry_after_is_capped() -> None:
    async def answer(seen: Seen, n: int) -> web.StreamResponse:
        if n == 1:
            return web.json_response({}, status=503, headers={"Retry-After": "3600"})
        return await _tei_embed(seen, n)

    async with serve(answer) as double, client_for(double.url, retry_after_cap_s=0.1) as client:
        started = time.monotonic()
        await RemoteEmbedder(client, wire="tei").embed(["a"])
    # Uncapped it would wait an hour: anything short of a minute proves the cap (a loaded CI box is slow).
    assert time.monotonic() - started < 60 and len(double.seen) == 2


async def test_persistent_500_is_unavailable_after_every_retry() -> None:
    failing = reply({"error": "CUDA out of memory"}, status=500)
    async with serve(failing) as double, client_for(double.url, max_retries=2) as client:
        with pytest.raises(ProviderUnavailable, match=r"failed \(500\): CUDA out of memory") as caught:
            await RemoteEmbedder(client, wire="tei").embed(["a"])
    assert len(double.seen) == 3
    assert isinstance(caught.value, Unavailable) and caught.value.status == 502
    assert caught.value.provider_status == 500


async def test_persistent_429_is_overloaded() -> None:
    limiting = reply({"detail": "rate limit"}, status=429)
    async with serve(limiting) as double, client_for(double.url, max_retries=1) as client:
        with pytest.raises(ProviderOverloaded, match="rate limit") as caught:
            await RemoteEmbedder(client, wire="tei").embed(["a"])
    assert len(double.seen) == 2
    assert isinstance(caught.value, Overloaded) and caught.value.status == 429


async def test_unreachable_provider_is_unavailable() -> None:
    with socket.socket() as sock:  # a port nobody listens on: bound, closed, free again
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with client_for(f"http://127.0.0.1:{port}", max_retries=1) as client:
        with pytest.raises(ProviderUnavailable, match="unreachable") as caught:
            await RemoteEmbedder(client, wire="tei").embed(["a"])
    assert caught.value.status == 503


async def test_slow_provider_times_out_within_the_timeout() -> None:
    async def slow(seen: Seen, n: int) -> web.StreamResponse:
        await asyncio.sleep(3)
        return await _tei_embed(seen, n)

    async with serve(slow) as double, client_for(double.url, timeout_s=0.3, max_retries=2) as client:
        started = time.monotonic()
        with pytest.raises(ProviderTimeout, match=r"within 0.3s") as caught:
            await RemoteEmbedder(client, wire="tei").embed(["a"])
        elapsed = time.monotonic() - started
    assert isinstance(caught.value, DeadlineExceeded) and caught.value.status == 504
    assert 0.3 <= elapsed < 2.9  # cut short before the provider's 3 s answer
    assert len(double.seen) == 1  # a timeout is not retried: it would spend the caller's deadline


async def test_provider_4xx_carries_its_own_message() -> None:
    body = {"error": {"message": "model 'nope' does not exist", "type": "invalid_request_error"}}
    async with serve(reply(body, status=404)) as double, client_for(double.url) as client:
        with pytest.raises(ProviderRejected, match=r"refused \(404\): model 'nope' does not") as caught:
            await ChatClient(client).complete([{"role": "user", "content": "x"}], model="nope")
    assert len(double.seen) == 1  # a refusal is not retried
    assert caught.value.status == 502 and caught.value.provider_status == 404


async def test_non_json_answer_is_a_clear_error() -> None:
    async def html(seen: Seen, n: int) -> web.StreamResponse:
        return web.Response(text="<html>gateway login</html>", content_type="text/html")

    async with serve(html) as double, client_for(double.url) as client:
        with pytest.raises(ProviderBadAnswer, match=r"not JSON \(26 characters, not shown\)") as caught:
            await RemoteEmbedder(client, wire="tei").embed(["a"])
    # Never quoted: a body that is not the model's answer may be anything the endpoint reached.
    assert "gateway" not in caught.value.message


async def test_concurrency_is_bounded_per_client() -> None:
    async def slowish(seen: Seen, n: int) -> web.StreamResponse:
        await asyncio.sleep(0.05)
        return await _tei_embed(seen, n)

    async with serve(slowish) as double, client_for(double.url, max_concurrency=3) as client:
        embedder = RemoteEmbedder(client, wire="tei")
        results = await asyncio.gather(*(embedder.embed([f"t{i}"]) for i in range(12)))
    assert results == [[_vec(f"t{i}")] for i in range(12)]
    assert double.max_in_flight == 3


# --- the API key ----------------------------------------------------------------------------------------


async def test_api_key_is_sent_and_never_shown(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    echo = f"Incorrect API key provided: {KEY}"

    async def leaky(seen: Seen, n: int) -> web.StreamResponse:
        status = {1: 500, 2: 429, 3: 401}.get(n, 200)
        if status == 200:
            return web.Response(text=f"not json {KEY}")
        return web.json_response({"error": {"message": echo}}, status=status)

    errors: list[MemproxyError] = []
    async with serve(leaky) as double, client_for(double.url, api_key=KEY, max_retries=2) as client:
        embedder = RemoteEmbedder(client, wire="tei")
        with pytest.raises(ProviderRejected) as rejected:  # 500, 429, then 401
            await embedder.embed(["a"])
        errors.append(rejected.value)
        with pytest.raises(ProviderBadAnswer) as garbage:
            await embedder.embed(["a"])
        errors.append(garbage.value)
        shown = [repr(client), repr(client.settings), str(client.settings)]
    assert double.seen[0].headers["Authorization"] == f"Bearer {KEY}"
    assert "[redacted]" in errors[0].message
    assert any("retrying" in r.getMessage() for r in caplog.records)
    for text in [*(str(e) for e in errors), *(e.message for e in errors), *shown, caplog.text]:
        assert KEY not in text


async def test_azure_key_goes_in_its_own_header() -> None:
    async with serve(_tei_embed) as double, client_for(double.url, api_key=KEY, provider="azure_openai") as c:
        await RemoteEmbedder(c, wire="tei").embed(["a"])
    assert double.seen[0].headers["api-key"] == KEY and "Authorization" not in double.seen[0].headers


async def test_no_key_no_header() -> None:
    async with serve(_tei_embed) as double, client_for(double.url) as client:
        await RemoteEmbedder(client, wire="tei").embed(["a"])
    assert "Authorization" not in double.seen[0].headers
