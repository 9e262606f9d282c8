"""GoodMem embedders, rerankers and LLMs for real: the real proxy and node, both real clients (``goodmem``
0.1.43 Gen B, ``goodmem-client`` 1.5.14 Gen A) and raw HTTP.

Test doubles stand only at the network edge: the remote embedder is memproxy's own OpenAI endpoint (real
all-MiniLM vectors, and it checks the API key the embedder's credentials carry), the reranker a small TEI
``/rerank`` server (``tests.support.tei_reranker``), the LLM ``tests.support.fake_llm.FakeLLM``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
import warnings
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pytest
from goodmem import Goodmem
from goodmem import errors as gerr

from tests.conftest import ProxyProcess, free_port
from tests.goodmem_helpers import root_api_key
from tests.support.fake_llm import FakeLLM
from tests.support.tei_reranker import TeiReranker

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import goodmem_client as gc
    from goodmem_client import models as gcm
    from goodmem_client.exceptions import ApiException

pytestmark = pytest.mark.timeout(300)


# --- fixtures ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root_key(proxy_url: str, opensearch_url: str) -> str:
    return root_api_key(proxy_url, opensearch_url)


@pytest.fixture(scope="module")
def gm(proxy_url: str, root_key: str) -> Iterator[Goodmem]:
    with Goodmem(base_url=proxy_url, api_key=root_key) as client:
        yield client


@pytest.fixture(scope="module")
def ga(proxy_url: str, root_key: str) -> gc.ApiClient:
    cfg = gc.Configuration(host=proxy_url)
    cfg.api_key = {"ApiKeyAuth": root_key}
    return gc.ApiClient(cfg)


@pytest.fixture(scope="module")
def http(proxy_url: str, root_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": root_key}, timeout=120) as client:
        yield client


# Every provider key issued here: none may ever reach the proxy's log.
_PROVIDER_KEYS: list[str] = []


@pytest.fixture
def provider_key(gm: Goodmem) -> str:
    """The remote embedder's API key: a memproxy key of its own per test, used for nothing else, so that
    finding it anywhere (a response, the log) can only mean the stored credential leaked; one per test also
    keeps one test's leftovers from being another's duplicate."""
    raw = gm.apikeys.create(labels={"purpose": "embedder-credential"}).raw_api_key
    assert raw
    _PROVIDER_KEYS.append(str(raw))
    return str(raw)


@pytest.fixture(scope="module")
def local_model(http: httpx.Client) -> str:
    """The model name memproxy's OpenAI endpoint serves (the local default embedder)."""
    models = http.get("/openai/v1/models").json()["data"]
    return str(models[0]["id"])


@pytest.fixture(scope="module")
def tei() -> Iterator[TeiReranker]:
    with TeiReranker() as server:
        yield server


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def _embedder(gm: Goodmem, proxy_url: str, model: str, key: str, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "display_name": f"remote-{uuid.uuid4().hex[:6]}",
        "model_identifier": model,
        "provider_type": "OPENAI",
        "endpoint_url": f"{proxy_url}/openai/v1",
        "dimensionality": 384,
        "api_key": key,
    }
    return gm.embedders.create(**{**args, **kw})


def _user(gm: Goodmem, proxy_url: str) -> tuple[str, Goodmem]:
    user = gm.users.create(email=f"m-{uuid.uuid4().hex[:8]}@example.com", display_name="Model user")
    key = gm.apikeys.create(subject_principal_id=user.user_id)
    return str(user.user_id), Goodmem(base_url=proxy_url, api_key=str(key.raw_api_key))


# --- the quickstart ----------------------------------------------------------------------------------------


