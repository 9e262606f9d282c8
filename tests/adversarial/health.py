"""A health poller for the adversarial suites: is the proxy still answering while they hammer it?

The poller runs in a process of its own. In a thread of the test process it would share the GIL with the
attack's own client threads (and Hypothesis drawing the next batch), so a slow poll would often be the test
waiting for itself, not the proxy being slow: a fuzz run once measured a 1.03 s "stall" that way.
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

import httpx

__all__ = ["HealthPoller"]

# A failed or timed-out poll counts as this long.
FAILED_POLL_S = 10.0


def _poll(url: str, every_s: float, ready: Event, stop: Event, out: Connection) -> None:
    latencies: list[float] = []
    with httpx.Client(timeout=FAILED_POLL_S) as client:
        ready.set()
        while not stop.is_set():
            started = time.perf_counter()
            try:
                ok = client.get(url + "/_memproxy/health").status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - started if ok else FAILED_POLL_S)
            stop.wait(every_s)
    out.send(latencies)
    out.close()


class HealthPoller:
    """Polls ``/_memproxy/health`` from its own process every ``every_s``; ``latencies`` holds every poll's
    latency once the block has exited (a failed or timed-out poll counts as 10 s)."""

    def __init__(self, url: str, every_s: float = 0.05) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.latencies: list[float] = []
        self._ready = ctx.Event()
        self._stop = ctx.Event()
        self._receive, send = ctx.Pipe(duplex=False)
        self._process = ctx.Process(
            target=_poll, args=(url, every_s, self._ready, self._stop, send), daemon=True
        )

    def __enter__(self) -> HealthPoller:
        self._process.start()
        # Measure the attack from its first request: wait until the poller's client exists.
        if not self._ready.wait(60):
            self._process.kill()
            raise RuntimeError("the health poller process did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._receive.poll(30 + FAILED_POLL_S):
            self.latencies = self._receive.recv()
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
