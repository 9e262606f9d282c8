"""ml-commons 3.8's session rules and 3.9's caller-chosen container id, against ml-commons 3.6.

Timestamps are volatile (normalised away), so a flow records whether one moved as a reply of its own.
"""

from __future__ import annotations

import time

from tests.conformance.compare import Reply, Trace, compare_traces
from tests.conformance.deviations import (
    ADD_BUMPS_SESSION,
    CALLER_CONTAINER_ID,
    CALLER_CONTAINER_ID_CHECKED,
    CHOSEN_CONTAINER,
    CONTENT_ONLY_TIMESTAMPS,
    OWN_SESSION_DOCUMENT,
    WORKING_SESSION_ID_FIELD,
)
from tests.conformance.sides import MC, Side, both, new_prefix

# Longer than a millisecond, the unit of last_updated_time, so a bump is always visible.
_TICK_S = 0.05


def _time_moved(before: Reply, after: Reply) -> Reply:
    """Whether one document's ``last_updated_time`` moved between two reads of it."""
    assert before.status == after.status == 200, (before, after)
    moved = after.body["last_updated_time"] > before.body["last_updated_time"]
    return Reply(200, {"last_updated_time_moved": moved})


def _container(side: Side, t: Trace, prefix: str) -> str:
    body = {"name": prefix, "configuration": {"index_prefix": prefix, "use_system_index": False}}
    return str(t.add("create", side.call("POST", f"{MC}/_create", body)).body["memory_container_id"])


def _messages(text: str) -> list[dict[str, object]]:
    return [{"role": "user", "content": [{"type": "text", "text": text}]}]


def session_rules(side: Side, prefix: str) -> Trace:
    t = side.trace()
    cid = _container(side, t, prefix)
    base = f"{MC}/{cid}/memories"
    own = f"{prefix}-own"
    t.name(own, "<own-session>")
    namespace = {"user_id": "u1", "session_id": own}
    data = {"structured_data": {"k": "v"}, "payload_type": "data", "namespace": namespace}
    t.add("add with a session never created", side.call("POST", base, data))
    t.add("get that session", side.call("GET", f"{base}/sessions/{own}"))
    t.add("working memories of that session", side.call("POST", f"{base}/working/_search", {
        "query": {"term": {"namespace.session_id": own}}}))  # fmt: skip

    session = {"namespace": {"user_id": "u1"}, "summary": "about tea"}
    sid = t.add("create session", side.call("POST", f"{base}/sessions", session)).body["session_id"]
    before = t.add("get session", side.call("GET", f"{base}/sessions/{sid}"))
    time.sleep(_TICK_S)
    turn = {"messages": _messages("Green tea, please."), "namespace": {"user_id": "u1", "session_id": sid}}
    wid = t.add("add to the session", side.call("POST", base, turn)).body["working_memory_id"]
    after = t.note(side.call("GET", f"{base}/sessions/{sid}"))
    t.add("session time after an add", _time_moved(before, after))

    steps = (
        ("sessions", sid, "session metadata", {"metadata": {"topic": "tea"}}),
        ("sessions", sid, "session agents", {"agents": {"planner": {"x": 1}}}),
        ("sessions", sid, "session summary", {"summary": "about coffee"}),
        ("working", wid, "working tags", {"tags": {"topic": "tea"}}),
        ("working", wid, "working metadata", {"metadata": {"source": "chat"}}),
        ("working", wid, "working messages", {"messages": _messages("Black tea, then.")}),
    )
    for memory_type, memory_id, what, update in steps:
        path = f"{base}/{memory_type}/{memory_id}"
        before = t.note(side.call("GET", path))
        time.sleep(_TICK_S)
        t.add(f"update {what}", side.call("PUT", path, update))
        t.add(f"time after updating {what}", _time_moved(before, t.note(side.call("GET", path))))
    t.add("delete", side.call("DELETE", f"{MC}/{cid}", params={"delete_all_memories": "true"}))
    return t


def test_session_rules(sides: tuple[Side, Side]) -> None:
    deviations = {
        "get that session": OWN_SESSION_DOCUMENT,
        "working memories of that session": WORKING_SESSION_ID_FIELD,
        "session time after an add": ADD_BUMPS_SESSION,
        "time after updating session metadata": CONTENT_ONLY_TIMESTAMPS,
        "time after updating session agents": CONTENT_ONLY_TIMESTAMPS,
        "time after updating working tags": CONTENT_ONLY_TIMESTAMPS,
        "time after updating working metadata": CONTENT_ONLY_TIMESTAMPS,
    }
    compare_traces(*both(sides, session_rules, new_prefix("sess")), deviations)


def caller_container_id(side: Side, prefix: str) -> Trace:
    t = side.trace()
    chosen = f"{prefix}-mine"
    t.name(chosen, CHOSEN_CONTAINER)
    body = {
        "name": prefix,
        "memory_container_id": chosen,
        "configuration": {"index_prefix": prefix, "use_system_index": False},
    }
    created = [t.add("create with a chosen id", side.call("POST", f"{MC}/_create", body))]
    t.add("get by the chosen id", side.call("GET", f"{MC}/{chosen}"))
    created.append(t.add("create with the chosen id again", side.call("POST", f"{MC}/_create", body)))
    invalid = {**body, "memory_container_id": "_hidden"}
    created.append(t.add("create with an invalid id", side.call("POST", f"{MC}/_create", invalid)))
    ids = [r.body["memory_container_id"] for r in created if r.status == 200]
    # The containers share the prefix: only the last one deletes the indices (3.6 refuses while shared).
    # Each side made other containers, so the deletes are its own steps; what is left afterwards is compared.
    for container_id in ids[:-1]:
        t.note(side.call("DELETE", f"{MC}/{container_id}"))
    t.note(side.call("DELETE", f"{MC}/{ids[-1]}", params={"delete_all_memories": "true"}))
    t.add("get by the chosen id after delete", side.call("GET", f"{MC}/{chosen}"))
    return t


def test_caller_chosen_container_id(sides: tuple[Side, Side]) -> None:
    deviations = {
        "create with a chosen id": CALLER_CONTAINER_ID,
        "get by the chosen id": CALLER_CONTAINER_ID,
        "create with the chosen id again": CALLER_CONTAINER_ID_CHECKED,
        "create with an invalid id": CALLER_CONTAINER_ID_CHECKED,
    }
    compare_traces(*both(sides, caller_container_id, new_prefix("cid")), deviations)