def test_quickstart_gen_b(
    gm: Goodmem, proxy_url: str, provider_key: str, local_model: str, tei: TeiReranker, llm: FakeLLM
) -> None:
    """Create an embedder, a reranker and an LLM, then a space on that embedder; memories go in through the
    remote embedder and come back out of a retrieve."""
    emb = _embedder(gm, proxy_url, local_model, provider_key, labels={"suite": "models"})
    assert emb.provider_type == "OPENAI" and emb.dimensionality == 384 and emb.api_path == "/embeddings"
    assert emb.endpoint_url == f"{proxy_url}/openai/v1" and emb.credentials is None
    rer = gm.rerankers.create(
        display_name="tei", provider_type="TEI", endpoint_url=tei.url, model_identifier="tei-rerank"
    )
    assert rer.api_path == "/rerank" and rer.supported_modalities == ["TEXT"]
    made = gm.llms.create(
        display_name="fake", provider_type="OPENAI", endpoint_url=llm.base_url, model_identifier="fake-model"
    )
    assert made.llm.capabilities.supports_chat is True and made.llm.api_path == "/chat/completions"
    assert [s.code for s in made.statuses or []] == ["LLM_CAPABILITY_INFERRED"]

    space = gm.spaces.create(
        name=f"models-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": emb.embedder_id}]
    )
    try:
        assert space.space_embedders[0].embedder_id == emb.embedder_id
        runbook = gm.memories.create(
            space_id=space.space_id, original_content="Manila office runbook: restart the VPN gateway."
        )
        gm.memories.create(space_id=space.space_id, original_content="Cats sleep on warm windowsills.")
        assert gm.memories.get(id=runbook.memory_id).processing_status == "COMPLETED"
        events = gm.memories.retrieve(message="VPN runbook", space_ids=[space.space_id], stream=False)
        defs = [e.memory_definition for e in events if e.memory_definition]
        hits = [e.retrieved_item.chunk for e in events if e.retrieved_item]
        assert hits and defs[hits[0].memory_index].memory_id == runbook.memory_id
        assert hits[0].relevance_score < -0.3  # real MiniLM vectors, not noise (-cos: the live convention)
        # The registered reranker and LLM serve retrieval's post-processor, by id.
        calls, prompts = len(tei.calls), len(llm.prompts)
        events = gm.memories.retrieve(
            message="VPN runbook",
            space_ids=[space.space_id],
            reranker_id=rer.reranker_id,
            llm_id=made.llm.llm_id,
            stream=False,
        )
        assert len(tei.calls) > calls and tei.calls[-1][1]["query"] == "VPN runbook"
        assert len(llm.prompts) > prompts and llm.prompts[-1].body["model"] == "fake-model"
        replies = [e.abstract_reply.text for e in events if e.abstract_reply]
        assert len(replies) == 1 and replies[0].startswith("Summary: ") and "VPN runbook" in replies[0]
    finally:
        gm.spaces.delete(id=space.space_id)
    gm.embedders.delete(id=emb.embedder_id)
    gm.rerankers.delete(id=rer.reranker_id)
    gm.llms.delete(id=made.llm.llm_id)


def test_stored_models_are_callable_by_any_process(
    gm: Goodmem, opensearch_url: str, tei: TeiReranker, llm: FakeLLM
) -> None:
    """A second registry over the same node (another memproxy process) calls the reranker and the LLM as
    registered: TEI's wire format with the sealed key in the header the client chose, OpenAI chat."""
    from proxy.config import Settings
    from proxy.core.models import ModelRegistry
    from proxy.store.client import Store
    from proxy.store.models import ModelDocs

    secret = f"tei-{uuid.uuid4().hex}"
    rer = gm.rerankers.create(
        display_name="tei-auth",
        provider_type="TEI",
        endpoint_url=tei.url + "/",  # canonicalised: the trailing slash goes
        model_identifier="tei-rerank",
        credentials={
            "kind": "CREDENTIAL_KIND_API_KEY",
            "api_key": {"inline_secret": secret, "prefix": "Key "},
        },
    )
    assert rer.endpoint_url == tei.url
    made = gm.llms.create(
        display_name="fake-chat",
        provider_type="VLLM",
        endpoint_url=llm.base_url,
        model_identifier="fake-model",
        capabilities={"supports_chat": True, "supports_streaming": False},
    )
    assert made.llm.capabilities.supports_streaming is False and made.llm.capabilities.supports_chat

    async def call() -> tuple[list[float], str]:
        store = Store(Settings(opensearch_url=opensearch_url))
        registry = ModelRegistry(
            ModelDocs(store),
            embedders=cast(Any, None),
            secret_key=os.environ.get("MEMPROXY_SECRET_KEY"),
            allow_private_endpoints=("loopback",),  # the doubles listen there
        )
        try:
            scores = await (await registry.rerank_model(rer.reranker_id)).rerank(
                "vpn runbook", ["cats sleep", "the vpn runbook"]
            )
            chat = await (await registry.chat_model(made.llm.llm_id)).complete(
                [{"role": "user", "content": "hello"}]
            )
            return scores, chat.text
        finally:
            await registry.close()
            await store.close()

    scores, text = asyncio.run(call())
    assert scores[1] > scores[0]
    assert tei.calls[-1][0] == f"Key {secret}" and tei.calls[-1][1]["texts"] == [
        "cats sleep",
        "the vpn runbook",
    ]
    assert text == "OK" and llm.prompts[-1].body["model"] == "fake-model"
    assert llm.prompts[-1].path == "/v1/chat/completions"
    gm.rerankers.delete(id=rer.reranker_id)
    gm.llms.delete(id=made.llm.llm_id)


# --- CRUD with both clients --------------------------------------------------------------------------------


