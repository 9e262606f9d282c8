"""Stored-data integrity without a node: memory writes are atomic from the client's view, ids cannot cross
spaces, scripts are refused in caller DSL, and every search carries its deadline.

``FakeNode`` stands in for the store's client (documents by index, versions, ``_bulk`` with conditional
operations, ``_mget``, and the few query shapes memproxy sends): the write path of
``proxy.core.goodmem.memories`` runs whole over it, with a node that dies at the step a test chooses, to pin
the order of writes and what a failure leaves (the node-kill test does the same against a real node).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import unquote

import pytest

from proxy.config import Settings
from proxy.core.goodmem.content import NewMemory
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.memories import create_memory, get_memory_records
from proxy.core.goodmem.rollback import sweep_abandoned_writes
from proxy.core.identity import Principal
from proxy.core.search import check_caller_dsl
from proxy.core.services import Services
from proxy.errors import BadRequest, Conflict, Overloaded, Unavailable
from proxy.store.client import url
from proxy.store.dsl_policy import DslRefused, check_query, check_search_body
from proxy.store.goodmem import MEMORIES
from proxy.store.layout import IndexLayouts
from proxy.store.memories import delete_by_query_deadline, search_deadline
from proxy.store.query import And, MetadataFilter, RawDsl, Term
from proxy.store.templates import MemoryLayout

SID = "01a0ace1-f672-7105-9642-bf658ff8f51a"
OTHER = "01a0ace1-f672-7105-9642-bf658ff8f51b"
CONTAINERS = ".plugins-ml-am-memory-container"
CHUNKS = ".plugins-ml-am-default-memory-long-term"
OWNER = Principal("u1", "k1")


def _field(src: Mapping[str, Any], path: str) -> Any:
    value: Any = src
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def matches(q: Mapping[str, Any] | None, doc_id: str, src: Mapping[str, Any]) -> bool:
    """The query shapes memproxy's own writes and clean-ups send."""
    if not q:
        return True
    (kind, spec), *_ = q.items()
    if kind == "match_all":
        return True
    if kind == "match_none":
        return False
    if kind == "bool":

        def each(key: str) -> list[Any]:
            clauses = spec.get(key, [])
            return clauses if isinstance(clauses, list) else [clauses]

        if not all(matches(c, doc_id, src) for c in each("filter") + each("must")):
            return False
        if any(matches(c, doc_id, src) for c in each("must_not")):
            return False
        should = each("should")
        return not should or any(matches(c, doc_id, src) for c in should)
    if kind == "ids":
        return doc_id in spec["values"]
    if kind == "exists":
        return _field(src, spec["field"]) is not None
    (field, value), *_ = spec.items()
    actual = doc_id if field == "_id" else _field(src, field)
    if kind == "term":
        return bool(actual == value)
    if kind == "terms":
        return actual in value
    if kind == "range":
        return actual is not None and all(
            {"lt": actual < v, "lte": actual <= v, "gt": actual > v, "gte": actual >= v}[op]
            for op, v in value.items()
        )
    raise AssertionError(f"query the fake node does not know: {q}")


async def _no_indices(*_: Any, **__: Any) -> dict[str, Any]:
    return {}


