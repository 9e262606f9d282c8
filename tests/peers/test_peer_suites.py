"""The GoodMem integrations' own live suites, unchanged, against memproxy (issue 29, item 4).

goodmem-langchain, goodmem-langgraph and goodmem-crewai ship their live tests in their sdists (pinned, with
sha256, in ``sdists.txt``); goodmem-llamaindex's sdist holds none, so its live tests are vendored unmodified
from its repository (``vendored/goodmem_llamaindex/``, with their provenance). Each runs with its own pytest
in the peers' venv (``venv.py``) against the session's memproxy, switched on by the environment variables
they read. Nothing of theirs is edited or selected beyond the files that hold their live tests: not written
by us, so nobody tuned them to memproxy.

As a real user would, the test makes a user of its own (so the peers' listings see their spaces only),
gives it an API key, and that user registers a reranker and an LLM through GoodMem's ``/v1/rerankers`` and
``/v1/llms``: the project's wire-exact doubles, a TEI ``/rerank`` server (word overlap,
``tests.support.tei_reranker``) and the OpenAI-compatible FakeLLM (``tests.support.fake_llm``), so the
suites' rerank and ``abstractReply`` tests run instead of skipping. A suite fails us when any of its tests
fails or errors, when a test skips that ``suites.py`` does not allow by name, when fewer than its minimum
pass (a suite that silently stopped running would otherwise pass), or when it did not call the reranker or
LLM its tests are known to use.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from goodmem import Goodmem

from tests.peers.suites import SUITES, VENDORED, Suite, run_suite
from tests.peers.venv import PeersVenv, prepare
from tests.support.fake_llm import FakeLLM
from tests.support.tei_reranker import TeiReranker

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def peers_venv() -> PeersVenv:
    return prepare()


@dataclass
class Live:
    env: dict[str, str]  # what the peers' suites read
    tei: TeiReranker
    llm: FakeLLM
    llm_model: str

    def calls(self) -> dict[str, int]:
        """How often the registered reranker and LLM have been called so far."""
        chats = [p for p in self.llm.prompts if p.body.get("model") == self.llm_model]
        return {"reranker": len(self.tei.calls), "llm": len(chats)}


@pytest.fixture(scope="module")
def live(proxy_url: str, admin_key: str, fake_llm: FakeLLM) -> Iterator[Live]:
    """A user, its key, and a reranker and an LLM it registered; the variables naming them for the peers."""
    # The session's FakeLLM also serves the start-up --llm models: a model name of its own tells our calls.
    llm_model = f"peers-{uuid.uuid4().hex[:8]}"
    with TeiReranker() as tei, Goodmem(base_url=proxy_url, api_key=admin_key) as root:
        user = root.users.create(
            email=f"peers-{uuid.uuid4().hex[:8]}@example.com", display_name="Peer suites"
        )
        key = str(root.apikeys.create(subject_principal_id=user.user_id).raw_api_key)
        with Goodmem(base_url=proxy_url, api_key=key) as gm:
            reranker = gm.rerankers.create(
                display_name="peers-tei",
                provider_type="TEI",
                endpoint_url=tei.url,
                model_identifier="overlap",
            )
            llm = gm.llms.create(
                display_name="peers-fake-llm",
                provider_type="OPENAI",
                endpoint_url=fake_llm.base_url,
                model_identifier=llm_model,
            ).llm
            # The built-in local embedder: what a user of a fresh memproxy finds listed.
            embedders = httpx.get(f"{proxy_url}/v1/embedders", headers={"x-api-key": key}, timeout=30).json()
            env = {
                "GOODMEM_BASE_URL": proxy_url,
                "GOODMEM_API_KEY": key,
                "GOODMEM_EMBEDDER_ID": embedders["embedders"][0]["embedderId"],
                "GOODMEM_RERANKER_ID": str(reranker.reranker_id),
                "GOODMEM_LLM_ID": str(llm.llm_id),
                # crewai: no telemetry, tracing or update checks leaving the machine while it runs
                "CREWAI_DISABLE_TELEMETRY": "true",
                "CREWAI_TRACING_ENABLED": "false",
                "OTEL_SDK_DISABLED": "true",
                "LANGSMITH_TRACING": "false",
            }
            try:
                yield Live(env, tei, fake_llm, llm_model)
            finally:
                gm.rerankers.delete(id=reranker.reranker_id)
                gm.llms.delete(id=llm.llm_id)


_reported: set[str] = set()  # what has been printed once for the whole module


@pytest.mark.parametrize("suite", SUITES, ids=lambda s: s.name)
def test_peer_live_suite(
    suite: Suite, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if suite.unavailable:
        pytest.skip(suite.unavailable)
    # Asked for only now: a suite that cannot run costs no venv and no models.
    peers_venv: PeersVenv = request.getfixturevalue("peers_venv")
    live: Live = request.getfixturevalue("live")
    lines = []
    if "venv" not in _reported:
        _reported.add("venv")
        prepared = f"prepared in {peers_venv.seconds:.0f} s" if peers_venv.seconds else "cached"
        lines.append(f"peers: the peers' venv: {prepared}")
    before, started = live.calls(), time.monotonic()
    source = peers_venv.source(suite.name, suite.version)
    if suite.vendored:
        # A copy: what their run writes (bytecode, pytest-benchmark's .benchmarks/) stays out of the repo.
        source = Path(shutil.copytree(VENDORED / suite.vendored, tmp_path / suite.vendored))
    outcome, output = run_suite(
        suite,
        peers_venv.python,
        source,
        # crewai keeps credentials and storage under the home folder: the run's own, not the machine's
        {**live.env, "HOME": str(tmp_path / "home")},
        tmp_path / "junit.xml",
    )
    calls = {kind: n - before[kind] for kind, n in live.calls().items()}
    lines.append(
        f"peers: {suite.label}: {outcome.summary()} in {time.monotonic() - started:.0f} s "
        f"(reranker calls {calls['reranker']}, LLM calls {calls['llm']})"
    )
    lines += [f"peers:   skipped {test}: {reason}" for test, reason in outcome.skipped.items()]
    lines += [f"peers:   FAILED {test}" for test in outcome.failed]
    with capsys.disabled():  # the counts and skip reasons belong in the CI log even without -s
        print("\n" + "\n".join(lines))
    assert not outcome.failed, "\n\n".join(f"{t}:\n{m}" for t, m in outcome.failed.items()) + "\n" + output
    unexpected = {t: r for t, r in outcome.skipped.items() if t not in suite.allowed_skips}
    assert not unexpected, f"skips not allowed for {suite.label}: {unexpected}"
    assert len(outcome.passed) >= suite.minimum, f"{suite.label}: {outcome.summary()}\n{output}"
    # The suites' rerank and abstractReply tests reached the models registered for them, not a fallback.
    assert all(calls[kind] > 0 for kind in suite.calls), (
        f"{suite.label} did not call {set(suite.calls)}: {calls}"
    )
