"""Input bounds without a node: the JSON reader, the answer writer, the input guard, aiohttp's parse errors,
the chunking bound and the tokenizer's cut (docs/security.md, "Input that cannot poison or freeze").

The guard and the error rendering are driven through a real aiohttp server on a real socket, with the real
middlewares and body readers in front of stub handlers, so what a client sees is what is asserted.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from aiohttp import web

from proxy.api import body as body_reader
from proxy.api.body import MalformedJson, PayloadTooLarge, decode_json, dumps, utf8
from proxy.api.errors import error_middleware
from proxy.api.goodmem.memory_wire import MemoryCreateBody
from proxy.api.goodmem.streaming import ndjson_line, sse_frame
from proxy.api.goodmem.wire import json_body, reply
from proxy.api.guards import (
    QuietRequestHandler,
    current_limits,
    input_guard_middleware,
    install_quiet_request_handler,
)
from proxy.api.opensearch_memory.common import json_response
from proxy.api.opensearch_memory.common import read_json as ml_read_json
from proxy.app_keys import SETTINGS
from proxy.config import Settings
from proxy.core.goodmem.chunking import (
    REGEX_BUDGET_S,
    ChunkingConfig,
    chunk_memory,
    chunk_text,
    parse_chunking,
)
from proxy.errors import BadRequest

SID = "01a0ace1-f672-7105-9642-bf658ff8f51a"
LONE = "\ud800"

# --- the JSON reader -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"name": "a\\ud800b"}',
        b'{"labels": {"k": "\\udfff"}}',
        b'{"a\\udc00": 1}',
        b'[[[{"deep": ["x", "\\uDBFF"]}]]]',
        '{"name": "\ud800"}'.encode("utf-8", "surrogatepass"),  # the UTF-8 form of a surrogate
        b'{"name": "\\ud83d"}',  # a high surrogate without its low half
        b'{"name": "\\ude00\\ud83d"}',  # the halves in the wrong order
    ],
)
def test_unpaired_surrogates_are_refused_anywhere(raw: bytes) -> None:
    with pytest.raises(MalformedJson) as refused:
        decode_json(raw)
    assert "Unicode" in refused.value.detail or "UTF-8" in refused.value.detail


def test_the_refusal_says_where() -> None:
    with pytest.raises(MalformedJson) as refused:
        decode_json(b'{"spaces": [{"labels": {"team": "\\ud800"}}]}')
    assert (
        refused.value.detail
        == "the string at $.spaces[0].labels.team is not valid Unicode (an unpaired surrogate)"
    )
    with pytest.raises(MalformedJson) as key:
        decode_json(b'{"labels": {"\\ud800": "x"}}')
    assert "key at $.labels" in key.value.detail


def test_valid_unicode_passes() -> None:
    assert decode_json(b'{"emoji": "\\ud83d\\ude00", "raw": "\xf0\x9f\x98\x80", "cjk": "\\u4e2d"}') == {
        "emoji": "\U0001f600",
        "raw": "\U0001f600",
        "cjk": "\u4e2d",
    }
    assert decode_json(b'{"a": "\\\\ud800"}') == {"a": "\\ud800"}  # an escaped backslash, not an escape
    assert decode_json('{"utf16": "é"}'.encode("utf-16")) == {"utf16": "é"}


def test_depth_is_bounded_and_never_recursion() -> None:
    assert decode_json(b"[" * 64 + b"]" * 64, max_depth=64) == decode_json(b"[" * 64 + b"]" * 64)
    with pytest.raises(MalformedJson, match="nesting deeper than 64"):
        decode_json(b"[" * 65 + b"]" * 65, max_depth=64)
    with pytest.raises(MalformedJson, match="nesting deeper than 3"):
        decode_json(b'{"a": {"b": {"c": {}}}}', max_depth=3)
    for depth in (900, 10_000, 200_000):  # the C decoder's own recursion guard, or our walk
        with pytest.raises(MalformedJson, match="nesting deeper"):
            decode_json(b'{"a":' * depth + b"1" + b"}" * depth)
        with pytest.raises(MalformedJson, match="nesting deeper"):
            decode_json(b"[" * depth + b"]" * depth)


@pytest.mark.parametrize("raw", [b"NaN", b'{"x": Infinity}', b"[-Infinity]", b'{"x": 1e400}', b"9" * 5000])
def test_non_json_numbers_are_refused(raw: bytes) -> None:
    with pytest.raises(MalformedJson):
        decode_json(raw)


def test_big_ordinary_documents_are_not_walked() -> None:
    """A large body without surrogate escapes, deep nesting or huge numbers is decoded once, fast."""
    doc = {"memories": [{"memory": "x" * 100, "n": i, "v": [0.5] * 8} for i in range(20_000)]}
    raw = json.dumps(doc).encode()
    assert decode_json(raw) == doc
    # Against the standard decoder on the same bytes, best of five interleaved rounds each, so that the
    # machine's load cancels out: the depth walk is linear and cheap, a walk that re-scans or recurses per
    # value would cost tens of times a plain decode.
    plain, ours = [], []
    for _ in range(5):
        started = time.perf_counter()
        json.loads(raw)
        plain.append(time.perf_counter() - started)
        started = time.perf_counter()
        decode_json(raw)
        ours.append(time.perf_counter() - started)
    assert min(ours) < 12 * min(plain), (min(ours), min(plain))


# --- the answer writer -----------------------------------------------------------------------------------


def test_lone_surrogates_are_written_as_replacement_characters() -> None:
    stored = {"name": f"a{LONE}b", f"k{LONE}": [f"{LONE}"], "fine": "\U0001f600"}
    text = dumps(stored)
    assert json.loads(utf8(text)) == {"name": "a\ufffdb", "k\ufffd": ["\ufffd"], "fine": "\U0001f600"}
    assert json.loads(reply(stored).body) == json.loads(utf8(text))  # type: ignore[arg-type]
    assert json.loads(json_response(stored).body)["name"] == "a\ufffdb"  # type: ignore[arg-type]
    assert json.loads(ndjson_line(stored))["name"] == "a\ufffdb"
    assert "a\ufffdb" in sse_frame("item", stored).decode()
    assert reply({"x": 1}).content_type == "application/json" and reply({"x": 1}).charset == "utf-8"


# --- memory creation requests (JSON, multipart parts, base64) ---------------------------------------------


def test_memory_requests_refuse_invalid_unicode_from_any_source() -> None:
    with pytest.raises(BadRequest, match="not valid Unicode"):
        MemoryCreateBody.read({"spaceId": SID, "originalContent": f"hi{LONE}"})
    with pytest.raises(BadRequest, match="not valid Unicode"):  # a multipart file part's Content-Type
        MemoryCreateBody.read(
            {"spaceId": SID, "originalContentB64": "aGk=", "contentType": f"text/plain{LONE}"}
        )
    with pytest.raises(BadRequest, match="not valid Unicode"):
        MemoryCreateBody.read({"spaceId": SID, "originalContent": "hi", "metadata": {"k": LONE}})
    with pytest.raises(BadRequest, match="invalid text"):  # a charset that decodes bytes into a surrogate
        MemoryCreateBody.read(
            {
                "spaceId": SID,
                "originalContentB64": "XHVkODAw",
                "contentType": "text/plain; charset=unicode_escape",
            }
        )
    with pytest.raises(BadRequest):  # bytes that are not UTF-8 (the UTF-8 form of a surrogate)
        MemoryCreateBody.read({"spaceId": SID, "originalContentB64": "7aCA", "contentType": "text/plain"})


def test_memory_text_is_bounded() -> None:
    limit = current_limits().max_memory_chars
    MemoryCreateBody.read({"spaceId": SID, "originalContent": "x" * limit})
    with pytest.raises(PayloadTooLarge) as refused:
        MemoryCreateBody.read({"spaceId": SID, "originalContent": "x" * (limit + 1)})
    assert refused.value.status == 413
    assert f"{limit + 1} characters, more than the {limit}" in refused.value.message
    assert "max_memory_chars" in refused.value.message


# --- chunking ---------------------------------------------------------------------------------------------


def test_too_many_chunks_is_a_400_naming_the_configuration() -> None:
    config = parse_chunking({"recursive": {"chunkSize": 1, "chunkOverlap": 0}})
    assert len(chunk_text("x" * 10, config, max_chunks=10)) == 10
    started = time.perf_counter()
    with pytest.raises(BadRequest) as refused:
        chunk_text("x" * 1_000_000, config, max_chunks=1000)
    assert time.perf_counter() - started < 0.5  # stopped at chunk 1001, not after a million
    assert (
        "recursive.chunkSize (1)" in refused.value.message
        and "more than 1000 chunks" in refused.value.message
    )
    assert '"chunkSize":1' in refused.value.message and "max_chunks_per_memory" in refused.value.message
    sentence = parse_chunking({"sentence": {"maxChunkSize": 2}})
    with pytest.raises(BadRequest, match=r"sentence\.maxChunkSize \(2\)"):
        chunk_text("Hi. " * 100, sentence, max_chunks=5)


def test_sentence_packing_is_linear() -> None:
    """A huge maxChunkSize once re-measured the growing chunk for every sentence: quadratic in the text."""
    config = parse_chunking({"sentence": {"maxChunkSize": 10**7, "lengthMeasurement": "TOKEN_COUNT"}})
    started = time.perf_counter()
    assert len(chunk_text("Ok. " * 250_000, config)) == 1
    assert time.perf_counter() - started < 3.0


def _backtracking() -> ChunkingConfig:
    """A separator regex that backtracks catastrophically on a run of x's without a y."""
    return parse_chunking(
        {
            "recursive": {
                "chunkSize": 10,
                "chunkOverlap": 0,
                "separators": ["(x+x+)+y"],
                "separatorIsRegex": True,
            }
        }
    )


