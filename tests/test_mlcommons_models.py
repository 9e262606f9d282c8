"""ml-commons' model APIs on memproxy, driven by opensearch-py as the agentic-memory tutorials drive them.

The tutorial flow runs unmodified: connector → register → deploy → predict, for an embedding model (a
connector to memproxy's own OpenAI embeddings endpoint, so the vectors are real all-MiniLM ones) and an LLM
(a connector to the tests' deterministic chat server), then a container on those two models whose memories
``_semantic_search`` finds. Around it: credentials never come back from a read nor reach the log, a
registration that fails stores nothing, who may write, and providers that refuse connections, answer
garbage, fail or hang give ml-commons' errors within the model timeout. The only doubles are at the network
edge: ``FakeLLM`` and a small HTTP server (:class:`Provider`) answering as a broken provider would.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from goodmem import Goodmem
from opensearchpy import OpenSearch

from proxy.core.mlmodels import NODE_ID
from tests.conftest import ProxyProcess, free_port
from tests.opensearch_memory_helpers import EMBEDDER, MC, assert_error, call, make_client
from tests.support.fake_llm import FakeLLM
from tests.support.reference import ML, embedding_connector, llm_connector

LLM_SECRET = "sk-llm-secret-9d1f0c"
INLINE_SECRET = "sk-inline-secret-77ab"
# The model timeout of the fault proxy: every failure must be answered well within a few of these.
TIMEOUT_S = 1.0


def _tag() -> str:
    return uuid.uuid4().hex[:8]


def _wait_task(client: OpenSearch, task_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        task = call(client, "GET", f"{ML}/tasks/{task_id}")
        if task["state"] not in {"CREATED", "RUNNING"} or time.monotonic() > deadline:
            return dict(task)
        time.sleep(0.2)


def _register(client: OpenSearch, name: str, connector: dict[str, Any], *, deploy: bool = False) -> str:
    connector_id = call(client, "POST", f"{ML}/connectors/_create", connector)["connector_id"]
    body = {"name": name, "function_name": "remote", "connector_id": connector_id}
    registered = call(client, "POST", f"{ML}/models/_register", body, {"deploy": "true"} if deploy else None)
    assert _wait_task(client, registered["task_id"])["state"] == "COMPLETED"
    return str(registered["model_id"])


def _remove(client: OpenSearch, model_id: str) -> None:
    model = call(client, "GET", f"{ML}/models/{model_id}")
    call(client, "POST", f"{ML}/models/{model_id}/_undeploy")
    call(client, "DELETE", f"{ML}/models/{model_id}")
    if model.get("connector_id"):
        call(client, "DELETE", f"{ML}/connectors/{model['connector_id']}")
    call(client, "DELETE", f"{ML}/model_groups/{model['model_group_id']}")


def _embedding_connector(memproxy_url: str, key: str) -> dict[str, Any]:
    """The OpenAI blueprint to memproxy's own endpoint; with authentication on, its key is a memproxy key."""
    return {**embedding_connector(memproxy_url), "credential": {"openAI_key": key}}


def _llm_connector(llm_url: str) -> dict[str, Any]:
    return {**llm_connector(llm_url), "credential": {"openAI_key": LLM_SECRET}}


# --- the tutorial ----------------------------------------------------------------------------------------