def test_crud_gen_b(
    gm: Goodmem, http: httpx.Client, proxy_url: str, provider_key: str, local_model: str, tei: TeiReranker
) -> None:
    emb = _embedder(gm, proxy_url, local_model, provider_key, labels={"a": "1"}, description="d")
    assert emb.embedder_id in [e.embedder_id for e in gm.embedders.list()]
    assert [e.embedder_id for e in gm.embedders.list(label={"a": "1"})] == [emb.embedder_id]
    assert emb.embedder_id in [e.embedder_id for e in gm.embedders.list(provider_type="OPENAI")]
    assert emb.embedder_id not in [e.embedder_id for e in gm.embedders.list(provider_type="TEI")]
    assert gm.embedders.get(id=emb.embedder_id).description == "d"
    merged = gm.embedders.update(
        id=emb.embedder_id, request={"merge_labels": {"b": "2"}, "display_name": "x"}
    )
    assert merged.labels == {"a": "1", "b": "2"} and merged.display_name == "x"
    assert merged.updated_at >= emb.updated_at
    replaced = gm.embedders.update(id=emb.embedder_id, request={"replace_labels": {}})
    assert replaced.labels == {}
    # The Gen B SDK does not even send it; Gen A and raw clients may.
    immutable = http.put(f"/v1/embedders/{emb.embedder_id}", json={"providerType": "TEI"})
    assert immutable.status_code == 400 and "immutable" in immutable.json()["error"]
    # Not in use: what defines the vectors may change.
    assert (
        gm.embedders.update(id=emb.embedder_id, request={"max_sequence_length": 256}).max_sequence_length
        == 256
    )
    gm.embedders.delete(id=emb.embedder_id)
    with pytest.raises(gerr.NotFoundError):
        gm.embedders.get(id=emb.embedder_id)
    with pytest.raises(gerr.NotFoundError):
        gm.embedders.delete(id=emb.embedder_id)

    rer = gm.rerankers.create(
        display_name="r",
        provider_type="COHERE",
        endpoint_url="https://api.cohere.example",
        model_identifier="m",
        api_key="co-key",
    )
    assert rer.api_path == "/v2/rerank"
    assert rer.reranker_id in [r.reranker_id for r in gm.rerankers.list()]
    upd = gm.rerankers.update(
        id=rer.reranker_id, request={"api_path": "/v1/rerank", "supported_modalities": []}
    )
    assert upd.api_path == "/v1/rerank" and upd.supported_modalities == ["TEXT"]
    assert gm.rerankers.update(id=rer.reranker_id, request={"api_path": ""}).api_path == "/v2/rerank"
    assert http.put(f"/v1/rerankers/{rer.reranker_id}", json={"providerType": "JINA"}).status_code == 400
    gm.rerankers.delete(id=rer.reranker_id)
    with pytest.raises(gerr.NotFoundError):
        gm.rerankers.get(id=rer.reranker_id)

    made = gm.llms.create(
        display_name="l",
        provider_type="OLLAMA",
        endpoint_url="http://localhost:11434/v1",
        model_identifier="llama3",
        default_sampling_params={"max_tokens": 64, "temperature": 0.2},
        client_config={"timeout": 5},
        max_context_length=8192,
    )
    llm_id = made.llm.llm_id
    got = gm.llms.get(id=llm_id)
    assert got.default_sampling_params.max_tokens == 64 and got.client_config == {"timeout": 5}
    assert got.capabilities.supports_function_calling is False
    caps = {"supports_chat": True, "supports_completion": True}
    upd_llm = gm.llms.update(id=llm_id, request={"capabilities": caps, "merge_labels": {"x": "y"}})
    assert upd_llm.capabilities.supports_completion is True and upd_llm.labels == {"x": "y"}
    assert upd_llm.capabilities.supports_streaming is None  # replaced whole
    assert llm_id in [m.llm_id for m in gm.llms.list(label={"x": "y"})]
    gm.llms.delete(id=llm_id)
    assert llm_id not in [m.llm_id for m in gm.llms.list()]


