"""Session fixtures: a real OpenSearch node, the real proxy process, a private PostgreSQL cluster.

The node comes from ``OPENSEARCH_URL`` when set, else testcontainers' OpenSearch when a Docker engine
answers, else ``scripts/opensearch-local start`` (our own single node with k-NN). PostgreSQL, the filter
differential's independent oracle, comes from Debian's ``postgresql`` package (``tests/postgres.py``).

The end-to-end tests replace nothing: they speak HTTP to the real proxy, which reaches the real node and
embeds with the real model. Test doubles are used in these places only, each for behaviour that an
end-to-end test cannot bring about on demand or observe from outside:

* ``test_goodmem_retrieve_handler.py``: the real retrieve handler, authentication and error middleware in an
  in-process server, with the application's ``Retriever`` (planning and memory loading) a fake whose timing
  the test controls and its store a fake node that knows one API key: a 504 before the first byte, the
  in-band deadline after it, cancellation on disconnect.
* ``test_goodmem_retrieve_plan.py``: the real planning with ``Retriever``'s space lookup, permission check
  and k-NN search (its public methods) and the embedder registry replaced by recorders, to pin that every
  permission is checked before anything is embedded or searched, and how multi-embedder spaces are fused.
* ``test_integrity_unit.py`` (``FakeNode``): the GoodMem write path whole, over a fake node (the store's
  client: documents, versions, conditional ``_bulk``, ``_mget``) that dies at the step a test chooses, to pin
  the order of writes (record before chunks) and what a failure leaves.
* ``tests/support/fake_llm.py``: a deterministic OpenAI-compatible chat server standing in for an external
  LLM, a real HTTP server that memproxy and the reference ml-commons call alike.

Elsewhere only time and threads are controlled, never the code under test: a fake clock for the cache's
own tests (``test_cache.py``), a gate holding the embedding compute thread (``test_embedding.py``).

Every test that needs a node (it uses ``opensearch_url``, ``reference_url``, ``memproxy_url`` or
``secured_cluster``, directly or through another fixture) is marked ``node`` at collection:
``pytest -m "not node"`` runs the rest, which need no node at all.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.postgres import MISSING as PG_MISSING
from tests.postgres import PostgresCluster
from tests.postgres import find_bindir as find_pg_bindir
from tests.support.fake_llm import FakeLLM

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = ["tests.opensearch_memory_fixtures"]

# memproxy_url reaches the session proxy (and so the node) through request.getfixturevalue.
NODE_FIXTURES = frozenset({"opensearch_url", "reference_url", "memproxy_url", "secured_cluster"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        # fixturenames holds every fixture the test needs, however indirectly.
        if NODE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.node)


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-not-found]

        # attr-defined: without the SDK, mypy finds the repository's docker/ folder (a namespace package).
        docker.from_env().ping()  # type: ignore[attr-defined]
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
    """The real memproxy, started as ``python -m proxy`` on a free port (``source``: another checkout's).

    ``workers`` > 1 runs ``--workers N`` (a supervisor and its workers: proxy/serve/); it is up once every
    worker serves. ``wait=False`` returns at once (``wait_ready()`` then), so that processes start together.
    """

    def __init__(
        self,
        opensearch_url: str,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        source: Path = REPO,
        *,
        workers: int = 1,
        wait: bool = True,
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers = workers
        self.log_path = REPO / ".cache" / f"proxy-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "proxy", "--opensearch-url", opensearch_url, "--port", str(self.port)]
        cmd += ["--workers", str(workers)] if workers > 1 else []
        cmd += extra_args or []
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            # ``python -m proxy`` imports the package of its working directory: ``source`` picks the code.
            cmd,
            cwd=source,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # The suite's model doubles (fake LLM, TEI doubles) listen on loopback, and its tests register
            # them at runtime: the suite's proxies open loopback as an operator of local model servers does
            # (tests/adversarial/test_outbound.py overrides it to check the default).
            env={**os.environ, "MEMPROXY_ALLOW_PRIVATE_MODEL_ENDPOINTS": "loopback", **(env or {})},
        )
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 180) -> None:
        try:
            _wait_http(self.url + "/_memproxy/health", timeout=timeout)
            if self.workers > 1:
                self.wait_log(f"({self.workers} workers)", timeout=timeout)
        except RuntimeError:
            self.stop()
            raise RuntimeError(f"proxy did not start; log:\n{self.log_path.read_text()[-4000:]}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 180, *, count: int = 1) -> None:
        """Until the log holds ``text`` ``count`` times (RuntimeError after ``timeout``, or if it exits)."""
        deadline = time.monotonic() + timeout
        while self.log().count(text) < count:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"no {text!r} (x{count}) in the proxy's log within {timeout}s")
            time.sleep(0.2)

    def worker_pids(self) -> list[int]:
        """Under ``--workers``: the pids of the workers that are ready and not stopping, as the supervisor
        logged them (proxy/serve/supervisor.py)."""
        ready: list[int] = []
        for match in re.finditer(r"worker #\d+ \(pid (\d+)\) (ready|stopped|died|stopping)", self.log()):
            pid = int(match.group(1))
            if match.group(2) == "ready":
                ready.append(pid)
            elif pid in ready:
                ready.remove(pid)
        return ready

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20 if self.workers == 1 else 60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """A private PostgreSQL cluster (tests/postgres.py), started on first use and deleted at the end. Without
    Debian's ``postgresql`` package this fails with a message naming it: it never skips."""
    if find_pg_bindir() is None:
        pytest.fail(PG_MISSING)
    cluster = PostgresCluster()
    yield cluster
    cluster.stop()


# The LLM ids the tests' containers name (``llm_id`` must name a model memproxy knows, as in ml-commons): each
# is a start-up ``--llm`` on the session's deterministic chat server.
TEST_LLM_IDS = ("llm1", "memproxy-llm")


@pytest.fixture(scope="session")
def fake_llm() -> Iterator[FakeLLM]:
    """The deterministic OpenAI-compatible chat server (tests/support/fake_llm.py), one per session: the
    test proxies' ``--llm`` models and the reference node's LLM connector both reach it."""
    with FakeLLM() as llm:
        yield llm


def llm_flags(llm_url: str, ids: tuple[str, ...] = TEST_LLM_IDS) -> list[str]:
    """``--llm ID=URL#provider=openai,model=fake-llm`` for each id."""
    flags: list[str] = []
    for llm_id in ids:
        flags += ["--llm", f"{llm_id}={llm_url}#provider=openai,model=fake-llm"]
    return flags


@pytest.fixture(scope="session")
def proxy(opensearch_url: str, fake_llm: FakeLLM) -> Iterator[ProxyProcess]:
    p = ProxyProcess(opensearch_url, extra_args=llm_flags(fake_llm.url))
    yield p
    p.stop()


@pytest.fixture(scope="session")
def proxy_url(proxy: ProxyProcess) -> str:
    return proxy.url


@pytest.fixture(scope="session")
def admin_key(proxy_url: str, opensearch_url: str) -> str:
    """A GoodMem key of the root user: the credential the tests use on every authenticated route."""
    from tests.goodmem_helpers import root_api_key

    return root_api_key(proxy_url, opensearch_url)


@pytest.fixture(scope="session")
def admin_headers(admin_key: str) -> dict[str, str]:
    return {"x-api-key": admin_key}


@pytest.fixture(scope="session")
def open_proxy(opensearch_url: str, fake_llm: FakeLLM) -> Iterator[ProxyProcess]:
    """memproxy with ``--auth none``: the ml-commons routes as ml-commons serves them without the security
    plugin (the configuration the conformance suite compares with the reference node)."""
    p = ProxyProcess(opensearch_url, extra_args=["--auth", "none", *llm_flags(fake_llm.url)])
    yield p
    p.stop()