def test_tutorial_flow(
    client: OpenSearch, memproxy_url: str, admin_key: str, fake_llm: FakeLLM, proxy: ProxyProcess
) -> None:
    tag = _tag()
    # The embedding model: connector → register → deploy → predict.
    connector = call(
        client, "POST", f"{ML}/connectors/_create", _embedding_connector(memproxy_url, admin_key)
    )
    assert set(connector) == {"connector_id"} and len(connector["connector_id"]) == 20
    body = {
        "name": f"tutorial-emb-{tag}",
        "function_name": "remote",
        "connector_id": connector["connector_id"],
    }
    registered = call(client, "POST", f"{ML}/models/_register", body)
    assert list(registered) == ["task_id", "status", "model_id"] and registered["status"] == "CREATED"
    emb_id = registered["model_id"]
    task = _wait_task(client, registered["task_id"])
    assert task["state"] == "COMPLETED" and task["model_id"] == emb_id and task["worker_node"] == [NODE_ID]
    assert call(client, "GET", f"{ML}/models/{emb_id}")["model_state"] == "REGISTERED"
    deployed = call(client, "POST", f"{ML}/models/{emb_id}/_deploy")
    assert deployed["task_type"] == "DEPLOY_MODEL" and deployed["status"] == "COMPLETED"
    model = call(client, "GET", f"{ML}/models/{emb_id}")
    assert model["model_state"] == "DEPLOYED" and model["planning_worker_nodes"] == [NODE_ID]
    text = "The user only drinks green tea."
    predicted = call(client, "POST", f"{ML}/models/{emb_id}/_predict", {"parameters": {"input": [text]}})
    [result] = predicted["inference_results"]
    [output] = result["output"]
    assert result["status_code"] == 200
    assert output["name"] == "sentence_embedding" and output["data_type"] == "FLOAT32"
    assert output["shape"] == [384]
    # The very vector memproxy's own endpoint gives: the connector really called it.
    direct = call(client, "POST", "/openai/v1/embeddings", {"input": [text], "model": EMBEDDER})
    assert output["data"] == pytest.approx(direct["data"][0]["embedding"], abs=1e-6)

    # The LLM: ?deploy=true at register, predict answers the provider's JSON.
    llm_id = _register(client, f"tutorial-llm-{tag}", _llm_connector(fake_llm.url), deploy=True)
    assert call(client, "GET", f"{ML}/models/{llm_id}")["model_state"] == "DEPLOYED"
    fake_llm.reset()
    prompts = {"parameters": {"system_prompt": "You are terse.", "user_prompt": "Say OK."}}
    answer = call(client, "POST", f"{ML}/models/{llm_id}/_predict", prompts)
    [llm_output] = answer["inference_results"][0]["output"]
    assert llm_output["name"] == "response"
    assert llm_output["dataAsMap"]["choices"][0]["message"]["content"] == "OK"
    [prompt] = fake_llm.prompts
    assert prompt.body["messages"][0] == {"role": "system", "content": "You are terse."}

    # A container on the two models: memories written are found by meaning through the remote embedder.
    prefix = f"mp-models-{tag}"
    configuration = {
        "embedding_model_type": "TEXT_EMBEDDING",
        "embedding_model_id": emb_id,
        "embedding_dimension": 384,
        "llm_id": llm_id,
        "index_prefix": prefix,
        "strategies": [{"type": "SEMANTIC", "namespace": ["user_id"]}],
    }
    created = call(client, "POST", f"{MC}/_create", {"name": prefix, "configuration": configuration})
    cid = created["memory_container_id"]
    try:
        stored = call(client, "GET", f"{MC}/{cid}")["configuration"]
        assert stored["embedding_model_id"] == emb_id and stored["llm_id"] == llm_id
        for memory in (text, "The user lives in Lisbon.", "The user's dog is called Rex."):
            added = call(
                client,
                "POST",
                f"{MC}/{cid}/memories/long-term/_memproxy_add",
                {"memory": memory, "namespace": {"user_id": "u1"}},
            )
            assert added["status"] == "created"
        query = {"query": "What does the user like to drink?", "k": 3, "namespace": {"user_id": "u1"}}
        found = call(client, "POST", f"{MC}/{cid}/memories/long-term/_semantic_search", query)
        hits = found["hits"]["hits"]
        assert len(hits) == 3 and hits[0]["_source"]["memory"] == text
    finally:
        call(client, "DELETE", f"{MC}/{cid}", params={"delete_all_memories": "true"})

    # A model a container uses stays deletable only when undeployed, as in ml-commons.
    assert_error(
        lambda: call(client, "DELETE", f"{ML}/models/{emb_id}"),
        400,
        "status_exception",
        "Model cannot be deleted in deploying or deployed state. Try undeploy model first then delete",
    )
    undeployed = call(client, "POST", f"{ML}/models/{emb_id}/_undeploy")
    assert undeployed == {NODE_ID: {"stats": {emb_id: "undeployed"}}}
    for model_id in (emb_id, llm_id):
        _remove(client, model_id)
    assert_error(
        lambda: call(client, "GET", f"{ML}/models/{emb_id}"),
        404,
        "status_exception",
        f"Failed to find model with the provided model id: {emb_id}",
    )