def test_a_backtracking_separator_regex_gets_a_time_budget() -> None:
    config = _backtracking()
    started = time.perf_counter()
    with pytest.raises(BadRequest, match="separator regex"):
        chunk_text("x" * 5000, config)
    assert time.perf_counter() - started < REGEX_BUDGET_S + 2.0


@pytest.mark.asyncio(loop_scope="function")
async def test_long_texts_are_chunked_off_the_event_loop() -> None:
    """While a heavy chunking runs (a backtracking regex, given its whole budget), the loop keeps ticking."""
    config = _backtracking()
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    try:
        with pytest.raises(BadRequest):
            await chunk_memory("x" * 5000, config)
    finally:
        tick.cancel()
        await asyncio.gather(tick, return_exceptions=True)
    assert len(gaps) > 20 and max(gaps) < 0.5, max(gaps)


# --- the tokenizer's cut -------------------------------------------------------------------------------


def test_tokenizing_a_huge_text_reads_only_its_head() -> None:
    from proxy.embedding import EngineOptions, default_model_path
    from proxy.embedding.model import CHARS_PER_TOKEN, load_model

    model = load_model(default_model_path(), EngineOptions(dtype="float32", warmup=False))
    assert model.max_chars == model.max_tokens * CHARS_PER_TOKEN
    huge = "the user prefers green tea in the morning " * 250_000  # 10.5 MB
    started = time.perf_counter()
    ids = model.tokenize([huge])[0]
    elapsed = time.perf_counter() - started
    assert len(ids) == model.max_tokens and ids == model.tokenize([huge[: model.max_chars]])[0]
    assert elapsed < 0.5, elapsed  # the whole text took 7-10 s before the cut


