"""The embedding thread default: the CPUs the process may really use (affinity, cgroup quota), halved."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from proxy.embedding.cpu import _cgroup_quota, default_threads, usable_cpus


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
    import os

    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))
    assert default_threads() >= 1
