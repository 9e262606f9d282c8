"""The tenant-scale benchmark (scripts/bench/tenants.py) runs, at a tiny size, so it cannot rot; no timing
is asserted. And the documents it writes directly are the ones memproxy writes itself."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import requests

from scripts.bench import tenants
from scripts.bench.tenants_data import FIELD, memory_source
from scripts.bench.tenants_measure import APIS

MC = "/_plugins/_ml/memory_containers"


@pytest.mark.timeout(300)
def test_tenants_benchmark_runs_and_cleans_up(opensearch_url: str, proxy_url: str, admin_key: str) -> None:
    data = tenants.main(
        [
            *("--url", opensearch_url, "--proxy-url", proxy_url, "--api-key", admin_key),
            *("--n", "600", "--containers", "20", "--max-size", "200", "--api-creates", "4"),
            *("--queries", "3", "--requests", "2", "--rounds", "2", "--concurrency", "1,2", "--warm-up", "1"),
            *("--recall-containers", "2", "--recall-queries", "3", "--quantized", "sq7", "--tag=-test"),
        ]
    )
    summary = data["summary"]
    assert summary["n"] == 600 and summary["containers"] == 20
    assert data["sizes"]["min"] == 10 and data["sizes"]["max"] == 200
    assert [c["docs"] for c in data["costs"]] == [600, 600]  # the shared index and its sq7 copy
    assert summary["foreign_hits"] == 0
    for row in data["answers"]:
        asked = int(row["count rule"].split("/")[1])
        assert row["count rule"] == f"{asked}/{asked}", row
    assert {(r["class"], r["clients"], r["api"]) for r in data["ratios"]} == {
        (c, n, a) for c in ("small", "median", "large") for n in (1, 2) for a in APIS
    }
    made = data["node"]["containers"]
    assert made["copied"] == 20 - made["via_api"] > 0
    prefix = data["node"]["prefix"]
    left = requests.get(f"{opensearch_url}/_cat/indices/{prefix}-*", params={"format": "json"}, timeout=30)
    assert left.json() == []
    headers = {"x-api-key": admin_key}
    for container_id in made["sample_ids"]:  # one created through the API, one copied
        gone = requests.get(f"{proxy_url}{MC}/{container_id}", headers=headers, timeout=30)
        assert gone.status_code == 404, gone.text


@pytest.mark.timeout(120)
def test_directly_written_documents_have_memproxys_keys(
    opensearch_url: str, proxy_url: str, admin_headers: dict[str, str]
) -> None:
    """A memory written through ``_memproxy_bulk`` and the benchmark's document carry the same keys."""
    prefix = f"bench-tenants-keys-{uuid.uuid4().hex[:8]}"
    health = requests.get(f"{proxy_url}/_memproxy/health", headers=admin_headers, timeout=30).json()
    embedder = health["proxy"]["embedders"][0]
    body: dict[str, Any] = {
        "name": "keys",
        "configuration": {
            "embedding_model_type": "TEXT_EMBEDDING",
            "embedding_model_id": embedder["id"],
            "embedding_dimension": embedder["dimension"],
            "index_prefix": prefix,
            "use_system_index": False,
        },
    }
    created = requests.post(f"{proxy_url}{MC}/_create", json=body, headers=admin_headers, timeout=60)
    container_id = created.json()["memory_container_id"]
    try:
        memory: dict[str, Any] = {
            "memory": "a memory",
            "strategy_type": "SEMANTIC",
            "namespace": {"user_id": "u0"},
        }
        written = requests.post(
            f"{proxy_url}{MC}/{container_id}/memories/long-term/_memproxy_bulk",
            json={"memories": [memory]},
            headers=admin_headers,
            timeout=60,
        ).json()
        doc_id = written["long_term_memory_ids"][0]
        stored = requests.get(f"{opensearch_url}/{prefix}-memory-long-term/_doc/{doc_id}", timeout=30).json()
        keys = [k for k in stored["_source"] if k != FIELD]
        assert keys == list(memory_source(container_id, 0, 0, stored["_source"]["owner_id"]))
    finally:
        requests.delete(f"{proxy_url}{MC}/{container_id}", headers=admin_headers, timeout=60)
        indices = requests.get(
            f"{opensearch_url}/_cat/indices/{prefix}-*", params={"format": "json"}, timeout=30
        )
        for index in indices.json():
            requests.delete(f"{opensearch_url}/{index['index']}", timeout=60)