def test_crud_gen_a(
    ga: gc.ApiClient, proxy_url: str, provider_key: str, local_model: str, llm: FakeLLM
) -> None:
    emb_api, rer_api, llm_api = gc.EmbeddersApi(ga), gc.RerankersApi(ga), gc.LLMsApi(ga)
    emb = emb_api.create_embedder(
        embedder_creation_request=gcm.EmbedderCreationRequest(
            display_name="gen-a",
            provider_type="OPENAI",
            endpoint_url=f"{proxy_url}/openai/v1",
            model_identifier=local_model,
            dimensionality=384,
            distribution_type="DENSE",
            credentials=gcm.EndpointAuthentication(
                kind="CREDENTIAL_KIND_API_KEY", api_key=gcm.ApiKeyAuth(inline_secret=provider_key)
            ),
        )
    )
    assert emb.credentials is None
    # Every embedder, local and registered, parses with Gen A's strict models.
    listed = emb_api.list_embedders().embedders
    assert emb.embedder_id in [e.embedder_id for e in listed] and len(listed) >= 2
    upd = emb_api.update_embedder(
        id=emb.embedder_id, update_embedder_request=gcm.UpdateEmbedderRequest(merge_labels={"gen": "a"})
    )
    assert upd.labels == {"gen": "a"}
    assert emb_api.get_embedder(id=emb.embedder_id).labels == {"gen": "a"}
    emb_api.delete_embedder(id=emb.embedder_id)

    rer = rer_api.create_reranker(
        reranker_creation_request=gcm.RerankerCreationRequest(
            display_name="gen-a-r",
            provider_type="JINA",
            endpoint_url="https://api.jina.example",
            model_identifier="j",
        )
    )
    assert rer.api_path == "/v1/rerank"
    assert rer.reranker_id in [r.reranker_id for r in rer_api.list_rerankers().rerankers]
    assert (
        rer_api.update_reranker(
            id=rer.reranker_id, update_reranker_request=gcm.UpdateRerankerRequest(display_name="renamed")
        ).display_name
        == "renamed"
    )
    rer_api.delete_reranker(id=rer.reranker_id)
    with pytest.raises(ApiException) as gone:
        rer_api.get_reranker(id=rer.reranker_id)
    assert gone.value.status == 404

    created = llm_api.create_llm(
        llm_creation_request=gcm.LLMCreationRequest(
            display_name="gen-a-l",
            provider_type="CUSTOM_OPENAI_COMPATIBLE",
            endpoint_url=llm.base_url,
            model_identifier="fake-model",
        )
    )
    assert created.llm.capabilities is not None and created.statuses
    assert created.statuses[0].code == "LLM_CAPABILITY_INFERRED"
    assert created.llm.llm_id in [m.llm_id for m in llm_api.list_llms().llms]
    assert llm_api.get_llm(id=created.llm.llm_id).model_identifier == "fake-model"
    assert (
        llm_api.update_llm(
            id=created.llm.llm_id, llm_update_request=gcm.LLMUpdateRequest(description="gen a")
        ).description
        == "gen a"
    )
    llm_api.delete_llm(id=created.llm.llm_id)


# --- rules ----------------------------------------------------------------------------------------------


def test_duplicates_and_taken_ids(
    gm: Goodmem, http: httpx.Client, proxy_url: str, provider_key: str, local_model: str
) -> None:
    emb = _embedder(gm, proxy_url, local_model, provider_key)
    try:
        with pytest.raises(gerr.ConflictError, match="same configuration"):
            _embedder(gm, proxy_url, local_model, provider_key)  # another display name: still the same model
        with pytest.raises(gerr.ConflictError):  # the URL is compared canonically
            _embedder(gm, proxy_url, local_model, provider_key, endpoint_url=f"{proxy_url}/openai/v1/")
        other = _embedder(gm, proxy_url, local_model, provider_key + "x")  # other credentials: another model
        with pytest.raises(gerr.ConflictError, match="same configuration"):
            gm.embedders.update(
                id=other.embedder_id,
                request={
                    "credentials": {
                        "kind": "CREDENTIAL_KIND_API_KEY",
                        "api_key": {"inline_secret": provider_key},
                    }
                },
            )
        gm.embedders.delete(id=other.embedder_id)
        with pytest.raises(gerr.ConflictError, match="ID already exists"):
            _embedder(gm, proxy_url, local_model, "k2", embedder_id=emb.embedder_id)
        local = gm.embedders.list()[0].embedder_id
        with pytest.raises(gerr.ConflictError, match="ID already exists"):
            _embedder(gm, proxy_url, local_model, "k3", embedder_id=local)
        body = {
            "displayName": "r",
            "providerType": "TEI",
            "endpointUrl": "https://tei.example",
            "modelIdentifier": "m",
        }
        first = http.post("/v1/rerankers", json=body)
        assert first.status_code == 201
        again = http.post("/v1/rerankers", json={**body, "displayName": "r2"})
        assert again.status_code == 409 and again.json()["status"] == 409
        chosen = str(uuid.uuid4())
        assert (
            http.post("/v1/llms", json={**body, "providerType": "VLLM", "llmId": chosen}).status_code == 201
        )
        taken = http.post("/v1/llms", json={**body, "providerType": "OLLAMA", "llmId": chosen})
        assert taken.status_code == 409 and "ID already exists" in taken.json()["error"]
        assert http.delete(f"/v1/rerankers/{first.json()['rerankerId']}").status_code == 204
        assert http.delete(f"/v1/llms/{chosen}").status_code == 204
    finally:
        gm.embedders.delete(id=emb.embedder_id)