def test_unknown_llm_refused_and_known_ones_accepted(client: OpenSearch, memproxy_url: str) -> None:
    prefix = f"mp-llmcheck-{_tag()}"

    def create(llm_id: str) -> Any:
        body = {"name": prefix, "configuration": {"llm_id": llm_id, "index_prefix": prefix}}
        return call(client, "POST", f"{MC}/_create", body)

    assert_error(
        lambda: create("no-such-llm"),
        400,
        "illegal_argument_exception",
        "LLM model with ID no-such-llm not found",
    )
    # A start-up --llm (tests/conftest.py) is a known LLM.
    cid = create("llm1")["memory_container_id"]
    try:
        update = {"configuration": {"llm_id": "still-no-such-llm"}}
        assert_error(
            lambda: call(client, "PUT", f"{MC}/{cid}", update),
            400,
            "illegal_argument_exception",
            "LLM model with ID still-no-such-llm not found",
        )
        assert call(client, "GET", f"{MC}/{cid}")["configuration"]["llm_id"] == "llm1"
    finally:
        call(client, "DELETE", f"{MC}/{cid}", params={"delete_all_memories": "true"})


def test_remote_embedding_model_dimension_is_checked(
    client: OpenSearch, memproxy_url: str, admin_key: str
) -> None:
    """A wrong ``embedding_dimension`` for a remote model is refused at create (asked once from the model)."""
    emb_id = _register(client, f"dim-{_tag()}", _embedding_connector(memproxy_url, admin_key))
    try:
        prefix = f"mp-dim-{_tag()}"
        configuration = {
            "embedding_model_type": "TEXT_EMBEDDING",
            "embedding_model_id": emb_id,
            "embedding_dimension": 768,
            "index_prefix": prefix,
        }
        assert_error(
            lambda: call(client, "POST", f"{MC}/_create", {"name": prefix, "configuration": configuration}),
            400,
            "illegal_argument_exception",
            f"Embedding dimension 768 does not match the dimension of embedding model {emb_id} (384)",
        )
    finally:
        _remove(client, emb_id)


# --- credentials -----------------------------------------------------------------------------------------


def test_credentials_never_come_back(
    client: OpenSearch, fake_llm: FakeLLM, provider: Provider, proxy: ProxyProcess
) -> None:
    tag = _tag()
    llm_id = _register(client, f"secret-llm-{tag}", _llm_connector(fake_llm.url), deploy=True)
    inline_connector = {**_embedding_at(provider.url + "/echo"), "credential": {"openAI_key": INLINE_SECRET}}
    inline = {"name": f"secret-inline-{tag}", "function_name": "remote", "connector": inline_connector}
    inline_id = call(client, "POST", f"{ML}/models/_register", inline)["model_id"]
    try:
        vectors = call(client, "POST", f"{ML}/models/{inline_id}/_predict", {"parameters": {"input": ["a"]}})
        assert vectors["inference_results"][0]["output"][0]["data"] == [0.5, 0.25]
        # The provider got the key, decrypted.
        assert provider.authorization == f"Bearer {INLINE_SECRET}"
        model = call(client, "GET", f"{ML}/models/{llm_id}")
        reads: list[Any] = [
            call(client, "GET", f"{ML}/connectors/{model['connector_id']}"),
            model,
            call(client, "GET", f"{ML}/models/{inline_id}"),
            call(client, "POST", f"{ML}/connectors/_search", {"query": {"match_all": {}}, "size": 1000}),
            call(client, "POST", f"{ML}/models/_search", {"query": {"match_all": {}}, "size": 1000}),
            call(
                client, "GET", f"{ML}/models/_search", {"query": {"term": {"name.keyword": inline["name"]}}}
            ),
        ]
        inline_model = reads[2]
        assert inline_model["connector"]["name"] == inline_connector["name"]
        assert "credential" not in inline_model["connector"] and "credential" not in reads[0]
        # A provider error that echoes the key (as OpenAI's "Incorrect API key provided" does) is redacted.
        fake_llm.fail_next(400, {"error": {"message": f"Incorrect API key provided: {LLM_SECRET}"}})
        prompts = {"parameters": {"system_prompt": "s", "user_prompt": "u"}}
        info = assert_error(
            lambda: call(client, "POST", f"{ML}/models/{llm_id}/_predict", prompts),
            400,
            "status_exception",
            'Error from remote service: {"error": {"message": "Incorrect API key provided: [redacted]"}}',
        )
        reads.append(info)
        for text in [json.dumps(r) for r in reads] + [proxy.log()]:
            for secret in (LLM_SECRET, INLINE_SECRET):
                assert secret not in text
    finally:
        _remove(client, llm_id)
        _remove(client, inline_id)


