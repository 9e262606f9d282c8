"""Fixtures shared by the ml-commons memory API tests (registered in tests/conftest.py via pytest_plugins)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from opensearchpy import OpenSearch

from tests.opensearch_memory_helpers import EMBEDDING, make_client, new_prefix, proxy_under_test


@pytest.fixture(scope="module")
def memproxy_url(request: pytest.FixtureRequest) -> str:
    return proxy_under_test(request)


@pytest.fixture(scope="module")
def client(memproxy_url: str, request: pytest.FixtureRequest) -> Iterator[OpenSearch]:
    """opensearch-py on the proxy under test, as its root user (``MEMPROXY_TEST_KEY`` with
    ``MEMPROXY_TEST_URL``)."""
    key = os.environ.get("MEMPROXY_TEST_KEY") if os.environ.get("MEMPROXY_TEST_URL") else None
    c = make_client(memproxy_url, key or request.getfixturevalue("admin_key"))
    yield c
    c.close()


@pytest.fixture(scope="module")
def node(opensearch_url: str) -> Iterator[OpenSearch]:
    c = OpenSearch(hosts=[opensearch_url], timeout=60)
    yield c
    c.close()


@pytest.fixture(scope="module")
def demo(client: OpenSearch) -> Iterator[str]:
    """A container like Appendix B's: embedding + LLM + one USER_PREFERENCE strategy, private prefix."""
    body = {
        "name": "demo",
        "configuration": {
            **EMBEDDING,
            "llm_id": "llm1",
            "index_prefix": new_prefix("demo"),
            "strategies": [{"type": "USER_PREFERENCE", "namespace": ["user_id"]}],
        },
    }
    cid = client.plugins.ml.create_memory_container(body=body)["memory_container_id"]
    yield cid
    client.plugins.ml.delete_memory_container(memory_container_id=cid, params={"delete_all_memories": "true"})


@pytest.fixture(scope="module")
def plain(client: OpenSearch) -> Iterator[str]:
    """A container with defaults only: working memory and sessions, on a private prefix."""
    body = {"name": "plain", "configuration": {"index_prefix": new_prefix("plain")}}
    cid = client.plugins.ml.create_memory_container(body=body)["memory_container_id"]
    yield cid
    client.plugins.ml.delete_memory_container(memory_container_id=cid, params={"delete_all_memories": "true"})
