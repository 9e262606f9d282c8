"""Input that cannot poison or freeze the service, against the real proxy on a real node (docs/security.md).

Each attack found by probing a running proxy is replayed here and gets its 4xx: unpaired surrogates in every
place text is stored, headers that are not UTF-8, deep JSON, multipart without a boundary, a malformed header
line, a 10 MB memory, ``chunkSize: 1``, bodies over ``max_body_bytes``. Records poisoned straight in the node
never break a listing, a client leaving a streamed retrieve leaves nothing behind, and while heavy input and
a queue-filling tenant are in flight, ``/_memproxy/health`` answers within 1 s and another tenant's
retrieve succeeds (its measured latencies are printed: ``pytest -s``).

The module runs its own proxy (default settings), so its log is its own.
"""

from __future__ import annotations

import json
import socket
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.adversarial.health import HealthPoller
from tests.adversarial.tenants import Tenant, make_tenant
from tests.conftest import ProxyProcess
from tests.goodmem_helpers import root_api_key
from tests.opensearch_memory_helpers import new_prefix

EMBEDDER = "7cee535f-87b7-58aa-9a5a-d51cea8a2f1d"
MC = "/_plugins/_ml/memory_containers"
CONTAINER_INDEX = ".plugins-ml-am-memory-container"
MEMORIES_INDEX = "memproxy-goodmem-memories"
TEN_MB = 10 * 1024 * 1024
POLL_EVERY_S = 0.05


@dataclass
class World:
    proxy: ProxyProcess
    opensearch_url: str
    admin: httpx.Client
    key: str
    space_id: str
    container_id: str
    tenant_a: Tenant
    tenant_b: Tenant
    space_b: str


@pytest.fixture(scope="module")
def world(opensearch_url: str) -> Iterator[World]:
    proxy = ProxyProcess(opensearch_url)
    try:
        key = root_api_key(proxy.url, opensearch_url)
        with httpx.Client(base_url=proxy.url, headers={"x-api-key": key}, timeout=300) as admin:
            space = admin.post(
                "/v1/spaces",
                json={"name": f"limits-{uuid.uuid4().hex[:8]}", "spaceEmbedders": [{"embedderId": EMBEDDER}]},
            )
            assert space.status_code == 200 or space.status_code == 201, space.text
            container = admin.post(
                f"{MC}/_create",
                json={
                    "name": "limits-container",
                    "configuration": {
                        "embedding_model_type": "TEXT_EMBEDDING",
                        "embedding_model_id": "all-minilm-l6-v2",
                        "embedding_dimension": 384,
                        "index_prefix": new_prefix("limits"),
                    },
                },
            )
            assert container.status_code == 200, container.text
            tenant_a, tenant_b = make_tenant(admin, "filler"), make_tenant(admin, "neighbour")
            b = {"x-api-key": tenant_b.key}
            space_b = admin.post(
                "/v1/spaces",
                headers=b,
                json={
                    "name": f"neighbour-{uuid.uuid4().hex[:8]}",
                    "spaceEmbedders": [{"embedderId": EMBEDDER}],
                },
            ).json()["spaceId"]
            for text in ("the neighbour likes oolong tea", "the neighbour walks the dog at seven"):
                made = admin.post(
                    "/v1/memories", headers=b, json={"spaceId": space_b, "originalContent": text}
                )
                assert made.status_code == 201, made.text
            cid = container.json()["memory_container_id"]
            yield World(
                proxy, opensearch_url, admin, key, space.json()["spaceId"], cid, tenant_a, tenant_b, space_b
            )
            admin.delete(
                f"{MC}/{container.json()['memory_container_id']}", params={"delete_all_memories": "true"}
            )
    finally:
        proxy.stop()


