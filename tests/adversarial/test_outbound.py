"""Outbound model calls follow no redirect, echo no answer that is not a model's, and connect only to allowed
addresses, checked on the resolved address (issue 24, item 4).

Real proxies on the real node; at the network edge, two small HTTP servers on loopback: a *redirector*
(answers 301/302/303/307/308 to the node or to another loopback port) and a *bystander* (a service a
registered model must never reach; also serves answers that are not a model's). The models are registered by
a non-admin tenant, through GoodMem (embedder, reranker, LLM, then ``ping:once``) and ml-commons (connector,
model, ``_predict``).

* ``proxy`` (the suite's): loopback allowed, as an operator running local model servers sets it; the
  cluster's own address stays refused whatever form names it.
* ``strict``: the default (no ``--allow-private-model-endpoints``): only public addresses.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from proxy.models.addresses import classify
from tests.adversarial.tenants import Tenant, basic, make_tenant
from tests.conftest import ProxyProcess
from tests.goodmem_helpers import root_api_key

pytestmark = pytest.mark.timeout(600)

ML = "/_plugins/_ml"
MARKER = "BYSTANDER-" + uuid.uuid4().hex  # what the bystander answers: must never reach a caller
REDIRECTS = (301, 302, 303, 307, 308)


@dataclass
class Server:
    """A threaded HTTP server; ``hits`` records (method, path) of every request it answered."""

    host: str
    answer: Any  # (handler, method) -> (status, headers, body)
    hits: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                server.hits.append((self.command, self.path))
                status, headers, body = server.answer(self.path)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer((self.host, 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _bystander_answer(path: str) -> tuple[int, dict[str, str], bytes]:
    kind = path.strip("/").split("/")[0]
    if kind == "plain":  # 200, not JSON: a page of some other service
        return 200, {"Content-Type": "text/plain"}, f"{MARKER} user root@example.com".encode()
    if kind == "html400":
        return 400, {"Content-Type": "text/html"}, f"<html>{MARKER}</html>".encode()
    if kind == "json500":  # JSON, but not a model's error shape
        return 500, {"Content-Type": "application/json"}, json.dumps({"rows": [MARKER]}).encode()
    if kind == "shaped":  # a model's own error: quoted
        body = {"error": {"message": "model says no", "type": "invalid_request_error"}}
        return 400, {"Content-Type": "application/json"}, json.dumps(body).encode()
    return 200, {"Content-Type": "application/json"}, json.dumps({"data": [], "secret": MARKER}).encode()


@dataclass(frozen=True)
class Edge:
    bystander: Server
    redirector: Server
    node: str


@pytest.fixture(scope="module")
def edge(opensearch_url: str) -> Iterator[Edge]:
    # On every interface: the host name's address (not loopback's literal) reaches it too.
    bystander = Server("0.0.0.0", _bystander_answer)

    def redirect(path: str) -> tuple[int, dict[str, str], bytes]:
        # /r{code}/{node|loopback}/{tag}/...: node → a write into index {tag}, loopback → the bystander.
        _, code, target, tag = [*path.split("/", 4), "", "", "", ""][:4]
        where = f"{opensearch_url}/{tag}/_doc/1" if target == "node" else f"{bystander.url}/{tag}"
        return int(code[1:]), {"Location": where}, b""

    redirector = Server("127.0.0.1", redirect)
    yield Edge(bystander, redirector, opensearch_url)
    bystander.close()
    redirector.close()


@pytest.fixture(scope="module")
def tenant(proxy_url: str, opensearch_url: str) -> Tenant:
    root = root_api_key(proxy_url, opensearch_url)
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": root}, timeout=120) as admin:
        return make_tenant(admin, "outbound")


@pytest.fixture(scope="module")
def strict(opensearch_url: str) -> Iterator[ProxyProcess]:
    """memproxy with the default address rule (the variable set empty is the variable unset)."""
    p = ProxyProcess(opensearch_url, env={"MEMPROXY_ALLOW_PRIVATE_MODEL_ENDPOINTS": ""})
    yield p
    p.stop()


def _client(url: str, tenant: Tenant) -> httpx.Client:
    return httpx.Client(base_url=url, headers=tenant.headers, timeout=120)


def _register(http: httpx.Client, kind: str, endpoint: str) -> httpx.Response:
    body: dict[str, Any] = {
        "displayName": f"outbound-{uuid.uuid4().hex[:6]}",
        "endpointUrl": endpoint,
        "modelIdentifier": "m",
        "providerType": "TEI" if kind == "rerankers" else "OPENAI",
    }
    if kind == "embedders":
        body["dimensionality"] = 8
    return http.post(f"/v1/{kind}", json=body)


def _model_id(kind: str, made: httpx.Response) -> str:
    assert made.status_code in (200, 201), made.text
    body = made.json()
    return str(
        {"embedders": body.get("embedderId"), "rerankers": body.get("rerankerId")}.get(kind)
        or body["llm"]["llmId"]
    )


def _ping(http: httpx.Client, kind: str, endpoint: str) -> dict[str, Any]:
    """Register a model at ``endpoint``, ping it once, delete it: the probe's result."""
    model_id = _model_id(kind, _register(http, kind, endpoint))
    try:
        resp = http.post("/v1/ping:once", json={"targetId": model_id, "timeoutMs": 20000})
        assert resp.status_code == 200, resp.text
        return dict(resp.json())
    finally:
        http.delete(f"/v1/{kind}/{model_id}")


