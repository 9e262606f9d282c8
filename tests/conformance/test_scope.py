"""Container scope: where memproxy keeps a write, a session and a delete inside their own container while
ml-commons 3.6 lets them reach others (docs/security.md, "Index families and container scope")."""

from __future__ import annotations

from tests.conformance.compare import Trace, compare_traces
from tests.conformance.deviations import (
    BODY_CONTAINER_ID,
    HIDDEN_PREFIX_REFUSED,
    SESSION_ID_PER_CONTAINER,
    SHARED_FAMILY_DELETE,
)
from tests.conformance.sides import MC, Side, both, new_prefix


def container_scope(side: Side, prefix: str) -> Trace:
    t = side.trace()
    shared = {"index_prefix": prefix, "use_system_index": False}
    ids = []
    for n in ("a", "b"):
        body = {"name": f"{prefix}-{n}", "configuration": shared}
        ids.append(t.add(f"create {n}", side.call("POST", f"{MC}/_create", body)).body["memory_container_id"])
    a, b = ids
    base = f"{MC}/{a}/memories"
    t.add("create custom session", side.call("POST", f"{base}/sessions", {"session_id": f"s-{prefix}"}))
    t.add("get custom session", side.call("GET", f"{base}/sessions/s-{prefix}"))
    found = t.add(
        "search sessions", side.call("POST", f"{base}/sessions/_search", {"query": {"match_all": {}}})
    )
    stored = found.body["hits"]["hits"][0]["_id"]
    t.add("get session by its stored id", side.call("GET", f"{base}/sessions/{stored}"))
    # Last of the calls that make ids: ml-commons makes one here, memproxy refuses.
    other = {"payload_type": "data", "structured_data": {"x": "1"}, "memory_container_id": b}
    t.add("add naming another container", side.call("POST", base, other))
    everything = {"delete_all_memories": "true"}
    t.add("delete a with its memories", side.call("DELETE", f"{MC}/{a}", params=everything))
    t.note(side.call("DELETE", f"{MC}/{a}"))  # ml-commons kept it (409): now it is gone on both sides
    t.add("delete b with its memories", side.call("DELETE", f"{MC}/{b}", params=everything))
    listing = {"format": "json", "h": "index", "s": "index"}
    t.add("indices left", side.call("GET", f"/_cat/indices/{prefix}-*", params=listing))
    hidden = {
        "name": f"{prefix}-h",
        "configuration": {"index_prefix": f".{prefix}", "use_system_index": False},
    }
    created = t.add("create on a hidden prefix", side.call("POST", f"{MC}/_create", hidden))
    if created.status == 200:  # ml-commons made it: its indices go again
        cid = created.body["memory_container_id"]
        t.note(side.call("DELETE", f"{MC}/{cid}", params=everything))
    return t


def test_container_scope(sides: tuple[Side, Side]) -> None:
    prefix = new_prefix("scope")
    deviations = {
        "add naming another container": BODY_CONTAINER_ID,
        "search sessions": SESSION_ID_PER_CONTAINER,
        "delete a with its memories": SHARED_FAMILY_DELETE,
        "create on a hidden prefix": HIDDEN_PREFIX_REFUSED,
    }
    compare_traces(*both(sides, container_scope, prefix), deviations)
