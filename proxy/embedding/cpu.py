"""How many CPUs this process really gets, and the embedding thread count memproxy picks from it.

torch's default intra-op thread count is the number of physical cores of the machine, whatever the process
is allowed to use. Its OpenMP threads wait for each other at every barrier, so when the OS deschedules one
of them — a CPU quota smaller than the machine, another heavy process on the same cores (OpenSearch on
the same box, a neighbour on a shared host) — every batch waits for it: tail latency collapses
(docs/benchmarks.md, "Embedding threads"). memproxy therefore sizes the pool from what the process gets
(CPU affinity, the cgroup quota) and leaves half of it to everything else it shares the cores with (its own
event loop and tokenizer, the node); ``--embed-threads`` overrides the choice.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["default_threads", "set_compute_threads", "usable_cpus"]

_CGROUP_V2 = Path("/sys/fs/cgroup/cpu.max")
_CGROUP_V1 = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))


def _cgroup_quota(v2: Path = _CGROUP_V2, v1: tuple[Path, Path] = _CGROUP_V1) -> float | None:
    """CPUs allowed by the cgroup quota (``cpu.max`` or v1's cfs files), None when unlimited or unknown."""
    try:
        quota, period = v2.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int(v1[0].read_text())
        period_us = int(v1[1].read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def usable_cpus(quota: float | None = None, affinity: int | None = None) -> float:
    """The CPUs this process may run on: its affinity mask, capped by the cgroup quota."""
    if affinity is None:
        try:
            affinity = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            affinity = os.cpu_count() or 1
    quota = _cgroup_quota() if quota is None else quota
    return float(min(affinity, quota)) if quota is not None else float(affinity)


def default_threads(cpus: float | None = None) -> int:
    """Half of the usable CPUs (rounded down, at least one): 1 on a 2-core box, 8 on a dedicated 16."""
    cpus = usable_cpus() if cpus is None else cpus
    return max(1, math.floor(cpus) // 2)


def set_compute_threads(threads: int | None) -> None:
    """Thread initializer of a model's compute thread: torch's thread count is per OS thread under OpenMP,
    so it is set on the thread that runs the model (``threads``, else :func:`default_threads`)."""
    import torch  # only the compute thread needs it; the sizing above is plain Python

    torch.set_num_threads(threads if threads is not None else default_threads())
