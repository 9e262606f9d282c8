"""The two systems under comparison: the real ml-commons 3.6 on the reference node, and memproxy.

The reference node comes from ``REFERENCE_OPENSEARCH_URL`` or ``scripts/opensearch-reference start``. Its
embedding model is a remote model whose connector points at memproxy's OpenAI endpoint, so both systems embed
with the very same all-MiniLM-L6-v2; its LLM is the tests' deterministic chat server (tests/support). Both
are registered and deployed once per session through the model APIs, as the tutorials do.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opensearchpy import OpenSearch

from tests.conformance.compare import LEDGER, Reply, Trace
from tests.conformance.sides import Side
from tests.conftest import ProxyProcess
from tests.opensearch_memory_helpers import EMBEDDER, proxy_under_test
from tests.support.fake_llm import FakeLLM
from tests.support.reference import embedding_connector, llm_connector, register_remote_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def reference_url() -> str:
    url = os.environ.get("REFERENCE_OPENSEARCH_URL")
    if url:
        return url.rstrip("/")
    out = subprocess.run(
        [str(REPO / "scripts" / "opensearch-reference"), "start"], check=True, capture_output=True, text=True
    ).stdout
    return next(line for line in out.splitlines() if line.startswith("OPENSEARCH_URL=")).split("=", 1)[1]


@dataclass
class ReferenceModels:
    embedding_model_id: str
    llm_id: str
    # What the model APIs answered while registering them (compared with memproxy's by test_models.py).
    calls: dict[str, Reply] = field(default_factory=dict)


@pytest.fixture(scope="session")
def proxy_url(open_proxy: ProxyProcess) -> str:
    """The reference node runs ml-commons without the security plugin, so memproxy is compared as it runs
    without authentication (``--auth none``): no caller, no owner fields, all access, as there."""
    return open_proxy.url


@pytest.fixture(scope="session")
def reference_models(reference_url: str, proxy_url: str, fake_llm: FakeLLM) -> ReferenceModels:
    client = OpenSearch(hosts=[reference_url], timeout=120)
    try:
        emb, emb_calls = register_remote_model(client, "memproxy-embedder", embedding_connector(proxy_url))
        llm, llm_calls = register_remote_model(client, "fake-llm", llm_connector(fake_llm.url))
    finally:
        client.close()
    calls = {f"embedding.{k}": Reply(200, v) for k, v in emb_calls.items()}
    calls |= {f"llm.{k}": Reply(200, v) for k, v in llm_calls.items()}
    return ReferenceModels(emb, llm, calls)


@pytest.fixture(scope="module")
def sides(
    request: pytest.FixtureRequest, reference_url: str, reference_models: ReferenceModels
) -> Iterator[tuple[Side, Side]]:
    """(ml-commons, memproxy), each with the model ids its containers name."""
    ref = Side("ml-commons", reference_url, reference_models.embedding_model_id, reference_models.llm_id)
    mp = Side("memproxy", proxy_under_test(request), EMBEDDER, "memproxy-llm")
    yield ref, mp
    ref.close()
    mp.close()


@pytest.fixture(autouse=True)
def _ledger_scope(request: pytest.FixtureRequest) -> Iterator[None]:
    LEDGER.in_expected_failure = request.node.get_closest_marker("xfail") is not None
    yield
    LEDGER.in_expected_failure = False


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not LEDGER.counts:
        return
    counts = dict(LEDGER.counts)
    terminalreporter.section("conformance with ml-commons 3.6")
    terminalreporter.write_line(
        f"compared calls: {sum(counts.values())}; "
        + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    )
    for dev, n in sorted(LEDGER.deviations.items()):
        terminalreporter.write_line(f"  deviation {dev}: {n} call(s)")
    out = REPO / ".cache" / "conformance-summary.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"counts": counts, "deviations": dict(LEDGER.deviations)}, indent=1))


__all__ = ["ReferenceModels", "Trace"]