class FakeNode:
    """Documents by index with versions; ``fail`` (a predicate on each call) makes the node unreachable for
    that call, ``after`` after applying it (the answer is lost)."""

    def __init__(self) -> None:
        self.settings = Settings()
        # The Store's layout and routing lookups; this node has no shards, so every index answers "routed"
        # without a call (the fail/after predicates see only the calls the code under test makes).
        self.memory_layout = MemoryLayout()
        self.layouts = IndexLayouts(_no_indices, url)
        self.indices: dict[str, dict[str, tuple[dict[str, Any], int]]] = {}
        self.seq = 0
        self.ops: list[tuple[str, str]] = []  # (action, index) of every bulk item, in order
        self.fail: Callable[[str, str, Any], bool] = lambda method, path, body: False
        self.after: Callable[[str, str, Any], bool] = lambda method, path, body: False
        self.put(CONTAINERS, SID, self.space(SID))

    @staticmethod
    def space(space_id: str) -> dict[str, Any]:
        cfg = {"embedding_model_type": "TEXT_EMBEDDING", "embedding_model_id": "e1", "embedding_dimension": 3}
        return {"name": space_id, "configuration": cfg, "goodmem": {"owner_id": "u1"}}

    def put(self, index: str, doc_id: str, src: dict[str, Any]) -> int:
        self.seq += 1
        self.indices.setdefault(index, {})[doc_id] = (src, self.seq)
        return self.seq

    def docs(self, index: str) -> dict[str, dict[str, Any]]:
        return {i: src for i, (src, _) in self.indices.get(index, {}).items()}

    def _matching(self, pattern: str) -> list[str]:
        return [i for i in self.indices if any(fnmatch.fnmatch(i, p) for p in pattern.split(","))]

    async def request(self, method: str, path: str, *, body: Any = None, params: Any = None) -> Any:
        if self.fail(method, path, body):
            raise Unavailable("OpenSearch is unreachable")
        answer = self._answer(method, [unquote(part) for part in path.lstrip("/").split("/")], body)
        if self.after(method, path, body):
            raise Unavailable("OpenSearch is unreachable")
        return answer

    def _answer(self, method: str, parts: list[str], body: Any) -> Any:
        index, action = parts[0], parts[1] if len(parts) > 1 else None
        if method == "PUT" and action is None:
            self.indices.setdefault(index, {})
            return {"acknowledged": True}
        if method == "GET" and action == "_doc":
            found = self.indices.get(index, {}).get(parts[2])
            if found is None:
                return {"_id": parts[2], "found": False}
            return {
                "_id": parts[2],
                "found": True,
                "_source": found[0],
                "_seq_no": found[1],
                "_primary_term": 1,
            }
        if action == "_mget":
            stored = self.indices.get(index, {})
            return {
                "docs": [
                    {
                        "_id": i,
                        "found": True,
                        "_source": stored[i][0],
                        "_seq_no": stored[i][1],
                        "_primary_term": 1,
                    }
                    if i in stored
                    else {"_id": i, "found": False}
                    for i in body["ids"]
                ]
            }
        if index == "_bulk":
            return self._bulk(body)
        if action == "_search":
            return self._search(index, body)
        if action == "_count":
            return {
                "count": sum(
                    1
                    for i in self._matching(index)
                    for d in self.docs(i).items()
                    if matches(body["query"], *d)
                )
            }
        if action == "_delete_by_query":
            deleted = 0
            for name in self._matching(index):
                for doc_id, src in self.docs(name).items():
                    if matches(body["query"], doc_id, src):
                        del self.indices[name][doc_id]
                        deleted += 1
            return {"deleted": deleted, "failures": []}
        raise AssertionError(f"unexpected node call {method} /{'/'.join(parts)}")

    def _bulk(self, body: str) -> dict[str, Any]:
        lines = [json.loads(line) for line in body.splitlines() if line]
        items, errors = [], False
        while lines:
            (action, meta), *_ = lines.pop(0).items()
            doc = lines.pop(0) if action != "delete" else None
            index, doc_id = meta["_index"], meta["_id"]
            self.ops.append((action, index))
            current = self.indices.get(index, {}).get(doc_id)
            status = 200
            if action == "create" and current is not None:
                status = 409
            elif action in ("update", "delete") and current is None:
                status = 404
            elif "if_seq_no" in meta and current is not None and current[1] != meta["if_seq_no"]:
                status = 409
            item: dict[str, Any] = {"_id": doc_id, "status": status}
            if status < 300:
                if action == "delete":
                    del self.indices[index][doc_id]
                else:
                    assert doc is not None
                    src = {**current[0], **doc["doc"]} if action == "update" and current else doc
                    item.update(_seq_no=self.put(index, doc_id, src), _primary_term=1, status=201)
            else:
                errors = True
                item["error"] = {"type": "version_conflict_engine_exception", "reason": "conflict"}
            items.append({action: item})
        return {"errors": errors, "items": items}

    def _search(self, pattern: str, body: Mapping[str, Any]) -> dict[str, Any]:
        hits: list[dict[str, Any]] = [
            {"_index": name, "_id": doc_id, "_source": src, "_seq_no": self.indices[name][doc_id][1]}
            for name in self._matching(pattern)
            for doc_id, src in self.docs(name).items()
            if matches(body.get("query"), doc_id, src)
        ]
        answer: dict[str, Any] = {"hits": {"hits": hits}}
        owners = body.get("aggs", {}).get("owners")
        if owners:
            wanted = set(owners["terms"]["include"])
            keys = {h["_source"].get("memory_id") for h in hits} & wanted
            answer["aggregations"] = {"owners": {"buckets": [{"key": k} for k in sorted(keys)]}}
        if body.get("post_filter"):
            answer["hits"]["hits"] = [h for h in hits if matches(body["post_filter"], h["_id"], h["_source"])]
        return answer


