"""The OpenAPI 3.1 document (``GET /_memproxy/openapi.json``, proxy.api.openapi) and a schemathesis run of
both APIs against it.

The document is checked as schemathesis loads it (its own OpenAPI 3.1 meta-schema); every declared operation
is served and the routes without a declaration are the known ones. The property-based run sends
schemathesis-generated requests with an administrator's key to a live memproxy on the real node, and every
answer must be no 5xx, conform to its documented schema, and have a documented status. It is fixed
(``derandomize``: the same requests every run) so that CI is stable, and sized to take under three minutes
here; it prints the number of requests it sent.
"""

from __future__ import annotations

import collections
import copy
import time
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from proxy.api import openapi
from proxy.api.goodmem.retrieve import TIMEOUT_HEADER
from proxy.app import OPENAPI_APIS, make_app
from proxy.config import Settings
from tests.support.reference import embedding_connector

# An export / import body is NDJSON: text to schemathesis (the body schema is a string).
schemathesis.serializer.alias("application/x-ndjson", "text/plain")

# Left out of the pass that names existing objects, because there they would name what is not the run's
# own: the run's API key and its user (root), whose change or deletion would fail every request after it,
# and the start-up embedder, which every test on the node shares (an update of a built-in model is kept in
# the cluster). The generated pass sends them too, with ids that name only what the run itself created.
# (System init stays in: the fixture initialised the instance, so it answers "already initialized".)
NOT_WITH_KNOWN_IDS = {
    ("DELETE", "/v1/apikeys/{id}"),
    ("PUT", "/v1/apikeys/{id}"),
    ("DELETE", "/v1/users/{id}"),
    ("PUT", "/v1/users/{id}"),
    ("DELETE", "/v1/embedders/{id}"),
    ("PUT", "/v1/embedders/{id}"),
    ("POST", "/v1/users/{id}:erase"),
}
# Not sent at all: an administrator's erase over every container would delete the generated user ids'
# memories from every other test's containers on the shared node (tests/test_erasure.py covers it).
NOT_RUN = {("POST", "/_plugins/_ml/memory_containers/_memproxy_erase")}

# Examples per operation and pass (a generated pass, and one that names objects that exist): about 4,900
# requests, a minute here (three at most with the machine's two shared cores busy).
MAX_EXAMPLES = 40
GENERATED_REQUESTS = 8204
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance]


def _document() -> dict[str, Any]:
    return openapi.build_document(make_app(Settings()), OPENAPI_APIS)


def test_the_document_is_valid_openapi_3_1() -> None:
    document = _document()
    assert document["openapi"] == "3.1.0"
    schema = schemathesis.openapi.from_dict(copy.deepcopy(document))
    schema.validate()  # schemathesis' OpenAPI 3.1 meta-schema
    operations = [cast(Any, op).ok() for op in schema.get_all_operations()]
    assert len(operations) >= 70
    # The check can fail: a response that is not a Response Object is refused.
    broken = copy.deepcopy(document)
    broken["paths"]["/v1/spaces"]["get"]["responses"]["200"] = {"content": 5}
    with pytest.raises(Exception, match="content"):
        schemathesis.openapi.from_dict(broken).validate()


def test_every_declared_operation_is_served_and_in_the_document() -> None:
    app = make_app(Settings())
    document = openapi.build_document(app, OPENAPI_APIS)
    served = {(m, p) for m, p in openapi.served_routes(app)}
    for api in OPENAPI_APIS:
        for method, path in api.operations:
            assert (method, path) in served, f"{method} {path} is declared but not served"
            assert method.lower() in document["paths"][path]


def test_the_routes_without_a_declared_schema_are_the_known_ones() -> None:
    undeclared = _document()["x-memproxy-undeclared"]
    assert undeclared == [], f"routes without a schema: {undeclared}"


