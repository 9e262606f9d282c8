"""The OpenAI embeddings protocol under ``/openai/v1/``, through the official ``openai`` client.

Against the real proxy process; vectors are checked against sentence-transformers on the same model, token
counts against its tokenizer. Malformed requests the client cannot send go raw over urllib.
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import openai
import pytest

from proxy.embedding import DEFAULT_EMBEDDER_ALIAS, DEFAULT_EMBEDDER_ID, DEFAULT_EMBEDDER_NAME
from tests.conftest import ProxyProcess
from tests.embedding_helpers import oracle_model, oracle_vectors, row_cosines

LONG = " ".join(f"memory{i} about the quarterly sales review" for i in range(120))  # > 256 tokens
TEXTS = [
    "The user prefers green tea over coffee in the morning.",
    "Meeting with Dana moved to Tuesday 3pm; bring the Q3 latency report.",
    "Ünïcödé façade, naïve café, Straße, 日本語のメモ, 🤖🚀",
    " ",
    LONG,
]


@pytest.fixture(scope="module")
def client(proxy_url: str, admin_key: str) -> Iterator[openai.OpenAI]:
    # OpenAI clients send the key as a Bearer token, which memproxy reads as a GoodMem API key.
    with openai.OpenAI(base_url=proxy_url + "/openai/v1", api_key=admin_key, max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def oracle() -> np.ndarray:
    return oracle_vectors(TEXTS)


@pytest.fixture(scope="module", autouse=True)
def _key(admin_key: str) -> Iterator[None]:
    """The key ``_raw`` sends (every OpenAI route needs one)."""
    _KEY.append(admin_key)
    yield
    _KEY.clear()


_KEY: list[str] = []


def _raw(url: str, body: bytes | None, method: str = "POST") -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {_KEY[-1]}"}
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _assert_openai_error(body: Any, kind: str = "invalid_request_error", param: str | None = None) -> None:
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert (error["type"], error["param"]) == (kind, param), error


# --- vectors and usage -----------------------------------------------------------------------------------


def test_float_vectors_match_sentence_transformers(client: openai.OpenAI, oracle: np.ndarray) -> None:
    answer = client.embeddings.create(model=DEFAULT_EMBEDDER_ALIAS, input=TEXTS, encoding_format="float")
    assert answer.object == "list" and answer.model == DEFAULT_EMBEDDER_ALIAS
    assert [(d.object, d.index) for d in answer.data] == [("embedding", i) for i in range(len(TEXTS))]
    vectors = [d.embedding for d in answer.data]
    assert all(len(v) == 384 for v in vectors)
    cosines = row_cosines(vectors, oracle)
    assert cosines.min() >= 1 - 1e-3, dict(zip(TEXTS, cosines.round(6), strict=True))


def test_wire_shape_and_base64_decode_to_the_same_vectors(proxy_url: str, client: openai.OpenAI) -> None:
    url = proxy_url + "/openai/v1/embeddings"
    bodies = {
        fmt: _raw(
            url, json.dumps({"model": DEFAULT_EMBEDDER_ID, "input": TEXTS, "encoding_format": fmt}).encode()
        )
        for fmt in ("float", "base64")
    }
    for status, body in bodies.values():
        assert status == 200
        assert set(body) == {"object", "data", "model", "usage"} and body["model"] == DEFAULT_EMBEDDER_ID
        assert len(body["data"]) == len(TEXTS)
        assert all(set(d) == {"object", "index", "embedding"} for d in body["data"])
        assert set(body["usage"]) == {"prompt_tokens", "total_tokens"}
    floats = np.asarray([d["embedding"] for d in bodies["float"][1]["data"]], dtype=np.float32)
    decoded = np.stack(
        [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in bodies["base64"][1]["data"]]
    )
    assert decoded.shape == (len(TEXTS), 384)
    assert row_cosines(decoded, floats).min() > 0.99999
    # The client asks for base64 unless told otherwise, and decodes it itself.
    by_client = client.embeddings.create(model=DEFAULT_EMBEDDER_ALIAS, input=TEXTS)
    assert row_cosines([d.embedding for d in by_client.data], floats).min() > 0.99999


def test_a_string_is_one_input_and_a_list_keeps_its_order(client: openai.OpenAI, oracle: np.ndarray) -> None:
    one = client.embeddings.create(model=DEFAULT_EMBEDDER_NAME, input=TEXTS[1], encoding_format="float")
    assert len(one.data) == 1 and one.model == DEFAULT_EMBEDDER_NAME
    assert row_cosines([one.data[0].embedding], oracle[1:2]).min() >= 1 - 1e-3
    order = [2, 0, 1]
    listed = client.embeddings.create(model=DEFAULT_EMBEDDER_ALIAS, input=[TEXTS[i] for i in order])
    assert [d.index for d in listed.data] == [0, 1, 2]
    assert row_cosines([d.embedding for d in listed.data], oracle[order]).min() >= 1 - 1e-3


def test_usage_counts_the_model_tokenizer(client: openai.OpenAI) -> None:
    # What the model reads: [CLS] and [SEP] included, the long text cut at max_seq_length (256).
    per_text = oracle_model().tokenize(TEXTS)["attention_mask"].sum(dim=1).tolist()
    assert per_text[-1] == 256
    answer = client.embeddings.create(model=DEFAULT_EMBEDDER_ALIAS, input=TEXTS)
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (sum(per_text), sum(per_text))
    single = client.embeddings.create(model=DEFAULT_EMBEDDER_ALIAS, input=TEXTS[0])
    assert single.usage.prompt_tokens == per_text[0]


def test_dimensions_must_be_the_model_s_own(client: openai.OpenAI) -> None:
    same = client.embeddings.create(model=DEFAULT_EMBEDDER_ALIAS, input="tea", dimensions=384)
    assert len(same.data[0].embedding) == 384
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model=DEFAULT_EMBEDDER_ALIAS, input="tea", dimensions=128)
    assert caught.value.status_code == 400
    _assert_openai_error({"error": caught.value.body}, param="dimensions")
    assert "384" in caught.value.message


# --- models ----------------------------------------------------------------------------------------------


def test_models_list_the_default_embedder_by_id_name_and_alias(client: openai.OpenAI) -> None:
    models = list(client.models.list())
    assert [m.id for m in models][:3] == [DEFAULT_EMBEDDER_ID, DEFAULT_EMBEDDER_NAME, DEFAULT_EMBEDDER_ALIAS]
    for m in models:
        assert (m.object, m.owned_by) == ("model", "memproxy") and isinstance(m.created, int)
    for name in (DEFAULT_EMBEDDER_ID, DEFAULT_EMBEDDER_NAME, DEFAULT_EMBEDDER_ALIAS.upper()):
        assert client.models.retrieve(name).id == name


def test_unknown_model_is_404_model_not_found(client: openai.OpenAI) -> None:
    for call in (
        lambda: client.models.retrieve("no-such-model"),
        lambda: client.embeddings.create(model="no-such-model", input="tea"),
    ):
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert caught.value.status_code == 404 and caught.value.code == "model_not_found"
        assert "no-such-model" in caught.value.message


# --- bad requests ----------------------------------------------------------------------------------------

TOO_MANY = ["tea"] * 2049


@pytest.mark.parametrize(
    "value",
    ["", [], ["tea", ""], [1, 2, 3], [[1, 2], [3]], TOO_MANY, ["tea", 3], {"text": "tea"}, None],
    ids=[
        "empty",
        "empty-list",
        "empty-item",
        "tokens",
        "token-lists",
        "2049-items",
        "non-string",
        "object",
        "null",
    ],
)
def test_bad_input_is_400_naming_input(client: openai.OpenAI, value: Any) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model=DEFAULT_EMBEDDER_ALIAS, input=value)
    assert caught.value.status_code == 400
    _assert_openai_error({"error": caught.value.body}, param="input")


def test_token_arrays_are_refused_as_strings_only(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model=DEFAULT_EMBEDDER_ALIAS, input=[101, 2023, 102])
    assert "only strings" in caught.value.message


def test_2048_inputs_are_served(client: openai.OpenAI) -> None:
    answer = client.embeddings.create(model=DEFAULT_EMBEDDER_ALIAS, input=[f"note {i}" for i in range(2048)])
    assert len(answer.data) == 2048 and answer.data[-1].index == 2047


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"", None),
        (b'["tea"]', None),
        (b'{"input": "tea"}', "model"),
        (b'{"model": "all-minilm-l6-v2"}', "input"),
        (b'{"model": "", "input": "tea"}', "model"),
        (b'{"model": 7, "input": "tea"}', "model"),
        (b'{"model": "all-minilm-l6-v2", "input": 7}', "input"),
        (b'{"model": "all-minilm-l6-v2", "input": "tea", "encoding_format": "int8"}', "encoding_format"),
        (b'{"model": "all-minilm-l6-v2", "input": "tea", "dimensions": "384"}', "dimensions"),
        (b'{"model": "all-minilm-l6-v2", "input": "tea", "dimensions": 0}', "dimensions"),
    ],
)
def test_malformed_requests_are_400_naming_the_field(proxy_url: str, body: bytes, param: str | None) -> None:
    status, answer = _raw(proxy_url + "/openai/v1/embeddings", body)
    assert status == 400
    _assert_openai_error(answer, param=param)


@pytest.mark.parametrize(("method", "path"), [("GET", "/embeddings"), ("POST", "/models"), ("GET", "/nope")])
def test_unknown_routes_answer_openai_404(proxy_url: str, method: str, path: str) -> None:
    status, answer = _raw(proxy_url + "/openai/v1" + path, b"{}" if method == "POST" else None, method)
    assert status == 404
    _assert_openai_error(answer)


# --- overload --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_queue_proxy(opensearch_url: str) -> Iterator[ProxyProcess]:
    # Anonymous (--auth none): the queue's limit is the subject here, not authentication.
    p = ProxyProcess(opensearch_url, extra_args=["--embed-max-queue", "4", "--auth", "none"])
    yield p
    p.stop()


def test_overloaded_embedder_is_429_in_openai_shape(small_queue_proxy: ProxyProcess) -> None:
    texts = [f"{LONG} variant {i}" for i in range(64)]

    async def burst() -> list[BaseException | None]:
        async with openai.AsyncOpenAI(
            base_url=small_queue_proxy.url + "/openai/v1", api_key="unused", max_retries=0
        ) as aclient:
            calls = [aclient.embeddings.create(model=DEFAULT_EMBEDDER_ALIAS, input=texts) for _ in range(6)]
            results = await asyncio.gather(*calls, return_exceptions=True)
        return [r if isinstance(r, BaseException) else None for r in results]

    errors = asyncio.run(burst())
    refused = [e for e in errors if e is not None]
    assert refused and len(refused) < len(errors), errors  # the first call is served, later ones refused
    for error in refused:
        assert isinstance(error, openai.RateLimitError), error
        assert error.status_code == 429 and error.code == "rate_limit_exceeded"
        _assert_openai_error({"error": error.body}, kind="rate_limit_exceeded")
    assert "Traceback" not in small_queue_proxy.log()