class FakeEmbedders:
    def __init__(self) -> None:
        self.full = False
        self.info = SimpleNamespace(id="e", dimension=3)

    def get(self, embedder_id: str) -> FakeEmbedders:
        return self

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self.full:
            raise Overloaded("embedding queue is full")
        return [[1.0, 0.0, 0.0] for _ in texts]


@pytest.fixture
def node() -> FakeNode:
    return FakeNode()


@pytest.fixture
def embedders() -> FakeEmbedders:
    return FakeEmbedders()


@pytest.fixture
def gm(node: FakeNode, embedders: FakeEmbedders) -> GoodMem:
    return GoodMem.create(Services(store=cast(Any, node), embedders=cast(Any, embedders)))


def memory(text: str = "one. two. three.", memory_id: str | None = None, space_id: str = SID) -> NewMemory:
    from proxy.core.goodmem.chunking import parse_chunking

    return NewMemory(
        space_id=space_id,
        content_type="text/plain",
        content=text.encode(),
        text=text,
        memory_id=memory_id,
        chunking=parse_chunking({"sentence": {"maxChunkSize": 6}}),
    )


async def settled(gm: GoodMem) -> None:
    """Wait for the background work (roll-backs, the sweep) to finish."""
    for _ in range(200):
        if not len(gm.background):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("background work did not finish")


def orphans(node: FakeNode) -> list[str]:
    records = node.docs(MEMORIES)
    return [cid for cid, src in node.docs(CHUNKS).items() if src.get("memory_id") not in records]


# --- the order of writes ----------------------------------------------------------------------------


async def test_record_first_then_chunks_then_completed(gm: GoodMem, node: FakeNode) -> None:
    record = await create_memory(gm, OWNER, memory())
    assert record.processing_status == "COMPLETED" and record.chunk_count == 3
    writes = [op for op in node.ops if op[1] in (MEMORIES, CHUNKS)]
    assert writes == [("create", MEMORIES), *[("create", CHUNKS)] * 3, ("update", MEMORIES)]
    stored = node.docs(MEMORIES)[record.memory_id]
    assert stored["processing_status"] == "COMPLETED" and stored["write_id"]
    assert sorted(c["memory"] for c in node.docs(CHUNKS).values()) == ["one.", "three.", "two."]
    await settled(gm)


async def test_failed_embedding_leaves_nothing(gm: GoodMem, node: FakeNode, embedders: FakeEmbedders) -> None:
    embedders.full = True
    with pytest.raises(Overloaded):
        await create_memory(gm, OWNER, memory())
    assert not node.docs(MEMORIES) and not node.docs(CHUNKS)


async def test_node_down_during_chunks_rolls_back_when_it_returns(gm: GoodMem, node: FakeNode) -> None:
    down = {"calls": 0}

    def fail(method: str, path: str, body: Any) -> bool:
        if path == "/_bulk" and CHUNKS in body:
            down["calls"] = 3  # the chunk write and the next two calls (the first roll-back tries) fail
        if down["calls"]:
            down["calls"] -= 1
            return True
        return False

    node.fail = fail
    with pytest.raises(Unavailable):
        await create_memory(gm, OWNER, memory())
    await settled(gm)
    assert not node.docs(MEMORIES) and not node.docs(CHUNKS)