def test_credential_is_encrypted_at_rest(client: OpenSearch, fake_llm: FakeLLM, node: OpenSearch) -> None:
    llm_id = _register(client, f"rest-{_tag()}", _llm_connector(fake_llm.url))
    try:
        connector_id = call(client, "GET", f"{ML}/models/{llm_id}")["connector_id"]
        for doc_id in (connector_id, llm_id):
            stored = node.get(index="memproxy-models", id=doc_id)["_source"]
            assert LLM_SECRET not in json.dumps(stored)
            assert str(stored["memproxy"]["credential"]).startswith("aesgcm1:")
    finally:
        _remove(client, llm_id)


# --- a registration that fails stores nothing --------------------------------------------------------------


def test_failed_registration_is_not_half_stored(client: OpenSearch, fake_llm: FakeLLM) -> None:
    tag = _tag()
    untrusted = {**_llm_connector(fake_llm.url)}
    untrusted["actions"] = [{**untrusted["actions"][0], "url": "http://10.0.0.1/v1/chat/completions"}]
    attempts = [
        (
            {"name": f"half-{tag}", "function_name": "remote", "connector": untrusted},
            (
                400,
                "illegal_argument_exception",
                "Connector URL is not matching the trusted connector endpoint regex",
            ),
        ),
        (
            {"name": f"half-{tag}", "function_name": "remote", "connector_id": "no-such-connector"},
            (404, "status_exception", "Failed to find connector:no-such-connector"),
        ),
        (
            {
                "name": f"half-{tag}",
                "function_name": "remote",
                "model_group_id": "no-such-group",
                "connector": _llm_connector(fake_llm.url),
            },
            (500, "m_l_resource_not_found_exception", "Model Group Response is empty for no-such-group"),
        ),
    ]
    for body, (status, etype, reason) in attempts:

        def register(body: Any = body) -> Any:
            return call(client, "POST", f"{ML}/models/_register", body)

        assert_error(register, status, etype, reason)
    by_name = {"query": {"term": {"name.keyword": f"half-{tag}"}}}
    assert call(client, "POST", f"{ML}/models/_search", by_name)["hits"]["hits"] == []
    assert call(client, "POST", f"{ML}/model_groups/_search", by_name)["hits"]["hits"] == []
    connectors = call(client, "POST", f"{ML}/connectors/_search", {"query": {"match_all": {}}, "size": 1000})
    assert not any(
        h["_source"]["actions"][0]["url"].startswith("http://10.") for h in connectors["hits"]["hits"]
    )


# --- who may write ---------------------------------------------------------------------------------------


def test_writes_need_an_administrator(
    client: OpenSearch, memproxy_url: str, admin_key: str, fake_llm: FakeLLM
) -> None:
    gm = Goodmem(base_url=memproxy_url, api_key=admin_key)
    user = gm.users.create(email=f"u-{_tag()}@example.com", display_name="Model user")
    key = gm.apikeys.create(subject_principal_id=user.user_id).raw_api_key
    plain = make_client(memproxy_url, key)
    anonymous = make_client(memproxy_url)
    llm_id = _register(client, f"access-{_tag()}", _llm_connector(fake_llm.url))
    try:
        assert call(plain, "GET", f"{ML}/models/{llm_id}")["name"].startswith("access-")
        prompts = {"parameters": {"system_prompt": "s", "user_prompt": "u"}}
        assert call(plain, "POST", f"{ML}/models/{llm_id}/_predict", prompts)["inference_results"]
        for method, path, body in (
            ("POST", f"{ML}/connectors/_create", _llm_connector(fake_llm.url)),
            ("POST", f"{ML}/models/_register", {"name": "x", "function_name": "remote", "connector_id": "x"}),
            ("POST", f"{ML}/model_groups/_register", {"name": f"g-{_tag()}"}),
            ("POST", f"{ML}/models/{llm_id}/_deploy", None),
            ("POST", f"{ML}/models/{llm_id}/_undeploy", None),
            ("DELETE", f"{ML}/models/{llm_id}", None),
        ):

            def write(method: str = method, path: str = path, body: Any = body) -> Any:
                return call(plain, method, path, body)

            info = assert_error(
                write,
                403,
                "status_exception",
                f"Permission denied: {method} {path} requires an administrator",
            )
            assert info["status"] == 403
        with pytest.raises(Exception) as missing:
            call(anonymous, "GET", f"{ML}/models/{llm_id}")
        assert getattr(missing.value, "status_code", None) == 401
        # The refused undeploy left the model as the plain user's predict left it (deployed on demand).
        assert call(client, "GET", f"{ML}/models/{llm_id}")["model_state"] == "DEPLOYED"
    finally:
        plain.close()
        anonymous.close()
        _remove(client, llm_id)


