"""Step 4 of a GoodMem write (proxy.core.goodmem.memories._complete) when the record's version moved."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from proxy.config import Settings
from proxy.core.goodmem.memories import _complete
from proxy.core.goodmem.rollback import COMPLETED, PROCESSING
from proxy.store.client import Store
from proxy.store.goodmem import MEMORIES
from proxy.store.memories import index_doc
from proxy.store.versioned import Versioned, mget_versioned

pytestmark = pytest.mark.node


@pytest.fixture
async def store(opensearch_url: str, admin_key: str) -> AsyncIterator[Store]:
    # (admin_key: the session proxy has initialised GoodMem, so its memories index exists with its mapping)
    s = Store(Settings(opensearch_url=opensearch_url))
    yield s
    await s.close()


async def _record(store: Store, write: str) -> Versioned:
    doc_id = str(uuid.uuid4())
    source = {"space_id": "s", "processing_status": PROCESSING, "write_id": write}
    written = await index_doc(store, MEMORIES, source, doc_id=doc_id, create=True, refresh=False)
    return Versioned(doc_id, source, written["_seq_no"], written["_primary_term"])


async def test_a_record_whose_version_moved_but_is_still_this_write_s_is_completed(store: Store) -> None:
    """The cluster's own retry of step 2 during a failover writes the same record again (a new version):
    that is no clean-up's claim, and the memory is completed, not reported removed."""
    write = str(uuid.uuid4())
    moved, claimed, untouched = [await _record(store, write) for _ in range(3)]
    # moved: the same document again (what a retried write leaves); claimed: a clean-up took it over.
    await index_doc(store, MEMORIES, moved.source, doc_id=moved.id, refresh=False)
    await index_doc(
        store, MEMORIES, {**claimed.source, "write_id": "cleanup"}, doc_id=claimed.id, refresh=False
    )
    done = await _complete(cast(Any, SimpleNamespace(store=store)), write, [moved, claimed, untouched])
    assert [int(item["status"]) for item in done] == [200, 409, 200]
    now = await mget_versioned(store, MEMORIES, [moved.id, claimed.id, untouched.id])
    assert now[moved.id].source["processing_status"] == COMPLETED
    assert now[claimed.id].source["processing_status"] == PROCESSING  # left to the clean-up
    assert now[untouched.id].source["processing_status"] == COMPLETED
