"""A health poller for the adversarial suites: is the proxy still answering while they hammer it?"""

from __future__ import annotations

import threading
import time

import httpx

__all__ = ["HealthPoller"]


class HealthPoller:
    """Polls ``/_memproxy/health`` from its own thread every ``every_s`` and keeps every latency (a failed or
    timed-out poll counts as 10 s)."""

    def __init__(self, url: str, every_s: float = 0.05) -> None:
        self.url = url
        self.every_s = every_s
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    ok = client.get(self.url + "/_memproxy/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.latencies.append(time.perf_counter() - started if ok else 10.0)
                self._stop.wait(self.every_s)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
