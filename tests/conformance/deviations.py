"""The deliberate differences from ml-commons 3.6, each documented in docs/opensearch-api.md.

A flow maps the label of a call to one of these; ``compare_traces`` then runs the deviation's check on the
two normalised replies, which asserts the difference exactly as documented and that nothing else differs.
``test_deviations.py`` keeps this list and the document's table equal.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from tests.conformance.compare import Deviation, Reply, assert_same

__all__ = [
    "ADD_BUMPS_SESSION",
    "ADD_MEMORY_EMPTY_BODY",
    "AUTO_SESSION_DOCUMENT",
    "AUTO_SESSION_WITHOUT_SECURITY",
    "BODY_CONTAINER_ID",
    "CALLER_CONTAINER_ID",
    "CALLER_CONTAINER_ID_CHECKED",
    "CHOSEN_CONTAINER",
    "CONNECTOR_IN_USE_EXACT",
    "CONNECTOR_MAP_TYPE_ERROR",
    "CONNECTOR_SCRIPTS_REFUSED",
    "CONNECTOR_UPDATE_CHECKED",
    "CONTAINER_UPDATE_REFRESHES",
    "CONTENT_ONLY_TIMESTAMPS",
    "DELETE_BY_QUERY_PROCEEDS",
    "DEVIATION_LIST",
    "DIMENSION_CHECKED",
    "DSL_ALLOWLIST",
    "EFFICIENT_FILTERING",
    "HIDDEN_PREFIX_REFUSED",
    "HYBRID_TOTAL",
    "LOCAL_MODELS_REFUSED",
    "LONG_TERM_WITHOUT_STRATEGIES",
    "OWN_SESSION_DOCUMENT",
    "PINNED",
    "RETENTION_POLICY",
    "RETENTION_ROUTES",
    "RETENTION_SETTINGS",
    "SCRIPTS_REFUSED",
    "SESSION_ID_PER_CONTAINER",
    "SHARED_FAMILY_DELETE",
    "UPDATE_ERRORS_4XX",
    "WORKING_SESSION_ID_FIELD",
]


def _without(reply: Reply, drop: Any) -> Reply:
    body = copy.deepcopy(reply.body)
    drop(body)
    return Reply(reply.status, body)


def _container_update_refreshes(ref: Reply, mp: Reply) -> None:
    assert "forced_refresh" not in ref.body and mp.body.get("forced_refresh") is True
    assert_same(ref, _without(mp, lambda b: b.pop("forced_refresh")))


CONTAINER_UPDATE_REFRESHES = Deviation(
    "container-update-refresh",
    "A container update is refreshed at once (`forced_refresh: true`), so the next `_search` sees it; "
    "ml-commons 3.6 does not refresh and `_search` returns the old document until the next refresh.",
    _container_update_refreshes,
)


def _working_session_id_field(ref: Reply, mp: Reply) -> None:
    def drop(body: dict[str, Any]) -> None:
        for hit in body["hits"]["hits"]:
            source = hit["_source"]
            if "session_id" in source:
                assert source["session_id"] == source["namespace"]["session_id"]
                del source["session_id"]

    assert not any("session_id" in h["_source"] for h in ref.body["hits"]["hits"])
    assert any("session_id" in h["_source"] for h in mp.body["hits"]["hits"])
    assert_same(ref, _without(mp, drop))


WORKING_SESSION_ID_FIELD = Deviation(
    "working-session-id",
    "Working memories that belong to a session also carry the top-level `session_id` keyword of "
    "ml-commons 3.8 (a copy of `namespace.session_id`), which `_search` shows in `_source`; 3.6 stores "
    "only the namespace.",
    _working_session_id_field,
)


def _delete_by_query_proceeds(ref: Reply, mp: Reply) -> None:
    ref_failures = ref.body["failures"]
    assert all(f["cause"]["type"] == "version_conflict_engine_exception" for f in ref_failures)
    assert mp.body["failures"] == [] and mp.body["version_conflicts"] == ref.body["version_conflicts"]
    assert_same(_without(ref, lambda b: b.update(failures=[])), mp)


DELETE_BY_QUERY_PROCEEDS = Deviation(
    "delete-by-query-conflicts",
    "`_delete_by_query` runs with `conflicts=proceed`: a document changed or deleted meanwhile is "
    "counted in `version_conflicts` and skipped, not listed in `failures`; ml-commons 3.6 aborts at the "
    "first conflict and lists it.",
    _delete_by_query_proceeds,
)


def _hits(reply: Reply) -> list[dict[str, Any]]:
    return list(reply.body["hits"]["hits"])


def _efficient_filtering(ref: Reply, mp: Reply) -> None:
    ref_hits, mp_hits = _hits(ref), _hits(mp)
    assert len(mp_hits) > len(ref_hits)
    # What ml-commons kept of its k candidates are memproxy's best hits, in the same order and scores.
    assert_same(Reply(ref.status, ref_hits), Reply(mp.status, mp_hits[: len(ref_hits)]))


EFFICIENT_FILTERING = Deviation(
    "efficient-filtering",
    "`_semantic_search` filters inside the k-NN query and returns min(k, matching) hits; ml-commons 3.6 "
    "post-filters its k nearest memories of the whole index and can return fewer. Its hits are then "
    "memproxy's first ones, in the same order with the same scores.",
    _efficient_filtering,
    applies=lambda ref, mp: ref.status == 200 and len(_hits(ref)) != len(_hits(mp)),
)


def _hybrid_total(ref: Reply, mp: Reply) -> None:
    ref_total, mp_total = ref.body["hits"]["total"]["value"], mp.body["hits"]["total"]["value"]
    assert len(_hits(mp)) <= mp_total < ref_total
    assert_same(ref, _without(mp, lambda b: b["hits"]["total"].update(value=ref_total)))


HYBRID_TOTAL = Deviation(
    "hybrid-total",
    "`_hybrid_search` counts in `hits.total` the distinct memories its two legs returned (at most 2k); "
    "neural-search counts every memory either sub-query matched. Hits, order and scores are the same.",
    _hybrid_total,
    applies=lambda ref, mp: ref.status == 200 and ref.body["hits"]["total"] != mp.body["hits"]["total"],
)


def _error(reply: Reply) -> tuple[int, str, str]:
    return reply.status, reply.error.get("type", ""), reply.error.get("reason", "")


def _add_memory_empty_body(ref: Reply, mp: Reply) -> None:
    assert _error(ref) == (500, "i_o_exception", "Add memory request has empty body")
    assert _error(mp) == (400, "illegal_argument_exception", "Add memory request has empty body")


ADD_MEMORY_EMPTY_BODY = Deviation(
    "add-memory-empty-body",
    "Add memory without a body is the caller's mistake: 400 `illegal_argument_exception` with ml-commons' "
    "reason; ml-commons 3.6 answers 500 `i_o_exception`.",
    _add_memory_empty_body,
)


def _dimension_checked(ref: Reply, mp: Reply) -> None:
    assert ref.status == 200 and ref.body["status"] == "created"
    assert _error(mp) == (
        400,
        "illegal_argument_exception",
        "Embedding dimension 768 does not match the dimension of embedding model <embedding_model> (384)",
    )


DIMENSION_CHECKED = Deviation(
    "dimension-checked",
    "A container whose `embedding_dimension` differs from its model's is refused (400); ml-commons 3.6 "
    "creates it, then its extraction fails silently and its semantic search answers 500.",
    _dimension_checked,
)

STRATEGIES_NEEDED = (
    "This memory container does not have any memory strategies configured. Semantic search requires "
    "long-term memories which are created through memory strategies. Please update the memory container "
    "configuration to add at least one strategy."
)


def _long_term_without_strategies(ref: Reply, mp: Reply) -> None:
    if isinstance(ref.body, list):  # the container's indices
        kinds = [row["index"].rsplit("-memory-", 1)[1] for row in mp.body]
        assert [row["index"].rsplit("-memory-", 1)[1] for row in ref.body] == ["sessions", "working"]
        assert kinds == ["history", "long-term", "sessions", "working"]
    else:  # a semantic search on it
        assert _error(ref) == (400, "status_exception", STRATEGIES_NEEDED)
        assert mp.status == 200 and mp.body["hits"]["hits"] == []


LONG_TERM_WITHOUT_STRATEGIES = Deviation(
    "long-term-without-strategies",
    "A container with an embedding model has long-term memory (and history) even without strategies, and "
    "`_semantic_search` / `_hybrid_search` serve it: GoodMem spaces are such containers, and memories "
    "written by `_memproxy_add` or GoodMem are searchable through this API. ml-commons 3.6 creates these "
    "indices only with strategies and refuses the search (400).",
    _long_term_without_strategies,
)


def _update_errors_4xx(ref: Reply, mp: Reply) -> None:
    assert _error(ref) == (500, "status_exception", "Internal server error")
    status, etype, reason = _error(mp)
    assert 400 <= status < 500 and etype in {"illegal_argument_exception", "status_exception"}
    assert reason and reason != "Internal server error"


UPDATE_ERRORS_4XX = Deviation(
    "update-errors-4xx",
    "A container update ml-commons refuses (a container that does not exist, an unknown strategy id, a "
    "strategy's type changed, the embedding changed once strategies exist) answers the 4xx and message "
    "ml-commons' own check raises (404 `Memory container not found`, 404 `Strategy with id <id> not found`, "
    "400 `Cannot change strategy type from <A> to <B> for strategy <id>`, 400 `Cannot change embedding "
    "configuration once strategies are configured. …`, as 3.8 answers since #4930); ml-commons 3.6 wraps "
    "each in 500 `Internal server error`.",
    _update_errors_4xx,
)


def _dsl_allowlist(ref: Reply, mp: Reply) -> None:
    assert ref.status in (200, 400)  # the node runs what it knows, and answers parsing_exception otherwise
    status, etype, reason = _error(mp)
    assert (status, etype) == (400, "illegal_argument_exception")
    assert "is not allowed in a memory search" in reason


DSL_ALLOWLIST = Deviation(
    "dsl-allowlist",
    "A caller's Query DSL is checked against memproxy's allowlist (docs/security.md, \"Caller Query DSL: the "
    'allowlist"): a query clause, aggregation or search-body key that is not on it (unknown to OpenSearch, '
    "or known and able to read outside the container: a `global` aggregation, suggesters, lookups) is "
    "refused with 400 `illegal_argument_exception` naming it; ml-commons 3.6 sends the body to the node, "
    "which runs it, or answers `parsing_exception` for a name it does not know.",
    _dsl_allowlist,
)


def _scripts_refused(ref: Reply, mp: Reply) -> None:
    assert ref.status == 200
    status, etype, reason = _error(mp)
    assert (status, etype) == (400, "illegal_argument_exception")
    assert "--allow-scripts" in reason and "[script]" in reason


SCRIPTS_REFUSED = Deviation(
    "scripts-refused",
    "A script anywhere in a caller's Query DSL (`_search` body, `_delete_by_query` query, semantic/hybrid "
    "`filter`, container `_search`) is refused with 400 `illegal_argument_exception` naming it and "
    "`--allow-scripts`, unless memproxy runs with `--allow-scripts true`; ml-commons 3.6 runs it on the "
    "node.",
    _scripts_refused,
)


def _connector_scripts_refused(ref: Reply, mp: Reply) -> None:
    assert ref.status == 200 and set(ref.body) == {"connector_id"}
    status, etype, reason = _error(mp)
    assert (status, etype) == (400, "illegal_argument_exception")
    assert "painless" in reason and "connector.pre_process.openai.embedding" in reason


CONNECTOR_SCRIPTS_REFUSED = Deviation(
    "connector-scripts-refused",
    "A connector whose predict action names a painless pre/post-process script instead of a built-in "
    "function is refused when it is created (400 `illegal_argument_exception` listing the built-in "
    "functions memproxy runs); ml-commons 3.6 stores it and runs the script at predict time.",
    _connector_scripts_refused,
)


def _local_models_refused(ref: Reply, mp: Reply) -> None:
    assert ref.status == 200 and set(ref.body) == {"task_id", "status"}
    status, etype, reason = _error(mp)
    assert (status, etype) == (400, "illegal_argument_exception")
    assert reason.startswith("memproxy registers remote models only")


LOCAL_MODELS_REFUSED = Deviation(
    "local-models-refused",
    "`models/_register` of a local model (any `function_name` but `remote`, with a `model_format`) is "
    "refused (400 `illegal_argument_exception`, naming `--embedder`, which is how memproxy runs local "
    "models); ml-commons 3.6 starts a download task.",
    _local_models_refused,
)


def _connector_update_checked(ref: Reply, mp: Reply) -> None:
    if ref.status == 200:  # the update itself: ml-commons stores what it cannot read back
        assert ref.body.get("result") == "updated", ref
        status, etype, reason = _error(mp)
        assert (status, etype) == (400, "illegal_argument_exception"), mp
        assert reason.startswith(("Unsupported connector protocol", "Cannot change connector protocol")), mp
    else:  # a read of the connector afterwards: unreadable on ml-commons, unchanged on memproxy
        assert _error(ref) == (400, "illegal_argument_exception", "Can't find class for type ftp"), ref
        assert mp.status == 200 and mp.body.get("protocol") == "http", mp


CONNECTOR_UPDATE_CHECKED = Deviation(
    "connector-update-checked",
    "A connector update is checked as a new connector is: an unknown `protocol` (400 `Unsupported "
    "connector protocol ...`) and a change between an MCP protocol and an inference one (400 `Cannot change "
    "connector protocol from [http] to [mcp_sse] ...`, as later ml-commons refuses it) are refused; "
    "ml-commons 3.6 stores either, after which every read of the connector fails (`Can't find class for "
    "type ftp`) or its next update answers 500.",
    _connector_update_checked,
)


_IN_USE = re.compile(
    r"^\d+ models are still using this connector, please (?:undeploy|delete or update) the models first: "
    r"\[(.*)\]$"
)


def _users(reply: Reply) -> list[str] | None:
    """The models an "are still using this connector" refusal names; None for any other answer."""
    found = _IN_USE.match(reply.error.get("reason", "")) if reply.status in (400, 409) else None
    return [m.strip() for m in found.group(1).split(",") if m.strip()] if found else None


def _bystanders_counted(ref: Reply, mp: Reply) -> bool:
    ref_users = _users(ref)
    if ref_users is not None:
        return set(ref_users) != set(_users(mp) or [])
    # a read of the connector whose delete ml-commons refused
    return ref.status == 200 and isinstance(ref.body, dict) and "protocol" in ref.body and mp.status == 404


def _connector_in_use_exact(ref: Reply, mp: Reply) -> None:
    ref_users = _users(ref)
    if ref_users is None:
        assert mp.error.get("reason", "").startswith("Failed to find connector"), mp
        return
    mp_users = _users(mp)
    if mp_users is None:  # no model of memproxy's uses it: the update or delete went through
        assert mp.status == 200 and mp.body.get("result") in ("updated", "deleted", "not_found"), mp
    else:  # the same refusal, naming the connector's own models only
        assert mp.status == ref.status and set(mp_users) < set(ref_users), (ref, mp)


CONNECTOR_IN_USE_EXACT = Deviation(
    "connector-in-use-exact",
    "A connector's update (while a deployed model uses it) and delete (while any model uses it) are refused "
    "for the models of *that* connector, matched by exact id; ml-commons 3.6 matches the id as analysed "
    "text, so models of other connectors whose ids share a token (ids one node makes often do) are counted "
    "and named too, and a delete or update nobody blocks on memproxy is refused there.",
    _connector_in_use_exact,
    applies=_bystanders_counted,
)


def _connector_map_type_error(ref: Reply, mp: Reply) -> None:
    assert ref.status == 200, ref  # the field is skipped: create answers an id, update "updated"
    assert _error(mp) == (
        400,
        "parsing_exception",
        "Failed to parse object: expecting token of type [START_OBJECT] but found [VALUE_STRING]",
    ), mp


CONNECTOR_MAP_TYPE_ERROR = Deviation(
    "connector-map-type-error",
    "A connector create or update whose `parameters` or `credential` is not an object is refused with 400 "
    "`parsing_exception` naming the token; ml-commons 3.6 skips the field and answers 200 as if it were "
    "absent.",
    _connector_map_type_error,
)


def _auto_session_without_security(ref: Reply, mp: Reply) -> None:
    assert ref.status == 500 and ref.error.get("reason") == "Internal server error", ref
    assert mp.status == 200 and set(mp.body) == {"session_id", "working_memory_id"}, mp


AUTO_SESSION_WITHOUT_SECURITY = Deviation(
    "auto-session-without-security",
    "A conversational add without a session id to a container with an `llm_id` creates the session (with "
    "the LLM's summary) and answers 200 without the security plugin too; ml-commons 3.6 answers 500 "
    "(`Internal server error`: a null owner id) there.",
    _auto_session_without_security,
)


def _auto_session_document(ref: Reply, mp: Reply) -> None:
    assert ref.status == 404, ref  # ml-commons' add failed, so there is no session to read
    assert mp.status == 200 and set(mp.body) >= {"memory_container_id", "summary", "namespace"}, mp


AUTO_SESSION_DOCUMENT = Deviation(
    "auto-session-document",
    "The session such an add creates (above) can be read; on ml-commons 3.6 there is none (404).",
    _auto_session_document,
)


def _body_container_id(ref: Reply, mp: Reply) -> None:
    assert ref.status == 200 and "working_memory_id" in ref.body, ref
    status, etype, reason = _error(mp)
    assert (status, etype) == (400, "illegal_argument_exception"), mp
    assert reason.startswith("memory_container_id in the request body ["), mp


BODY_CONTAINER_ID = Deviation(
    "body-container-id",
    "A write whose body names another `memory_container_id` than its path (add memory, create session, "
    "update a memory, the long-term extensions) is refused with 400 `illegal_argument_exception`; "
    "ml-commons 3.6 lets the body's id override the path and writes into that container.",
    _body_container_id,
)


def _session_id_per_container(ref: Reply, mp: Reply) -> None:
    # Normalised, ml-commons' _id is the session id's placeholder and memproxy's a new one.
    (ref_hit,), (mp_hit,) = _hits(ref), _hits(mp)
    assert ref_hit["_id"] != mp_hit["_id"] and mp_hit["_id"].startswith("<id:"), (ref_hit, mp_hit)
    assert_same(ref, _without(mp, lambda b: b["hits"]["hits"][0].update(_id=ref_hit["_id"])))


SESSION_ID_PER_CONTAINER = Deviation(
    "session-id-per-container",
    "A caller-chosen session id is stored under the document id `<container id>:<session id>` (shown as "
    "`_id` by `sessions/_search`), so that two containers sharing a sessions index keep separate sessions "
    "of the same id; ml-commons 3.6 stores it under the id itself, shared by every container of the index.",
    _session_id_per_container,
)


def _hidden_prefix_refused(ref: Reply, mp: Reply) -> None:
    assert ref.status == 200 and ref.body.get("status") == "created", ref
    status, etype, reason = _error(mp)
    assert (status, etype) == (400, "parse_exception"), mp
    assert "must not start with '.' unless use_system_index is true" in reason, mp


HIDDEN_PREFIX_REFUSED = Deviation(
    "hidden-prefix-refused",
    "A non-system `index_prefix` (`use_system_index: false`) whose index names would be hidden (a leading "
    "`.`, `.plugins-ml-am-*` included) or memproxy's own (`memproxy-*`) is refused with 400 "
    "`parse_exception`; ml-commons 3.6 creates the container on those names.",
    _hidden_prefix_refused,
)


def _shared_family_delete(ref: Reply, mp: Reply) -> None:
    status, etype, reason = _error(ref)
    assert (status, etype) == (409, "status_exception"), ref
    assert reason.startswith("Cannot delete memory indices as multiple containers share the index prefix"), (
        ref
    )
    assert mp.status == 200 and mp.body["result"] == "deleted", mp


SHARED_FAMILY_DELETE = Deviation(
    "shared-family-delete",
    "`delete_all_memories` / `delete_memories` on a container whose indices another container also uses "
    "deletes the container and its own documents from those indices, and drops only the indices nobody else "
    "uses; ml-commons 3.6 refuses the whole delete with 409.",
    _shared_family_delete,
)


# The placeholder a flow names the caller's chosen container id with (``Trace.name``), on both sides.
CHOSEN_CONTAINER = "<chosen-container>"


def _caller_container_id(ref: Reply, mp: Reply) -> None:
    if ref.status == 404:  # the get by the chosen id: ml-commons 3.6 made no container of that id
        reason = _error(ref)[2]
        assert reason.startswith("Failed to find memory container with the provided memory container id"), ref
        assert mp.status == 200 and "configuration" in mp.body, mp
        return
    assert ref.status == 200 and ref.body["memory_container_id"] != CHOSEN_CONTAINER, ref
    assert mp.status == 200 and mp.body == {"memory_container_id": CHOSEN_CONTAINER, "status": "created"}, mp


CALLER_CONTAINER_ID = Deviation(
    "caller-container-id",
    "Create takes the caller's `memory_container_id` from the body and stores the container under it, as "
    "ml-commons 3.9 does; ml-commons 3.6 ignores the field and answers an id of its own, so a get by the "
    "chosen id is 404 there.",
    _caller_container_id,
)


def _caller_container_id_checked(ref: Reply, mp: Reply) -> None:
    assert ref.status == 200 and ref.body.get("status") == "created", ref  # 3.6 ignored the id
    if mp.status == 409:
        assert _error(mp) == (
            409,
            "status_exception",
            f"memory container id '{CHOSEN_CONTAINER}' already exists",
        ), mp
        return
    assert _error(mp) == (
        400,
        "illegal_argument_exception",
        "memory container id must not start with '_'",
    ), mp


CALLER_CONTAINER_ID_CHECKED = Deviation(
    "caller-container-id-checked",
    "A chosen `memory_container_id` that is taken is refused with 409 `status_exception` (`memory container "
    "id 'X' already exists`), one that breaks ml-commons 3.9's rules with 400 `illegal_argument_exception`; "
    "ml-commons 3.6 ignores the field and creates another container.",
    _caller_container_id_checked,
)


def _own_session_document(ref: Reply, mp: Reply) -> None:
    assert _error(ref) == (404, "status_exception", "Memory not found"), ref
    assert mp.status == 200, mp
    assert set(mp.body) == {"memory_container_id", "namespace", "created_time", "last_updated_time"}, mp
    assert set(mp.body["namespace"]) == {"user_id", "session_id"}, mp


OWN_SESSION_DOCUMENT = Deviation(
    "own-session-document",
    "An add whose `namespace.session_id` names a session that was never created first writes a minimal "
    "session document (`owner_id` with security, `memory_container_id`, the add's `namespace`, "
    "`created_time`, `last_updated_time`), and fails if it cannot, as ml-commons 3.8 does; ml-commons 3.6 "
    "writes none, so the session is 404.",
    _own_session_document,
)


def _add_bumps_session(ref: Reply, mp: Reply) -> None:
    assert ref.body == {"last_updated_time_moved": False}, ref
    assert mp.body == {"last_updated_time_moved": True}, mp


ADD_BUMPS_SESSION = Deviation(
    "add-bumps-session",
    "Adding working memory to a session moves the session's `last_updated_time`, as ml-commons 3.8 does; "
    "ml-commons 3.6 leaves it.",
    _add_bumps_session,
)


def _content_only_timestamps(ref: Reply, mp: Reply) -> None:
    assert ref.body == {"last_updated_time_moved": True}, ref
    assert mp.body == {"last_updated_time_moved": False}, mp


CONTENT_ONLY_TIMESTAMPS = Deviation(
    "content-only-timestamps",
    "An update moves `last_updated_time` only when it changes content (a session's `summary`; a working "
    "memory's `messages`, `binary_data`, `structured_data`, `structured_data_blob`; a long-term `memory`), "
    "not for `metadata`, `tags`, `agents`, `additional_info` or `pinned` alone, as ml-commons 3.8 does; "
    "ml-commons 3.6 moves it on every update.",
    _content_only_timestamps,
)


_RETENTION_KEY = "plugins.ml_commons.memory.retention_enabled"


def _retention_settings(ref: Reply, mp: Reply) -> None:
    assert ref.status == 400 and ref.error["type"] == "settings_exception", ref
    assert ref.error["reason"].endswith(f"setting [{_RETENTION_KEY}], not recognized"), ref
    assert mp.status == 200 and mp.body["acknowledged"] is True, mp
    assert set(mp.body) == {"acknowledged", "persistent", "transient"}, mp


RETENTION_SETTINGS = Deviation(
    "retention-settings",
    "`PUT /_cluster/settings` takes the memory retention settings "
    "(`plugins.ml_commons.memory.retention_enabled`, `retention_job_interval_hours`, "
    "`retention_job_throttle_seconds`, `orphan_ttl_days`, `working_memory_ttl_days`, "
    "`default_session_retention_days`, `default_session_max_count`, `default_long_term_max_count`, "
    "`default_history_max_count`), which memproxy keeps, and `GET` shows them, as ml-commons 3.8 does; "
    'ml-commons 3.6 has none of them: 400 `settings_exception` ("not recognized").',
    _retention_settings,
)


def _retention_policy(ref: Reply, mp: Reply) -> None:
    policy = mp.body["configuration"].get("retention_policy")
    assert policy == {"sessions": {"retention_days": 3650}}, mp
    assert "retention_policy" not in ref.body["configuration"], ref
    assert_same(ref, _without(mp, lambda b: b["configuration"].pop("retention_policy")))


RETENTION_POLICY = Deviation(
    "retention-policy",
    "With retention enabled, a container's `configuration.retention_policy` (`sessions`, `long-term`, "
    "`history`; `retention_days`, `max_count`) is validated, stored, merged field by field on update and "
    "shown by `GET`, as ml-commons 3.8 does; ml-commons 3.6 drops it.",
    _retention_policy,
)


def _pinned(ref: Reply, mp: Reply) -> None:
    assert "pinned" not in ref.body and mp.body.get("pinned") is True, (ref, mp)
    assert_same(ref, _without(mp, lambda b: b.pop("pinned")))


PINNED = Deviation(
    "pinned",
    "With retention enabled, `PUT …/memories/sessions|long-term/{id}` with `pinned` stores it (retention "
    "never evicts a pinned memory) and `GET` shows it; working memory refuses it (400), as ml-commons 3.8 "
    "does; ml-commons 3.6 ignores the field.",
    _pinned,
)


def _retention_routes(ref: Reply, mp: Reply) -> None:
    assert ref.status == 400 and "no handler found for uri" in str(ref.body.get("error")), ref
    assert mp.status == 200, mp
    expected = {"container_id", "evaluated_at", "policy_source", "effective_policy", "would_delete"}
    assert expected | {"pinned_would_skip", "warnings"} == set(mp.body), mp


RETENTION_ROUTES = Deviation(
    "retention-routes",
    "`POST …/memory_containers/{id}/_retention/_dry_run`, the cluster-wide `…/_retention/_dry_run` and "
    "`…/_retention/_execute` are served, as ml-commons 3.9 does; ml-commons 3.6 has no such routes "
    '(400 "no handler found").',
    _retention_routes,
)


DEVIATION_LIST: list[Deviation] = [
    EFFICIENT_FILTERING,
    LONG_TERM_WITHOUT_STRATEGIES,
    DIMENSION_CHECKED,
    ADD_MEMORY_EMPTY_BODY,
    UPDATE_ERRORS_4XX,
    DSL_ALLOWLIST,
    HYBRID_TOTAL,
    CONTAINER_UPDATE_REFRESHES,
    WORKING_SESSION_ID_FIELD,
    DELETE_BY_QUERY_PROCEEDS,
    SCRIPTS_REFUSED,
    CONNECTOR_SCRIPTS_REFUSED,
    CONNECTOR_IN_USE_EXACT,
    CONNECTOR_MAP_TYPE_ERROR,
    CONNECTOR_UPDATE_CHECKED,
    LOCAL_MODELS_REFUSED,
    AUTO_SESSION_WITHOUT_SECURITY,
    AUTO_SESSION_DOCUMENT,
    BODY_CONTAINER_ID,
    SESSION_ID_PER_CONTAINER,
    HIDDEN_PREFIX_REFUSED,
    SHARED_FAMILY_DELETE,
    CALLER_CONTAINER_ID,
    CALLER_CONTAINER_ID_CHECKED,
    OWN_SESSION_DOCUMENT,
    ADD_BUMPS_SESSION,
    CONTENT_ONLY_TIMESTAMPS,
    RETENTION_SETTINGS,
    RETENTION_POLICY,
    PINNED,
    RETENTION_ROUTES,
]