def _refused_at_registration(http: httpx.Client, endpoint: str) -> str:
    resp = _register(http, "embedders", endpoint)
    assert resp.status_code == 400, (endpoint, resp.status_code, resp.text)
    assert resp.json()["status"] == 400
    return str(resp.json()["error"])


def _index_exists(node: str, index: str) -> bool:
    return httpx.head(f"{node}/{index}", timeout=30).status_code == 200


# --- no redirects ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", REDIRECTS)
@pytest.mark.parametrize("target", ["node", "loopback"])
def test_an_embedder_redirect_is_not_followed(
    proxy_url: str, tenant: Tenant, edge: Edge, code: int, target: str
) -> None:
    tag = f"mp-redirect-{uuid.uuid4().hex[:10]}"
    with _client(proxy_url, tenant) as http:
        result = _ping(http, "embedders", f"{edge.redirector.url}/r{code}/{target}/{tag}")
    assert result["ok"] is False
    assert f"answered a redirect ({code}), which memproxy does not follow" in result["errorMessage"]
    assert MARKER not in json.dumps(result) and "tagline" not in json.dumps(result)
    assert not [hit for hit in edge.bystander.hits if tag in hit[1]]
    assert not _index_exists(edge.node, tag)  # a 307/308 re-POST would have written a document there


@pytest.mark.parametrize(
    ("kind", "code"), [("rerankers", 307), ("llms", 303), ("llms", 308), ("rerankers", 302)]
)
def test_reranker_and_llm_redirects_are_not_followed(
    proxy_url: str, tenant: Tenant, edge: Edge, kind: str, code: int
) -> None:
    tag = f"mp-redirect-{uuid.uuid4().hex[:10]}"
    with _client(proxy_url, tenant) as http:
        for target in ("node", "loopback"):
            result = _ping(http, kind, f"{edge.redirector.url}/r{code}/{target}/{tag}")
            assert result["ok"] is False and "does not follow" in result["errorMessage"], result
            assert MARKER not in json.dumps(result)
    assert not [hit for hit in edge.bystander.hits if tag in hit[1]]
    assert not _index_exists(edge.node, tag)


def _connector(url: str) -> dict[str, Any]:
    return {
        "name": f"outbound-{uuid.uuid4().hex[:6]}",
        "version": 1,
        "protocol": "http",
        "parameters": {"model": "m"},
        "credential": {"openAI_key": "k"},
        "actions": [
            {
                "action_type": "predict",
                "method": "POST",
                "url": url,
                "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
                "request_body": '{ "input": ${parameters.input}, "model": "${parameters.model}" }',
            }
        ],
    }


@pytest.fixture(scope="module")
def root(proxy_url: str, opensearch_url: str) -> str:
    """ml-commons connectors are an administrator's to create: the root key (a redirect or an address
    must not take even an administrator's model call into memproxy's cluster)."""
    return root_api_key(proxy_url, opensearch_url)


def _ml(proxy_url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=proxy_url, headers={"Authorization": basic("root", key)}, timeout=120)


def _predict(http: httpx.Client, url: str) -> httpx.Response:
    made = http.post(f"{ML}/connectors/_create", json=_connector(url))
    assert made.status_code == 200, made.text
    body = {"name": "outbound", "function_name": "remote", "connector_id": made.json()["connector_id"]}
    registered = http.post(f"{ML}/models/_register", params={"deploy": "true"}, json=body)
    assert registered.status_code == 200, registered.text
    model_id = registered.json()["model_id"]
    try:
        return http.post(f"{ML}/models/{model_id}/_predict", json={"parameters": {"input": ["a"]}})
    finally:
        http.post(f"{ML}/models/{model_id}/_undeploy")
        http.delete(f"{ML}/models/{model_id}")
        http.delete(f"{ML}/connectors/{made.json()['connector_id']}")


@pytest.mark.parametrize("code", [303, 307, 308])
def test_an_ml_commons_connector_redirect_is_not_followed(
    proxy_url: str, root: str, edge: Edge, code: int
) -> None:
    tag = f"mp-redirect-{uuid.uuid4().hex[:10]}"
    with _ml(proxy_url, root) as http:
        for target in ("node", "loopback"):
            resp = _predict(http, f"{edge.redirector.url}/r{code}/{target}/{tag}")
            assert resp.status_code == 500, resp.text
            assert f"answered a redirect ({code})" in resp.json()["error"]["reason"], resp.text
            assert MARKER not in resp.text and "_index" not in resp.text
    assert not [hit for hit in edge.bystander.hits if tag in hit[1]]
    assert not _index_exists(edge.node, tag)