def test_in_use_rules(gm: Goodmem, proxy_url: str, provider_key: str, local_model: str) -> None:
    emb = _embedder(gm, proxy_url, local_model, provider_key)
    space = gm.spaces.create(
        name=f"in-use-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": emb.embedder_id}]
    )
    try:
        with pytest.raises(gerr.ConflictError, match="in use"):
            gm.embedders.delete(id=emb.embedder_id)
        for change in (
            {"dimensionality": 385},
            {"distribution_type": "SPARSE"},
            {"model_identifier": "other"},
        ):
            with pytest.raises(gerr.APIError) as refused:
                gm.embedders.update(id=emb.embedder_id, request=change)
            assert refused.value.status_code == 412
        # Descriptive fields, the endpoint and the key may change while it is used.
        assert (
            gm.embedders.update(id=emb.embedder_id, request={"display_name": "renamed"}).display_name
            == "renamed"
        )
    finally:
        gm.spaces.delete(id=space.space_id)
    assert gm.embedders.update(id=emb.embedder_id, request={"dimensionality": 385}).dimensionality == 385
    gm.embedders.delete(id=emb.embedder_id)


def test_wrong_dimensionality_is_refused_at_space_creation(
    gm: Goodmem, proxy_url: str, provider_key: str, local_model: str
) -> None:
    emb = _embedder(gm, proxy_url, local_model, provider_key, dimensionality=768)
    try:
        with pytest.raises(gerr.BadRequestError, match="768") as refused:
            gm.spaces.create(
                name=f"dims-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": emb.embedder_id}]
            )
        assert "384" in str(refused.value.body)
        # A key the provider refuses is also found at space creation, in GoodMem's shape (a bad gateway).
        bad = _embedder(gm, proxy_url, local_model, "sk-test")
        with pytest.raises(gerr.APIError) as rejected:
            gm.spaces.create(
                name=f"key-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": bad.embedder_id}]
            )
        assert rejected.value.status_code == 502 and "401" in str(rejected.value.body)
        gm.embedders.delete(id=bad.embedder_id)
    finally:
        gm.embedders.delete(id=emb.embedder_id)


def test_unreachable_embedder_at_ingest(
    gm: Goodmem, http: httpx.Client, proxy_url: str, provider_key: str, local_model: str
) -> None:
    emb = _embedder(gm, proxy_url, local_model, provider_key)
    space = gm.spaces.create(
        name=f"gone-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": emb.embedder_id}]
    )
    try:
        dead = f"http://127.0.0.1:{free_port()}/v1"
        gm.embedders.update(id=emb.embedder_id, request={"endpoint_url": dead})
        res = http.post(
            "/v1/memories",
            json={"spaceId": space.space_id, "originalContent": "x", "contentType": "text/plain"},
        )
        assert res.status_code == 503, res.text
        assert res.json()["status"] == 503 and "unreachable" in res.json()["error"]
        found = http.post(
            "/v1/memories:retrieve", json={"message": "x", "spaceKeys": [{"spaceId": space.space_id}]}
        )
        assert found.status_code == 503 and found.json()["status"] == 503
    finally:
        gm.spaces.delete(id=space.space_id)
        gm.embedders.delete(id=emb.embedder_id)


def test_validation(http: httpx.Client, proxy_url: str) -> None:
    base = {
        "displayName": "v",
        "providerType": "OPENAI",
        "endpointUrl": "https://api.example/v1",
        "modelIdentifier": "m",
        "dimensionality": 8,
    }

    def status(path: str, body: dict[str, Any]) -> tuple[int, str]:
        res = http.post(path, json=body)
        return res.status_code, res.json().get("error", "") if res.status_code >= 400 else ""

    for broken in (
        {"displayName": None},
        {"providerType": None},
        {"providerType": "NOPE"},
        {"endpointUrl": None},
        {"endpointUrl": "ftp://x.example"},
        {"modelIdentifier": ""},
        {"dimensionality": 0},
        {"dimensionality": 1.5},
        {"distributionType": "DIAGONAL"},
        {"supportedModalities": ["SMELL"]},
        {"labels": {"k": 1}},
        {"ownerId": "not-a-uuid"},
        {"credentials": {"kind": "CREDENTIAL_KIND_GCP_ADC", "gcpAdc": {}}},
        {"credentials": {"kind": "CREDENTIAL_KIND_API_KEY", "apiKey": {"secretRef": {"uri": "vault://k"}}}},
        {"credentials": {"kind": "CREDENTIAL_KIND_API_KEY"}},
    ):
        assert status("/v1/embedders", {**base, **broken})[0] == 400, broken
    code, message = status("/v1/embedders", {**base, "providerType": "GEMINI"})
    assert code == 400 and "does not speak" in message
    assert status("/v1/embedders", {**base, "providerType": "DASHSCOPE"})[0] == 400
    assert status("/v1/rerankers", {**base, "providerType": "OPENAI"})[0] == 400  # no reranker provider
    assert status("/v1/llms", {**base, "providerType": "TEI"})[0] == 400
    for sampling in ({"temperature": 3}, {"topP": 1.5}, {"maxTokens": 0}, {"stopSequences": ["x"] * 11}):
        assert status("/v1/llms", {**base, "defaultSamplingParams": sampling})[0] == 400, sampling
    assert status("/v1/llms", {**base, "capabilities": {"supportsChat": "yes"}})[0] == 400
    # Trusted endpoints only (--trusted-model-endpoints: https, or http on loopback).
    code, message = status("/v1/embedders", {**base, "endpointUrl": "http://10.1.2.3:8080/v1"})
    assert code == 400 and "trusted" in message
    assert status("/v1/llms", {**base, "endpointUrl": "http://internal.example/v1"})[0] == 400
    made = http.post("/v1/rerankers", json={**base, "providerType": "TEI"}).json()
    rid = made["rerankerId"]
    assert http.put(f"/v1/rerankers/{rid}", json={"endpointUrl": "http://10.0.0.1/"}).status_code == 400
    both = http.put(f"/v1/rerankers/{rid}", json={"replaceLabels": {}, "mergeLabels": {}})
    assert both.status_code == 400 and "mutually exclusive" in both.json()["error"]
    assert http.put(f"/v1/rerankers/{rid}", json={"credentials": {}}).status_code == 400
    assert http.delete(f"/v1/rerankers/{rid}").status_code == 204
    assert http.get(f"/v1/llms/{uuid.uuid4()}").status_code == 404


