"""The 3-node cluster of ``scripts/opensearch-cluster`` for the tests of this package: free ports, a home of
its own (``.cache/opensearch/cluster-test``, install kept, data wiped: a new cluster each session), stopped
at the end, as the conformance suite starts its reference node."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.conftest import REPO, free_port

HOME = REPO / ".cache" / "opensearch" / "cluster-test"
NODES = 3


@dataclass
class Cluster:
    """``scripts/opensearch-cluster`` with this session's ports and home."""

    ports: list[int] = field(default_factory=lambda: [free_port() for _ in range(NODES)])
    transport_ports: list[int] = field(default_factory=lambda: [free_port() for _ in range(NODES)])

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    def script(self, *args: str, timeout: float = 420) -> str:
        env = {
            **os.environ,
            "OPENSEARCH_CLUSTER_HOME": str(HOME),
            "OPENSEARCH_CLUSTER_NODES": str(NODES),
            "OPENSEARCH_CLUSTER_PORTS": ",".join(map(str, self.ports)),
            "OPENSEARCH_CLUSTER_TRANSPORT_PORTS": ",".join(map(str, self.transport_ports)),
            "OPENSEARCH_CLUSTER_HEAP": os.environ.get("OPENSEARCH_CLUSTER_HEAP", "1g"),
        }
        done = subprocess.run(
            [str(REPO / "scripts" / "opensearch-cluster"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, (
            f"opensearch-cluster {' '.join(args)}: {done.returncode}\n{done.stderr[-3000:]}"
        )
        return done.stdout

    def manager(self) -> int:
        return int(self.script("manager").strip())

    def health(self, exclude: int | None = None) -> dict[str, object]:
        """The cluster's health, asked of the first node that answers (not ``exclude``)."""
        for i, url in enumerate(self.urls, start=1):
            if i == exclude:
                continue
            try:
                return dict(httpx.get(f"{url}/_cluster/health", timeout=5).json())
            except httpx.HTTPError:
                continue
        raise AssertionError("no node answers")

    def wait_green(self, within_s: float) -> float:
        """Seconds until the cluster is green with every node in, by itself (no call but health)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < within_s:
            h = self.health()
            if h.get("status") == "green" and h.get("number_of_nodes") == NODES:
                return time.monotonic() - t0
            time.sleep(0.5)
        raise AssertionError(f"not green within {within_s} s: {self.health()}")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    for node in HOME.glob("node-*"):
        shutil.rmtree(node / "data", ignore_errors=True)  # a new cluster every session
    try:
        out = c.script("start", timeout=900)
        assert f"OPENSEARCH_URL={','.join(c.urls)}" in out
        yield c
    finally:
        c.script("stop")  # also when the start failed: no node is left behind