# --- the input guard and the error middleware, over a real socket ----------------------------------------


async def _goodmem(request: web.Request) -> web.Response:
    return reply(await json_body(request))


async def _ml(request: web.Request) -> web.Response:
    return json_response(await ml_read_json(request))


async def _openai(request: web.Request) -> web.Response:
    try:
        body = await body_reader.read_json(request)
    except MalformedJson:
        raise BadRequest("We could not parse the JSON body of your request.") from None
    return web.json_response(body)


async def _passthrough(request: web.Request) -> web.Response:
    return web.Response(text="relayed")


@pytest_asyncio.fixture(loop_scope="function")
async def server() -> AsyncIterator[tuple[str, int]]:
    app = web.Application(middlewares=[error_middleware, input_guard_middleware], client_max_size=4096)
    app[SETTINGS] = Settings(max_body_bytes=4096, max_json_depth=8, max_memory_chars=100)
    app.router.add_post("/v1/echo", _goodmem)
    app.router.add_post(
        "/_plugins/_ml/memory_containers/{memory_container_id}/memories/long-term/_memproxy_add", _ml
    )
    app.router.add_post("/_plugins/_ml/memory_containers/_search", _ml)
    app.router.add_post("/openai/v1/echo", _openai)
    app.router.add_route("*", "/{tail:.*}", _passthrough)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield "127.0.0.1", port
    await runner.cleanup()


