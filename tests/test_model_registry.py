"""The model registry's own parts: credential encryption, ml-commons connector execution, start-up flags,
and the registry itself on a real node (records, the shared master key, handles that really call).

Remote providers are wire-format doubles at the network edge (``tests.test_models_remote.serve``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from aiohttp import web

from proxy.config import Settings
from proxy.core.models import ModelRecord, ModelRegistry, ProviderCall, UnknownModel, UntrustedEndpoint
from proxy.core.models.registry import StartupModel
from proxy.core.models.startup import LocalModelPath, parse_model_flag
from proxy.errors import BadRequest
from proxy.models import ProviderRejected
from proxy.models.addresses import OPEN
from proxy.models.connector import connector_client, parse_action, predict, render_payload
from proxy.models.secrets import SecretBox, SecretUnreadable, generate_key
from proxy.store.client import Store, url
from proxy.store.models import MODELS, MODELS_CONFIG, ModelDocs
from tests.test_models_remote import Seen, serve

SECRET = "sk-registry-SECRET-42"

# --- credentials at rest -------------------------------------------------------------


def test_secret_box_round_trip_and_binding() -> None:
    box = SecretBox.from_text(generate_key(), "test")
    token = box.encrypt(SECRET, bound_to="model-a")
    assert SECRET not in token and token.startswith("aesgcm1:")
    assert box.decrypt(token, bound_to="model-a") == SECRET
    # Copied onto another model's record, the ciphertext does not open.
    with pytest.raises(SecretUnreadable):
        box.decrypt(token, bound_to="model-b")
    # Another key cannot read it, and says where its own key came from, never the key.
    other = SecretBox.from_text(generate_key(), "MEMPROXY_SECRET_KEY")
    with pytest.raises(SecretUnreadable, match="MEMPROXY_SECRET_KEY"):
        other.decrypt(token, bound_to="model-a")
    assert "test" in repr(box) and SECRET not in repr(box)


def test_passphrase_keys_are_stretched_and_stable() -> None:
    a = SecretBox.from_text("correct horse battery staple", "env")
    b = SecretBox.from_text("correct horse battery staple", "env")
    assert b.decrypt(a.encrypt("x", bound_to="m"), bound_to="m") == "x"
    with pytest.raises(ValueError):
        SecretBox.from_text("   ", "env")


# --- ml-commons connectors -------------------------------------------------------------

EMBED_ACTION = {
    "action_type": "predict",
    "method": "POST",
    "url": "http://127.0.0.1:1/v1/embeddings",
    "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
    "request_body": '{ "input": ${parameters.input}, "model": "${parameters.model}" }',
    "pre_process_function": "connector.pre_process.openai.embedding",
    "post_process_function": "connector.post_process.openai.embedding",
}


def test_payload_fills_parameters_as_ml_commons_does() -> None:
    action = parse_action([EMBED_ACTION])
    target, headers, body = render_payload(
        action, {"model": 'm"1', "input": ["a", "b"]}, {"openAI_key": SECRET}
    )
    assert target == "http://127.0.0.1:1/v1/embeddings"
    assert headers == {"Authorization": f"Bearer {SECRET}"}
    # A list is written as JSON, a string escaped inside the template's quotes.
    assert body == {"input": ["a", "b"], "model": 'm"1'}
    # text_docs go through the pre-process function into ``input``.
    _, _, body = render_payload(action, {"model": "m"}, {"openAI_key": SECRET}, text_docs=["x"])
    assert body["input"] == ["x"]


def test_unfilled_placeholders_and_unrunnable_actions_are_refused() -> None:
    action = parse_action([EMBED_ACTION])
    with pytest.raises(BadRequest, match="Some parameter placeholder not filled in payload: model"):
        render_payload(action, {"input": ["a"]}, {"openAI_key": SECRET})
    with pytest.raises(BadRequest, match="painless"):
        parse_action([{**EMBED_ACTION, "post_process_function": "return params.x;"}])
    with pytest.raises(BadRequest, match="POST"):
        parse_action([{**EMBED_ACTION, "method": "GET"}])
    with pytest.raises(BadRequest, match="predict"):
        parse_action([{**EMBED_ACTION, "action_type": "batch_predict"}])


async def test_connector_call_posts_the_rendered_body_and_reads_vectors() -> None:
    async def answer(seen: Seen, n: int) -> web.StreamResponse:
        data = [{"object": "embedding", "index": i, "embedding": [float(i), 1.0]} for i in range(2)]
        return web.json_response({"object": "list", "data": list(reversed(data))})

    async with serve(answer) as double:
        action = parse_action([{**EMBED_ACTION, "url": f"{double.url}/v1/embeddings"}])
        params = {"model": "m"}
        client = connector_client(
            action,
            params,
            {"openAI_key": SECRET},
            timeout_s=5,
            max_retries=0,
            max_concurrency=2,
            addresses=OPEN,
        )
        try:
            _, _, body = render_payload(action, params, {"openAI_key": SECRET}, text_docs=["a", "b"])
            out = await predict(client, action, body)
        finally:
            await client.close()
    assert out.vectors == [[0.0, 1.0], [1.0, 1.0]]  # put back in index order
    assert double.seen[0].path == "/v1/embeddings"
    assert double.seen[0].headers["Authorization"] == f"Bearer {SECRET}"
    assert double.seen[0].body == {"input": ["a", "b"], "model": "m"}


async def test_a_provider_echoing_the_credential_never_shows_it() -> None:
    async def answer(seen: Seen, n: int) -> web.StreamResponse:
        return web.json_response({"error": f"Incorrect API key provided: {SECRET}"}, status=401)

    async with serve(answer) as double:
        action = parse_action([{**EMBED_ACTION, "url": f"{double.url}/v1/embeddings"}])
        client = connector_client(
            action,
            {"model": "m"},
            {"openAI_key": SECRET},
            timeout_s=5,
            max_retries=0,
            max_concurrency=1,
            addresses=OPEN,
        )
        try:
            with pytest.raises(ProviderRejected) as caught:
                await predict(client, action, {"input": ["a"]})
        finally:
            await client.close()
    assert SECRET not in caught.value.message and "[redacted]" in caught.value.message


# --- start-up flags -------------------------------------------------------------


def test_model_flags() -> None:
    env = {"OPENAI_KEY": SECRET}
    assert parse_model_flag("ce=/models/ce", "reranker", env) == LocalModelPath("ce", "/models/ce")
    llm = parse_model_flag(
        "gpt=https://api.openai.com/v1#provider=openai,model=gpt-4o-mini,key_env=OPENAI_KEY", "llm", env
    )
    assert isinstance(llm, StartupModel)
    assert (llm.model_id, llm.kind, llm.api_key) == ("gpt", "llm", SECRET)
    assert llm.call.endpoint_url == "https://api.openai.com/v1" and llm.call.model == "gpt-4o-mini"
    assert llm.call.chat_provider == "openai"
    assert SECRET not in repr(llm)
    emb = parse_model_flag("e=http://127.0.0.1:8080#provider=tei,dimension=384", "embedder", env)
    assert isinstance(emb, StartupModel) and (emb.call.wire, emb.call.dimension) == ("tei", 384)
    for entry, kind, why in [
        ("x=/path", "llm", "over HTTP"),
        ("x=http://h#provider=openai", "llm", "needs model=NAME"),
        ("x=http://h#provider=nope,model=m", "llm", "provider must be one of"),
        ("x=http://h#model=m,colour=red", "llm", "unknown option"),
        ("x=http://h#model=m,key_env=NOT_SET_ANYWHERE", "llm", "is not set"),
        ("x=http://h#provider=tei", "embedder", "needs dimension"),
        ("noequals", "reranker", "expects ID="),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_model_flag(entry, cast(Any, kind), env)


# --- the registry on a real node -------------------------------------------------------------


class NoLocalModels:
    def get(self, model_id: str) -> Any:
        from proxy.embedding.errors import UnknownEmbedder

        raise UnknownEmbedder(model_id, [])


@pytest.fixture
async def store(opensearch_url: str) -> AsyncIterator[Store]:
    s = Store(Settings(opensearch_url=opensearch_url))
    yield s
    await s.close()


def registry(store: Store, **kw: Any) -> ModelRegistry:
    # The doubles listen on loopback, which the test opens as an operator of local model servers would.
    kw.setdefault("allow_private_endpoints", ("loopback",))
    return ModelRegistry(ModelDocs(store), cast(Any, NoLocalModels()), ttl_s=0, **kw)


def provider_record(model_id: str, kind: Any, call: ProviderCall, credential: str | None) -> ModelRecord:
    return ModelRecord(
        model_id=model_id,
        kind=kind,
        api="goodmem",
        owner_id="u",
        created_at=1,
        updated_at=1,
        view={"displayName": "test"},
        call=call.to_doc(),
        credential=credential,
    )


@pytest.mark.node
async def test_records_persist_encrypted_and_every_process_shares_one_key(store: Store) -> None:
    first, second = registry(store), registry(store)
    model_id = str(uuid.uuid4())
    call = ProviderCall(wire="openai", endpoint_url="https://example.invalid/v1", model="m", dimension=3)
    sealed = await first.seal(model_id, {"apiKey": {"inlineSecret": SECRET}})
    await first.save(provider_record(model_id, "embedder", call, sealed), create=True)
    try:
        raw = await store.request("GET", url(MODELS, "_doc", model_id))
        assert SECRET not in json.dumps(raw)
        # Another process (its own registry, no configured key) reads the same record and opens it with
        # the cluster's master key, generated once by whichever process needed it first.
        found = await second.get(model_id)
        assert found is not None and found.view == {"displayName": "test"}
        assert (await second.unseal(found))["apiKey"]["inlineSecret"] == SECRET
        assert [r.model_id for r in await second.find(["embedder"]) if r.model_id == model_id] == [model_id]
        with pytest.raises(Exception, match="already exists"):
            await second.save(found, create=True)
        key_doc = await store.request("GET", url(MODELS_CONFIG, "_doc", "master-key"))
        assert key_doc["found"]
    finally:
        assert await first.remove(model_id)
    assert await second.get(model_id) is None
    with pytest.raises(UnknownModel):
        await second.embedding_model(model_id)


@pytest.mark.node
async def test_a_configured_key_cannot_read_what_the_cluster_key_sealed(store: Store) -> None:
    cluster, configured = registry(store), registry(store, secret_key=generate_key())
    model_id = str(uuid.uuid4())
    call = ProviderCall(wire="openai", endpoint_url="https://example.invalid/v1", model="m", dimension=3)
    await cluster.save(provider_record(model_id, "embedder", call, await cluster.seal(model_id, {"k": "v"})))
    try:
        record = await configured.get(model_id)
        assert record is not None
        with pytest.raises(SecretUnreadable):
            await configured.unseal(record)
    finally:
        await cluster.remove(model_id)


@pytest.mark.node
async def test_handles_call_the_registered_provider_with_its_key(store: Store) -> None:
    async def answer(seen: Seen, n: int) -> web.StreamResponse:
        if seen.path == "/v1/rerank":
            docs = seen.body["documents"]
            return web.json_response(
                {"results": [{"index": i, "relevance_score": 1.0 / (i + 1)} for i in range(len(docs))]}
            )
        return web.json_response({"data": [{"index": 0, "embedding": [0.5, 0.5, 0.5]}]})

    reg = registry(store)
    ids = [str(uuid.uuid4()), str(uuid.uuid4())]
    async with serve(answer) as double:
        emb = ProviderCall(
            wire="openai", endpoint_url=f"{double.url}/v1", api_path="/embeddings", model="m", dimension=3
        )
        rr = ProviderCall(wire="cohere", endpoint_url=double.url, api_path="/v1/rerank", model="r")
        for model_id, kind, call in ((ids[0], "embedder", emb), (ids[1], "reranker", rr)):
            sealed = await reg.seal(model_id, {"apiKey": {"inlineSecret": SECRET}})
            await reg.save(provider_record(model_id, kind, call, sealed))
        try:
            model = await reg.embedding_model(ids[0])
            assert await model.embed(["hello"]) == [[0.5, 0.5, 0.5]]
            assert await reg.dimension(model) == 3
            scores = await (await reg.rerank_model(ids[1])).rerank("q", ["a", "b"])
            assert scores == [1.0, 0.5]
            with pytest.raises(UnknownModel):
                await reg.rerank_model(ids[0])  # an embedder is not a reranker
        finally:
            for model_id in ids:
                await reg.remove(model_id)
            await reg.close()
    assert [s.path for s in double.seen] == ["/v1/embeddings", "/v1/rerank"]
    assert all(s.headers["Authorization"] == f"Bearer {SECRET}" for s in double.seen)


@pytest.mark.node
async def test_untrusted_endpoints_are_never_called(store: Store) -> None:
    reg = registry(store)
    reg.check_endpoint("https://api.openai.com/v1")
    reg.check_endpoint("http://127.0.0.1:8080/v1")
    for bad in ("http://10.0.0.1/v1", "http://169.254.169.254/latest", "file:///etc/passwd"):
        with pytest.raises(UntrustedEndpoint):
            reg.check_endpoint(bad)
    # A record written under a looser setting is refused at call time too.
    model_id = str(uuid.uuid4())
    call = ProviderCall(wire="openai", endpoint_url="http://10.0.0.1/v1", model="m", dimension=3)
    await reg.save(provider_record(model_id, "embedder", call, None))
    try:
        with pytest.raises(UntrustedEndpoint):
            await reg.embedding_model(model_id)
    finally:
        await reg.remove(model_id)


def test_the_data_cluster_is_never_a_model_endpoint() -> None:
    reg = ModelRegistry(
        cast(Any, None),
        cast(Any, NoLocalModels()),
        forbidden_endpoints=["http://127.0.0.1:9250"],
        allow_private_endpoints=["loopback"],
    )
    for same in ("http://localhost:9250/_bulk", "http://127.0.0.1:9250", "http://[::1]:9250/x/_doc"):
        with pytest.raises(UntrustedEndpoint, match="the OpenSearch cluster memproxy stores its data in"):
            reg.check_endpoint(same)
    reg.check_endpoint("http://127.0.0.1:9251/v1")  # another port on the same host is another service


@pytest.mark.node
def test_a_connector_to_the_data_cluster_is_refused(open_proxy: Any, opensearch_url: str) -> None:
    """The attack: a connector whose template writes a forged API key document straight into the node."""
    import urllib.error
    import urllib.request

    connector = {
        "name": "forge",
        "version": 1,
        "protocol": "http",
        "credential": {"k": "v"},
        "actions": [
            {
                "action_type": "predict",
                "method": "POST",
                "url": f"{opensearch_url}/memproxy-goodmem-apikeys/_doc/forged",
                "request_body": '{"user_id": "root", "roles": ["ROOT"]}',
            }
        ],
    }
    req = urllib.request.Request(
        open_proxy.url + "/_plugins/_ml/connectors/_create",
        data=json.dumps(connector).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req)
    assert refused.value.code == 400


async def test_lookups_of_made_up_ids_do_not_grow_the_cache_without_bound() -> None:
    class NothingStored:
        reads = 0

        async def get(self, doc_id: str) -> None:
            NothingStored.reads += 1

    reg = ModelRegistry(cast(Any, NothingStored()), cast(Any, NoLocalModels()), ttl_s=60)
    for n in range(10_000):
        assert await reg.get(f"made-up-{n}") is None
    assert NothingStored.reads == 10_000
    assert len(reg._records) <= 4096
    assert await reg.get("made-up-9999") is None and NothingStored.reads == 10_000  # still cached