def test_answers_and_errors_name_their_models_in_each_api_shape() -> None:
    document = _document()
    paths, schemas = document["paths"], document["components"]["schemas"]

    def ref(operation: dict[str, Any], status: str) -> str:
        return str(operation["responses"][status]["content"]["application/json"]["schema"]["$ref"])

    space = paths["/v1/spaces/{id}"]["get"]
    assert ref(space, "200").endswith("/Space") and ref(space, "404").endswith("/GoodMemError")
    assert {"spaceId", "name", "spaceEmbedders"} <= set(schemas["Space"]["required"])
    container = paths["/_plugins/_ml/memory_containers/{memory_container_id}"]["get"]
    assert ref(container, "404").endswith("/OpenSearchError")
    embeddings = paths["/openai/v1/embeddings"]["post"]
    assert ref(embeddings, "400").endswith("/OpenAIError")
    # Request bodies are read in validation mode, and name only the fields their handler reads.
    body = embeddings["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert schemas[body]["additionalProperties"] is False
    # The public routes need no credential; the others any of the three schemes.
    assert paths["/v1/system/info"]["get"]["security"] == []
    assert "security" not in space and {"apiKey", "bearer", "basic"} == {
        next(iter(s)) for s in document["security"]
    }


def test_the_alternatives_of_a_path_parameter_are_paths_of_their_own() -> None:
    paths = _document()["paths"]
    assert {"/v1/rerankers", "/v1/llms", "/v1/rerankers/{id}", "/v1/llms/{id}"} <= set(paths)
    assert "/v1/{kind}" not in paths


def test_the_document_is_served_without_a_key(proxy_url: str) -> None:
    answer = httpx.get(proxy_url + openapi.PATH, timeout=30)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/json")
    served = answer.json()
    assert served["openapi"] == "3.1.0"
    assert set(served["paths"]) == set(_document()["paths"])
    assert served["components"]["securitySchemes"]["apiKey"]["name"] == "x-api-key"


# --- what the run found ------------------------------------------------------------------------------


def test_a_memory_search_past_the_result_window_is_400(
    proxy_url: str, admin_headers: dict[str, str], known_ids: dict[str, str]
) -> None:
    """The run's find: ``size`` over the index's result window failed on every shard and was answered as
    an execution failure (500); it is the caller's argument, refused by the node with a 400."""
    base = f"{proxy_url}/_plugins/_ml/memory_containers/{known_ids['space']}/memories/long-term/_search"
    answer = httpx.post(base, json={"size": 26951, "query": None}, headers=admin_headers, timeout=60)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["root_cause"][0]["type"] == "illegal_argument_exception"
    assert error["root_cause"][0]["reason"].startswith("Result window is too large")
    # An execution failure that is not the caller's argument stays ml-commons' wrapped 500.
    unmapped = httpx.post(base, json={"sort": [{"nope": "asc"}]}, headers=admin_headers, timeout=60)
    assert unmapped.status_code == 500
    assert unmapped.json()["error"]["reason"].startswith("Search execution failed: ")


# --- the schemathesis run --------------------------------------------------------------------------------


# What the run may create through the GoodMem API: (list route, list key, id field).
_CREATED = (
    ("/v1/users", "users", "userId"),
    ("/v1/apikeys", "keys", "apiKeyId"),
    ("/v1/embedders", "embedders", "embedderId"),
    ("/v1/rerankers", "rerankers", "rerankerId"),
    ("/v1/llms", "llms", "llmId"),
    ("/v1/access-policy/grants", "grants", "grantId"),
)


def _cleanup(proxy_url: str, headers: dict[str, str], since_ms: int) -> None:
    """Delete what the run created (containers = spaces with their memories, users, keys, models, grants):
    the node is shared, and the run must leave it as it found it."""
    query = {"size": 1000, "query": {"range": {"created_time": {"gte": since_ms}}}}
    found = httpx.post(
        proxy_url + "/_plugins/_ml/memory_containers/_search", json=query, headers=headers, timeout=60
    ).json()
    for hit in found.get("hits", {}).get("hits", []):
        url = f"{proxy_url}/_plugins/_ml/memory_containers/{hit['_id']}"
        deleted = httpx.delete(url, params={"delete_all_memories": "true"}, headers=headers, timeout=60)
        if deleted.status_code == 409:  # its indices are shared with other containers: the document only
            httpx.delete(url, headers=headers, timeout=60)
    # ml-commons model objects: models before their groups and connectors, which refuse while in use.
    ml = proxy_url + "/_plugins/_ml"
    for kind in ("models", "model_groups", "connectors"):
        found = httpx.post(f"{ml}/{kind}/_search", json=query, headers=headers, timeout=60).json()
        for hit in found.get("hits", {}).get("hits", []):
            if kind == "models":
                httpx.post(f"{ml}/models/{hit['_id']}/_undeploy", headers=headers, timeout=60)
            httpx.delete(f"{ml}/{kind}/{hit['_id']}", headers=headers, timeout=60)
    for route, key, id_field in _CREATED:
        token: str | None = None
        while True:
            params = {"maxResults": "1000", **({"nextToken": token} if token else {})}
            page = httpx.get(proxy_url + route, params=params, headers=headers, timeout=60).json()
            for item in page.get(key, []):
                if int(item.get("createdAt") or 0) >= since_ms:
                    httpx.delete(f"{proxy_url}{route}/{item[id_field]}", headers=headers, timeout=60)
            token = page.get("nextToken")
            if not token:
                break


@pytest.fixture
def run_cleanup(proxy_url: str, admin_headers: dict[str, str]) -> Iterator[None]:
    since = int(time.time() * 1000)
    yield
    _cleanup(proxy_url, admin_headers, since)


@pytest.fixture
def known_ids(proxy_url: str, admin_headers: dict[str, str], run_cleanup: None) -> dict[str, str]:
    """Objects that exist, so that part of the run reaches past "not found": a space (= a container) with a
    memory in it and a long-term memory, the root user, the run's own key, a start-up embedder (and its
    OpenAI model name)."""
    h = admin_headers
    embedder = httpx.get(proxy_url + "/v1/embedders", headers=h, timeout=30).json()["embedders"][0][
        "embedderId"
    ]
    space = httpx.post(
        proxy_url + "/v1/spaces",
        json={"name": f"openapi-run-{time.time_ns()}", "spaceEmbedders": [{"embedderId": embedder}]},
        headers=h,
        timeout=60,
    )
    assert space.status_code == 201, space.text
    space_id = space.json()["spaceId"]
    memory = httpx.post(
        proxy_url + "/v1/memories",
        json={"spaceId": space_id, "originalContent": "The schemathesis run reads this memory."},
        headers=h,
        timeout=60,
    )
    assert memory.status_code == 201, memory.text
    long_term = httpx.post(
        f"{proxy_url}/_plugins/_ml/memory_containers/{space_id}/memories/long-term/_memproxy_add",
        json={"memory": "Long-term memories are searched semantically."},
        headers=h,
        timeout=60,
    )
    assert long_term.status_code == 200, long_term.text
    # A remote model whose connector calls memproxy's own OpenAI embeddings route with the run's key, so
    # that predict reaches a real provider.
    connector = embedding_connector(proxy_url)
    connector["credential"] = {"openAI_key": h["x-api-key"]}
    ml = proxy_url + "/_plugins/_ml"
    connector_id = httpx.post(ml + "/connectors/_create", json=connector, headers=h, timeout=60).json()[
        "connector_id"
    ]
    registered = httpx.post(
        ml + "/models/_register",
        json={"name": f"openapi-{time.time_ns()}", "function_name": "remote", "connector_id": connector_id},
        headers=h,
        timeout=60,
    )
    assert registered.status_code == 200, registered.text
    model_id = registered.json()["model_id"]
    model = httpx.get(f"{ml}/models/{model_id}", headers=h, timeout=30).json()
    me = httpx.get(proxy_url + "/v1/users/me", headers=h, timeout=30).json()
    keys = httpx.get(proxy_url + "/v1/apikeys", headers=h, timeout=30).json()["keys"]
    openai_model = httpx.get(proxy_url + "/openai/v1/models", headers=h, timeout=30).json()["data"][0]["id"]
    return {
        "space": space_id,
        "memory": memory.json()["memoryId"],
        "long_term": long_term.json()["long_term_memory_id"],
        "user": me["userId"],
        "key": keys[0]["apiKeyId"],
        "embedder": embedder,
        "openai_model": openai_model,
        "connector": connector_id,
        "model_group": model["model_group_id"],
        "model": model_id,
        "task": registered.json()["task_id"],
    }


def _known_path_parameters(path: str, ids: dict[str, str]) -> dict[str, str]:
    """The parameters of ``path`` that name an object of ``ids`` (the others stay generated)."""
    out: dict[str, str] = {}
    if "{memory_container_id}" in path:
        out["memory_container_id"] = ids["space"]
    if "{memory_id}" in path:
        out["memory_id"] = ids["long_term"]
    if "{model}" in path:
        out["model"] = ids["openai_model"]
    for name in ("connector", "model_group", "model", "task"):
        if "{" + name + "_id}" in path:
            out[name + "_id"] = ids[name]
    if path.startswith("/v1/spaces/"):
        out["id" if "{id}" in path else "spaceId"] = ids["space"]
    for prefix, name in (
        ("/v1/memories/", "memory"),
        ("/v1/users/{id}", "user"),
        ("/v1/apikeys/", "key"),
        ("/v1/embedders/", "embedder"),
    ):
        if path.startswith(prefix) and "{id}" in path:
            out["id"] = ids[name]
    return out


# Body fields that name an object, and the key of ``known_ids`` that names one that exists. Memory ids are
# filled only into batchGet's list: a batchDelete of the run's memory would leave the later reads nothing.
_KNOWN_FIELDS = {
    "spaceId": "space",
    "embedderId": "embedder",
    "resourceId": "space",
    "principalId": "user",
    "model": "openai_model",
    "connector_id": "connector",
    "model_group_id": "model_group",
}


def _fill_known(value: Any, ids: dict[str, str]) -> Any:
    """``value`` (a generated body) with every field named in _KNOWN_FIELDS set to an object that exists."""
    if isinstance(value, dict):
        out = {k: _fill_known(v, ids) for k, v in value.items()}
        for field, name in _KNOWN_FIELDS.items():
            if field in out:
                out[field] = ids[name]
        if isinstance(out.get("memoryIds"), list):
            out["memoryIds"] = [ids["memory"], *out["memoryIds"]]
        return out
    if isinstance(value, list):
        return [_fill_known(v, ids) for v in value]
    return value


def _with_known_ids(case: Any, ids: dict[str, str]) -> Any:
    if isinstance(case.body, dict | list):
        case.body = _fill_known(case.body, ids)
    if case.query and "spaceIds" in case.query:
        case.query["spaceIds"] = ids["space"]
    return case


def _run(strategy: Any, url: str, headers: dict[str, str], failures: list[str], name: str) -> list[int]:
    """Send MAX_EXAMPLES cases of ``strategy`` (fewer when it has fewer); record failed checks, never shrink
    (every failure is reported as it was sent); the status of each answer."""
    codes: list[int] = []

    @given(case=strategy)
    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        response = case.call(base_url=url, headers=headers, timeout=60)
        codes.append(response.status_code)
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except FailureGroup as exc:
            failures.append(f"{name}: {exc}")

    run()
    return codes


def test_schemathesis_finds_no_5xx_and_no_answer_outside_the_schema(
    proxy_url: str, admin_headers: dict[str, str], known_ids: dict[str, str]
) -> None:
    document = httpx.get(proxy_url + openapi.PATH, timeout=30).json()
    schema = schemathesis.openapi.from_dict(document)
    operations = [
        op
        for op in (cast(Any, r).ok() for r in schema.get_all_operations())
        if (op.method.upper(), op.path) not in NOT_RUN
    ]
    # Deletes last, so the objects of known_ids live through every other operation's run.
    operations.sort(key=lambda op: op.method.upper() == "DELETE")
    sent = 0
    statuses: dict[str, list[int]] = collections.defaultdict(list)
    failures: list[str] = []
    started = time.monotonic()
    for operation in operations:
        name = f"{operation.method.upper()} {operation.path}"
        known = _known_path_parameters(operation.path, known_ids)
        with_known = (operation.method.upper(), operation.path) not in NOT_WITH_KNOWN_IDS
        # Retrieve answers 504 when the caller's own GoodMem-Timeout-Ms passes before the first byte, as
        # GoodMem does (documented; test_goodmem_retrieve.py::test_deadline_before_first_byte_is_504): the run
        # gives it a deadline it cannot miss, so that any 5xx it sees is memproxy's.
        headers = {TIMEOUT_HEADER: "120000"} if operation.path == "/v1/memories:retrieve" else None
        strategies = [operation.as_strategy(headers=headers)]
        if with_known and (known or operation.body or operation.path == "/v1/memories:retrieve"):
            known_strategy = operation.as_strategy(path_parameters=known or None, headers=headers)
            strategies.append(known_strategy.map(lambda case: _with_known_ids(case, known_ids)))
        for strategy in strategies:
            codes = _run(strategy, proxy_url, admin_headers, failures, name)
            statuses[name] += codes
            sent += len(codes)
    elapsed = time.monotonic() - started
    print(f"schemathesis sent {sent} generated requests in {elapsed:.0f} s; {len(failures)} failed")
    for name, codes in statuses.items():
        print(f"  {name}: {dict(collections.Counter(codes))}")
    for failure in failures[:20]:
        print(failure[:3000])
    assert not failures, f"{len(failures)} of {sent} answers failed a check; the first:\n{failures[0][:3000]}"
    # The run is fixed (derandomized): the same requests, so the same number, every time. A change to the
    # document or to MAX_EXAMPLES changes it: update GENERATED_REQUESTS (and docs/openapi.md) with it.
    assert sent == GENERATED_REQUESTS, sent