async def test_chunks_stored_but_answer_lost_completes_the_write(gm: GoodMem, node: FakeNode) -> None:
    """The node stored every chunk, then its answer was lost: nothing is missing, so the write stands and
    create answers the COMPLETED memory."""
    lost = {"once": True}

    def after(method: str, path: str, body: Any) -> bool:
        if path == "/_bulk" and CHUNKS in body and lost["once"]:
            lost["once"] = False
            return True
        return False

    node.after = after
    record = await create_memory(gm, OWNER, memory())
    assert node.docs(MEMORIES)[record.memory_id]["processing_status"] == "COMPLETED"
    assert len(node.docs(CHUNKS)) == 3 and not orphans(node)
    await settled(gm)


async def test_node_down_after_storing_everything_completes_in_the_background(
    gm: GoodMem, node: FakeNode
) -> None:
    """The node stored every chunk and died before answering: the client is told the write failed; once
    the node is back the proxy finds nothing missing and completes it (a retry then finds it: 409)."""
    down = {"calls": 0}

    def after(method: str, path: str, body: Any) -> bool:
        if path == "/_bulk" and CHUNKS in body:
            down["calls"] = 2  # this answer is lost, and the next two calls (the first settling tries) fail
            return True
        return False

    def fail(method: str, path: str, body: Any) -> bool:
        if down["calls"]:
            down["calls"] -= 1
            return True
        return False

    node.after, node.fail = after, fail
    with pytest.raises(Unavailable):
        await create_memory(gm, OWNER, memory())
    await settled(gm)
    [(memory_id, record)] = node.docs(MEMORIES).items()
    assert record["processing_status"] == "COMPLETED" and len(node.docs(CHUNKS)) == 3 and not orphans(node)
    with pytest.raises(Conflict):
        await create_memory(gm, OWNER, memory(memory_id=memory_id))


async def test_record_removed_meanwhile_undoes_the_chunks(gm: GoodMem, node: FakeNode) -> None:
    """A delete (or a sweep's claim) between the chunks and COMPLETED wins: the write fails, no orphan."""

    def fail(method: str, path: str, body: Any) -> bool:
        if path == "/_bulk" and CHUNKS in body:
            node.indices[MEMORIES].clear()
        return False

    node.fail = fail
    with pytest.raises(Exception, match="removed while it was being stored"):
        await create_memory(gm, OWNER, memory())
    await settled(gm)
    assert not node.docs(CHUNKS) and not node.docs(MEMORIES)


# --- ids ----------------------------------------------------------------------------------------------


async def test_an_id_taken_in_another_container_is_409_and_writes_nothing(
    gm: GoodMem, node: FakeNode
) -> None:
    taken = "01a0ace1-f672-7105-9642-000000000001"
    node.put(".plugins-ml-am-other-memory-long-term", taken, {"memory": "x", "memory_container_id": OTHER})
    before = dict(node.indices)
    with pytest.raises(Conflict):
        await create_memory(gm, OWNER, memory(memory_id=taken))
    assert not node.docs(MEMORIES) and not node.docs(CHUNKS) and node.indices.keys() >= before.keys()
    chunk_owner = "01a0ace1-f672-7105-9642-000000000002"  # the memory_id of a chunk anywhere is taken too
    node.put(
        ".plugins-ml-am-other-memory-long-term",
        "c1",
        {"memory_id": chunk_owner, "memory_container_id": OTHER},
    )
    with pytest.raises(Conflict):
        await create_memory(gm, OWNER, memory(memory_id=chunk_owner))


async def test_an_id_still_being_written_is_503(gm: GoodMem, node: FakeNode) -> None:
    mid = "01a0ace1-f672-7105-9642-000000000003"
    node.put(MEMORIES, mid, {"memory_id": mid, "space_id": SID, "processing_status": "PROCESSING"})
    with pytest.raises(Unavailable, match="retry"):
        await create_memory(gm, OWNER, memory(memory_id=mid))


