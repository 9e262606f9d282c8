"""memproxy's GoodMem indices on a real node: the lists that must be complete whatever their size."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from proxy.config import Settings
from proxy.store.client import Store
from proxy.store.goodmem import GRANTS, GoodMemIndices
from proxy.store.query import Term


@pytest.fixture
async def docs(opensearch_url: str) -> AsyncIterator[GoodMemIndices]:
    store = Store(Settings(opensearch_url=opensearch_url))
    yield GoodMemIndices(store)
    await store.close()


async def test_search_all_pages_past_any_window(docs: GoodMemIndices) -> None:
    """``search_all`` returns every match once, a batch at a time (here 2, so that 7 documents take four
    searches): a caller's grants or keys are never cut at the node's 10 000-hit window."""
    principal = str(uuid.uuid4())
    ids = [f"test-grant-{uuid.uuid4()}" for _ in range(7)]
    for grant_id in ids:
        await docs.put(GRANTS, grant_id, {"grant_id": grant_id, "principal_id": principal})
    other = f"test-grant-{uuid.uuid4()}"
    await docs.put(GRANTS, other, {"grant_id": other, "principal_id": str(uuid.uuid4())})  # someone else's
    try:
        hits = await docs.search_all(
            GRANTS, Term("principal_id", principal), key="grant_id", fields=("grant_id",), batch=2
        )
        assert sorted(h["_source"]["grant_id"] for h in hits) == sorted(ids)
        assert await docs.search_all(GRANTS, Term("principal_id", str(uuid.uuid4())), key="grant_id") == []
    finally:
        await docs.delete_by_query(GRANTS, Term("principal_id", principal))
        await docs.delete(GRANTS, other)
