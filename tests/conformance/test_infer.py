"""``infer: true``: the same conversation added to both sides, the long-term memories and history compared.

ml-commons extracts asynchronously through the tests' deterministic LLM (tests/support/fake_llm.py); the
first test proves that the reference really did, so the expected failure of the second is memproxy's alone
until issue 15 (``infer: true`` for real) lands.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conformance.compare import Trace, compare_traces
from tests.conformance.deviations import AUTO_SESSION_DOCUMENT, AUTO_SESSION_WITHOUT_SECURITY
from tests.conformance.sides import MC, Side, new_prefix
from tests.support.fake_llm import FakeLLM

CONVERSATION = [
    {"role": "user", "content": [{"type": "text", "text": "I only drink green tea. I live in Lisbon."}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
]
SORT = {"sort": [{"created_time": "asc"}], "_source": {"excludes": ["memory_embedding"]}}


def _wait_for_memories(side: Side, base: str, want: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = side.call("POST", f"{base}/long-term/_search", {"query": {"match_all": {}}, "size": 0})
        if found.status == 200 and found.body["hits"]["total"]["value"] >= want:
            return
        time.sleep(0.5)


def infer_flow(side: Side, prefix: str, wait_s: float) -> Trace:
    t = side.trace()
    parameters = {"llm_result_path": "$.choices[0].message.content"}
    body = {"name": prefix, "configuration": side.configuration(prefix, parameters=parameters)}
    cid = t.add("create", side.call("POST", f"{MC}/_create", body)).body["memory_container_id"]
    base = f"{MC}/{cid}/memories"
    session = t.add("create session", side.call("POST", f"{base}/sessions", {"namespace": {"user_id": "u1"}}))
    add = {"messages": CONVERSATION, "namespace": {"user_id": "u1", "session_id": session.body["session_id"]},
           "infer": True}  # fmt: skip
    t.add("add with infer", side.call("POST", base, add))
    _wait_for_memories(side, base, 2, wait_s)
    t.add("long-term", side.call("POST", f"{base}/long-term/_search", {"query": {"match_all": {}}, **SORT}))
    t.add("history", side.call("POST", f"{base}/history/_search", {"query": {"match_all": {}}, **SORT}))
    return t


@pytest.fixture(scope="module")
def infer_traces(sides: tuple[Side, Side], fake_llm: FakeLLM) -> tuple[Trace, Trace]:
    ref, mp = sides
    prefix = new_prefix("infer")
    # ml-commons extracts in the background (about 5 s here); memproxy would write before answering.
    return infer_flow(ref, prefix, 90), infer_flow(mp, prefix, 10)


def _memories(trace: Trace) -> list[Any]:
    return [hit["_source"]["memory"] for hit in trace.replies["long-term"].body["hits"]["hits"]]


def test_reference_extracts_facts(infer_traces: tuple[Trace, Trace], fake_llm: FakeLLM) -> None:
    ref, _ = infer_traces
    assert sorted(_memories(ref)) == ["I live in Lisbon", "I only drink green tea"]
    assert fake_llm.prompts_of("extraction"), "ml-commons never asked the test LLM"


def test_infer_matches_ml_commons(infer_traces: tuple[Trace, Trace]) -> None:
    compare_traces(*infer_traces)


def auto_session_flow(side: Side) -> Trace:
    """A conversational add without a session id: both ask the LLM for a summary of the new session."""
    t = side.trace()
    prefix = new_prefix("autosession")
    parameters = {"llm_result_path": "$.choices[0].message.content"}
    body = {"name": prefix, "configuration": side.configuration(prefix, parameters=parameters)}
    cid = t.add("create", side.call("POST", f"{MC}/_create", body)).body["memory_container_id"]
    base = f"{MC}/{cid}/memories"
    add = {"messages": CONVERSATION, "namespace": {"user_id": "u2"}}
    added = t.add("add without session", side.call("POST", base, add))
    t.add("session", side.call("GET", f"{base}/sessions/{added.body.get('session_id')}"))
    return t


def test_auto_created_session_has_the_llm_summary(sides: tuple[Side, Side], fake_llm: FakeLLM) -> None:
    ref, mp = sides
    mine = auto_session_flow(mp)
    compare_traces(
        auto_session_flow(ref),
        mine,
        {
            "add without session": AUTO_SESSION_WITHOUT_SECURITY,
            "session": AUTO_SESSION_DOCUMENT,
        },
    )
    # The summary is the LLM's (the deterministic one answers "Summary: " + the user's words).
    assert mine.replies["session"].body["summary"] == "Summary: I only drink green tea. I live in Lisbon."