async def test_a_record_of_another_space_never_stands_in(gm: GoodMem, node: FakeNode) -> None:
    mid = "01a0ace1-f672-7105-9642-000000000004"
    node.put(MEMORIES, mid, {"memory_id": mid, "space_id": OTHER, "processing_status": "COMPLETED"})
    node.put(CHUNKS, mid, {"memory": "mine", "memory_container_id": SID})
    node.put(MEMORIES, "x", {"memory_id": "x", "space_id": SID})
    assert (await get_memory_records(gm, [mid]))[mid].space_id == OTHER  # without a space: by id alone
    found = await get_memory_records(gm, [mid, "x"], spaces={mid: SID, "x": SID})
    assert found[mid].space_id == SID and found[mid].from_long_term and found["x"].space_id == SID
    assert await get_memory_records(gm, ["x"], spaces={"x": OTHER}) == {}


# --- abandoned writes ---------------------------------------------------------------------------------


async def test_sweep_rolls_back_only_abandoned_writes(gm: GoodMem, node: FakeNode) -> None:
    old, fresh = "01a0ace1-f672-7105-9642-00000000000a", "01a0ace1-f672-7105-9642-00000000000b"
    for mid, t in ((old, 1), (fresh, 2**62)):
        node.put(
            MEMORIES,
            mid,
            {"memory_id": mid, "space_id": SID, "processing_status": "PROCESSING", "last_updated_time": t},
        )
        node.put(CHUNKS, f"chunk-{mid}", {"memory_id": mid, "memory_container_id": SID})
    assert await sweep_abandoned_writes(gm) == 1
    assert list(node.docs(MEMORIES)) == [fresh] and not orphans(node)


# --- scripts and deadlines ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dsl", "path"),
    [
        ({"query": {"script": {"script": "true"}}}, "query.script"),
        ({"query": {"bool": {"filter": [{"term": {"a": 1}}, {"script": {"script": {"source": "x"}}}]}}},
         "query.bool.filter[1].script"),
        ({"query": {"function_score": {"functions": [{"script_score": {"script": "1"}}]}}},
         "query.function_score.functions[0].script_score"),
        ({"script_fields": {"f": {"script": "1"}}}, "script_fields"),
        ({"runtime_mappings": {"f": {"type": "long"}}}, "runtime_mappings"),
        ({"aggs": {"a": {"scripted_metric": {"map_script": "x"}}}}, "aggs.a.scripted_metric"),
        ({"aggs": {"a": {"terms": {"script": "x"}}}}, "aggs.a.terms.script"),
        ({"sort": [{"_script": {"type": "number", "script": "1"}}]}, "sort[0]._script"),
        ({"query": {"knn": {"v": {"vector": [1], "k": 1, "filter": {"script": {"script": "1"}}}}}},
         "query.knn.v.filter.script"),
        ({"query": {"match": {"transcript": "script"}}}, None),
        ({"query": {"term": {"scripture": "x"}}, "sort": ["script_name"]}, None),
    ],
)  # fmt: skip
def test_the_allowlist_refuses_scripts_wherever_they_are(dsl: dict[str, Any], path: str | None) -> None:
    """The allowlist refuses a script wherever it is (naming its path), and only scripts: a field or a
    sort named like one is no script."""
    if path is None:
        check_search_body(dsl, allow_scripts=False)
        return
    with pytest.raises(DslRefused) as refused:
        check_search_body(dsl, allow_scripts=False)
    assert refused.value.path == path and "--allow-scripts" in refused.value.message
    check_search_body(dsl, allow_scripts=True)


def test_the_allowlist_survives_deep_nesting() -> None:
    deep: dict[str, Any] = {"script": {"script": "1"}}
    for _ in range(50_000):
        deep = {"bool": {"must": [deep]}}
    with pytest.raises(DslRefused) as refused:
        check_query(deep, allow_scripts=True)
    assert refused.value.name == "depth"