async def raw_request(
    address: tuple[str, int], head: bytes, body: bytes = b"", *, with_length: bool = True
) -> tuple[int, bytes, bytes]:
    """Sends ``head`` (request line and headers, without the blank line) and ``body``; the answer's status,
    head and body, read until the server closes the connection."""
    reader, writer = await asyncio.open_connection(*address)
    length = b"Content-Length: %d\r\n" % len(body) if with_length else b""
    writer.write(head + b"\r\n" + length + b"Connection: close\r\n\r\n" + body)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), timeout=30)
    writer.close()
    head_out, _, payload = data.partition(b"\r\n\r\n")
    return int(head_out.split(b" ", 2)[1]), head_out, payload


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/echo", "goodmem"),
        ("/_plugins/_ml/memory_containers/_search", "opensearch"),
        ("/openai/v1/echo", "openai"),
        ("/_cat/indices", "opensearch"),
    ],
)
async def test_a_header_that_is_not_utf8_is_a_400_in_the_apis_shape(
    server: tuple[str, int], path: str, shape: str
) -> None:
    head = (
        b"POST "
        + path.encode()
        + b" HTTP/1.1\r\nHost: x\r\nx-api-key: secret\xff\xfekey\r\nContent-Type: application/json"
    )
    status, _, payload = await raw_request(server, head, b"{}")
    assert status == 400
    body = json.loads(payload)
    message = {
        "goodmem": lambda: body["error"],
        "opensearch": lambda: body["error"]["reason"],
        "openai": lambda: body["error"]["message"],
    }[shape]()
    assert message == "The x-api-key header is not valid UTF-8"
    assert b"secret" not in payload


@pytest.mark.asyncio(loop_scope="function")
async def test_the_request_target_must_be_utf8(server: tuple[str, int]) -> None:
    status, _, payload = await raw_request(server, b"GET /v1/spaces/\xed\xa0\x80 HTTP/1.1\r\nHost: x")
    assert status == 400 and b"\xed" not in payload


@pytest.mark.asyncio(loop_scope="function")
async def test_bodies_over_the_limit_are_413_saying_the_limit(server: tuple[str, int]) -> None:
    big = json.dumps({"x": "y" * 5000}).encode()
    for path, read in [
        ("/v1/echo", lambda b: b["error"]),
        ("/_plugins/_ml/memory_containers/_search", lambda b: b["error"]["reason"]),
        ("/openai/v1/echo", lambda b: b["error"]["message"]),
    ]:
        for chunked in (False, True):  # refused by Content-Length, or while reading a chunked body
            if chunked:
                chunks = b"".join(
                    b"%x\r\n%s\r\n" % (len(big[i : i + 1000]), big[i : i + 1000])
                    for i in range(0, len(big), 1000)
                )
                head = f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked".encode()
                status, _, payload = await raw_request(server, head, chunks + b"0\r\n\r\n", with_length=False)
            else:
                head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json".encode()
                status, _, payload = await raw_request(server, head, big)
            assert status == 413, (path, chunked, payload)
            message = read(json.loads(payload))
            assert (
                message
                == "The request body is larger than 4096 bytes, the most memproxy accepts (max_body_bytes)"
            )


@pytest.mark.asyncio(loop_scope="function")
async def test_ml_commons_memory_texts_are_bounded(server: tuple[str, int]) -> None:
    path = "/_plugins/_ml/memory_containers/c1/memories/long-term/_memproxy_add"
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json".encode()
    status, _, payload = await raw_request(server, head, json.dumps({"memory": "m" * 100}).encode())
    assert status == 200
    status, _, payload = await raw_request(server, head, json.dumps({"memory": "m" * 101}).encode())
    assert status == 413
    reason = json.loads(payload)["error"]["reason"]
    assert (
        reason
        == "The text at $.memory has 101 characters, more than the 100 one memory may hold (max_memory_chars)"
    )