def raw_exchange(world: World, data: bytes, timeout: float = 60) -> bytes:
    """``data`` sent on a fresh socket; everything the proxy answers until it closes the connection."""
    parts = urlsplit(world.proxy.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def json_of(answer: bytes) -> Any:
    return json.loads(answer.partition(b"\r\n\r\n")[2])


# --- unpaired surrogates: refused before anything is stored ----------------------------------------------

# (method, path, raw JSON body with a surrogate escape, what the node would have stored)
SURROGATE_CASES: list[tuple[str, str, str]] = [
    ("POST", "/v1/spaces", '{"name": "bad\\ud800space", "spaceEmbedders": [{"embedderId": "EMB"}]}'),
    (
        "POST",
        "/v1/spaces",
        '{"name": "ok", "labels": {"team": "\\udfff"}, "spaceEmbedders": [{"embedderId": "EMB"}]}',
    ),
    (
        "POST",
        "/v1/spaces",
        '{"name": "ok2", "labels": {"\\ud800": "v"}, "spaceEmbedders": [{"embedderId": "EMB"}]}',
    ),
    ("PUT", "/v1/spaces/SID", '{"name": "renamed\\ud800"}'),
    ("POST", "/v1/users", '{"email": "s@example.com", "displayName": "Mallory\\ud800"}'),
    ("POST", "/v1/apikeys", '{"labels": {"purpose": "\\udbff"}}'),
    (
        "POST",
        "/v1/memories",
        '{"spaceId": "SID", "originalContent": "hi", "originalContentRef": "ref\\ud800"}',
    ),
    ("POST", "/v1/memories", '{"spaceId": "SID", "originalContent": "poison \\ud800 text"}'),
    ("POST", "/v1/memories", '{"spaceId": "SID", "originalContent": "hi", "metadata": {"k": "\\ud800"}}'),
    ("POST", "/v1/memories:batchCreate", '{"requests": [{"spaceId": "SID", "originalContent": "x\\ud800"}]}'),
    ("POST", "/v1/memories:retrieve", '{"message": "tea \\ud800", "spaceKeys": [{"spaceId": "SID"}]}'),
    ("POST", f"{MC}/_create", '{"name": "c\\ud800"}'),
    ("POST", f"{MC}/CID/memories/long-term/_memproxy_add", '{"memory": "poison \\ud800"}'),
    ("POST", f"{MC}/CID/memories/long-term/_memproxy_bulk", '{"memories": [{"memory": "a\\udc00"}]}'),
    (
        "POST",
        f"{MC}/CID/memories",
        '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud800"}]}]}',
    ),
    ("POST", f"{MC}/CID/memories/long-term/_search", '{"query": {"match": {"memory": "\\ud800"}}}'),
    ("POST", "/openai/v1/embeddings", '{"model": "all-minilm-l6-v2", "input": "\\ud800"}'),
]


@pytest.mark.parametrize(("method", "path", "raw"), SURROGATE_CASES)
def test_unpaired_surrogates_are_400_and_nothing_is_stored(
    world: World, method: str, path: str, raw: str
) -> None:
    path = path.replace("SID", world.space_id).replace("CID", world.container_id)
    body = raw.replace("EMB", EMBEDDER).encode()
    resp = world.admin.request(method, path, content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 400, (path, resp.status_code, resp.text)
    text = resp.text
    assert "Unicode" in text or "JSON" in text, text
    # Every listing still answers (and would show a stored record if one had slipped through).
    for listing in ("/v1/spaces", "/v1/apikeys", f"/v1/spaces/{world.space_id}/memories"):
        assert world.admin.get(listing).status_code == 200
    assert world.admin.post(f"{MC}/_search", json={"query": {"match_all": {}}}).status_code == 200


# --- headers, JSON nesting, multipart, malformed requests -------------------------------------------------


def test_header_values_that_are_not_utf8_are_400(world: World) -> None:
    head = b"GET /v1/spaces HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    answer = raw_exchange(world, head + b"x-api-key: \xff\xfe\r\n\r\n")
    assert status_of(answer) == 400 and "not valid UTF-8" in json_of(answer)["error"]
    key = world.key.encode()
    for path in (b"/v1/spaces", MC.encode() + b"/_search", b"/_cat/health", b"/openai/v1/models"):
        answer = raw_exchange(
            world,
            b"GET "
            + path
            + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: "
            + key
            + b"\r\nX-Note: caf\xe9\r\n\r\n",
        )
        assert status_of(answer) == 400, (path, answer[:300])
        assert b"The X-Note header is not valid UTF-8" in answer


def test_json_nested_ten_thousand_deep_is_400(world: World) -> None:
    deep = b'{"a":' * 10_000 + b"1" + b"}" * 10_000
    for path in ("/v1/spaces", f"{MC}/_search", "/openai/v1/embeddings", "/v1/memories:retrieve"):
        resp = world.admin.post(path, content=deep, headers={"Content-Type": "application/json"})
        assert resp.status_code == 400, (path, resp.text)
    resp = world.admin.post(
        "/v1/spaces", content=b"[" * 65 + b"]" * 65, headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 400 and "nesting deeper than 64" in resp.json()["error"]


def test_multipart_without_a_boundary_is_400(world: World) -> None:
    for path in ("/v1/memories", "/v1/memories:batchCreate"):
        resp = world.admin.post(path, content=b"--x\r\n\r\n", headers={"Content-Type": "multipart/form-data"})
        assert resp.status_code == 400 and "boundary" in resp.json()["error"], resp.text


def test_a_multipart_line_over_the_readers_limit_is_400(world: World) -> None:
    """The fuzz suite's find: a multipart body that is one line longer than aiohttp's 512 KiB line limit
    made the reader raise LineTooLong, answered as a 500."""
    line = b'{"a":' * 120_000
    for path in ("/v1/memories", "/v1/memories:batchCreate"):
        resp = world.admin.post(
            path, content=line, headers={"Content-Type": "multipart/form-data; boundary=x"}
        )
        assert resp.status_code == 400 and "Malformed multipart body" in resp.json()["error"], resp.text


def test_a_malformed_header_line_gets_a_bare_400_without_the_key(world: World) -> None:
    answer = raw_exchange(
        world, b"GET /v1/spaces HTTP/1.1\r\nHost: x\r\nx-api-key: " + world.key.encode() + b"\x01tail\r\n\r\n"
    )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].endswith(b" 400 Bad Request")
    assert body == b"400 Bad Request"
    assert world.key.encode() not in answer
    assert world.key not in world.proxy.log()


# --- sizes ------------------------------------------------------------------------------------------------


def test_a_ten_megabyte_memory_is_413_saying_the_bound(world: World) -> None:
    huge = "tea " * (TEN_MB // 4)
    resp = world.admin.post("/v1/memories", json={"spaceId": world.space_id, "originalContent": huge})
    assert resp.status_code == 413
    assert resp.json()["error"] == (
        f"originalContent has {len(huge)} characters, more than the 1000000 one memory may hold "
        "(max_memory_chars)"
    )
    batch = world.admin.post(
        "/v1/memories:batchCreate", json={"requests": [{"spaceId": world.space_id, "originalContent": huge}]}
    )
    assert batch.status_code == 207 and batch.json()["results"][0]["error"]["code"] == 413
    lt = world.admin.post(
        f"{MC}/{world.container_id}/memories/long-term/_memproxy_add", json={"memory": huge}
    )
    assert lt.status_code == 413 and "max_memory_chars" in lt.json()["error"]["reason"]


def test_bodies_over_max_body_bytes_are_413_in_each_apis_shape(world: World) -> None:
    limit = 32 * 1024 * 1024
    expected = f"The request body is larger than {limit} bytes, the most memproxy accepts (max_body_bytes)"
    for path, message in (
        ("/v1/memories", lambda b: b["error"]),
        (f"{MC}/{world.container_id}/memories/long-term/_memproxy_add", lambda b: b["error"]["reason"]),
        ("/openai/v1/embeddings", lambda b: b["error"]["message"]),
    ):
        head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: {world.key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {limit + 1}\r\n\r\n"
        ).encode()
        answer = raw_exchange(world, head + b"{")  # refused on its Content-Length, before the body is read
        assert status_of(answer) == 413, answer[:300]
        assert message(json_of(answer)) == expected


def test_chunk_size_one_is_a_400_naming_the_configuration(world: World) -> None:
    text = "word " * 8000  # 40 KB: 32 000 one-character chunks
    started = time.monotonic()
    resp = world.admin.post(
        "/v1/memories",
        json={
            "spaceId": world.space_id,
            "originalContent": text,
            "chunkingConfig": {"recursive": {"chunkSize": 1, "chunkOverlap": 0}},
        },
    )
    assert resp.status_code == 400, resp.text
    message = resp.json()["error"]
    assert (
        "recursive.chunkSize (1)" in message
        and "more than 1000 chunks" in message
        and "max_chunks_per_memory" in message
    )
    assert time.monotonic() - started < 10
    # Nothing was queued: another tenant embeds at once.
    assert retrieve(world, world.tenant_b, "tea")[0] == 200


# --- a record poisoned in the node never breaks a listing --------------------------------------------------


def _poison(world: World, index: str, doc_id: str, raw_doc: str) -> None:
    resp = httpx.post(
        f"{world.opensearch_url}/{index}/_update/{doc_id}",
        params={"refresh": "true"},
        content=('{"doc": ' + raw_doc + "}").encode(),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text


def test_poisoned_records_are_served_with_replacement_characters(world: World) -> None:
    admin = world.admin
    space = admin.post(
        "/v1/spaces",
        json={"name": f"poison-{uuid.uuid4().hex[:8]}", "spaceEmbedders": [{"embedderId": EMBEDDER}]},
    ).json()
    sid = space["spaceId"]
    memory = admin.post(
        "/v1/memories", json={"spaceId": sid, "originalContent": "the poisoned memory about tea"}
    )
    assert memory.status_code == 201, memory.text
    mid = memory.json()["memoryId"]
    _poison(world, CONTAINER_INDEX, sid, '{"name": "poison\\ud800ed"}')
    _poison(
        world, MEMORIES_INDEX, mid, '{"original_content_ref": "ref\\udfff", "metadata": {"note": "\\ud800"}}'
    )
    hits = _long_term_hits(world, {"term": {"memory_id": mid}})
    assert hits
    for hit in hits:
        _poison(world, hit["_index"], hit["_id"], '{"memory": "tea \\ud800 poisoned"}')

    listed = admin.get("/v1/spaces")
    assert listed.status_code == 200
    assert "poison\ufffded" in [s["name"] for s in listed.json()["spaces"]]
    assert admin.get(f"/v1/spaces/{sid}").json()["name"] == "poison\ufffded"
    memories = admin.get(f"/v1/spaces/{sid}/memories", params={"includeContent": "true"})
    assert memories.status_code == 200 and memories.json()["memories"][0]["originalContentRef"] == "ref\ufffd"
    got = admin.get(f"/v1/memories/{mid}")
    assert got.status_code == 200 and got.json()["metadata"] == {"note": "\ufffd"}
    status, events = retrieve(world, None, "tea", space_id=sid)
    assert status == 200 and any("tea \ufffd poisoned" in json.dumps(e, ensure_ascii=False) for e in events)
    sse = admin.post(
        "/v1/memories:retrieve",
        json={"message": "tea", "spaceKeys": [{"spaceId": sid}]},
        headers={"Accept": "text/event-stream"},
    )
    assert sse.status_code == 200 and "tea \ufffd poisoned" in sse.text and "event: close" in sse.text
    ml = admin.post(f"{MC}/{sid}/memories/long-term/_search", json={"query": {"match_all": {}}})
    assert ml.status_code == 200 and "tea \ufffd poisoned" in ml.text
    containers = admin.post(f"{MC}/_search", json={"query": {"match_all": {}}, "size": 1000})
    assert containers.status_code == 200 and "poison\ufffded" in containers.text
    assert admin.get(f"{MC}/{sid}").status_code == 200
    sem = admin.post(f"{MC}/{sid}/memories/long-term/_semantic_search", json={"query": "tea", "k": 3})
    assert sem.status_code == 200 and "\ufffd" in sem.text


def test_a_poisoned_ml_commons_memory_is_served_through_goodmem(world: World) -> None:
    """A long-term memory with no GoodMem record (written by the ml-commons API) is read as a one-chunk
    GoodMem memory: its text is encoded for the content, which a lone surrogate must not break."""
    added = world.admin.post(
        f"{MC}/{world.container_id}/memories/long-term/_memproxy_add", json={"memory": "plain"}
    )
    assert added.status_code == 200, added.text
    lt_id = added.json()["long_term_memory_id"]
    (hit,) = _long_term_hits(world, {"ids": {"values": [lt_id]}})
    _poison(world, hit["_index"], lt_id, '{"memory": "bad \\ud800 text"}')
    got = world.admin.get(f"/v1/memories/{lt_id}", params={"includeContent": "true"})
    assert got.status_code == 200, got.text


def _long_term_hits(world: World, query: dict[str, Any]) -> list[dict[str, Any]]:
    """The long-term documents matching ``query``, read straight from the node (with their ``_index``)."""
    resp = httpx.post(
        f"{world.opensearch_url}/*-memory-long-term/_search",
        params={"expand_wildcards": "all"},
        json={"query": query, "size": 100},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    return list(resp.json()["hits"]["hits"])


# --- streamed retrieve: a client leaving leaves nothing behind ---------------------------------------------


def retrieve(
    world: World, tenant: Tenant | None, message: str, *, space_id: str | None = None
) -> tuple[int, list[Any]]:
    headers = {"x-api-key": tenant.key} if tenant is not None else {}
    sid = space_id or (world.space_b if tenant is world.tenant_b else world.space_id)
    resp = world.admin.post(
        "/v1/memories:retrieve",
        json={"message": message, "spaceKeys": [{"spaceId": sid}], "requestedSize": 5},
        headers={"Accept": "application/x-ndjson", **headers},
    )
    return resp.status_code, [json.loads(line) for line in resp.text.splitlines() if line.strip()]


def test_clients_leaving_a_stream_leave_no_task_behind(world: World) -> None:
    for i in range(12):
        made = world.admin.post(
            "/v1/memories",
            json={"spaceId": world.space_id, "originalContent": f"stream memory {i} about tea " * 10},
        )
        assert made.status_code == 201
    body = json.dumps(
        # One entry per space (a space named twice is a 400): the 12 memories' chunks make the stream.
        {"message": "tea", "spaceKeys": [{"spaceId": world.space_id}], "requestedSize": 40}
    ).encode()
    parts = urlsplit(world.proxy.url)
    for accept in ("text/event-stream", "application/x-ndjson"):
        for delay in (0.0, 0.02, 0.05, 0.1, 0.2, 0.3) * 3:
            with socket.create_connection((parts.hostname, parts.port)) as sock:
                sock.sendall(
                    f"POST /v1/memories:retrieve HTTP/1.1\r\nHost: x\r\nx-api-key: {world.key}\r\n"
                    f"Accept: {accept}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                time.sleep(delay)
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )  # reset
    time.sleep(2)  # the garbage collector reports an unretrieved exception when it collects the task
    assert world.admin.get("/_memproxy/health").status_code == 200
    log = world.proxy.log()
    assert "Task exception was never retrieved" not in log
    assert "Traceback" not in log, log[-3000:]


# --- health and another tenant's retrieve while heavy input is in flight ------------------------------------


def test_health_and_a_neighbour_stay_fast_under_heavy_input(world: World) -> None:
    a = {"x-api-key": world.tenant_a.key}
    space_a = world.admin.post(
        "/v1/spaces",
        headers=a,
        json={"name": f"filler-{uuid.uuid4().hex[:8]}", "spaceEmbedders": [{"embedderId": EMBEDDER}]},
    ).json()["spaceId"]
    huge = "tea " * (TEN_MB // 4)
    outcomes: list[tuple[str, int]] = []

    def run(name: str, call: Callable[[], httpx.Response]) -> None:
        outcomes.append((name, call().status_code))

    # Encoded once, before the poller starts: this process's threads then only send bytes, so the latencies
    # measured are the proxy's, not this interpreter's (it shares the GIL with the poller).
    json_headers = {**a, "Content-Type": "application/json"}
    memory_body = json.dumps({"spaceId": space_a, "originalContent": huge}).encode()
    embedding_body = json.dumps({"model": "all-minilm-l6-v2", "input": huge}).encode()

    def big_memory() -> httpx.Response:
        return world.admin.post("/v1/memories", headers=json_headers, content=memory_body)

    def big_embedding() -> httpx.Response:
        return world.admin.post("/openai/v1/embeddings", headers=json_headers, content=embedding_body)

    def chunk_size_one() -> httpx.Response:
        return world.admin.post(
            "/v1/memories",
            headers=a,
            json={
                "spaceId": space_a,
                "originalContent": "word " * 8000,
                "chunkingConfig": {"recursive": {"chunkSize": 1, "chunkOverlap": 0}},
            },
        )

    def filler(batch: int) -> Callable[[], httpx.Response]:
        requests = [
            {"spaceId": space_a, "originalContent": f"filler memory {batch}-{i}: the tenant writes a lot"}
            for i in range(100)
        ]
        return lambda: world.admin.post("/v1/memories:batchCreate", headers=a, json={"requests": requests})

    neighbour: list[tuple[int, float, list[Any]]] = []

    def neighbour_retrieves() -> None:
        time.sleep(1.0)  # once the filler's texts are queued
        for _ in range(3):
            started = time.perf_counter()
            status, events = retrieve(world, world.tenant_b, "which tea does the neighbour like")
            neighbour.append((status, time.perf_counter() - started, events))

    with HealthPoller(world.proxy.url, every_s=POLL_EVERY_S) as poller, ThreadPoolExecutor(16) as pool:
        load_started = time.perf_counter()
        jobs = [pool.submit(run, "big-memory", big_memory) for _ in range(4)]
        jobs += [pool.submit(run, "big-embedding", big_embedding) for _ in range(4)]
        jobs += [pool.submit(run, "chunk-size-1", chunk_size_one)]
        jobs += [pool.submit(run, f"filler-{i}", filler(i)) for i in range(7)]
        jobs += [pool.submit(neighbour_retrieves)]
        for job in jobs:
            job.result(timeout=600)
        load_s = time.perf_counter() - load_started
    latencies = sorted(poller.latencies)
    worst, p50 = latencies[-1], statistics.median(latencies)
    print(
        f"\nhealth during heavy input: {len(latencies)} polls, max {worst * 1000:.0f} ms, "
        f"p50 {p50 * 1000:.1f} ms, load {load_s:.1f} s; neighbour retrieves: "
        + ", ".join(f"{status} in {seconds:.2f} s" for status, seconds, _ in neighbour)
        + f"; outcomes: {sorted(outcomes)}"
    )
    assert all(status < 500 for _, status in outcomes), outcomes
    assert dict(outcomes)["big-memory"] == 413 and dict(outcomes)["chunk-size-1"] == 400
    assert all(status == 200 for name, status in outcomes if name == "big-embedding")
    assert any(status in (200, 207) for name, status in outcomes if name.startswith("filler"))
    # The poller must have sampled the whole load, however long the load took on this machine: a poll
    # loop that stalled (or never ran) takes far fewer samples than the load's length allows.
    # (A third of the most it could take: on two busy cores the poller's own wake-ups run late.)
    possible = load_s / (POLL_EVERY_S + statistics.fmean(latencies))
    assert len(latencies) >= max(10, possible / 3), (len(latencies), possible, load_s)
    assert worst < 1.0, (worst, p50)
    assert [status for status, _, _ in neighbour] == [200, 200, 200]
    for _, _, events in neighbour:
        assert any("retrievedItem" in e for e in events), events
        assert not any(e.get("type") == "error" or "status" in e for e in events), events
