"""Long-term memories: the same memories on both sides, then the same searches, compared hit by hit.

ml-commons writes long-term memories only through ``infer: true``; to hold the LLM out of this comparison,
the reference side indexes the documents ml-commons' extraction would write straight into the container's
long-term index, whose default ingest pipeline embeds them through the remote model (memproxy's OpenAI
endpoint). memproxy writes the same memories through ``_memproxy_bulk``. Both then hold the same texts,
namespaces, tags and strategies, with the same vectors.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.conformance.compare import Trace, compare_traces
from tests.conformance.deviations import (
    EFFICIENT_FILTERING,
    HYBRID_TOTAL,
)
from tests.conformance.sides import MC, Side, both, new_prefix

# (text, user, topic): three users, topics that cut across them.
MEMORIES: list[tuple[str, str, str]] = [
    ("The user only drinks green tea.", "alice", "food"),
    ("The user is allergic to peanuts.", "alice", "food"),
    ("The user flies to Lisbon every spring.", "alice", "travel"),
    ("The user works as a nurse on night shifts.", "alice", "work"),
    ("The user prefers window seats on planes.", "alice", "travel"),
    ("The user drinks three espressos a day.", "bob", "food"),
    ("The user is vegetarian.", "bob", "food"),
    ("The user commutes by bicycle.", "bob", "travel"),
    ("The user writes Rust at a robotics startup.", "bob", "work"),
    ("The user hates long meetings.", "bob", "work"),
    ("The user likes spicy ramen.", "carol", "food"),
    ("The user is learning Japanese for a trip to Kyoto.", "carol", "travel"),
    ("The user manages a team of data engineers.", "carol", "work"),
    ("The user drinks oolong tea in the afternoon.", "carol", "food"),
    ("The user never travels without a paper notebook.", "carol", "travel"),
    ("The user's cat is called Miso.", "carol", "home"),
    ("The user grows tomatoes on the balcony.", "alice", "home"),
    ("The user's favourite drink is mint tea with honey.", "dave", "food"),
    ("The user is training for a marathon.", "dave", "sport"),
    ("The user lives in Porto.", "dave", "home"),
]


def write_memories(side: Side, t: Trace, cid: str, prefix: str, strategy_id: str) -> None:
    """Each side's own way to hold the memories; the ids they got are numbered, not compared."""
    docs = [
        {
            "memory": text,
            "namespace": {"user_id": user},
            "namespace_size": 1,
            "tags": {"topic": topic},
            "strategy_type": "SEMANTIC",
            "strategy_id": strategy_id,
        }
        for text, user, topic in MEMORIES
    ]
    if side.name == "memproxy":
        bulk = {"memories": docs}
        t.note(side.call("POST", f"{MC}/{cid}/memories/long-term/_memproxy_bulk", bulk))
        return
    now = int(time.time() * 1000)
    lines: list[Any] = []
    for doc in docs:
        extra = {"memory_container_id": cid, "created_time": now, "last_updated_time": now}
        lines += [{"index": {}}, {**doc, **extra}]
    body = "".join(_json_line(x) for x in lines)
    reply = side.call("POST", f"/{prefix}-memory-long-term/_bulk", body, params={"refresh": "true"})
    assert reply.status == 200 and not reply.body["errors"], reply.body
    t.note(reply)


def _json_line(obj: Any) -> str:
    return json.dumps(obj) + "\n"


def create_container(side: Side, t: Trace, prefix: str) -> tuple[str, str]:
    body = {"name": prefix, "configuration": side.configuration(prefix)}
    cid = t.add("create", side.call("POST", f"{MC}/_create", body)).body["memory_container_id"]
    got = t.add("get", side.call("GET", f"{MC}/{cid}"))
    return cid, got.body["configuration"]["strategies"][0]["id"]


SEMANTIC_QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("alice's tea, k=3", {"query": "what does the user drink", "k": 3, "namespace": {"user_id": "alice"}}),
    ("bob at k=1", {"query": "green tea", "k": 1, "namespace": {"user_id": "bob"}}),
    ("bob at k=3", {"query": "green tea", "k": 3, "namespace": {"user_id": "bob"}}),
    ("bob at k=50", {"query": "green tea", "k": 50, "namespace": {"user_id": "bob"}}),
    ("no namespace", {"query": "travel plans", "k": 5}),
    ("tags", {"query": "travel plans", "k": 4, "tags": {"topic": "travel"}}),
    ("tags and namespace",
     {"query": "food", "k": 10, "namespace": {"user_id": "carol"}, "tags": {"topic": "food"}}),
    ("min_score", {"query": "tea", "k": 10, "min_score": 0.7}),
    ("caller filter", {"query": "work", "k": 5, "filter": {"term": {"tags.topic": "work"}}}),
    ("nobody", {"query": "tea", "k": 5, "namespace": {"user_id": "nobody"}}),
    ("default k", {"query": "what does carol do"}),
]  # fmt: skip