def test_credentials_never_leave(
    gm: Goodmem, http: httpx.Client, proxy: ProxyProcess, opensearch_url: str, tei: TeiReranker, llm: FakeLLM
) -> None:
    secret = f"sk-secret-{uuid.uuid4().hex}"
    cred = {"kind": "CREDENTIAL_KIND_API_KEY", "apiKey": {"inlineSecret": secret, "headerName": "X-Key"}}
    answers: list[str] = []
    common = {"displayName": "c", "modelIdentifier": "m", "credentials": cred, "labels": {"leak": "test"}}
    made = {
        "embedders": http.post(
            "/v1/embedders",
            json={**common, "providerType": "TEI", "endpointUrl": tei.url, "dimensionality": 4},
        ),
        "rerankers": http.post(
            "/v1/rerankers", json={**common, "providerType": "TEI", "endpointUrl": tei.url}
        ),
        "llms": http.post("/v1/llms", json={**common, "providerType": "OPENAI", "endpointUrl": llm.base_url}),
    }
    ids = {}
    for kind, res in made.items():
        assert res.status_code == 201, res.text
        answers.append(res.text)
        body = res.json()
        ids[kind] = (body.get("llm") or body)[
            {"embedders": "embedderId", "rerankers": "rerankerId", "llms": "llmId"}[kind]
        ]
    for kind, model_id in ids.items():
        answers.append(http.get(f"/v1/{kind}").text)
        answers.append(http.get(f"/v1/{kind}/{model_id}").text)
        answers.append(
            http.put(f"/v1/{kind}/{model_id}", json={"mergeLabels": {"x": "y"}, "credentials": cred}).text
        )
        refused = http.get(f"/v1/{kind}/{model_id}", params={"include_credentials": "true"})
        assert refused.status_code == 403 and "never returns stored credentials" in refused.json()["error"]
        answers.append(refused.text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert all(e.credentials is None for e in gm.embedders.list())
    assert not any(secret in a for a in answers)
    assert all("credentials" not in a for a in answers[:3])
    stored = httpx.post(
        f"{opensearch_url}/memproxy-models/_search", json={"query": {"terms": {"_id": list(ids.values())}}}
    ).text
    assert ids["llms"] in stored and secret not in stored  # sealed at rest
    for kind, model_id in ids.items():
        assert http.delete(f"/v1/{kind}/{model_id}").status_code == 204
    assert secret not in proxy.log()


def test_provider_keys_never_logged(proxy: ProxyProcess) -> None:
    """Runs after the tests that used remote embedders (file order): their keys never reached the log."""
    log = proxy.log()
    assert log and _PROVIDER_KEYS and not any(k in log for k in _PROVIDER_KEYS)


def test_permissions(
    gm: Goodmem, proxy_url: str, provider_key: str, local_model: str, tei: TeiReranker
) -> None:
    alice_id, alice = _user(gm, proxy_url)
    bob_id, bob = _user(gm, proxy_url)
    try:
        root_emb = _embedder(gm, proxy_url, local_model, provider_key)
        mine = _embedder(alice, proxy_url, local_model, provider_key)
        assert mine.owner_id == alice_id and mine.created_by_id == alice_id
        # Alice sees the local models, root's (the instance's) and her own; Bob not hers.
        seen = [e.embedder_id for e in alice.embedders.list()]
        assert (
            mine.embedder_id in seen
            and root_emb.embedder_id in seen
            and gm.embedders.list()[0].embedder_id in seen
        )
        assert mine.embedder_id not in [e.embedder_id for e in bob.embedders.list()]
        assert [e.embedder_id for e in bob.embedders.list(owner_id=alice_id)] == []
        with pytest.raises(gerr.PermissionDeniedError):
            bob.embedders.get(id=mine.embedder_id)
        with pytest.raises(gerr.PermissionDeniedError):
            bob.spaces.create(
                name=f"p-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": mine.embedder_id}]
            )
        with pytest.raises(gerr.PermissionDeniedError):
            bob.embedders.delete(id=mine.embedder_id)
        with pytest.raises(gerr.PermissionDeniedError):
            alice.embedders.update(id=root_emb.embedder_id, request={"display_name": "mine now"})
        with pytest.raises(gerr.PermissionDeniedError):
            alice.embedders.update(id=gm.embedders.list()[0].embedder_id, request={"display_name": "local"})
        with pytest.raises(gerr.PermissionDeniedError):
            alice.rerankers.create(
                display_name="r",
                provider_type="TEI",
                endpoint_url=tei.url,
                model_identifier="m",
                owner_id=bob_id,
            )
        # An administrator may register for another owner, who then owns it.
        for_bob = gm.rerankers.create(
            display_name="r",
            provider_type="TEI",
            endpoint_url=tei.url,
            model_identifier="for-bob",
            owner_id=bob_id,
        )
        assert for_bob.owner_id == bob_id and bob.rerankers.get(id=for_bob.reranker_id).owner_id == bob_id
        assert alice.embedders.update(id=mine.embedder_id, request={"description": "ok"}).description == "ok"
        alice.embedders.delete(id=mine.embedder_id)
        bob.rerankers.delete(id=for_bob.reranker_id)
        gm.embedders.delete(id=root_emb.embedder_id)
    finally:
        alice.close()
        bob.close()


