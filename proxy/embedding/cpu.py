"""How many CPUs this process really gets, and the embedding thread count memproxy picks from it.

torch's default intra-op thread count is the number of physical cores of the machine, whatever the process
is allowed to use. Its OpenMP threads wait for each other at every barrier, so when the OS deschedules one
of them — a CPU quota smaller than the machine, another heavy process on the same cores (OpenSearch on
the same box, a neighbour on a shared host) — every batch waits for it: tail latency collapses
(docs/benchmarks.md, "Embedding threads"). memproxy therefore sizes the pool from what the process gets
(CPU affinity, the cgroup quota) and leaves half of it to everything else it shares the cores with (its own
event loop and tokenizer, the node); ``--embed-threads`` overrides the choice.

Half is a floor, not a fit: on a quiet 2-core machine a second thread makes a forward 1.2-1.3 x faster
(docs/embedding.md). So, where it can see the cores it runs on, memproxy lets the count follow them: before
each forward, :class:`ThreadGovernor` looks at how busy *everything else* kept those cores over the last
window (the kernel's per-CPU busy time minus this process's own CPU time) and gives the model the cores
left free, between the floor and all of them. A busy neighbour (the node indexing, another job) shows up
within one window and the count drops before a barrier can wait on a descheduled thread; when it leaves,
the count comes back. Under a cgroup quota the kernel's counters say nothing about the share this process
gets, so there the floor stays fixed.
"""

from __future__ import annotations

import math
import os
import resource
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "ThreadGovernor",
    "adapt_threads",
    "compute_governor",
    "default_threads",
    "set_compute_threads",
    "usable_cpus",
]

_CGROUP_V2 = Path("/sys/fs/cgroup/cpu.max")
_CGROUP_V1 = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
_PROC_STAT = Path("/proc/stat")


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

    if threads is None:
        governor = ThreadGovernor.for_this_process()
        if governor is not None:
            _local.governor = governor
            torch.set_num_threads(governor.current)
            return
    torch.set_num_threads(threads if threads is not None else default_threads())


# --- adaptive thread count ------------------------------------------------------------------------------

_local = threading.local()


def _busy_seconds(cpus: frozenset[int], stat: Path = _PROC_STAT) -> float:
    """CPU-seconds the kernel counts as busy on ``cpus`` since boot (user, nice, system, irq, softirq and
    steal: a core a hypervisor took is not free either)."""
    ticks = os.sysconf("SC_CLK_TCK")
    busy = 0
    with stat.open() as lines:
        for line in lines:
            if not line.startswith("cpu"):
                break
            name, *fields = line.split()
            if name == "cpu" or int(name[3:]) not in cpus:
                continue
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
            busy += user + nice + system + irq + softirq + steal
    return busy / ticks


def _own_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class ThreadGovernor:
    """The intra-op thread count of the next forward: the cores that the rest of the machine left free
    over the last ``window_s``, between ``least`` and ``most``.

    ``others`` = (busy CPU-seconds of our cores - this process's CPU-seconds) / wall seconds, so this
    process's own threads (the model's, spinning or not; the event loop) never count against it. The count
    is ``most - others`` rounded down after adding ``slack`` (a neighbour using a third of a core leaves it
    free enough; half a core does not). Sampling is one read of /proc/stat and one ``getrusage`` per
    window, on the compute thread, before a forward: nothing runs while the model is idle.
    """

    def __init__(
        self,
        least: int,
        most: int,
        *,
        window_s: float = 0.2,
        slack: float = 0.4,
        busy: Callable[[], float],
        own: Callable[[], float] = _own_seconds,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= least <= most:
            raise ValueError(f"need 1 <= least <= most, got {least}, {most}")
        self.least, self.most = least, most
        self._window_s, self._slack = window_s, slack
        self._busy, self._own, self._clock = busy, own, clock
        self._last = (clock(), busy(), own())
        self.current = least
        self.others = 0.0
        # Forwards run at each thread count: for the health answer, the metrics and the tests.
        self.forwards: Counter[int] = Counter()

    @classmethod
    def for_this_process(cls) -> ThreadGovernor | None:
        """A governor over this process's CPUs, or None where the kernel's counters cannot tell what is
        free: a cgroup quota below the affinity mask, no /proc/stat, or a single CPU."""
        try:
            cpus = frozenset(os.sched_getaffinity(0))
            _busy_seconds(cpus)
        except (AttributeError, OSError, ValueError):
            return None
        quota = _cgroup_quota()
        if len(cpus) < 2 or (quota is not None and quota < len(cpus)):
            return None
        return cls(default_threads(len(cpus)), len(cpus), busy=lambda: _busy_seconds(cpus))

    def threads(self) -> int:
        """The count for the forward about to run (re-sampled when the window has passed)."""
        now = self._clock()
        then, busy_then, own_then = self._last
        if now - then >= self._window_s:
            busy, own = self._busy(), self._own()
            self.others = max(0.0, (busy - busy_then) - (own - own_then)) / (now - then)
            self._last = (now, busy, own)
            free = math.floor(self.most - self.others + self._slack)
            self.current = min(self.most, max(self.least, free))
        self.forwards[self.current] += 1
        return self.current


def compute_governor() -> ThreadGovernor | None:
    """The governor of the calling compute thread (None: a fixed count)."""
    return getattr(_local, "governor", None)


def adapt_threads() -> None:
    """Called on a compute thread before each forward: applies the governor's count, if it has one."""
    governor = compute_governor()
    if governor is None:
        return
    before = governor.current
    count = governor.threads()
    if count != before:
        import torch

        torch.set_num_threads(count)
