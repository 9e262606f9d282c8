"""How two answers to the same call are compared, and the tally of what was compared.

A flow runs the same calls on ml-commons 3.6 and on memproxy and records each answer in a :class:`Trace`.
Answers are normalised before they are compared:

- ids are replaced by ordinals in the order each side first produced them (``<id:1>``, ``<id:2>``, …), so
  "the hit is the memory created second" is compared, not the id's spelling (ml-commons makes 20-character
  ids, memproxy UUIDs); the model ids a side was configured with become ``<embedding_model>`` / ``<llm>``;
- timestamps, ``took`` and the node's bookkeeping (``_seq_no``, ``_primary_term``, ``_version``, ``_shards``)
  keep only their type;
- floats are compared within 1e-3 (scores are computed by two different engines);
- a container's ``strategies`` are compared as a set (sorted by type and namespace): ml-commons 3.6 keeps
  them in hash order after an update, so their order differs from one run to the next on its own side.

Everything else must be equal: status, keys, nesting, value types and values, list lengths and order, error
``type`` and ``reason``. A call that differs on purpose names a :class:`Deviation`, whose check asserts the
documented difference instead, so a deviation cannot drift silently.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LEDGER",
    "Deviation",
    "Reply",
    "Trace",
    "assert_same",
    "compare_traces",
    "differences",
    "normalise",
    "reply_differences",
]

# Keys whose string values are ids (one side's ids never equal the other's).
ID_KEYS = frozenset(
    {
        "memory_container_id",
        "session_id",
        "working_memory_id",
        "long_term_memory_id",
        "long_term_memory_ids",
        "memory_id",
        "_id",
        "id",
        "connector_id",
        "model_id",
        "task_id",
        # A strategy's id is made by each side when the container is created ("semantic_<8 hex>").
        "strategy_id",
    }
)
# Values that differ between any two runs; only their type is compared.
VOLATILE_KEYS = frozenset(
    {"took", "_seq_no", "_primary_term", "_version", "_shards", "created_time", "last_updated_time", "sort"}
)
FLOAT_TOLERANCE = 1e-3


@dataclass
class Reply:
    status: int
    body: Any

    @property
    def error(self) -> dict[str, Any]:
        err = self.body.get("error") if isinstance(self.body, dict) else None
        return err if isinstance(err, dict) else {}


@dataclass
class Deviation:
    """A documented, deliberate difference from ml-commons 3.6 (listed in docs/opensearch-api.md)."""

    id: str
    summary: str
    # Asserts the documented difference on the two normalised replies (ml-commons first).
    check: Callable[[Reply, Reply], None]
    # Whether the difference arises for these replies; when it does not, they are compared as any other.
    applies: Callable[[Reply, Reply], bool] = lambda ref, mp: True


@dataclass
class Trace:
    """One side's answers to one flow, by label, with the ids the side produced in order."""

    side: str
    known: dict[str, str] = field(default_factory=dict)
    replies: dict[str, Reply] = field(default_factory=dict)

    def name(self, value: str, placeholder: str) -> None:
        """Give a value a fixed name on this side (a model id the side was configured with)."""
        self.known[value] = placeholder

    def add(self, label: str, reply: Reply) -> Reply:
        """A reply to compare with the other side's reply of the same label."""
        assert label not in self.replies, f"label {label} recorded twice"
        self.note(reply)
        self.replies[label] = reply
        return reply

    def note(self, reply: Reply) -> Reply:
        """A reply that is not compared (each side's own way to do a step), whose ids are numbered."""
        for value in _ids_in(reply.body):
            self.known.setdefault(value, f"<id:{sum(p.startswith('<id:') for p in self.known.values()) + 1}>")
        return reply


def _ids_in(body: Any) -> Iterator[str]:
    if isinstance(body, dict):
        for key, value in body.items():
            if key in ID_KEYS and isinstance(value, str) and value:
                yield value
            elif key in ID_KEYS and isinstance(value, list):
                yield from (v for v in value if isinstance(v, str) and v)
            else:
                yield from _ids_in(value)
    elif isinstance(body, list):
        for item in body:
            yield from _ids_in(item)