def test_startup_llms_are_listed_and_fixed(gm: Goodmem, ga: gc.ApiClient, http: httpx.Client) -> None:
    """The session proxy names ``--llm llm1=...`` (tests/conftest.py): a built-in LLM with its id."""
    listed = {m.llm_id: m for m in gm.llms.list()}
    assert "llm1" in listed and listed["llm1"].model_identifier == "fake-llm"
    assert listed["llm1"].provider_type == "OPENAI" and listed["llm1"].capabilities.supports_chat
    assert "llm1" in [m.llm_id for m in gc.LLMsApi(ga).list_llms().llms]
    assert gm.llms.get(id="llm1").endpoint_url.startswith("http://127.0.0.1:")
    assert http.delete("/v1/llms/llm1").status_code == 400
    assert http.put("/v1/llms/llm1", json={"modelIdentifier": "other"}).status_code == 400


def test_local_models_keep_their_rules(gm: Goodmem, http: httpx.Client) -> None:
    local = gm.embedders.list()[0]
    assert local.provider_type == "TEI" and local.endpoint_url.startswith("local://memproxy/")
    again = gm.embedders.get(id=local.embedder_id)
    assert again.embedder_id == local.embedder_id and again.dimensionality == 384
    with pytest.raises(gerr.BadRequestError, match="built-in"):
        gm.embedders.update(id=local.embedder_id, request={"dimensionality": 385})
    edited = gm.embedders.update(id=local.embedder_id, request={"merge_labels": {"models": "yes"}})
    assert edited.labels.get("models") == "yes" and edited.dimensionality == 384
    unused = http.delete(f"/v1/embedders/{local.embedder_id}")
    assert unused.status_code in (400, 409)  # 409 while another module's space uses it
    with contextlib.suppress(Exception):
        gm.embedders.update(id=local.embedder_id, request={"replace_labels": {}})


# --- units (no node) -------------------------------------------------------------------------------------


