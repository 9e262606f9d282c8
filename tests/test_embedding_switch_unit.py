"""The embedding switch's pure parts, without a node: where a switched container's long-term memories are,
which index a write mirrors to in each phase, the new index's name, and the request's checks."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.api.opensearch_memory.embedding_switch import parse_request
from proxy.core.container_record import LONG_TERM_INDEX_KEY, SWITCH_KEY, Container
from proxy.core.embedding_switch import DEFAULT_GRACE_S, target_index
from proxy.core.longterm_mirror import COPYING, SWITCHED, mirror_of
from proxy.errors import BadRequest

CFG = {"embedding_model_type": "TEXT_EMBEDDING", "embedding_model_id": "old", "embedding_dimension": 384}


def _container(**extra: Any) -> Container:
    return Container("c1", "n", None, 1, 1, dict(CFG), extra=extra)


def _switch(state: str) -> dict[str, Any]:
    return {
        "job_id": "j",
        "state": state,
        "source": {"index": "a-long-term", "embedding_model_id": "old", "embedding_dimension": 384},
        "target": {"index": "a-long-term-x", "embedding_model_id": "new", "embedding_dimension": 64},
    }


def test_a_switched_container_reads_its_own_long_term_index_and_keeps_the_others() -> None:
    base = _container()
    assert base.index_name("long-term") == ".plugins-ml-am-default-memory-long-term"
    moved = _container(**{LONG_TERM_INDEX_KEY: "elsewhere"})
    assert moved.index_name("long-term") == "elsewhere"
    assert moved.index_name("history") == base.index_name("history")
    assert moved.index_name("working") == base.index_name("working")
    # The key is the container's own: it is written back with the document, and ml-commons' GET omits it.
    assert moved.source()[LONG_TERM_INDEX_KEY] == "elsewhere"
    assert Container.from_source("c1", moved.source()).index_name("long-term") == "elsewhere"
    no_embedding = Container("c2", "n", None, 1, 1, {}, extra={LONG_TERM_INDEX_KEY: "elsewhere"})
    assert no_embedding.index_name("long-term") is None


def test_writes_mirror_to_the_new_index_while_copying_and_to_the_old_one_after_the_switch() -> None:
    assert mirror_of(_container()) is None
    copying = mirror_of(_container(**{SWITCH_KEY: _switch(COPYING)}))
    assert copying is not None
    assert (copying.index, copying.embedder_id, copying.tombstones) == ("a-long-term-x", "new", True)
    switched = mirror_of(_container(**{SWITCH_KEY: _switch(SWITCHED)}))
    assert switched is not None
    assert (switched.index, switched.embedder_id, switched.tombstones) == ("a-long-term", "old", False)
    assert mirror_of(_container(**{SWITCH_KEY: _switch("something else")})) is None


def test_the_new_index_is_named_by_the_model_within_the_family() -> None:
    container = Container("c", "n", None, 1, 1, {**CFG, "index_prefix": "p", "use_system_index": False})
    name = target_index(container, "hash64")
    assert name.startswith("p-memory-long-term-") and len(name) == len("p-memory-long-term-") + 12
    assert target_index(container, "hash64") == name != target_index(container, "hash32")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({}, "embedding_model_id is required"),
        ({"embedding_model_id": "  "}, "embedding_model_id is required"),
        ({"embedding_model_id": "m", "extra": 1}, "unknown field(s) extra"),
        ({"embedding_model_id": "m", "grace_period_s": -1}, "grace_period_s must be between"),
        ({"embedding_model_id": "m", "grace_period_s": 40 * 86_400}, "grace_period_s must be between"),
        ({"embedding_model_id": "m", "batch_size": 0}, "batch_size must be between"),
    ],
)
def test_bad_switch_bodies_are_refused(body: dict[str, Any], reason: str) -> None:
    with pytest.raises(BadRequest, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_request(body)


def test_a_switch_body_takes_lenient_numbers_and_defaults() -> None:
    req = parse_request({"embedding_model_id": " m ", "embedding_dimension": "64"})
    assert (req.embedding_model_id, req.embedding_dimension, req.grace_period_s) == ("m", 64, DEFAULT_GRACE_S)
    assert parse_request({"embedding_model_id": "m", "grace_period_s": "0", "batch_size": 10}).batch == 10
