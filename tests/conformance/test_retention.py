"""ml-commons 3.8/3.9 retention against ml-commons 3.6, which has none of it.

The flow turns retention on through ``PUT /_cluster/settings`` (memproxy keeps the setting; the 3.6 node
refuses it) and off again at its end, so the suite's other processes see it on only meanwhile. Its
container's policy deletes nothing (ten years), should a scheduled run come by.
"""

from __future__ import annotations

import time

from tests.conformance.compare import Reply, Trace, compare_traces
from tests.conformance.deviations import (
    CONTENT_ONLY_TIMESTAMPS,
    PINNED,
    RETENTION_POLICY,
    RETENTION_ROUTES,
    RETENTION_SETTINGS,
)
from tests.conformance.sides import MC, Side, both, new_prefix

_ENABLED = "plugins.ml_commons.memory.retention_enabled"
_TICK_S = 0.05


def _time_moved(before: Reply, after: Reply) -> Reply:
    assert before.status == after.status == 200, (before, after)
    return Reply(
        200, {"last_updated_time_moved": after.body["last_updated_time"] > before.body["last_updated_time"]}
    )


def retention(side: Side, prefix: str) -> Trace:
    t = side.trace()
    on = {"persistent": {_ENABLED: True}}
    t.add("enable retention", side.call("PUT", "/_cluster/settings", on))
    try:
        policy = {"sessions": {"retention_days": 3650}}
        body = {
            "name": prefix,
            "configuration": {"index_prefix": prefix, "use_system_index": False, "retention_policy": policy},
        }
        cid = t.add("create with a policy", side.call("POST", f"{MC}/_create", body)).body[
            "memory_container_id"
        ]
        t.add("get the container", side.call("GET", f"{MC}/{cid}"))
        base = f"{MC}/{cid}/memories"
        sid = t.add("create session", side.call("POST", f"{base}/sessions", {"summary": "tea"})).body[
            "session_id"
        ]
        before = t.note(side.call("GET", f"{base}/sessions/{sid}"))
        time.sleep(_TICK_S)
        t.add("pin the session", side.call("PUT", f"{base}/sessions/{sid}", {"pinned": True}))
        after = t.add("get the pinned session", side.call("GET", f"{base}/sessions/{sid}"))
        t.add("session time after pinning", _time_moved(before, after))
        t.add("dry run", side.call("POST", f"{MC}/{cid}/_retention/_dry_run"))
        t.add("delete", side.call("DELETE", f"{MC}/{cid}", params={"delete_all_memories": "true"}))
    finally:
        t.add("reset retention", side.call("PUT", "/_cluster/settings", {"persistent": {_ENABLED: None}}))
    return t


def test_retention(sides: tuple[Side, Side]) -> None:
    deviations = {
        "enable retention": RETENTION_SETTINGS,
        "get the container": RETENTION_POLICY,
        "get the pinned session": PINNED,
        "session time after pinning": CONTENT_ONLY_TIMESTAMPS,
        "dry run": RETENTION_ROUTES,
        "reset retention": RETENTION_SETTINGS,
    }
    compare_traces(*both(sides, retention, new_prefix("ret")), deviations)
