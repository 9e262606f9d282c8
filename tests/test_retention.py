"""ml-commons 3.8/3.9 memory retention and pinning (docs/opensearch-api.md, "Retention").

Unit tests: the policy's parse and merge, the settings' typed parse, the effective policy. Node tests run
a memproxy of their own with ``--memory-retention`` (``--auth none``) on two containers that share their
indices: ``A`` with a policy, ``B`` (its neighbour) without; old memories are made by writing
``last_updated_time`` straight into the index on the node. The dry run's figures are checked against the
data, ``_execute`` must delete exactly those documents and nothing of ``B``, pinned ones survive, a
session's working memory goes with it, and an orphaned working memory goes only once its first observation
is ``orphan_ttl_days`` old. Cluster defaults and the working-memory TTL are given to one container's run in
process (stored, they would apply to every container of the shared node). The cluster-settings tests go
through the suite's ordinary proxy (retention off), and reset what they set.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import httpx
import pytest
from opensearchpy import OpenSearch, TransportError

from proxy.config import Settings, parse_settings
from proxy.core.clock import now_ms
from proxy.core.containers import get_container
from proxy.core.jobs import JobQueue
from proxy.core.retention.job import run_container, schedule, trigger
from proxy.core.retention.plan import plan_container
from proxy.core.retention.policy import effective_policy, merge_policy, parse_policy
from proxy.core.retention.settings import PREFIX, RetentionSettings, parse_setting
from proxy.core.services import Services
from proxy.errors import BadRequest
from proxy.store.client import Store
from proxy.store.jobs import JobDocs
from tests.conftest import ProxyProcess
from tests.opensearch_memory_helpers import EMBEDDING, MC, call, error_body, new_prefix

pytest_plugins = ["tests.opensearch_memory_fixtures"]

DAY_MS = 86_400_000
T = TypeVar("T")
ENABLED = PREFIX + "retention_enabled"
INTERVAL = PREFIX + "retention_job_interval_hours"

# --- no node ----------------------------------------------------------------------------------------------


def test_policy_parse_keeps_nulls_and_refuses_unknown_keys_and_bad_numbers() -> None:
    raw = {"sessions": {"retention_days": 30, "max_count": None}, "history": None}
    assert parse_policy(raw) == {"sessions": {"retention_days": 30, "max_count": None}, "history": None}
    assert parse_policy(None) is None
    for bad, text in (
        ({"working": {"max_count": 1}}, "Unknown retention_policy memory type [working]"),
        ({"sessions": {"ttl": 1}}, "Unknown retention_policy field [ttl]"),
        ({"history": {"retention_days": 3}}, "Unknown retention_policy field [retention_days] for history"),
        ({"sessions": {"max_count": 0}}, "must be a positive integer"),
        ({"sessions": {"max_count": True}}, "must be a positive integer"),
        ({"long-term": {"retention_days": "3"}}, "must be a positive integer"),
        ({"sessions": 3}, "retention_policy.sessions must be an object"),
        ([1], "retention_policy must be an object"),
    ):
        with pytest.raises(BadRequest, match=text.replace("[", r"\[").replace("]", r"\]")):
            parse_policy(bad)


def test_policy_merges_type_by_type_and_field_by_field() -> None:
    current = {"sessions": {"retention_days": 30, "max_count": 100}, "long-term": {"max_count": 5}}
    update = parse_policy({"sessions": {"max_count": None, "retention_days": 7}, "history": {"max_count": 9}})
    assert merge_policy(current, update) == {
        "sessions": {"retention_days": 7},
        "long-term": {"max_count": 5},
        "history": {"max_count": 9},
    }
    assert merge_policy(current, parse_policy({"long-term": None})) == {
        "sessions": {"retention_days": 30, "max_count": 100}
    }
    assert merge_policy(current, None) == {}  # "retention_policy": null opts out


def test_effective_policy_is_the_containers_else_the_cluster_defaults_unless_opted_out() -> None:
    defaults = RetentionSettings(default_session_max_count=10, default_history_max_count=-1)
    assert effective_policy({"history": {"max_count": 3}}, False, defaults) == (
        "container",
        {"history": {"max_count": 3}},
    )
    assert effective_policy(None, False, defaults) == ("cluster_default", {"sessions": {"max_count": 10}})
    assert effective_policy(None, True, defaults) == ("opted_out", {})
    assert effective_policy(None, False, RetentionSettings()) == ("none", {})


def test_settings_parse_like_the_nodes_typed_settings() -> None:
    assert parse_setting(ENABLED, True) == "true"
    assert parse_setting(INTERVAL, "168") == "168"
    assert parse_setting(PREFIX + "default_session_max_count", -1) == "-1"
    for key, value, text in (
        (ENABLED, "yes", "Failed to parse value [yes] as only [true] or [false] are allowed."),
        (INTERVAL, 0, f"Failed to parse value [0] for setting [{INTERVAL}] must be >= 1"),
        (INTERVAL, 169, f"Failed to parse value [169] for setting [{INTERVAL}] must be <= 168"),
        (INTERVAL, "x", f"Failed to parse value [x] for setting [{INTERVAL}]"),
        (PREFIX + "orphan_ttl_days", -1, "must be >= 1"),
        (PREFIX + "default_history_max_count", 0, "must be -1 or >= 1"),
    ):
        with pytest.raises(BadRequest) as err:
            parse_setting(key, value)
        assert text in err.value.message and err.value.os_type == "illegal_argument_exception"


def test_the_memory_retention_flag_and_its_environment_variable() -> None:
    assert parse_settings([], {}).memory_retention is False
    assert parse_settings(["--memory-retention"], {}).memory_retention is True
    assert parse_settings(["--memory-retention", "false"], {}).memory_retention is False
    assert parse_settings([], {"MEMPROXY_MEMORY_RETENTION": "true"}).memory_retention is True


# --- on the node ------------------------------------------------------------------------------------------


def _slot_job() -> str:
    return f"retention-24h-{now_ms() // (24 * 3_600_000)}"


@pytest.fixture(scope="module")
def retention_proxy(opensearch_url: str) -> Iterator[ProxyProcess]:
    # The process schedules this slot's run when it starts: an earlier run's job of the slot must not count.
    httpx.delete(f"{opensearch_url}/memproxy-jobs/_doc/{_slot_job()}", params={"refresh": "true"})
    p = ProxyProcess(
        opensearch_url, extra_args=["--auth", "none", "--memory-retention", "--jobs-poll-s", "0.2"]
    )
    yield p
    p.stop()


@pytest.fixture(scope="module")
def api(retention_proxy: ProxyProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=retention_proxy.url, timeout=120) as c:
        yield c


def _ok(resp: httpx.Response) -> Any:
    assert resp.status_code == 200, resp.text
    return resp.json()


@dataclass
class Data:
    a: str
    b: str
    prefix: str
    lt: dict[str, str]  # label → long-term id of A
    history_a: int


def _index(prefix: str, memory_type: str) -> str:
    return f"{prefix}-memory-{memory_type}"


def _backdate(node: OpenSearch, index: str, query: dict[str, Any], days: float) -> int:
    when = now_ms() - int(days * DAY_MS)
    answer = node.update_by_query(
        index=index,
        body={
            "query": query,
            "script": {"source": f"ctx._source.last_updated_time = {when}L", "lang": "painless"},
        },
        params={"refresh": "true"},
    )
    return int(answer["updated"])


def _count(node: OpenSearch, prefix: str, memory_type: str, cid: str, extra: list[Any] | None = None) -> int:
    query = {"bool": {"filter": [{"term": {"memory_container_id": cid}}, *(extra or [])]}}
    return int(node.count(index=_index(prefix, memory_type), body={"query": query})["count"])


def _add_working(api: httpx.Client, cid: str, session: str, text: str) -> str:
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        "namespace": {"session_id": session},
    }
    return str(_ok(api.post(f"{MC}/{cid}/memories", json=body))["working_memory_id"])


def _wait_for_slot_run(node: OpenSearch) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        found = node.get(index="memproxy-jobs", id=_slot_job(), params={"ignore": 404})
        if found.get("found") and found["_source"]["state"] in ("COMPLETED", "FAILED"):
            return dict(found["_source"])
        assert time.monotonic() < deadline, found
        time.sleep(0.2)


@pytest.fixture(scope="module")
def data(api: httpx.Client, node: OpenSearch) -> Iterator[Data]:
    # The run the process scheduled at its start is over before the data exists (it cannot take any of it).
    assert _wait_for_slot_run(node)["state"] == "COMPLETED"
    prefix = new_prefix("retention")
    config = {**EMBEDDING, "index_prefix": prefix, "use_system_index": False}
    policy = {
        "sessions": {"retention_days": 30},
        "long-term": {"max_count": 2},
        "history": {"max_count": 1},
    }
    a = _ok(
        api.post(f"{MC}/_create", json={"name": "A", "configuration": {**config, "retention_policy": policy}})
    )
    b = _ok(api.post(f"{MC}/_create", json={"name": "B", "configuration": config}))
    a_id, b_id = a["memory_container_id"], b["memory_container_id"]
    for cid in (a_id, b_id):
        for session in ("s-old", "s-pin", "s-new"):
            _ok(api.post(f"{MC}/{cid}/memories/sessions", json={"session_id": session, "summary": session}))
        _add_working(api, cid, "s-old", "one")
        _add_working(api, cid, "s-old", "two")
        _add_working(api, cid, "s-pin", "kept by its pinned session")
        _add_working(api, cid, "s-new", "fresh")
        _add_working(api, cid, "s-gone", "its session is deleted below")
    labels = ("lt1", "lt2", "lt3", "lt4")
    memories = [{"memory": f"memory {label}", "tags": {"label": label}} for label in labels]
    added = _ok(api.post(f"{MC}/{a_id}/memories/long-term/_memproxy_bulk", json={"memories": memories}))
    lt = dict(zip(labels, added["long_term_memory_ids"], strict=True))
    _ok(api.post(f"{MC}/{b_id}/memories/long-term/_memproxy_bulk", json={"memories": memories}))
    # Ages: both containers' s-old and s-pin sessions 60 days, long-term lt1 4 days, lt2 3, lt3 2, lt4 now.
    for cid in (a_id, b_id):
        ids = [f"{cid}:s-old", f"{cid}:s-pin"]
        assert _backdate(node, _index(prefix, "sessions"), {"ids": {"values": ids}}, 60) == 2
        for label, days in (("lt1", 4), ("lt2", 3), ("lt3", 2)):
            query = {
                "bool": {"filter": [{"term": {"memory_container_id": cid}}, {"term": {"tags.label": label}}]}
            }
            assert _backdate(node, _index(prefix, "long-term"), query, days) == 1
        # The session of "s-gone" disappears behind memproxy's back: its working memory is an orphan.
        node.delete(
            index=_index(prefix, "sessions"), id=f"{cid}:s-gone", params={"refresh": "true", "routing": cid}
        )
        # History as ml-commons writes it (memproxy's long-term bulk route records none): 3, 2 and 1 day old.
        for days in (3, 2, 1):
            event = {
                "memory_container_id": cid,
                "memory_id": "x",
                "action": "ADD",
                "created_time": now_ms() - days * DAY_MS,
            }
            node.index(
                index=_index(prefix, "history"), body=event, params={"routing": cid, "refresh": "true"}
            )
    history_a = _count(node, prefix, "history", a_id)
    assert history_a == 3
    yield Data(a_id, b_id, prefix, lt, history_a)
    for cid in (a_id, b_id):
        api.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})


def _pin(api: httpx.Client, cid: str, memory_type: str, memory_id: str, pinned: bool) -> httpx.Response:
    return api.put(f"{MC}/{cid}/memories/{memory_type}/{memory_id}", json={"pinned": pinned})


def test_policy_is_stored_merged_and_nulled(api: httpx.Client) -> None:
    config = {"index_prefix": new_prefix("retpolicy"), "use_system_index": False}
    body = {"name": "p", "configuration": {**config, "retention_policy": {"sessions": {"retention_days": 9}}}}
    cid = _ok(api.post(f"{MC}/_create", json=body))["memory_container_id"]
    try:
        shown = _ok(api.get(f"{MC}/{cid}"))["configuration"]["retention_policy"]
        assert shown == {"sessions": {"retention_days": 9}}
        update = {"retention_policy": {"sessions": {"max_count": 4}, "history": {"max_count": 2}}}
        _ok(api.put(f"{MC}/{cid}", json={"configuration": update}))
        shown = _ok(api.get(f"{MC}/{cid}"))["configuration"]["retention_policy"]
        assert shown == {"sessions": {"retention_days": 9, "max_count": 4}, "history": {"max_count": 2}}
        bad = api.put(
            f"{MC}/{cid}", json={"configuration": {"retention_policy": {"sessions": {"max_count": -3}}}}
        )
        assert bad.status_code == 400 and "must be a positive integer" in bad.text
        _ok(api.put(f"{MC}/{cid}", json={"configuration": {"retention_policy": None}}))
        cfg = _ok(api.get(f"{MC}/{cid}"))["configuration"]
        assert "retention_policy" not in cfg
        dry = _ok(api.post(f"{MC}/{cid}/_retention/_dry_run"))
        assert dry["policy_source"] == "opted_out" and dry["effective_policy"] == {}
    finally:
        api.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})


def test_pinning_does_not_move_the_time_and_working_memory_refuses_it(
    api: httpx.Client, data: Data, node: OpenSearch
) -> None:
    before = _ok(api.get(f"{MC}/{data.a}/memories/long-term/{data.lt['lt2']}"))
    _ok(_pin(api, data.a, "long-term", data.lt["lt2"], True))
    after = _ok(api.get(f"{MC}/{data.a}/memories/long-term/{data.lt['lt2']}"))
    assert after["pinned"] is True and after["last_updated_time"] == before["last_updated_time"]
    session_before = _ok(api.get(f"{MC}/{data.a}/memories/sessions/s-pin"))
    _ok(_pin(api, data.a, "sessions", "s-pin", True))
    session = _ok(api.get(f"{MC}/{data.a}/memories/sessions/s-pin"))
    assert session["pinned"] is True and session["last_updated_time"] == session_before["last_updated_time"]
    # Unpin and pin again: false is stored as false.
    _ok(_pin(api, data.a, "sessions", "s-pin", False))
    assert _ok(api.get(f"{MC}/{data.a}/memories/sessions/s-pin"))["pinned"] is False
    _ok(_pin(api, data.a, "sessions", "s-pin", True))
    working = _ok(
        api.post(f"{MC}/{data.a}/memories/working/_search", json={"query": {"match_all": {}}, "size": 1})
    )
    wid = working["hits"]["hits"][0]["_id"]
    refused = _pin(api, data.a, "working", wid, True)
    assert refused.status_code == 400, refused.text
    assert "pinned field is not supported for working memory type" in refused.text
    # The neighbour's same-named session is its own: not pinned.
    assert "pinned" not in _ok(api.get(f"{MC}/{data.b}/memories/sessions/s-pin"))
    # A long-term memory may be written pinned (memproxy's write route), with retention on.
    written = _ok(
        api.post(f"{MC}/{data.b}/memories/long-term/_memproxy_add", json={"memory": "kept", "pinned": True})
    )
    stored = _ok(api.get(f"{MC}/{data.b}/memories/long-term/{written['long_term_memory_id']}"))
    assert stored["pinned"] is True
    api.delete(f"{MC}/{data.b}/memories/long-term/{written['long_term_memory_id']}")


def test_a_process_with_retention_on_schedules_the_current_slots_run(
    api: httpx.Client, node: OpenSearch
) -> None:
    """The runner's scheduler (JobRunner.every) enqueued this interval slot's run when the process started
    (the fixture deleted any earlier one)."""
    job = _wait_for_slot_run(node)
    assert job["kind"] == "retention" and job["state"] == "COMPLETED", job
    assert set(job["result"]) == {"containers", "deleted"}, job  # it ran (retention on), not skipped


def _wait_for_run(api: httpx.Client, node: OpenSearch) -> dict[str, Any]:
    """Trigger a run (waiting out one already pending) and wait for it to complete; its result."""
    deadline = time.monotonic() + 120
    while True:
        started = now_ms()
        status = _ok(api.post(f"{MC}/_retention/_execute"))["status"]
        if status == "triggered":
            break
        assert status == "already_running" and time.monotonic() < deadline, status
        time.sleep(0.5)
    while time.monotonic() < deadline:
        node.indices.refresh(index="memproxy-jobs")
        query = {
            "bool": {
                "filter": [
                    {"term": {"subject": "memory-retention"}},
                    {"range": {"created_at": {"gte": started}}},
                ]
            }
        }
        hits = node.search(index="memproxy-jobs", body={"query": query, "size": 5})["hits"]["hits"]
        done = [h["_source"] for h in hits if h["_source"]["state"] in ("COMPLETED", "FAILED")]
        if done:
            assert done[0]["state"] == "COMPLETED", done[0]
            return dict(done[0]["result"])
        time.sleep(0.3)
    raise AssertionError("the retention run did not complete within 120 s")


def _ids(node: OpenSearch, prefix: str, memory_type: str, cid: str) -> set[str]:
    query = {"bool": {"filter": [{"term": {"memory_container_id": cid}}]}}
    found = node.search(
        index=_index(prefix, memory_type), body={"query": query, "size": 1000, "_source": False}
    )
    return {h["_id"] for h in found["hits"]["hits"]}


def test_dry_run_then_execute_deletes_exactly_that_and_nothing_of_the_neighbour(
    api: httpx.Client, data: Data, node: OpenSearch
) -> None:
    _ok(_pin(api, data.a, "long-term", data.lt["lt2"], True))
    _ok(_pin(api, data.a, "sessions", "s-pin", True))
    dry = _ok(api.post(f"{MC}/{data.a}/_retention/_dry_run"))
    assert dry["container_id"] == data.a and dry["policy_source"] == "container"
    assert dry["effective_policy"]["long-term"] == {"max_count": 2}
    would = dry["would_delete"]
    assert would["sessions"] == {
        "total": 1,
        "by_reason": {"retention_days": 1, "max_count": 0, "cascade": 0, "ttl": 0, "orphan": 0},
    }
    assert would["long_term"]["by_reason"]["max_count"] == 2 and would["long_term"]["total"] == 2
    assert would["history"] == {
        "total": 2,
        "by_reason": {"retention_days": 0, "max_count": 2, "cascade": 0, "ttl": 0, "orphan": 0},
    }
    # s-old's two working memories cascade; the orphan has no baseline yet, so it is only observed.
    assert would["working_memory"]["by_reason"] == {
        "retention_days": 0,
        "max_count": 0,
        "cascade": 2,
        "ttl": 0,
        "orphan": 0,
    }
    assert dry["pinned_would_skip"] == 1  # s-pin, 60 days old
    neighbour = _ok(api.post(f"{MC}/{data.b}/_retention/_dry_run"))
    assert neighbour["policy_source"] == "none"
    assert all(v["total"] == 0 for v in neighbour["would_delete"].values())

    before = {t: _ids(node, data.prefix, t, data.a) for t in ("sessions", "working", "long-term", "history")}
    neighbour_before = {
        t: _ids(node, data.prefix, t, data.b) for t in ("sessions", "working", "long-term", "history")
    }
    result = _wait_for_run(api, node)
    assert result["containers"] >= 2
    after = {t: _ids(node, data.prefix, t, data.a) for t in before}
    assert before["sessions"] - after["sessions"] == {f"{data.a}:s-old"}
    assert after["long-term"] == {data.lt["lt2"], data.lt["lt4"]}  # lt2 pinned, lt4 the newest
    assert len(before["working"] - after["working"]) == 2
    assert len(after["history"]) == 1
    newest = node.search(
        index=_index(data.prefix, "history"), body={"query": {"ids": {"values": list(after["history"])}}}
    )
    assert now_ms() - newest["hits"]["hits"][0]["_source"]["created_time"] < 1.5 * DAY_MS  # the newest stays
    kept = _ok(
        api.post(f"{MC}/{data.a}/memories/working/_search", json={"query": {"match_all": {}}, "size": 10})
    )
    sessions_left = sorted(h["_source"]["namespace"]["session_id"] for h in kept["hits"]["hits"])
    assert sessions_left == ["s-gone", "s-new", "s-pin"]  # the pinned session protects its working memory
    assert {t: _ids(node, data.prefix, t, data.b) for t in before} == neighbour_before

    # The run records the orphan's first observation; it is due once that is orphan_ttl_days (7) old.
    baseline_id = f"retention-orphans-{data.a}"
    baseline = node.get(index="memproxy-settings", id=baseline_id)["_source"]["first_seen"]
    assert set(baseline) == {"s-gone"} and abs(baseline["s-gone"] - now_ms()) < 600_000
    again = _ok(api.post(f"{MC}/{data.a}/_retention/_dry_run"))["would_delete"]
    assert again["working_memory"]["total"] == 0 and again["sessions"]["total"] == 0
    assert again["long_term"]["total"] == 0
    aged = {"doc": {"first_seen": {"s-gone": now_ms() - 8 * DAY_MS}}}
    node.update(index="memproxy-settings", id=baseline_id, body=aged, params={"refresh": "true"})
    due = _ok(api.post(f"{MC}/{data.a}/_retention/_dry_run"))["would_delete"]["working_memory"]
    assert due["by_reason"]["orphan"] == 1 and due["total"] == 1
    _wait_for_run(api, node)
    kept = _ok(
        api.post(f"{MC}/{data.a}/memories/working/_search", json={"query": {"match_all": {}}, "size": 10})
    )
    assert sorted(h["_source"]["namespace"]["session_id"] for h in kept["hits"]["hits"]) == ["s-new", "s-pin"]
    assert {t: _ids(node, data.prefix, t, data.b) for t in before} == neighbour_before
    # Still there: the pinned session and the pinned long-term memory.
    assert _ok(api.get(f"{MC}/{data.a}/memories/sessions/s-pin"))["pinned"] is True
    assert _ok(api.get(f"{MC}/{data.a}/memories/long-term/{data.lt['lt2']}"))["pinned"] is True


# --- retention off: the suite's ordinary proxy -----------------------------------------------------------


def test_disabled_retention_refuses_policy_and_pin_and_execute(client: OpenSearch, plain: str) -> None:
    assert call(client, "POST", f"{MC}/_retention/_execute") == {"status": "retention_disabled"}
    with pytest.raises(TransportError) as refused:
        session = call(client, "POST", f"{MC}/{plain}/memories/sessions", {"summary": "x"})["session_id"]
        call(client, "PUT", f"{MC}/{plain}/memories/sessions/{session}", {"pinned": True})
    assert refused.value.status_code == 403
    dry = call(client, "POST", f"{MC}/{plain}/_retention/_dry_run")
    assert dry["policy_source"] == "none" and "memory retention is not enabled" in dry["warnings"][0]
    with pytest.raises(TransportError) as err:
        body = {"name": "x", "configuration": {"retention_policy": {"sessions": {"max_count": 3}}}}
        call(client, "POST", f"{MC}/_create", body)
    assert err.value.status_code == 403
    assert "plugins.ml_commons.memory.retention_enabled" in error_body(err.value)["error"]["reason"]


def _settings(client: OpenSearch, **params: str) -> dict[str, Any]:
    return dict(call(client, "GET", "/_cluster/settings", params=params or None))


def test_cluster_settings_through_memproxy(client: OpenSearch) -> None:
    try:
        answer = call(client, "PUT", "/_cluster/settings", {"transient": {INTERVAL: 48}})
        assert answer == {
            "acknowledged": True,
            "persistent": {},
            "transient": {"plugins": {"ml_commons": {"memory": {"retention_job_interval_hours": "48"}}}},
        }
        assert _settings(client, flat_settings="true")["transient"][INTERVAL] == "48"
        nested = _settings(client)["transient"]["plugins"]["ml_commons"]["memory"]
        assert nested["retention_job_interval_hours"] == "48"
        defaults = _settings(client, flat_settings="true", include_defaults="true")["defaults"]
        assert defaults[ENABLED] == "false" and defaults[PREFIX + "orphan_ttl_days"] == "7"
        assert INTERVAL not in defaults
        # Nested keys and a node setting in one body: the node gets its own, memproxy keeps its own.
        mixed = {
            "persistent": {
                "plugins": {"ml_commons": {"memory": {"default_history_max_count": "-1"}}},
                "search.default_keep_alive": "6m",
            }
        }
        answer = call(client, "PUT", "/_cluster/settings", mixed, params={"flat_settings": "true"})
        assert answer["persistent"] == {
            "search.default_keep_alive": "6m",
            PREFIX + "default_history_max_count": "-1",
        }
        assert _settings(client, flat_settings="true")["persistent"]["search.default_keep_alive"] == "6m"
        with pytest.raises(TransportError) as err:
            call(
                client,
                "PUT",
                "/_cluster/settings",
                {"persistent": {INTERVAL: 0, "search.default_keep_alive": "7m"}},
            )
        info = error_body(err.value)
        assert err.value.status_code == 400 and info["error"]["type"] == "illegal_argument_exception"
        assert f"for setting [{INTERVAL}] must be >= 1" in info["error"]["reason"]
        # Nothing of a refused body is applied, the node's part included.
        assert _settings(client, flat_settings="true")["persistent"]["search.default_keep_alive"] == "6m"
        # Nor memproxy's part when the node refuses its own.
        with pytest.raises(TransportError) as err:
            call(client, "PUT", "/_cluster/settings", {"persistent": {INTERVAL: 12, "no.such.setting": 1}})
        assert err.value.status_code == 400 and error_body(err.value)["error"]["type"] == "settings_exception"
        assert INTERVAL not in _settings(client, flat_settings="true")["persistent"]
    finally:
        reset = {
            "persistent": {PREFIX + "default_history_max_count": None, "search.default_keep_alive": None},
            "transient": {INTERVAL: None},
        }
        call(client, "PUT", "/_cluster/settings", reset)
    flat = _settings(client, flat_settings="true")
    assert INTERVAL not in flat["transient"] and "search.default_keep_alive" not in flat["persistent"]


def test_retention_enabled_through_cluster_settings_lets_a_policy_in(client: OpenSearch) -> None:
    prefix = new_prefix("retenable")
    body = {
        "name": "e",
        "configuration": {"index_prefix": prefix, "retention_policy": {"sessions": {"max_count": 3}}},
    }
    cid = None
    try:
        call(client, "PUT", "/_cluster/settings", {"persistent": {ENABLED: True}})
        cid = call(client, "POST", f"{MC}/_create", body)["memory_container_id"]
        shown = call(client, "GET", f"{MC}/{cid}")["configuration"]["retention_policy"]
        assert shown == {"sessions": {"max_count": 3}}
    finally:
        call(client, "PUT", "/_cluster/settings", {"persistent": {ENABLED: None}})
        if cid is not None:
            call(client, "DELETE", f"{MC}/{cid}", params={"delete_all_memories": "true"})
    assert _settings(client, flat_settings="true")["persistent"].get(ENABLED) is None
    assert call(client, "POST", f"{MC}/_retention/_execute") == {"status": "retention_disabled"}


# --- in process, on the node: one container's run with settings of the test's own ---------------------------


async def _in_process(opensearch_url: str, work: Callable[[Services], Awaitable[T]]) -> T:
    store = Store(Settings(opensearch_url=opensearch_url))
    try:
        return await work(Services(store=store, embedders=cast(Any, None), memory_retention=True))
    finally:
        await store.close()


def test_cluster_defaults_apply_once_and_ttl_spares_a_pinned_sessions_working_memory(
    api: httpx.Client, node: OpenSearch, opensearch_url: str
) -> None:
    """The cluster defaults and the working-memory TTL are passed to the run here, not stored: a stored
    default would apply to every container of the shared node."""
    prefix = new_prefix("retdefaults")
    body = {"name": "d", "configuration": {"index_prefix": prefix, "use_system_index": False}}
    cid = _ok(api.post(f"{MC}/_create", json=body))["memory_container_id"]
    try:
        for session in ("s1", "s2", "s3"):
            _ok(api.post(f"{MC}/{cid}/memories/sessions", json={"session_id": session}))
        for session, text in (("s1", "old"), ("s2", "old"), ("s3", "old"), ("s3", "fresh")):
            _add_working(api, cid, session, text)
        _ok(_pin(api, cid, "sessions", "s2", True))
        # s1 is the least recently updated session; every "old" working memory is 10 days old.
        assert _backdate(node, _index(prefix, "sessions"), {"ids": {"values": [f"{cid}:s1"]}}, 3) == 1
        for session in ("s1", "s2", "s3"):
            query = {
                "bool": {
                    "filter": [{"term": {"memory_container_id": cid}}, {"term": {"session_id": session}}]
                }
            }
            found = node.search(index=_index(prefix, "working"), body={"query": query, "size": 10})
            for hit in found["hits"]["hits"]:
                if hit["_source"]["messages"][0]["content"][0]["text"] == "old":
                    assert (
                        _backdate(node, _index(prefix, "working"), {"ids": {"values": [hit["_id"]]}}, 10) == 1
                    )
        settings = RetentionSettings(enabled=True, default_session_max_count=2, working_memory_ttl_days=5)

        async def first(svc: Services) -> tuple[dict[str, Any], dict[str, int] | None]:
            container = await get_container(svc, cid)
            plan = (await plan_container(svc, container, settings)).view()
            return plan, await run_container(svc, container, settings)

        plan, deleted = asyncio.run(_in_process(opensearch_url, first))
        assert plan["policy_source"] == "cluster_default"
        assert plan["effective_policy"] == {"sessions": {"max_count": 2}}
        assert plan["would_delete"]["sessions"]["by_reason"]["max_count"] == 1
        working = plan["would_delete"]["working_memory"]["by_reason"]
        assert (working["cascade"], working["ttl"]) == (1, 1)  # s1's, and s3's old one
        assert plan["pinned_would_skip"] == 1  # s2's old working memory, protected by its pinned session
        assert deleted == {"sessions": 1, "working_memory": 2, "long_term": 0, "history": 0}
        left = _ok(
            api.post(f"{MC}/{cid}/memories/working/_search", json={"query": {"match_all": {}}, "size": 10})
        )
        texts = sorted(
            (h["_source"]["namespace"]["session_id"], h["_source"]["messages"][0]["content"][0]["text"])
            for h in left["hits"]["hits"]
        )
        assert texts == [("s2", "old"), ("s3", "fresh")]
        # Applied once: the defaults are now the container's own policy, and a later default does not apply.
        assert _ok(api.get(f"{MC}/{cid}"))["configuration"]["retention_policy"] == {
            "sessions": {"max_count": 2}
        }
        later = RetentionSettings(enabled=True, default_session_max_count=1)

        async def second(svc: Services) -> dict[str, Any]:
            return (await plan_container(svc, await get_container(svc, cid), later)).view()

        again = asyncio.run(_in_process(opensearch_url, second))
        assert again["policy_source"] == "container" and again["effective_policy"] == {
            "sessions": {"max_count": 2}
        }
        assert again["would_delete"]["sessions"]["total"] == 0
        _ok(api.put(f"{MC}/{cid}", json={"configuration": {"retention_policy": None}}))
        opted = asyncio.run(_in_process(opensearch_url, second))
        assert opted["policy_source"] == "opted_out" and opted["would_delete"]["sessions"]["total"] == 0
    finally:
        api.delete(f"{MC}/{cid}", params={"delete_all_memories": "true"})


def test_every_process_scheduling_one_slot_makes_one_job(opensearch_url: str) -> None:
    index = f"memproxy-jobs-rt-{uuid.uuid4().hex[:8]}"

    async def work(svc: Services) -> tuple[list[str | None], int, str]:
        queues = [JobQueue(JobDocs(svc.store, index=index)) for _ in range(3)]
        ids = [await schedule(svc, q) for q in queues]
        await svc.store.request("POST", f"/{index}/_refresh")
        found = await svc.store.request("POST", f"/{index}/_count", body={"query": {"match_all": {}}})
        return ids, int(found["count"]), await trigger(svc, queues[0])

    try:
        ids, count, status = asyncio.run(_in_process(opensearch_url, work))
    finally:
        httpx.delete(f"{opensearch_url}/{index}")
    assert len(set(ids)) == 1 and str(ids[0]).startswith("retention-24h-")
    assert count == 1
    assert status == "already_running"  # the slot's run is pending
