"""Shared by the GoodMem tests: a root API key that does not disturb other modules' keys."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
from opensearchpy import OpenSearch

__all__ = ["root_api_key"]


def root_api_key(proxy_url: str, opensearch_url: str) -> str:
    """The root key from ``/v1/system/init``; on a node initialised earlier, a fresh key for the root user."""
    body = httpx.post(proxy_url + "/v1/system/init", timeout=30).json()
    if body.get("rootApiKey"):
        return str(body["rootApiKey"])
    from proxy.config import Settings
    from proxy.core.goodmem.apikeys import issue_key
    from proxy.store.client import Store

    root = OpenSearch(hosts=[opensearch_url]).get(index="memproxy-goodmem-system", id="instance")["_source"]

    async def mint() -> str:
        store = Store(Settings(opensearch_url=opensearch_url))
        try:
            issued = await issue_key(
                SimpleNamespace(store=store, embedders=None),
                user_id=root["root_user_id"],
                actor_id=root["root_user_id"],
                labels={"purpose": "tests"},
            )
            return issued.raw_key
        finally:
            await store.close()

    return asyncio.run(mint())
