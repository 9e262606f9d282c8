"""GoodMem retrieve, planning phase, with what planning asks of the rest of memproxy recorded.

``Retriever``'s public methods for a space, a permission and a k-NN search are replaced by recorders (and the
embedder registry by a fake), to pin the ordering guarantees that an end-to-end test cannot observe from
outside: every permission is checked before anything is embedded or searched, and a multi-embedder space is
fused from exact scores.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from proxy.core.container_record import Container
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.retrieve import (
    EmbedderWeight,
    HnswOptions,
    RetrievalPlan,
    Retriever,
    RetrieveRequest,
    SpaceFailed,
    SpaceKey,
    SpaceSkipped,
)
from proxy.core.identity import Principal
from proxy.core.query import VectorSearch
from proxy.core.services import Services
from proxy.embedding import EmbedderOverloaded
from proxy.errors import BadRequest, Forbidden, MemproxyError, NotFound, Unavailable
from proxy.store.query import Hit, MatchAll, Terms

S1 = "0192f6a0-0000-7000-8000-000000000001"
S2 = "0192f6a0-0000-7000-8000-000000000002"
E1 = "0192f6a0-0000-7000-8000-0000000000e1"
E2 = "0192f6a0-0000-7000-8000-0000000000e2"


def container(space_id: str, embedders: list[tuple[str, float]]) -> Container:
    return Container.from_source(
        space_id,
        {
            "name": space_id,
            "configuration": {
                "embedding_model_type": "TEXT_EMBEDDING",
                "embedding_model_id": embedders[0][0],
                "embedding_dimension": 2,
            },
            "goodmem": {
                "space_embedders": [{"embedder_id": e, "default_retrieval_weight": w} for e, w in embedders],
                "owner_id": "owner",
            },
        },
    )


@dataclass
class Recorder:
    log: list[str] = field(default_factory=list)
    searches: list[VectorSearch] = field(default_factory=list)
    # (space id, vector field) → {chunk id: cosine}
    cosines: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    denied: set[str] = field(default_factory=set)
    failing: set[str] = field(default_factory=set)
    overloaded: bool = False


class FakeEmbedder:
    def __init__(self, rec: Recorder, embedder_id: str) -> None:
        self.rec, self.embedder_id = rec, embedder_id
        self.info = SimpleNamespace(id=embedder_id, dimension=2)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self.rec.overloaded:
            raise EmbedderOverloaded("embedder is overloaded; retry later")
        self.rec.log.append(f"embed:{self.embedder_id}")
        return [[1.0, 0.0] for _ in texts]


class FakeRegistry:
    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    def infos(self) -> list[Any]:
        return [SimpleNamespace(id=E1), SimpleNamespace(id=E2)]

    def get(self, embedder_id: str) -> FakeEmbedder:
        return FakeEmbedder(self.rec, embedder_id)


SPACES = {S1: container(S1, [(E1, 1.0)]), S2: container(S2, [(E1, 1.0), (E2, 0.5)])}


class RecordingRetriever(Retriever):
    """The real planning; spaces, permissions and searches answered from the recorder."""

    def __init__(self, rec: Recorder) -> None:
        super().__init__(
            GoodMem.create(Services(store=cast(Any, None), embedders=cast(Any, FakeRegistry(rec))))
        )
        self.rec = rec

    async def get_space(self, space_id: str) -> Container:
        self.rec.log.append(f"get:{space_id}")
        if space_id not in SPACES:
            raise NotFound("Space not found")
        return SPACES[space_id]

    async def authorize(self, principal: Principal, container: Container, op: str) -> None:
        self.rec.log.append(f"auth:{container.id}:{op}")
        if container.id in self.rec.denied:
            raise Forbidden(f"Permission denied: {op} on space {container.id}")

    async def search(self, search: VectorSearch) -> list[Hit]:
        rec = self.rec
        rec.log.append(f"search:{search.container.id}:{search.vector_field}")
        rec.searches.append(search)
        if search.container.id in rec.failing:
            raise Unavailable("OpenSearch is unreachable")
        cos = rec.cosines.get((search.container.id, search.vector_field), {})
        if isinstance(search.filter, Terms):
            wanted = set(search.filter.values)
            cos = {k: v for k, v in cos.items() if k in wanted}
        ranked = sorted(cos.items(), key=lambda kv: -kv[1])[: search.k]
        return [
            Hit(id=cid, index="lt", score=(1 + c) / 2, source={"memory": cid, "memory_id": "m-" + cid})
            for cid, c in ranked
        ]


@pytest.fixture()
def rec() -> Recorder:
    return Recorder()


def plan(rec: Recorder, req: RetrieveRequest) -> RetrievalPlan:
    return asyncio.run(RecordingRetriever(rec).plan(Principal("u", "k"), req))


def test_every_permission_is_checked_before_any_work(rec: Recorder) -> None:
    rec.denied.add(S2)
    with pytest.raises(Forbidden):
        plan(rec, RetrieveRequest("q", (SpaceKey(S1), SpaceKey(S2))))
    assert not any(e.startswith(("embed", "search")) for e in rec.log)
    assert f"auth:{S1}:LIST_MEMORY" in rec.log and f"auth:{S1}:READ_MEMORY" in rec.log


def test_unknown_space_is_404_before_any_work(rec: Recorder) -> None:
    with pytest.raises(NotFound):
        plan(rec, RetrieveRequest("q", (SpaceKey(S1), SpaceKey("0192f6a0-0000-7000-8000-00000000dead"))))
    assert not any(e.startswith(("embed", "search")) for e in rec.log)


def test_bad_filter_is_400_before_lookups(rec: Recorder) -> None:
    with pytest.raises(BadRequest, match=r"spaceKeys\[0\]\.filter"):
        plan(rec, RetrieveRequest("q", (SpaceKey(S1, filter="CAST(val('$.a') AS TEXT) = "),)))
    assert rec.log == []


def test_single_space_ranks_by_cosine_with_ef_search(rec: Recorder) -> None:
    rec.cosines[(S1, "memory_embedding")] = {"a": 0.2, "b": 0.9, "c": 0.5}
    result = plan(
        rec, RetrieveRequest("q", (SpaceKey(S1),), requested_size=2, hnsw=HnswOptions(ef_search=77))
    )
    assert [(i.chunk_id, round(i.score, 6)) for i in result.items] == [("b", 0.9), ("c", 0.5)]
    assert result.items[0].memory_id == "m-b" and result.items[0].space_id == S1
    assert [s.ef_search for s in rec.searches] == [77]
    assert rec.searches[0].k == 2 and isinstance(rec.searches[0].filter, MatchAll)
    assert rec.log.count("embed:" + E1) == 1


def test_spaces_sharing_an_embedder_embed_once_and_merge(rec: Recorder) -> None:
    rec.cosines[(S1, "memory_embedding")] = {"a": 0.3, "b": 0.8}
    rec.cosines[(S2, "memory_embedding")] = {"x": 0.6}
    rec.cosines[(S2, "memory_embedding__1")] = {"x": 0.6}
    result = plan(rec, RetrieveRequest("q", (SpaceKey(S1), SpaceKey(S2))))
    assert [i.chunk_id for i in result.items] == ["b", "x", "a"]
    assert [i.space_id for i in result.items] == [S1, S2, S1]
    assert sorted(e for e in rec.log if e.startswith("embed")) == [f"embed:{E1}", f"embed:{E2}"]


def test_multi_embedder_fusion_uses_exact_second_pass(rec: Recorder) -> None:
    # S2: E1 (weight 1) on memory_embedding, E2 (default 0.5) on memory_embedding__1.
    rec.cosines[(S2, "memory_embedding")] = {"a": 0.9, "b": 0.1, "c": 0.05}
    rec.cosines[(S2, "memory_embedding__1")] = {"a": 0.0, "b": 0.95, "c": 0.8}
    result = plan(rec, RetrieveRequest("q", (SpaceKey(S2),), requested_size=1))
    # First pass k=1 per embedder finds a (E1) and b (E2); the second pass scores a under E2 and b under E1.
    scores = {i.chunk_id: i.score for i in result.items}
    assert list(scores) == ["a"]
    assert scores["a"] == pytest.approx((1.0 * 0.9 + 0.5 * 0.0) / 1.5)
    second = {(s.vector_field, s.filter.values) for s in rec.searches if isinstance(s.filter, Terms)}
    assert second == {
        ("memory_embedding", ("b",)),
        ("memory_embedding__1", ("a",)),
    }


def test_embedder_weight_overrides(rec: Recorder) -> None:
    rec.cosines[(S2, "memory_embedding")] = {"a": 0.9, "b": 0.1}
    rec.cosines[(S2, "memory_embedding__1")] = {"a": 0.0, "b": 0.95}
    req = RetrieveRequest("q", (SpaceKey(S2, embedder_weights=(EmbedderWeight(E1, 0.0),)),))
    result = plan(rec, req)
    # E1 switched off: only E2's field is searched and ranks b first.
    assert [i.chunk_id for i in result.items] == ["b", "a"]
    assert {s.vector_field for s in rec.searches} == {"memory_embedding__1"}
    assert f"embed:{E1}" not in rec.log


def test_embedder_weight_for_foreign_embedder_is_400(rec: Recorder) -> None:
    with pytest.raises(BadRequest, match="not an embedder of space"):
        plan(rec, RetrieveRequest("q", (SpaceKey(S1, embedder_weights=(EmbedderWeight(E2, 1.0),)),)))
    assert not any(e.startswith(("embed", "search")) for e in rec.log)


def test_space_without_positive_weight_is_a_status(rec: Recorder) -> None:
    rec.cosines[(S2, "memory_embedding")] = {"x": 0.5}
    req = RetrieveRequest("q", (SpaceKey(S1, embedder_weights=(EmbedderWeight(E1, 0.0),)), SpaceKey(S2)))
    result = plan(rec, req)
    assert result.notes == [SpaceSkipped(S1)]
    assert [i.chunk_id for i in result.items] == ["x"]


def test_partial_search_failure_is_a_status_total_failure_raises(rec: Recorder) -> None:
    rec.cosines[(S1, "memory_embedding")] = {"a": 0.5}
    rec.failing.add(S2)
    result = plan(rec, RetrieveRequest("q", (SpaceKey(S1), SpaceKey(S2))))
    assert [type(n) for n in result.notes] == [SpaceFailed] and result.notes[0].space_id == S2
    assert [i.chunk_id for i in result.items] == ["a"]
    rec.failing.add(S1)
    with pytest.raises(MemproxyError):
        plan(rec, RetrieveRequest("q", (SpaceKey(S1), SpaceKey(S2))))


def test_embedder_overload_is_429_before_streaming(rec: Recorder) -> None:
    rec.overloaded = True
    with pytest.raises(EmbedderOverloaded) as info:
        plan(rec, RetrieveRequest("q", (SpaceKey(S1), SpaceKey(S2))))
    assert info.value.status == 429
    assert not any(e.startswith("search") for e in rec.log)
