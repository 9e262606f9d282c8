"""The peers' live suites: which tests of which sdist, how one is run, and what its JUnit XML says.

Each suite runs with the peer's own pytest configuration (its ``pyproject.toml``: the working directory is
the unpacked sdist, or for a peer whose sdist holds no tests the files vendored from its repository under
``vendored/``) in the peers' venv, as its maintainers run it against a live GoodMem; only the environment
variables that switch it on differ. The outcome is read from ``--junitxml``, not from pytest's
terminal output, whose wording and verbosity each peer's ``addopts`` changes.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SUITES", "VENDORED", "Outcome", "Suite", "parse_junit", "run_suite"]

# Peers' test files copied unmodified from their repositories, each folder with its PROVENANCE.md.
VENDORED = Path(__file__).resolve().parent / "vendored"


@dataclass(frozen=True)
class Suite:
    name: str
    version: str
    paths: tuple[str, ...]  # the live tests, relative to the sdist's (or the vendored folder's) root
    minimum: int  # fewer passed tests than this means part of the suite did not run
    # test id (JUnit's "classname::name") -> why it may skip against memproxy; any other skip fails us
    allowed_skips: Mapping[str, str] = field(default_factory=dict)
    # what of the registered models the suite's tests call: "reranker", "llm" (checked on the doubles)
    calls: frozenset[str] = frozenset()
    unavailable: str | None = None  # the whole suite cannot run: why
    # the folder under VENDORED its tests run from, when its sdist ships none; None: the unpacked sdist
    vendored: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"


@dataclass
class Outcome:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # id -> the failure's message and text
    skipped: dict[str, str] = field(default_factory=dict)  # id -> the skip's reason

    def summary(self) -> str:
        return f"{len(self.passed)} passed, {len(self.failed)} failed, {len(self.skipped)} skipped"


def _test_id(case: ET.Element) -> str:
    # JUnit's classname is the dotted module path, then the class if any: "tests.test_e2e::test_x",
    # "tests.integration_tests.test_standard.TestGoodMemRetrieverLive::test_invoke_returns_documents".
    return f"{case.get('classname', '')}::{case.get('name', '?')}"


def parse_junit(path: Path) -> Outcome:
    outcome = Outcome()
    for case in ET.parse(path).iter("testcase"):
        test = _test_id(case)
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skip = case.find("skipped")
        if problem is not None:
            outcome.failed[test] = f"{problem.get('message', '')}\n{problem.text or ''}".strip()
        elif skip is not None:
            outcome.skipped[test] = skip.get("message", "")
        else:
            outcome.passed.append(test)
    return outcome


def run_suite(
    suite: Suite, python: Path, source: Path, env: Mapping[str, str], junit: Path, timeout: float = 600
) -> tuple[Outcome, str]:
    """Run ``suite`` from ``source`` with ``python``; the outcome and pytest's own output (its tail)."""
    # The peers' venv only: nothing of memproxy's interpreter or of this pytest run may leak into theirs.
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON", "VIRTUAL_ENV", "COV"))
    }
    done = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}", *suite.paths],
        cwd=source,
        env={**inherited, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = (done.stdout + done.stderr)[-6000:]
    if not junit.is_file():  # pytest did not get as far as collecting (a usage or import error)
        raise RuntimeError(f"{suite.label}: pytest exited {done.returncode} without a report:\n{output}")
    return parse_junit(junit), output


SUITES = (
    Suite(
        "goodmem-langchain",
        "0.3.0",
        # langchain-tests' standard RetrieversIntegrationTests are in test_standard.py
        ("tests/integration_tests",),
        minimum=20,
        calls=frozenset({"reranker"}),  # test_sdk_rag, test_live_filter_excludes_..._limit[True]
    ),
    # test_live_reranking_without_llm
    Suite(
        "goodmem-langgraph", "0.3.0", ("tests/integration_tests",), minimum=6, calls=frozenset({"reranker"})
    ),
    # test_llm_answer_is_returned_with_the_passages
    Suite("goodmem-crewai", "0.4.0", ("tests/test_e2e.py",), minimum=16, calls=frozenset({"llm"})),
    # Its sdist and wheel pack llama_index/ alone: the live tests are vendored from its repository
    # (vendored/goodmem_llamaindex/PROVENANCE.md). test_live_reranking_and_partial_failures reranks.
    Suite(
        "goodmem-llamaindex",
        "0.2.3",
        ("tests/test_tools_goodmem_e2e.py",),
        minimum=4,
        calls=frozenset({"reranker"}),
        vendored="goodmem_llamaindex",
    ),
)