HYBRID_QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("hybrid tea", {"query": "green tea", "k": 5}),
    ("hybrid alice", {"query": "tea", "k": 3, "namespace": {"user_id": "alice"}}),
    ("hybrid weights", {"query": "user drinks tea", "k": 5, "bm25_weight": 0.3, "neural_weight": 0.7}),
    ("hybrid tags", {"query": "trip", "k": 4, "tags": {"topic": "travel"}}),
]


def search_flow(side: Side, prefix: str) -> Trace:
    t = side.trace()
    cid, strategy_id = create_container(side, t, prefix)
    write_memories(side, t, cid, prefix, strategy_id)
    lt = f"{MC}/{cid}/memories/long-term"
    for label, body in SEMANTIC_QUERIES:
        t.add(label, side.call("POST", f"{lt}/_semantic_search", body))
        count = {"size": 0, "query": {"bool": {"filter": _filters(body)}}}
        t.add(f"{label}: matching", side.call("POST", f"{lt}/_search", count))
    for label, body in HYBRID_QUERIES:
        t.add(label, side.call("POST", f"{lt}/_hybrid_search", body))
    search = {"query": {"term": {"namespace.user_id": "dave"}}, "sort": ["_doc"]}
    t.add("search long-term", side.call("POST", f"{lt}/_search", search))
    first = t.replies["search long-term"].body["hits"]["hits"][0]["_id"]
    t.add("get long-term", side.call("GET", f"{lt}/{first}"))
    update = {"memory": "The user's favourite drink is hot chocolate."}
    t.add("update long-term", side.call("PUT", f"{lt}/{first}", update))
    t.add("get updated long-term", side.call("GET", f"{lt}/{first}"))
    query = {"query": "hot chocolate", "k": 1, "namespace": {"user_id": "dave"}}
    t.add("search updated long-term", side.call("POST", f"{lt}/_semantic_search", query))
    t.add("delete long-term", side.call("DELETE", f"{lt}/{first}"))
    t.add("get deleted long-term", side.call("GET", f"{lt}/{first}"))
    t.add("delete", side.call("DELETE", f"{MC}/{cid}", params={"delete_all_memories": "true"}))
    return t


def _filters(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The memories a semantic search may return: its namespace, tags and filter, within the container."""
    out: list[dict[str, Any]] = [
        {"term": {f"namespace.{k}": v}} for k, v in body.get("namespace", {}).items()
    ]
    out += [{"term": {f"tags.{k}": v}} for k, v in body.get("tags", {}).items()]
    return out + ([body["filter"]] if "filter" in body else [])


@pytest.fixture(scope="module")
def search_traces(sides: tuple[Side, Side]) -> tuple[Trace, Trace]:
    return both(sides, search_flow, new_prefix("search"))


def test_semantic_and_hybrid_search(search_traces: tuple[Trace, Trace]) -> None:
    ref, mp = search_traces
    deviations = {label: EFFICIENT_FILTERING for label, _ in SEMANTIC_QUERIES}
    deviations |= {label: HYBRID_TOTAL for label, _ in HYBRID_QUERIES}
    compare_traces(ref, mp, deviations)


def test_memproxy_returns_min_k_matching(search_traces: tuple[Trace, Trace]) -> None:
    """The deviation's promise, on memproxy's own answers: min(k, matching) hits before min_score."""
    _, mp = search_traces
    for label, body in SEMANTIC_QUERIES:
        if "min_score" in body:
            continue
        hits = mp.replies[label].body["hits"]["hits"]
        matching = mp.replies[f"{label}: matching"].body["hits"]["total"]["value"]
        assert len(hits) == min(body.get("k", 10), matching), label


def test_ml_commons_post_filter_cuts(search_traces: tuple[Trace, Trace]) -> None:
    """The reason for the deviation is real: ml-commons 3.6 answers fewer than min(k, matching) here."""
    ref, _ = search_traces
    cut = [
        label
        for label, body in SEMANTIC_QUERIES
        if len(ref.replies[label].body["hits"]["hits"])
        < min(body.get("k", 10), ref.replies[f"{label}: matching"].body["hits"]["total"]["value"])
    ]
    assert "bob at k=1" in cut, cut
