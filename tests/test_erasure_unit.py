"""The erasure engine without a node (proxy.core.erasure): the delete-then-verify rounds, the receipt's
tally, which jobs belong to a subject, and the scope every delete carries. tests/test_erasure.py runs it on
the node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from proxy.core.container_record import Container
from proxy.core.erasure import (
    ERASED_IDS_SHOWN,
    MAX_ROUNDS,
    JobMatch,
    NamespaceUserScope,
    Tally,
    run_erasure,
)
from proxy.core.services import Services
from proxy.store.query import Term, Terms, all_of
from proxy.store.query_dsl import compile_filter

NO_SERVICES = cast(Services, None)  # the scripted scopes below never reach a store


@dataclass
class Scripted:
    """A scope over an in-memory index that a concurrent writer adds to during the first ``writes`` rounds."""

    docs: int
    writes: int
    rounds: int = 0
    log: list[str] = field(default_factory=list)

    async def erase_round(self, svc: Services, tally: Tally) -> None:
        self.rounds += 1
        tally.add("idx", self.docs, [f"d{self.rounds}-{n}" for n in range(self.docs)])
        self.docs = 1 if self.rounds <= self.writes else 0  # what a writer added while the round ran
        self.log.append("erase")

    async def remaining(self, svc: Services) -> dict[str, int]:
        self.log.append("count")
        return {"idx": self.docs}


async def test_a_round_that_finds_nothing_afterwards_is_verified_at_once() -> None:
    scope = Scripted(docs=5, writes=0)
    receipt = await run_erasure(NO_SERVICES, scope)
    assert receipt.verification.verified and receipt.verification.rounds == 1
    assert receipt.verification.found == {"idx": 0}
    assert receipt.total == 5 and scope.log == ["erase", "count"]


async def test_concurrent_writes_are_erased_by_the_next_round() -> None:
    receipt = await run_erasure(NO_SERVICES, Scripted(docs=5, writes=MAX_ROUNDS - 1))
    assert receipt.verification.verified and receipt.verification.rounds == MAX_ROUNDS
    assert receipt.tally.deleted == {"idx": 5 + MAX_ROUNDS - 1}


async def test_writes_that_keep_coming_are_reported_not_hidden() -> None:
    scope = Scripted(docs=5, writes=MAX_ROUNDS)
    receipt = await run_erasure(NO_SERVICES, scope)
    assert not receipt.verification.verified and receipt.verification.rounds == MAX_ROUNDS
    assert receipt.verification.found == {"idx": 1}
    assert scope.rounds == MAX_ROUNDS  # bounded


def test_the_tally_counts_everything_and_shows_a_bounded_list_of_ids() -> None:
    tally = Tally()
    tally.add("a", 150, (f"id{n}" for n in range(150)))
    tally.add("a", 2, ["id0", "id1"])  # a retried delete names the same ids again
    tally.touch("b")
    tally.touch("a")
    assert tally.deleted == {"a": 152, "b": 0}
    assert len(tally.ids["a"]) == ERASED_IDS_SHOWN and tally.ids["b"] == []


def test_an_infer_job_is_the_users_only_in_a_container_of_the_call() -> None:
    match = JobMatch("infer", (), frozenset({"c1"}), "ua")

    def job(payload: Any) -> dict[str, Any]:
        return {"payload": payload}

    assert match.matches(job({"container_id": "c1", "namespace": {"user_id": "ua", "session_id": "s"}}))
    assert not match.matches(job({"container_id": "c2", "namespace": {"user_id": "ua"}}))
    assert not match.matches(job({"container_id": "c1", "namespace": {"user_id": "ub"}}))
    assert not match.matches(job({"container_id": "c1", "namespace": {"user_id": "UA"}}))
    assert not match.matches(job({"container_id": "c1"}))
    assert not match.matches(job(None)) and not match.matches(job("c1"))
    # A GoodMem space's jobs: every job of the space, whoever's namespace.
    space = JobMatch("document_processor", (), space_ids=frozenset({"s1"}))
    assert space.matches(job({"space_id": "s1", "memory_id": "m"}))
    assert not space.matches(job({"space_id": "s2"}))
    whole = JobMatch("infer", (), frozenset({"s1"}))
    assert whole.matches(job({"container_id": "s1", "namespace": {"user_id": "anyone"}}))


def _container(cid: str, prefix: str | None = None, **cfg: Any) -> Container:
    configuration: dict[str, Any] = {
        "embedding_model_type": "TEXT_EMBEDDING",
        "embedding_model_id": "all-minilm-l6-v2",
        "embedding_dimension": 384,
        **cfg,
    }
    if prefix:
        configuration["index_prefix"] = prefix
    return Container.from_source(cid, {"name": cid, "configuration": configuration})


def test_every_target_carries_its_containers_scope_and_routing() -> None:
    shared = [_container("c1"), _container("c2", disable_history=True), _container("c3", prefix="own")]
    scope = NamespaceUserScope(shared, "ua", None)
    long_term = {t.index: t for t in scope.targets("long-term")}
    default_lt, own_lt = ".plugins-ml-am-default-memory-long-term", ".plugins-ml-am-own-memory-long-term"
    assert set(long_term) == {default_lt, own_lt}
    default = long_term[default_lt]
    assert default.routing == ("c1", "c2")
    assert default.selection == all_of(
        [Term("namespace.user_id", "ua"), Terms("memory_container_id", ("c1", "c2"))]
    )
    assert compile_filter(long_term[own_lt].selection) == {
        "bool": {"filter": [{"term": {"namespace.user_id": "ua"}}, {"term": {"memory_container_id": "c3"}}]}
    }
    # A container whose history is disabled has no history target.
    history = {t.index: t.routing for t in scope.targets("history")}
    assert history == {
        ".plugins-ml-am-default-memory-history": ("c1",),
        ".plugins-ml-am-own-memory-history": ("c3",),
    }
    # Every selection of every type names the containers: none is the user filter alone.
    for memory_type in ("sessions", "working", "long-term", "history"):
        for target in scope.targets(memory_type):
            assert "memory_container_id" in str(compile_filter(target.selection))