def _svc(**settings: Any) -> Services:
    store = SimpleNamespace(settings=Settings(**settings))
    return Services(store=cast(Any, store), embedders=cast(Any, None))


def test_scripts_are_refused_in_caller_dsl_only() -> None:
    svc = _svc()
    with pytest.raises(BadRequest) as refused:
        check_caller_dsl(svc, And((Term("memory_container_id", "c"), RawDsl({"script": {"script": "1"}}))))
    assert refused.value.status == 400 and refused.value.os_type == "illegal_argument_exception"
    assert "--allow-scripts" in refused.value.message and "[script]" in refused.value.message
    with pytest.raises(BadRequest):
        check_caller_dsl(svc, {"query": {"match_all": {}}, "script_fields": {"x": {"script": "1"}}})
    check_caller_dsl(svc, MetadataFilter(object()))  # memproxy's own compiled GoodMem filters: never refused
    check_caller_dsl(svc, RawDsl({"term": {"a": 1}}))
    check_caller_dsl(_svc(allow_scripts=True), RawDsl({"script": {"script": "1"}}))


def test_every_search_carries_the_deadline() -> None:
    store = cast(Any, SimpleNamespace(settings=Settings(search_timeout_s=2.5)))
    assert search_deadline(store) == {"timeout": "2500ms", "cancel_after_time_interval": "2500ms"}
    assert delete_by_query_deadline(store) == {"search_timeout": "2500ms"}
    assert search_deadline(cast(Any, SimpleNamespace(settings=Settings(search_timeout_s=0)))) == {}


# --- large writes are pipelined --------------------------------------------------------------------------


async def test_a_large_write_embeds_the_next_slice_while_the_node_indexes(
    gm: GoodMem, node: FakeNode, embedders: FakeEmbedders, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.core import longterm

    monkeypatch.setattr(longterm, "PIPELINE_SLICE", 4)
    events: list[str] = []
    embed, request = embedders.embed, node.request

    async def logged_embed(texts: list[str]) -> list[list[float]]:
        events.append(f"embed {len(texts)}")
        await asyncio.sleep(0)
        return await embed(texts)

    async def logged_request(method: str, path: str, *, body: Any = None, params: Any = None) -> Any:
        chunks = isinstance(body, str) and CHUNKS in body
        if chunks:
            events.append(f"bulk start refresh={(params or {}).get('refresh')}")
            await asyncio.sleep(0.01)  # the node indexing
        answer = await request(method, path, body=body, params=params)
        if chunks:
            events.append("bulk end")
        return answer

    monkeypatch.setattr(embedders, "embed", logged_embed)
    monkeypatch.setattr(node, "request", logged_request)
    record = await create_memory(gm, OWNER, memory(" ".join(f"s{i}." for i in range(10))))
    assert record.chunk_count == 10 and len(node.docs(CHUNKS)) == 10
    # Three slices (4, 4, 2); each next slice is embedded while the node indexes the one before it, and
    # only the last bulk refreshes.
    assert events == [
        "embed 4",
        "bulk start refresh=false",
        "embed 4",
        "bulk end",
        "bulk start refresh=false",
        "embed 2",
        "bulk end",
        "bulk start refresh=true",
        "bulk end",
    ]
    await settled(gm)


async def test_a_pipelined_write_failing_late_leaves_nothing(
    gm: GoodMem, node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.core import longterm

    monkeypatch.setattr(longterm, "PIPELINE_SLICE", 4)
    seen = {"bulks": 0}

    def third_chunk_bulk(method: str, path: str, body: Any) -> bool:
        if isinstance(body, str) and CHUNKS in body and '"create"' in body:
            seen["bulks"] += 1
            return seen["bulks"] == 3
        return False

    node.fail = third_chunk_bulk
    with pytest.raises(Unavailable):
        await create_memory(gm, OWNER, memory(" ".join(f"s{i}." for i in range(10))))
    await settled(gm)
    assert node.docs(CHUNKS) == {} and node.docs(MEMORIES) == {} and not orphans(node)