# --- broken providers ------------------------------------------------------------------------------------


class Provider:
    """An HTTP server answering as a provider does, by path: ``/echo`` one OpenAI embedding (and remembers
    the ``Authorization`` it got); broken: ``/garbage`` 200 with text, ``/nodata`` 200 JSON without ``data``,
    ``/boom`` 500, ``/slow`` after 10 s."""

    BOOM = '{"error": {"message": "boom", "type": "server_error", "param": null, "code": null}}'
    ECHO = '{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, 0.25]}]}'

    def __init__(self) -> None:
        self.calls = 0
        self.authorization: str | None = None
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                provider.calls += 1
                provider.authorization = self.headers.get("Authorization")
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.startswith("/slow"):
                    time.sleep(10)
                status, text = {
                    "/garbage": (200, "this is not json"),
                    "/nodata": (200, '{"object": "list"}'),
                    "/boom": (500, Provider.BOOM),
                }.get(self.path, (200, Provider.ECHO))
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the caller gave up (the slow path)
                    self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    p = Provider()
    yield p
    p.close()


@pytest.fixture(scope="module")
def fault_client(opensearch_url: str) -> Iterator[OpenSearch]:
    """memproxy with a short model timeout and no retries, so each fault is answered at once."""
    p = ProxyProcess(
        opensearch_url,
        extra_args=["--auth", "none", "--model-timeout-s", str(TIMEOUT_S), "--model-max-retries", "0"],
    )
    c = make_client(p.url)
    yield c
    c.close()
    p.stop()


def _embedding_at(url: str) -> dict[str, Any]:
    body = embedding_connector("http://127.0.0.1:9")
    body["actions"] = [{**body["actions"][0], "url": url}]
    return body


@pytest.mark.parametrize(
    ("path", "status", "etype", "reason", "cause"),
    [
        (
            "closed",
            500,
            "status_exception",
            "Error communicating with remote model: Connection refused: /127.0.0.1:{port}",
            None,
        ),
        ("/boom", 500, "status_exception", f"Error from remote service: {Provider.BOOM}", None),
        (
            "/garbage",
            500,
            "m_l_exception",
            "Fail to execute PREDICT in aws connector",
            "Expected to find an object with property ['data'] in path $ but found 'java.lang.String'. This "
            "is not a json object according to the JsonProvider: "
            "'com.jayway.jsonpath.spi.json.JsonSmartJsonProvider'.",
        ),
        (
            "/nodata",
            500,
            "m_l_exception",
            "Fail to execute PREDICT in aws connector",
            "Missing property in path $['data']",
        ),
        (
            "/slow",
            500,
            "status_exception",
            "Error communicating with remote model: provider connector did not answer within 1s",
            None,
        ),
    ],
)
def test_broken_provider_answers_ml_commons_error_in_time(
    fault_client: OpenSearch,
    provider: Provider,
    path: str,
    status: int,
    etype: str,
    reason: str,
    cause: str | None,
) -> None:
    port = free_port()  # nothing listens there
    url = f"http://127.0.0.1:{port}/v1/embeddings" if path == "closed" else provider.url + path
    model_id = _register(fault_client, f"fault-{_tag()}", _embedding_at(url), deploy=True)
    try:
        started = time.monotonic()
        info = assert_error(
            lambda: call(
                fault_client, "POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"input": ["a"]}}
            ),
            status,
            etype,
            reason.replace("{port}", str(port)),
        )
        assert time.monotonic() - started < 4 * TIMEOUT_S
        if cause is not None:
            assert info["error"]["caused_by"] == {"type": "path_not_found_exception", "reason": cause}
        assert "Traceback" not in json.dumps(info)
    finally:
        _remove(fault_client, model_id)


