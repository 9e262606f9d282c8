"""Session fixtures: a real OpenSearch node and the real proxy process.

The node comes from ``OPENSEARCH_URL`` when set, else testcontainers' OpenSearch when a Docker engine
answers, else ``scripts/opensearch-local start`` (our own single node with k-NN). Nothing is mocked.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = ["tests.opensearch_memory_fixtures"]


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-not-found]

        docker.from_env().ping()
        return True
    except Exception:
        return False


def _wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status < 500:
                    return
        except Exception as exc:  # the server is still starting
            last = exc
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout}s: {last}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def opensearch_url() -> Iterator[str]:
    url = os.environ.get("OPENSEARCH_URL")
    if url:
        yield url.rstrip("/")
        return
    if _docker_answers():
        from testcontainers.opensearch import OpenSearchContainer  # type: ignore[import-not-found]

        with OpenSearchContainer("opensearchproject/opensearch:3.6.0") as node:
            yield node.get_config()["url"]
        return
    out = subprocess.run(
        [str(REPO / "scripts" / "opensearch-local"), "start"], check=True, capture_output=True, text=True
    ).stdout
    line = next(line for line in out.splitlines() if line.startswith("OPENSEARCH_URL="))
    yield line.split("=", 1)[1]


class ProxyProcess:
    """The real memproxy, started as ``python -m proxy`` on a free port."""

    def __init__(
        self, opensearch_url: str, extra_args: list[str] | None = None, env: dict[str, str] | None = None
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = REPO / ".cache" / f"proxy-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "proxy", "--opensearch-url", opensearch_url, "--port", str(self.port)]
        cmd += extra_args or []
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        try:
            _wait_http(self.url + "/_memproxy/health", timeout=180)
        except RuntimeError:
            self.stop()
            raise RuntimeError(f"proxy did not start; log:\n{self.log_path.read_text()[-4000:]}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()


@pytest.fixture(scope="session")
def proxy(opensearch_url: str) -> Iterator[ProxyProcess]:
    p = ProxyProcess(opensearch_url)
    yield p
    p.stop()


@pytest.fixture(scope="session")
def proxy_url(proxy: ProxyProcess) -> str:
    return proxy.url