@pytest.mark.asyncio(loop_scope="function")
async def test_invalid_json_is_worded_by_each_api(server: tuple[str, int]) -> None:
    for raw in (b'{"n": "\\ud800"}', b"[" * 9 + b"]" * 9, b"[" * 50_000 + b"]" * 50_000):
        status, _, payload = await raw_request(server, b"POST /v1/echo HTTP/1.1\r\nHost: x", raw[:4000])
        assert status == 400, payload
        assert json.loads(payload)["error"].startswith("Malformed JSON body: ")
        status, _, payload = await raw_request(
            server, b"POST /_plugins/_ml/memory_containers/_search HTTP/1.1\r\nHost: x", raw[:4000]
        )
        assert status == 400 and json.loads(payload)["error"]["type"] == "json_parse_exception"


@pytest.mark.asyncio(loop_scope="function")
async def test_multipart_without_a_boundary_is_a_400_on_own_routes_only(server: tuple[str, int]) -> None:
    for content_type in (
        "multipart/form-data",
        "multipart/form-data; boundary=",
        "multipart/mixed; boundary=" + "b" * 71,
    ):
        head = f"POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}".encode()
        status, _, payload = await raw_request(server, head, b"--x\r\n")
        assert status == 400 and "boundary" in json.loads(payload)["error"], payload
    head = b"POST /some-index/_doc HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data"
    assert (await raw_request(server, head, b"--x\r\n"))[0] == 200  # pass-through relays whatever it gets


# --- aiohttp's own answer to a request it cannot parse ------------------------------------------------------


def _serve_and_send(handler_installed: bool, data: bytes) -> bytes:
    """A real server in a thread of its own (its own loop), a raw socket sending ``data``: the answer."""
    import aiohttp.web_server

    original = aiohttp.web_server.RequestHandler
    ready: list[int] = []
    stop = asyncio.Event()

    async def serve() -> None:
        app = web.Application(middlewares=[error_middleware, input_guard_middleware])
        app.router.add_route("*", "/{tail:.*}", _passthrough)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ready.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        while not stop.is_set():
            await asyncio.sleep(0.01)
        await runner.cleanup()

    import threading

    loop = asyncio.new_event_loop()
    if handler_installed:
        install_quiet_request_handler()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not ready and time.monotonic() < deadline:
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", ready[0]), timeout=30) as sock:
            sock.sendall(data)
            out = b""
            while chunk := sock.recv(65536):
                out += chunk
        return out
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()
        aiohttp.web_server.RequestHandler = original  # type: ignore[misc]


MALFORMED = b"GET /v1/spaces HTTP/1.1\r\nHost: x\r\nx-api-key: gm_SECRETKEY\x01oops\r\n\r\n"


def test_aiohttp_alone_echoes_the_raw_header() -> None:
    """The reason for QuietRequestHandler: without it, the parser's message quotes the header line."""
    answer = _serve_and_send(False, MALFORMED)
    assert answer.split(b"\r\n")[0].endswith(b" 400 Bad Request") and b"SECRETKEY" in answer


def test_a_malformed_header_line_gets_a_bare_400() -> None:
    answer = _serve_and_send(True, MALFORMED)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].endswith(b" 400 Bad Request")
    assert body == b"400 Bad Request" and b"SECRETKEY" not in answer
    assert issubclass(QuietRequestHandler, web.RequestHandler)


@pytest.fixture()
def _restore_request_handler() -> Iterator[None]:
    import aiohttp.web_server

    original = aiohttp.web_server.RequestHandler
    yield
    aiohttp.web_server.RequestHandler = original  # type: ignore[misc]


def test_install_is_idempotent(_restore_request_handler: None) -> None:
    import aiohttp.web_server

    install_quiet_request_handler()
    install_quiet_request_handler()
    assert aiohttp.web_server.RequestHandler is QuietRequestHandler