def normalise(body: Any, known: dict[str, str]) -> Any:
    """The body with ids replaced by their placeholders and volatile values by their type."""
    pattern = (
        re.compile("|".join(re.escape(k) for k in sorted(known, key=len, reverse=True))) if known else None
    )

    def walk(value: Any, key: str | None) -> Any:
        if key in VOLATILE_KEYS:
            return f"<{type(value).__name__}>"
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            items = [walk(v, key) for v in value]
            if key == "strategies" and all(isinstance(v, dict) for v in items):
                items.sort(key=lambda v: (str(v.get("type")), json.dumps(v.get("namespace"))))
            return items
        if isinstance(value, str) and pattern is not None:
            return pattern.sub(lambda m: known[m.group(0)], value)
        return value

    return walk(body, None)


def differences(ref: Any, mp: Any, path: str = "$") -> list[str]:
    """Where two normalised bodies differ, as ``path: ml-commons … memproxy …`` lines."""
    if isinstance(ref, dict) and isinstance(mp, dict):
        out = [f"{path}.{k}: only in ml-commons" for k in ref if k not in mp]
        out += [f"{path}.{k}: only in memproxy" for k in mp if k not in ref]
        for k in ref:
            if k in mp:
                out += differences(ref[k], mp[k], f"{path}.{k}")
        return out
    if isinstance(ref, list) and isinstance(mp, list):
        out = (
            [] if len(ref) == len(mp) else [f"{path}: {len(ref)} items in ml-commons, {len(mp)} in memproxy"]
        )
        for i, (a, b) in enumerate(zip(ref, mp, strict=False)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    if isinstance(ref, float) and isinstance(mp, float):
        same = abs(ref - mp) <= FLOAT_TOLERANCE
        return [] if same else [f"{path}: ml-commons {ref!r}, memproxy {mp!r}"]
    if type(ref) is not type(mp) or ref != mp:
        return [f"{path}: ml-commons {_short(ref)}, memproxy {_short(mp)}"]
    return []


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


class Ledger:
    """What the suite compared, for the summary printed at the end of the run."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.deviations: Counter[str] = Counter()
        # Set while a test marked xfail runs: its mismatches are the expected ones, counted apart.
        self.in_expected_failure = False

    def record(self, outcome: str, deviation: str | None = None) -> None:
        if self.in_expected_failure and outcome == "mismatch":
            outcome = "mismatch in an expected failure"
        self.counts[outcome] += 1
        if deviation:
            self.deviations[deviation] += 1


LEDGER = Ledger()


def compare_traces(ref: Trace, mp: Trace, deviations: dict[str, Deviation] | None = None) -> None:
    """Every label both sides recorded must match, or differ exactly as its deviation documents."""
    deviations = deviations or {}
    assert list(ref.replies) == list(mp.replies), (list(ref.replies), list(mp.replies))
    problems: list[str] = []
    for label in ref.replies:
        ref_reply = Reply(ref.replies[label].status, normalise(ref.replies[label].body, ref.known))
        mp_reply = Reply(mp.replies[label].status, normalise(mp.replies[label].body, mp.known))
        deviation = deviations.get(label)
        if deviation is not None and deviation.applies(ref_reply, mp_reply):
            try:
                deviation.check(ref_reply, mp_reply)
            except AssertionError as exc:
                LEDGER.record("deviation-broken", deviation.id)
                problems.append(f"{label}: deviation {deviation.id} no longer holds as documented: {exc}")
            else:
                LEDGER.record("deviation", deviation.id)
            continue
        found = reply_differences(ref_reply, mp_reply)
        LEDGER.record("mismatch" if found else "match")
        problems += [f"{label}: {line}" for line in found]
    assert not problems, "memproxy differs from ml-commons 3.6:\n  " + "\n  ".join(problems)


def reply_differences(ref: Reply, mp: Reply) -> list[str]:
    """Status and body differences of two normalised replies."""
    found = [] if ref.status == mp.status else [f"status: ml-commons {ref.status}, memproxy {mp.status}"]
    return found + differences(ref.body, mp.body)


def assert_same(ref: Reply, mp: Reply) -> None:
    found = reply_differences(ref, mp)
    assert not found, "; ".join(found)
