"""The embedding thread count: the CPUs the process may really use (affinity, cgroup quota), halved as a
floor, and the adaptive count above it that follows the cores the rest of the machine leaves free."""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from proxy.embedding import cpu
from proxy.embedding.cpu import (
    ThreadGovernor,
    _busy_seconds,
    _cgroup_quota,
    adapt_threads,
    compute_governor,
    default_threads,
    set_compute_threads,
    usable_cpus,
)


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    v2 = tmp_path / "cpu.max"
    missing = (tmp_path / "nope", tmp_path / "nope")
    v2.write_text("150000 100000\n")
    assert _cgroup_quota(v2, missing) == 1.5
    v2.write_text("max 100000\n")
    assert _cgroup_quota(v2, missing) is None


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    quota, period = tmp_path / "cpu.cfs_quota_us", tmp_path / "cpu.cfs_period_us"
    quota.write_text("200000\n")
    period.write_text("100000\n")
    assert _cgroup_quota(tmp_path / "absent", (quota, period)) == 2.0
    quota.write_text("-1\n")  # v1's "no limit"
    assert _cgroup_quota(tmp_path / "absent", (quota, period)) is None
    assert _cgroup_quota(tmp_path / "absent", (tmp_path / "x", tmp_path / "y")) is None


@pytest.mark.parametrize(
    ("affinity", "quota", "cpus", "threads"),
    [
        (2, math.inf, 2.0, 1),  # this machine (no quota): the measured best (docs/benchmarks.md)
        (16, math.inf, 16.0, 8),
        (16, 4.0, 4.0, 2),  # a container limited to 4 CPUs on a 16-core host
        (16, 1.5, 1.5, 1),
        (1, math.inf, 1.0, 1),
        (8, 0.5, 0.5, 1),  # never zero
    ],
)
def test_threads_follow_what_the_process_gets(affinity: int, quota: float, cpus: float, threads: int) -> None:
    assert usable_cpus(quota=quota, affinity=affinity) == cpus
    assert default_threads(cpus) == threads


def test_this_process_is_measured() -> None:
    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))
    assert default_threads() >= 1


# --- the adaptive count (ThreadGovernor) -------------------------------------------------------------------


class _Counters:
    """Hand-driven clock and CPU counters: ``advance(wall, busy, own)`` moves them on."""

    def __init__(self) -> None:
        self.now = self.busy = self.own = 0.0

    def advance(self, wall: float, busy: float, own: float = 0.0) -> None:
        self.now += wall
        self.busy += busy
        self.own += own

    def governor(self, least: int = 1, most: int = 2) -> ThreadGovernor:
        return ThreadGovernor(
            least, most, window_s=0.2, busy=lambda: self.busy, own=lambda: self.own, clock=lambda: self.now
        )


@pytest.mark.parametrize(
    ("others", "threads"),
    [
        (0.0, 2),  # a quiet machine: both cores
        (0.3, 2),  # a neighbour using under 0.4 of a core leaves it free enough
        (0.7, 1),  # the node indexing next door: the second core is not free
        (1.0, 1),  # a busy loop
        (2.0, 1),  # oversubscribed: never below the floor
    ],
)
def test_the_count_is_the_cores_the_others_leave(others: float, threads: int) -> None:
    c = _Counters()
    governor = c.governor()
    c.advance(wall=0.5, busy=others * 0.5)
    assert governor.threads() == threads
    assert governor.others == pytest.approx(others)


def test_this_process_s_own_cpu_never_counts_against_it() -> None:
    """Its own model threads (spinning between forwards or not) and event loop keep both cores busy: that is
    not a neighbour, so the count stays up."""
    c = _Counters()
    governor = c.governor()
    c.advance(wall=1.0, busy=2.0, own=1.9)
    assert governor.threads() == 2
    c.advance(wall=1.0, busy=2.0, own=1.0)  # now a neighbour takes one core of the two
    assert governor.threads() == 1


def test_the_count_follows_a_neighbour_that_comes_and_goes() -> None:
    c = _Counters()
    governor = c.governor()
    counts = []
    for others in (0.0, 0.0, 1.0, 1.0, 0.0):
        c.advance(wall=0.25, busy=others * 0.25)
        counts.append(governor.threads())
    assert counts == [2, 2, 1, 1, 2]
    assert governor.forwards == {2: 3, 1: 2}