def test_provider_http_error_keeps_its_status(fault_client: OpenSearch, fake_llm: FakeLLM) -> None:
    llm_id = _register(fault_client, f"status-{_tag()}", llm_connector(fake_llm.url), deploy=True)
    try:
        body = {"error": {"message": "Rate limit reached", "type": "rate_limit", "param": None, "code": "x"}}
        fake_llm.fail_next(429, body)
        prompts = {"parameters": {"system_prompt": "s", "user_prompt": "u"}}
        info = assert_error(
            lambda: call(fault_client, "POST", f"{ML}/models/{llm_id}/_predict", prompts),
            429,
            "status_exception",
            f"Error from remote service: {json.dumps(body)}",
        )
        assert info["status"] == 429
    finally:
        _remove(fault_client, llm_id)


# --- unit: parsing and error mapping (no node) -------------------------------------------------------------


def test_action_parsed_and_refused_as_ml_commons_does() -> None:
    from proxy.api.opensearch_memory.models import _action
    from proxy.errors import BadRequest

    parsed = _action(
        {"url": "http://h/x", "foo": 1, "method": "POST", "action_type": "predict", "headers": {"n": 2}}
    )
    assert parsed == {"action_type": "PREDICT", "method": "POST", "url": "http://h/x", "headers": {"n": "2"}}
    for raw, reason in (
        ({"url": "u", "method": "POST"}, "action type can't be null"),
        ({"action_type": "predict", "method": "POST"}, "url can't be null"),
        ({"action_type": "predict", "url": "u"}, "method can't be null"),
        (
            {"action_type": "nope", "url": "u"},
            "No enum constant org.opensearch.ml.common.connector.ConnectorAction.ActionType.NOPE",
        ),
    ):
        with pytest.raises(BadRequest) as refused:
            _action(raw)
        assert refused.value.message == reason


def test_provider_failures_become_ml_commons_errors() -> None:
    from proxy.api.opensearch_memory.models import _remote_failure
    from proxy.models.provider import (
        ProviderBadAnswer,
        ProviderOverloaded,
        ProviderRejected,
        ProviderTimeout,
        ProviderUnavailable,
    )

    openai = "connector.post_process.openai.embedding"
    refused = _remote_failure(
        ProviderRejected(
            "provider connector refused (400): x", provider="connector", provider_status=400, body="{}"
        ),
        None,
    )
    assert (refused.status, refused.os_type, refused.message) == (
        400,
        "status_exception",
        "Error from remote service: {}",
    )
    limited = _remote_failure(
        ProviderOverloaded("rate limited", provider="connector", provider_status=429, body="slow down"), None
    )
    assert (limited.status, limited.message) == (429, "Error from remote service: slow down")
    down = ProviderUnavailable(
        "provider connector is unreachable: Cannot connect to host 127.0.0.1:9 ssl:default "
        "[Connect call failed ('127.0.0.1', 9)]",
        provider="connector",
    )
    mapped = _remote_failure(down, openai)
    assert (mapped.status, mapped.message) == (
        500,
        "Error communicating with remote model: Connection refused: /127.0.0.1:9",
    )
    slow = _remote_failure(ProviderTimeout("provider connector did not answer within 2s", provider="c"), None)
    assert (
        slow.message == "Error communicating with remote model: provider connector did not answer within 2s"
    )
    garbage = _remote_failure(
        ProviderBadAnswer("not JSON", provider="c", provider_status=200, body="x"), openai
    )
    assert (garbage.status, garbage.os_type) == (500, "m_l_exception")
    assert garbage.details["caused_by"]["type"] == "path_not_found_exception"
    shape = _remote_failure(ProviderBadAnswer("no data", provider="c"), openai)
    assert shape.details["caused_by"]["reason"] == "Missing property in path $['data']"
