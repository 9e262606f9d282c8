"""Whose job runs next: turns across owners, so one tenant's thousand documents cannot starve another's
``infer``.

A runner's free slot goes to the owner (``Job.owner_id``; jobs without one share one turn) that has the
fewest jobs running in this process, and among those to the one whose last job started longest ago: each
owner with a due job gets a slot before any owner gets a second. An owner never holds more than
``max_per_owner`` slots at once. Turns are per process (each process has its own workers); across
processes the claim of a job stays a conditional write (docs/jobs.md), so fairness never costs a double run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["OwnerTurns"]

T = TypeVar("T")


class OwnerTurns:
    def __init__(self, max_per_owner: int) -> None:
        self.max_per_owner = max(1, max_per_owner)
        self._running: dict[str, str | None] = {}  # job id → its owner
        self._last_start: dict[str | None, int] = {}  # owner → the sequence number of its latest start
        self._starts = itertools.count(1)

    def running(self, owner: str | None) -> int:
        return sum(1 for o in self._running.values() if o == owner)

    def admits(self, owner: str | None) -> bool:
        return self.running(owner) < self.max_per_owner

    def order(self, candidates: Iterable[T], owner_of: Callable[[T], str | None]) -> list[T]:
        """``candidates`` an owner may take now, the owner whose turn it is first, one per owner (the first
        of each, in the order given: the oldest due)."""
        firsts: dict[str | None, T] = {}
        for candidate in candidates:
            firsts.setdefault(owner_of(candidate), candidate)
        admitted = [(owner, c) for owner, c in firsts.items() if self.admits(owner)]
        admitted.sort(key=lambda item: (self.running(item[0]), self._last_start.get(item[0], 0)))
        return [c for _, c in admitted]

    def started(self, job_id: str, owner: str | None) -> None:
        self._running[job_id] = owner
        self._last_start[owner] = next(self._starts)
        if len(self._last_start) > 10_000:  # owners long idle lose their place in line, not their turn
            for stale in sorted(self._last_start, key=lambda o: self._last_start[o])[:5_000]:
                del self._last_start[stale]

    def ended(self, job_id: str) -> None:
        self._running.pop(job_id, None)
