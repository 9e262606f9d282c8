"""The peers' harness without a node: the JUnit reading it judges a suite by, and the vendored files."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from tests.peers.suites import SUITES, VENDORED, Suite, parse_junit

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5">
<testcase classname="tests.integration_tests.test_standard.TestGoodMemRetrieverLive" name="test_invoke" />
<testcase classname="tests.test_e2e" name="test_ok[True]" />
<testcase classname="tests.test_e2e" name="test_no"><failure message="assert 1 == 2">tb</failure></testcase>
<testcase classname="tests.test_e2e" name="test_setup"><error message="fixture failed">boom</error></testcase>
<testcase classname="tests.test_e2e" name="test_llm">
<skipped type="pytest.skip" message="GOODMEM_LLM_ID not set">tests/test_e2e.py:1: skip</skipped></testcase>
</testsuite></testsuites>
"""


def test_every_outcome_is_read(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(REPORT)
    outcome = parse_junit(path)
    assert outcome.passed == [
        "tests.integration_tests.test_standard.TestGoodMemRetrieverLive::test_invoke",
        "tests.test_e2e::test_ok[True]",
    ]
    # an error (a fixture's failure) fails a suite as a failed assertion does
    assert outcome.failed == {
        "tests.test_e2e::test_no": "assert 1 == 2\ntb",
        "tests.test_e2e::test_setup": "fixture failed\nboom",
    }
    assert outcome.skipped == {"tests.test_e2e::test_llm": "GOODMEM_LLM_ID not set"}
    assert outcome.summary() == "2 passed, 2 failed, 1 skipped"


# A row of PROVENANCE.md's table: | `path` | ... | `sha256` |
_ROW = re.compile(r"^\| `(?P<path>[^`]+)` \|.*\| `(?P<sha256>[0-9a-f]{64})` \|$", re.MULTILINE)


@pytest.mark.parametrize("suite", [s for s in SUITES if s.vendored], ids=lambda s: s.name)
def test_vendored_files_are_theirs_unmodified(suite: Suite) -> None:
    folder = VENDORED / str(suite.vendored)
    recorded = {m["path"]: m["sha256"] for m in _ROW.finditer((folder / "PROVENANCE.md").read_text())}
    present = {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.name != "PROVENANCE.md"
    }
    # every file is accounted for, none edited, and the licence came with them
    assert present == recorded
    assert "LICENSE" in recorded
    assert all((folder / path).is_file() for path in suite.paths)
