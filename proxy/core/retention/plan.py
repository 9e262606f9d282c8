"""What retention would delete in one container (the dry run), and deleting exactly that (a run).

Per type, in this order, at most :data:`MAX_PER_TYPE` documents per container per run, pinned documents never:

* sessions and long-term: ``retention_days`` (``last_updated_time`` older than that many days), then
  ``max_count`` (the least recently updated beyond the newest ``max_count``; pinned documents count towards
  it but are never taken);
* history: ``max_count`` by ``created_time``;
* working memory: ``cascade`` (its session is evicted by this plan), ``ttl`` (``working_memory_ttl_days``
  from ``last_updated_time``, unless its session is pinned), ``orphan`` (its ``session_id`` names no session
  of the container, first observed at least ``orphan_ttl_days`` ago).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.container_record import Container
from proxy.core.longterm_mirror import mirror_deleted
from proxy.core.retention.policy import OPT_OUT_KEY, effective_policy
from proxy.core.retention.settings import RetentionSettings
from proxy.core.services import Services
from proxy.store import retention as store
from proxy.store.query import And, Exists, Filter, MatchAll, Not, Range, Term, Terms
from proxy.store.settings import StateDoc

__all__ = [
    "MAX_PER_TYPE",
    "REASONS",
    "ContainerPlan",
    "execute_plan",
    "plan_container",
    "record_orphans",
]

MAX_PER_TYPE = 50_000
REASONS = ("retention_days", "max_count", "cascade", "ttl", "orphan")
DAY_MS = 86_400_000
_TYPES = (
    ("sessions", "sessions"),
    ("long_term", "long-term"),
    ("history", "history"),
    ("working_memory", "working"),
)
_NOT_PINNED = Not(Term("pinned", True))
_PINNED = Term("pinned", True)
_SESSION_LOOKUP = 1000


@dataclass
class TypePlan:
    by_reason: dict[str, list[str]] = field(default_factory=lambda: {r: [] for r in REASONS})

    @property
    def ids(self) -> list[str]:
        return [i for r in REASONS for i in self.by_reason[r]]

    def room(self) -> int:
        return MAX_PER_TYPE - len(self.ids)

    def view(self) -> dict[str, Any]:
        return {"total": len(self.ids), "by_reason": {r: len(v) for r, v in self.by_reason.items()}}


@dataclass
class ContainerPlan:
    container_id: str
    evaluated_at: int
    policy_source: str
    effective_policy: dict[str, dict[str, int]]
    types: dict[str, TypePlan]
    pinned_would_skip: int = 0
    warnings: list[str] = field(default_factory=list)
    # Orphaned sessions seen now that have no baseline yet (a run records them).
    new_orphans: list[str] = field(default_factory=list)
    orphan_baselines: dict[str, int] = field(default_factory=dict)

    def view(self) -> dict[str, Any]:
        return {
            "container_id": self.container_id,
            "evaluated_at": self.evaluated_at,
            "policy_source": self.policy_source,
            "effective_policy": self.effective_policy,
            "would_delete": {name: self.types[name].view() for name, _ in _TYPES},
            "pinned_would_skip": self.pinned_would_skip,
            "warnings": self.warnings,
        }


def _orphans_doc(container_id: str) -> str:
    return f"retention-orphans-{container_id}"


def _session_client_id(container: Container, doc_id: str) -> str:
    prefix = f"{container.id}:"
    return doc_id[len(prefix) :] if doc_id.startswith(prefix) else doc_id


async def _age_and_count(
    svc: Services,
    plan: ContainerPlan,
    container: Container,
    name: str,
    memory_type: str,
    rules: Mapping[str, int],
    now: int,
) -> None:
    index = container.index_name(memory_type)
    if index is None or not rules:
        return
    typed = plan.types[name]
    sort_field = "created_time" if memory_type == "history" else "last_updated_time"
    young: Filter = MatchAll()
    if "retention_days" in rules:
        cutoff = now - rules["retention_days"] * DAY_MS
        old = Range("last_updated_time", lt=cutoff)
        found = await store.oldest(
            svc.store, index, container.id, And((old, _NOT_PINNED)), sort_field=sort_field, limit=typed.room()
        )
        typed.by_reason["retention_days"] = [i for i, _ in found]
        plan.pinned_would_skip += await store.count_in(svc.store, index, container.id, And((old, _PINNED)))
        young = Not(old)
    if "max_count" in rules:
        remaining = await store.count_in(svc.store, index, container.id, young)
        excess = remaining - rules["max_count"]
        if excess > 0:
            found = await store.oldest(
                svc.store,
                index,
                container.id,
                And((young, _NOT_PINNED)),
                sort_field=sort_field,
                limit=min(excess, typed.room()),
            )
            typed.by_reason["max_count"] = [i for i, _ in found]
            short = excess - len(found)
            if short > 0 and typed.room() > 0:
                plan.pinned_would_skip += short
    if typed.room() <= 0:
        plan.warnings.append(
            f"{memory_type}: more than {MAX_PER_TYPE} documents to delete; the rest next run"
        )


async def _working(
    svc: Services, plan: ContainerPlan, container: Container, settings: RetentionSettings, now: int
) -> None:
    index = container.index_name("working")
    sessions = container.index_name("sessions")
    typed = plan.types["working_memory"]
    if index is None:
        return
    evicted = [_session_client_id(container, i) for i in plan.types["sessions"].ids]
    for start in range(0, len(evicted), _SESSION_LOOKUP):
        if typed.room() <= 0:
            break
        batch = tuple(evicted[start : start + _SESSION_LOOKUP])
        found = await store.oldest(
            svc.store,
            index,
            container.id,
            Terms("session_id", batch),
            sort_field="created_time",
            limit=typed.room(),
        )
        typed.by_reason["cascade"] += [i for i, _ in found]
    taken = set(typed.ids)
    pinned_sessions: list[str] = []
    if sessions is not None:
        pinned = await store.oldest(
            svc.store, sessions, container.id, _PINNED, sort_field="created_time", limit=MAX_PER_TYPE
        )
        pinned_sessions = [_session_client_id(container, i) for i, _ in pinned]
    if settings.working_memory_ttl_days > 0 and typed.room() > 0:
        cutoff = now - settings.working_memory_ttl_days * DAY_MS
        selection: Filter = Range("last_updated_time", lt=cutoff)
        if pinned_sessions:
            selection = And((selection, Not(Terms("session_id", tuple(pinned_sessions)))))
            plan.pinned_would_skip += await store.count_in(
                svc.store,
                index,
                container.id,
                And((Range("last_updated_time", lt=cutoff), Terms("session_id", tuple(pinned_sessions)))),
            )
        found = await store.oldest(
            svc.store,
            index,
            container.id,
            selection,
            sort_field="last_updated_time",
            limit=typed.room() + len(taken),
        )
        typed.by_reason["ttl"] = [i for i, _ in found if i not in taken][: typed.room()]
        taken = set(typed.ids)
    if sessions is None:
        return
    referenced = await store.distinct_values(
        svc.store, index, container.id, "session_id", Exists("session_id"), limit=MAX_PER_TYPE
    )
    evicted_set = set(evicted)
    missing: list[str] = []
    for start in range(0, len(referenced), _SESSION_LOOKUP):
        names = referenced[start : start + _SESSION_LOOKUP]
        candidates = tuple(x for s in names for x in (f"{container.id}:{s}", s))
        existing = await store.oldest(
            svc.store,
            sessions,
            container.id,
            Terms("_id", candidates),
            sort_field="created_time",
            limit=len(candidates),
        )
        present = {_session_client_id(container, i) for i, _ in existing}
        missing += [s for s in names if s not in present and s not in evicted_set]
    baselines = (await svc.retention.docs.read(_orphans_doc(container.id))).source.get("first_seen") or {}
    plan.orphan_baselines = {s: int(baselines[s]) for s in missing if s in baselines}
    plan.new_orphans = [s for s in missing if s not in baselines]
    due = [s for s, seen in plan.orphan_baselines.items() if seen + settings.orphan_ttl_days * DAY_MS <= now]
    for start in range(0, len(due), _SESSION_LOOKUP):
        if typed.room() <= 0:
            break
        found = await store.oldest(
            svc.store,
            index,
            container.id,
            Terms("session_id", tuple(due[start : start + _SESSION_LOOKUP])),
            sort_field="created_time",
            limit=typed.room() + len(taken),
        )
        typed.by_reason["orphan"] += [i for i, _ in found if i not in taken][: typed.room()]
        taken = set(typed.ids)


async def plan_container(svc: Services, container: Container, settings: RetentionSettings) -> ContainerPlan:
    """The dry run of one container: what a run now would delete, by type and reason (nothing is written)."""
    now = now_ms()
    source, policy = effective_policy(
        container.configuration.get("retention_policy"), bool(container.extra.get(OPT_OUT_KEY)), settings
    )
    plan = ContainerPlan(container.id, now, source, policy, {name: TypePlan() for name, _ in _TYPES})
    for name, memory_type in _TYPES[:3]:
        await _age_and_count(svc, plan, container, name, memory_type, policy.get(memory_type, {}), now)
    await _working(svc, plan, container, settings, now)
    return plan


async def record_orphans(svc: Services, plan: ContainerPlan) -> None:
    """Keep the first-observation time of every orphaned session still orphaned (and only those)."""
    docs = svc.retention.docs
    doc_id = _orphans_doc(plan.container_id)
    first_seen = {**plan.orphan_baselines, **dict.fromkeys(plan.new_orphans, plan.evaluated_at)}
    read: StateDoc = await docs.read(doc_id)
    if not first_seen and read.seq_no is None:
        return
    await docs.write(
        doc_id,
        {"kind": "retention_orphans", "container_id": plan.container_id, "first_seen": first_seen},
        read,
    )


async def execute_plan(svc: Services, container: Container, plan: ContainerPlan) -> dict[str, int]:
    """Delete what ``plan`` lists (sessions first, then what they cascade to); deleted counts by type."""
    deleted: dict[str, int] = {}
    for name, memory_type in (_TYPES[0], _TYPES[3], _TYPES[1], _TYPES[2]):
        index = container.index_name(memory_type)
        ids = plan.types[name].ids
        deleted[name] = await store.delete_ids(svc.store, index, container.id, ids) if index and ids else 0
        if memory_type == "long-term" and ids:
            # An embedding switch under way holds a second copy of each long-term memory: evict it too.
            await mirror_deleted(svc, container, ids)
    await record_orphans(svc, plan)
    return deleted