# --- no echo -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["plain", "html400", "json500"])
def test_a_probe_never_echoes_an_answer_that_is_not_a_models(
    proxy_url: str, tenant: Tenant, root: str, edge: Edge, kind: str
) -> None:
    with _client(proxy_url, tenant) as http:
        for model in ("embedders", "llms"):
            result = _ping(http, model, f"{edge.bystander.url}/{kind}")
            assert result["ok"] is False and MARKER not in json.dumps(result), result
            assert "not shown" in result["errorMessage"], result
    with _ml(proxy_url, root) as http:
        resp = _predict(http, f"{edge.bystander.url}/{kind}/v1/embeddings")
        assert resp.status_code >= 400 and MARKER not in resp.text, resp.text


def test_a_models_own_error_is_still_quoted(proxy_url: str, tenant: Tenant, edge: Edge) -> None:
    with _client(proxy_url, tenant) as http:
        result = _ping(http, "embedders", f"{edge.bystander.url}/shaped")
    assert result["ok"] is False and "model says no" in result["errorMessage"], result


# --- addresses ---------------------------------------------------------------------------------------------


def _node_port(node: str) -> int:
    return urllib.parse.urlsplit(node).port or 80


@pytest.mark.parametrize(
    "host", ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]"]
)
def test_the_cluster_is_refused_in_every_form_even_with_loopback_allowed(
    proxy_url: str, tenant: Tenant, edge: Edge, host: str
) -> None:
    with _client(proxy_url, tenant) as http:
        error = _refused_at_registration(http, f"https://{host}:{_node_port(edge.node)}/v1")
    assert "the OpenSearch cluster memproxy stores its data in" in error


def _host_name_address() -> tuple[str, str]:
    """This machine's host name and what it resolves to, when that is not a public address."""
    name = socket.gethostname()
    try:
        address = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)[0][4][0]
    except OSError:
        pytest.skip(f"the host name {name!r} does not resolve")
    if classify(ipaddress.ip_address(address)) is None:
        pytest.skip(f"the host name {name!r} resolves to a public address")
    return name, str(address)


def test_a_name_resolving_to_the_cluster_is_refused_at_connect_time(
    proxy_url: str, tenant: Tenant, edge: Edge
) -> None:
    name, address = _host_name_address()
    if not ipaddress.ip_address(address).is_loopback:
        pytest.skip("the host name does not resolve to the cluster's loopback address")
    with _client(proxy_url, tenant) as http:
        result = _ping(http, "embedders", f"https://{name}:{_node_port(edge.node)}/v1")
    assert result["ok"] is False
    assert "the OpenSearch cluster memproxy stores its data in" in result["errorMessage"], result


PRIVATE = [
    "http://localhost:{port}/v1",
    "http://127.0.0.1:{port}/v1",
    "http://[::1]:{port}/v1",
    "https://2130706433:{port}/v1",
    "https://0x7f.1:{port}/v1",
    "https://[::ffff:127.0.0.1]:{port}/v1",
    "https://10.1.2.3/v1",
    "https://172.16.0.1/v1",
    "https://192.168.1.1/v1",
    "https://[fd00::1]/v1",
    "https://[::ffff:10.0.0.1]/v1",
    "https://169.254.169.254/latest",
    "https://[fe80::1]/v1",
    "https://100.64.0.1/v1",
    "https://0.0.0.0:{port}/v1",
    "https://224.0.0.1/v1",
    "https://[64:ff9b::a00:1]/v1",
]


@pytest.mark.parametrize("template", PRIVATE)
def test_by_default_a_registered_model_reaches_public_addresses_only(
    strict: ProxyProcess, tenant: Tenant, edge: Edge, template: str
) -> None:
    with _client(strict.url, tenant) as http:
        error = _refused_at_registration(http, template.format(port=edge.bystander.port))
    assert "--allow-private-model-endpoints" in error, error


def test_by_default_a_name_resolving_to_a_private_address_is_refused_at_connect_time(
    strict: ProxyProcess, tenant: Tenant, edge: Edge
) -> None:
    name, address = _host_name_address()
    before = len(edge.bystander.hits)
    with _client(strict.url, tenant) as http:
        # https: the default trusted patterns take plain http on loopback literals only.
        result = _ping(http, "embedders", f"https://{name}:{edge.bystander.port}/v1")
    assert result["ok"] is False and result["httpStatus"] == 400, result
    assert f"{address} is a {classify(ipaddress.ip_address(address))} address" in result["errorMessage"]
    assert len(edge.bystander.hits) == before


def test_by_default_an_ml_commons_connector_to_a_private_address_is_refused(
    strict: ProxyProcess, root: str, edge: Edge
) -> None:
    with _ml(strict.url, root) as http:
        for url in ("https://10.0.0.1/v1/embeddings", f"https://[::ffff:127.0.0.1]:{edge.bystander.port}/x"):
            made = http.post(f"{ML}/connectors/_create", json=_connector(url))
            assert made.status_code == 400, made.text
            assert "trusted connector endpoint" in made.json()["error"]["reason"]
