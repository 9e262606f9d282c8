"""A write without an id that the node refuses as "already exists" (proxy.store.memories.index_doc)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from proxy.store.client import NodeConflict, Store
from proxy.store.memories import index_doc


class _Node:
    """Answers the first ``POST <index>/_doc`` with ``refusal``; records every call."""

    def __init__(self, refusal: dict[str, Any]) -> None:
        self.refusal = refusal
        self.calls: list[tuple[str, str]] = []

    async def request(self, method: str, path: str, **_: Any) -> Any:
        self.calls.append((method, path))
        if path.endswith("/_doc"):
            raise NodeConflict(409, self.refusal)
        return {"_shards": {"failed": 0}}


_RETRIED = {
    "type": "version_conflict_engine_exception",
    "reason": "[Zx1fCZoBnW7kq3zzmAbc]: version conflict, document already exists (current version [1])",
    "index": "mem-working",
}


async def test_an_auto_id_write_the_cluster_retried_is_its_own_success() -> None:
    """The node chose the id: only this write can hold it (an attempt the cluster retried inside itself
    while a primary failed over). The id is the refusal's, and the refresh asked for still happens."""
    node = _Node(_RETRIED)
    result = await index_doc(cast(Store, node), "mem-working", {"memory": "tea"}, refresh=True)
    assert result == {"_index": "mem-working", "_id": "Zx1fCZoBnW7kq3zzmAbc", "result": "created"}
    assert node.calls == [("POST", "/mem-working/_doc"), ("POST", "/mem-working/_refresh")]


async def test_without_refresh_none_is_made() -> None:
    node = _Node(_RETRIED)
    await index_doc(cast(Store, node), "mem-working", {"memory": "tea"}, refresh=False)
    assert node.calls == [("POST", "/mem-working/_doc")]


@pytest.mark.parametrize(
    "refusal",
    [
        {"type": "version_conflict_engine_exception", "reason": "[x]: version conflict, current version [2]"},
        {"type": "other_exception", "reason": "[x]: version conflict, document already exists"},
        "a plain string",
    ],
)
async def test_any_other_conflict_is_the_conflict_it_says(refusal: Any) -> None:
    with pytest.raises(NodeConflict):
        await index_doc(cast(Store, _Node(refusal)), "mem-working", {"memory": "tea"})


async def test_a_write_with_its_own_id_keeps_its_conflict() -> None:
    """A caller-chosen id may be someone else's document: its "already exists" is a real conflict."""

    class _Put(_Node):
        async def request(self, method: str, path: str, **_: Any) -> Any:
            raise NodeConflict(409, _RETRIED)

    with pytest.raises(NodeConflict):
        await index_doc(cast(Store, _Put(_RETRIED)), "mem-working", {"m": 1}, doc_id="mine", create=True)