def test_within_a_window_the_count_is_not_resampled() -> None:
    c = _Counters()
    governor = c.governor()
    c.advance(wall=0.3, busy=0.0)
    assert governor.threads() == 2
    c.advance(wall=0.05, busy=0.05)  # a busy 50 ms: too short a window to judge
    assert governor.threads() == 2
    c.advance(wall=0.2, busy=0.2)
    assert governor.threads() == 1  # the window since the last sample: busy the whole time


def test_a_bigger_machine_keeps_its_floor_and_uses_what_is_free() -> None:
    c = _Counters()
    governor = c.governor(least=8, most=16)
    c.advance(wall=1.0, busy=3.0)
    assert governor.threads() == 13
    c.advance(wall=1.0, busy=12.0)
    assert governor.threads() == 8


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="least <= most"):
        ThreadGovernor(3, 2, busy=lambda: 0.0)
    with pytest.raises(ValueError, match="least <= most"):
        ThreadGovernor(0, 2, busy=lambda: 0.0)


def test_busy_time_is_read_for_the_process_s_cpus_only(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice, in clock ticks
    stat.write_text(
        "cpu  700 0 300 5000 0 0 0 0 0 0\n"
        "cpu0 100 0 50 2500 9 0 0 0 0 0\n"
        "cpu1 600 0 250 2500 0 1 1 8 0 0\n"
        "intr 12345\n"
    )
    ticks = os.sysconf("SC_CLK_TCK")
    assert _busy_seconds(frozenset({0}), stat) == pytest.approx(150 / ticks)
    assert _busy_seconds(frozenset({1}), stat) == pytest.approx(860 / ticks)  # steal counts as busy
    assert _busy_seconds(frozenset({0, 1}), stat) == pytest.approx(1010 / ticks)


def test_no_governor_under_a_quota_or_on_one_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "_cgroup_quota", lambda *a: 1.5)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert ThreadGovernor.for_this_process() is None  # the kernel's counters cannot see a quota's share
    monkeypatch.setattr(cpu, "_cgroup_quota", lambda *a: None)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert ThreadGovernor.for_this_process() is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    governor = ThreadGovernor.for_this_process()
    assert governor is not None and (governor.least, governor.most) == (1, 2)


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.skipif(ThreadGovernor.for_this_process() is None, reason="no per-CPU counters to read here")
def test_a_real_spinning_neighbour_is_seen_and_this_process_is_not() -> None:
    governor = ThreadGovernor.for_this_process()
    assert governor is not None
    governor._window_s = 0.0
    _spin(0.5)  # this process spinning: not a neighbour
    governor.threads()
    own_spin = governor.others
    ctx = multiprocessing.get_context("spawn")
    neighbour = ctx.Process(target=_spin, args=(3.0,), daemon=True)
    neighbour.start()
    try:
        time.sleep(1.0)  # past the child's start-up
        governor.threads()  # starts a window
        time.sleep(1.0)
        assert governor.threads() == governor.least
        seen = governor.others
    finally:
        neighbour.join(10)
    # The child keeps one core busy for the whole window, whatever else this machine runs; this process's
    # own half-second of spinning is excluded (it can only show what *other* processes did meanwhile).
    assert seen >= 0.8, (seen, own_spin)


def test_the_default_compute_thread_has_a_governor_and_a_fixed_count_has_none() -> None:
    with ThreadPoolExecutor(1, initializer=set_compute_threads, initargs=(None,)) as pool:
        adaptive = pool.submit(compute_governor).result()
    with ThreadPoolExecutor(1, initializer=set_compute_threads, initargs=(1,)) as pool:
        fixed = pool.submit(compute_governor).result()
    assert fixed is None
    assert (adaptive is not None) == (ThreadGovernor.for_this_process() is not None)


def test_adapt_threads_sets_torch_s_count_on_the_compute_thread() -> None:
    import torch

    c = _Counters()

    def install_and_run(others: float) -> tuple[int, int]:
        cpu._local.governor = governor = c.governor()
        torch.set_num_threads(governor.current)
        before = torch.get_num_threads()
        c.advance(wall=0.5, busy=others * 0.5)
        adapt_threads()
        return before, torch.get_num_threads()

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(install_and_run, 0.0).result() == (1, 2)
        assert pool.submit(install_and_run, 1.0).result() == (1, 1)
