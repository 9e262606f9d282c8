"""Shared by the GoodMem tests: a root API key that does not disturb other modules' keys."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

import httpx
from opensearchpy import OpenSearch

if TYPE_CHECKING:
    from proxy.core.goodmem.records import MemoryRecord

__all__ = ["memory_record", "root_api_key"]


def root_api_key(proxy_url: str, opensearch_url: str) -> str:
    """The root key from ``/v1/system/init``; on a node initialised earlier, a fresh key for the root user."""
    body = httpx.post(proxy_url + "/v1/system/init", timeout=30).json()
    if body.get("rootApiKey"):
        return str(body["rootApiKey"])
    from proxy.config import Settings
    from proxy.core.goodmem.apikeys import issue_key
    from proxy.core.goodmem.context import GoodMem
    from proxy.core.services import Services
    from proxy.store.client import Store

    root = OpenSearch(hosts=[opensearch_url]).get(index="memproxy-goodmem-system", id="instance")["_source"]

    async def mint() -> str:
        store = Store(Settings(opensearch_url=opensearch_url))
        try:
            issued = await issue_key(
                GoodMem.create(Services(store=store, embedders=cast(Any, None))),  # a key embeds nothing
                user_id=root["root_user_id"],
                actor_id=root["root_user_id"],
                labels={"purpose": "tests"},
            )
            return issued.raw_key
        finally:
            await store.close()

    return asyncio.run(mint())


def memory_record(memory_id: str, space_id: str, *, actor: str) -> MemoryRecord:
    """A COMPLETED text memory record created (and last updated) by ``actor`` at time 1, with no metadata."""
    from proxy.core.goodmem.records import MemoryRecord

    return MemoryRecord(
        memory_id=memory_id,
        space_id=space_id,
        content_type="text/plain",
        processing_status="COMPLETED",
        created_at=1,
        updated_at=1,
        created_by_id=actor,
        updated_by_id=actor,
        metadata={},
    )
