"""Shared by the ml-commons memory API tests: the client, raw calls, error assertions."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from opensearchpy import OpenSearch
from opensearchpy.exceptions import TransportError

__all__ = [
    "EMBEDDER",
    "EMBEDDING",
    "MC",
    "assert_error",
    "call",
    "container_doc_count",
    "make_client",
    "new_prefix",
    "proxy_under_test",
]

MC = "/_plugins/_ml/memory_containers"
# The built-in embedder's alias (all-MiniLM-L6-v2, 384 dimensions).
EMBEDDER = "all-minilm-l6-v2"
EMBEDDING = {
    "embedding_model_type": "TEXT_EMBEDDING",
    "embedding_model_id": EMBEDDER,
    "embedding_dimension": 384,
}


def proxy_under_test(request: pytest.FixtureRequest) -> str:
    """The proxy under test: ``MEMPROXY_TEST_URL`` (an already running proxy) or the session's own."""
    url = os.environ.get("MEMPROXY_TEST_URL")
    if url:
        return url.rstrip("/")
    return str(request.getfixturevalue("proxy_url"))


def make_client(url: str, key: str | None = None) -> OpenSearch:
    """opensearch-py on ``url``; with ``key``, authenticated by it as basic auth's password (how OpenSearch
    clients present a memproxy API key)."""
    return OpenSearch(hosts=[url], timeout=120, http_auth=("memproxy", key) if key else None)


def new_prefix(label: str) -> str:
    """A private index prefix, so a test's memories share indices with nobody else's."""
    return f"mp-{label}-{uuid.uuid4().hex[:8]}"


def call(
    client: OpenSearch, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None
) -> Any:
    return client.transport.perform_request(method, path, body=body, params=params)


def error_body(exc: TransportError) -> dict[str, Any]:
    """The JSON error body of a failed call (opensearch-py leaves it a string when it is not JSON-typed)."""
    info = exc.info
    return info if isinstance(info, dict) else json.loads(str(info))


def assert_error(fn: Callable[[], Any], status: int, etype: str, reason: str) -> dict[str, Any]:
    """``fn`` fails with the OpenSearch envelope ``{"error": {root_cause, type, reason}, "status"}``."""
    with pytest.raises(TransportError) as err:
        fn()
    info = error_body(err.value)
    assert err.value.status_code == status, info
    assert info["status"] == status
    assert info["error"]["type"] == etype, info
    assert info["error"]["reason"] == reason, info
    assert info["error"]["root_cause"][0]["type"] == etype
    return info


def container_doc_count(client: OpenSearch, cid: str, memory_type: str) -> int:
    found = client.plugins.ml.search_agentic_memory(
        memory_container_id=cid, doc_type=memory_type, body={"query": {"match_all": {}}, "size": 0}
    )
    return int(found["hits"]["total"]["value"])