def test_provider_types_map_to_the_wires_memproxy_speaks() -> None:
    from proxy.core.goodmem.providers import EMBEDDER, LLM, RERANKER
    from proxy.errors import BadRequest

    embed_types = ("OPENAI", "VLLM", "LLAMA_CPP", "JINA", "VOYAGE", "TEI", "COHERE")
    assert [EMBEDDER.wire(p, None) for p in embed_types] == [*["openai"] * 5, "tei", "cohere"]
    assert EMBEDDER.wire("DASHSCOPE", "OPENAI_COMPATIBLE") == "openai"
    for provider, dialect in (("GEMINI", None), ("DASHSCOPE", None), ("DASHSCOPE", "EMBEDDING_NATIVE_TEXT")):
        with pytest.raises(BadRequest, match="does not speak"):
            EMBEDDER.wire(provider, dialect)
    assert [RERANKER.wire(p, None) for p in ("TEI", "COHERE", "JINA", "VOYAGE", "VLLM", "LLAMA_CPP")] == [
        "tei", "cohere", "jina", "voyage", "vllm", "jina"
    ]  # fmt: skip
    with pytest.raises(BadRequest, match="providerType must be one of"):
        RERANKER.wire("OPENAI", None)
    assert LLM.wire("OPEN_ROUTER", None) == "openrouter" and LLM.wire("DASHSCOPE", None) == "generic"
    with pytest.raises(BadRequest):
        LLM.wire("DASHSCOPE", "LLM_NATIVE_TEXT")
    assert (EMBEDDER.path_for("COHERE"), EMBEDDER.path_for("TEI"), EMBEDDER.path_for("VOYAGE")) == (
        "/v2/embed", "/embed", "/embeddings"
    )  # fmt: skip
    assert (RERANKER.path_for("COHERE"), RERANKER.path_for("JINA"), RERANKER.path_for("TEI")) == (
        "/v2/rerank", "/v1/rerank", "/rerank"
    )  # fmt: skip


def test_endpoint_urls_are_compared_canonically() -> None:
    from proxy.core.goodmem.providers import canonical_url
    from proxy.errors import BadRequest

    assert canonical_url("HTTPS://API.Example.com:443/v1/") == "https://api.example.com/v1"
    assert canonical_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert canonical_url("http://[::1]:80/x/") == "http://[::1]/x"
    for bad in (
        "ftp://x.example",
        "example.com/v1",
        "https://u:p@x.example",
        "https://x.example/?q=1",
        "http://:9",
    ):
        with pytest.raises(BadRequest):
            canonical_url(bad)


def test_fingerprint_is_goodmems_duplicate_rule() -> None:
    from proxy.core.goodmem.providers import EMBEDDER, RERANKER, fingerprint

    view = {
        "ownerId": "o",
        "providerType": "OPENAI",
        "endpointUrl": "https://x.example/v1",
        "apiPath": "/embeddings",
        "modelIdentifier": "m",
        "dimensionality": 8,
        "distributionType": "DENSE",
        "displayName": "a",
    }
    key = {"kind": "CREDENTIAL_KIND_API_KEY", "apiKey": {"inlineSecret": "k"}}
    same = fingerprint(EMBEDDER, view, key)
    assert fingerprint(EMBEDDER, {**view, "displayName": "b", "labels": {"x": "y"}}, key) == same
    for change in ({"ownerId": "p"}, {"dimensionality": 9}, {"apiPath": "/e"}, {"modelIdentifier": "n"}):
        assert fingerprint(EMBEDDER, {**view, **change}, key) != same
    assert (
        fingerprint(EMBEDDER, view, {"kind": "CREDENTIAL_KIND_API_KEY", "apiKey": {"inlineSecret": "j"}})
        != same
    )
    assert fingerprint(EMBEDDER, view, None) != same and "k" not in same
    # Rerankers have no dimensionality: it does not make two of them different.
    assert fingerprint(RERANKER, view, key) == fingerprint(RERANKER, {**view, "dimensionality": 9}, key)


def test_credentials_are_read_and_never_echoed() -> None:
    from proxy.api.goodmem.models import read_credentials
    from proxy.errors import BadRequest

    assert read_credentials(
        {"kind": "CREDENTIAL_KIND_API_KEY", "apiKey": {"inlineSecret": "s", "labels": 1}}
    ) == {
        "kind": "CREDENTIAL_KIND_API_KEY",
        "apiKey": {"inlineSecret": "s"},
    }
    assert read_credentials({"apiKey": {"inlineSecret": "s", "headerName": "X-Key", "prefix": ""}}) == {
        "kind": "CREDENTIAL_KIND_API_KEY",
        "apiKey": {"inlineSecret": "s", "headerName": "X-Key", "prefix": ""},
    }
    assert read_credentials({"kind": "CREDENTIAL_KIND_UNSPECIFIED"}) == {} and read_credentials(None) is None
    secret = "sk-do-not-echo"
    for bad in (
        {"kind": "CREDENTIAL_KIND_API_KEY", "apiKey": {"inlineSecret": secret, "headerName": "Bad Header"}},
        {"kind": "CREDENTIAL_KIND_API_KEY", "apiKey": {"inlineSecret": secret, "secretRef": {"uri": "x"}}},
        {"kind": "CREDENTIAL_KIND_API_KEY", "apiKey": {"inlineSecret": secret + "\n"}},
        {"kind": "CREDENTIAL_KIND_UNSPECIFIED", "apiKey": {"inlineSecret": secret}},
        {"kind": "NOPE", "apiKey": {"inlineSecret": secret}},
    ):
        with pytest.raises(BadRequest) as refused:
            read_credentials(bad)
        assert secret not in refused.value.message
