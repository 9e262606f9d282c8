"""The JUnit reading the peers' harness judges a suite by (no node: a report written here)."""

from __future__ import annotations

from pathlib import Path

from tests.peers.suites import parse_junit

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
