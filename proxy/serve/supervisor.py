"""``memproxy --workers N``: a supervisor and N worker processes on one port (docs/operations.md).

The supervisor binds the listening socket once and starts each worker as ``python -m proxy serve`` with its
own arguments, handing it the socket's descriptor (pre-fork style: one accept queue, which every worker
takes connections from) and a pipe the worker writes to once it serves (:mod:`proxy.serve.worker`). A
worker is a fresh interpreter (spawned, not forked after torch was imported) and loads its own models. The
supervisor itself imports nothing of the server: it starts, watches and stops processes.

* A worker that dies is started again at once; one that dies before it is ready, after a backoff (1, 2, 4 …
  30 s). A worker that dies before any worker was ever ready (a model that does not load, say) makes the
  supervisor stop the others and exit 1.
* SIGTERM / SIGINT: every worker stops gracefully; the supervisor waits for them (``--shutdown-timeout-s``
  and a margin, then SIGKILL), closes the socket and exits 0.
* SIGHUP: a **rolling restart**. For each worker running when the signal came, one at a time: a new worker
  starts; once it is ready the old one is stopped gracefully and awaited. At most N + 1 workers run, and
  never fewer than N ready ones but for the moments a worker dies. A new worker not ready within
  :data:`READY_TIMEOUT_S` (or dead before) ends the restart; the old workers serve on.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.config import Settings

__all__ = ["LISTEN_FD_ENV", "READY_FD_ENV", "READY_TIMEOUT_S", "Supervisor"]

log = logging.getLogger("proxy.serve")

# How a worker learns its listening socket and its readiness pipe (descriptors it inherits).
LISTEN_FD_ENV = "_MEMPROXY_LISTEN_FD"
READY_FD_ENV = "_MEMPROXY_READY_FD"
# How long a new worker of a rolling restart may take to serve (it loads its models first).
READY_TIMEOUT_S = 300.0
_MAX_BACKOFF_S = 30.0
# Beyond --shutdown-timeout-s, how long a stopping worker may take to close its store and exit.
_EXIT_MARGIN_S = 15.0


@dataclass(eq=False)
class _Worker:
    number: int  # 1, 2, … in the order started: the logs' "worker #3"
    proc: subprocess.Popen[bytes]
    ready_fd: int | None  # the read end of its readiness pipe, until it is read
    started: float
    ready: bool = False
    stopping: bool = False

    @property
    def name(self) -> str:
        return f"worker #{self.number} (pid {self.proc.pid})"


def _exit_text(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


class Supervisor:
    """Runs ``settings.workers`` workers of ``python -m proxy serve <argv>`` on one listening socket."""

    def __init__(self, argv: Sequence[str], settings: Settings) -> None:
        self.argv = list(argv)
        self.settings = settings
        self.workers: list[_Worker] = []
        self._started = 0
        self._stop = False
        self._roll_requested = False
        self._roll: list[_Worker] | None = None  # the old workers a rolling restart has yet to replace
        self._incoming: _Worker | None = None  # the new worker of the restart's current step
        self._outgoing: _Worker | None = None  # the old worker it is stopping
        self._failures = 0  # workers in a row that died before they were ready
        self._next_spawn = 0.0
        self._ever_ready = False
        self._sel = selectors.DefaultSelector()
        self._sock: socket.socket | None = None

    # --- the loop -------------------------------------------------------------------------------------

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT; the process's exit status (0, or 1 when no worker could start)."""
        n, host, port = self.settings.workers, self.settings.host, self.settings.port
        self._sock = socket.create_server((host, port), backlog=1024)  # SO_REUSEADDR, not SO_REUSEPORT
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        # Every signal wakes the loop's select (CPython writes its number to this pipe).
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a worker's death wakes the loop too
        self._sel.register(wake_r, selectors.EVENT_READ, None)
        log.info("supervisor %d: http://%s:%d, %d workers", os.getpid(), host, port, n)
        announced = False
        try:
            for _ in range(n):
                self._spawn()
            while not self._stop:
                for key, _ in self._sel.select(timeout=0.5):
                    if key.data is None:
                        _drain_pipe(wake_r)
                    else:
                        self._read_ready(key.data)
                if self._reap() and not self._ever_ready:
                    log.error("supervisor: no worker could start (see its log above); stopping")
                    self._stop_all()
                    return 1
                if not announced and sum(w.ready and not w.stopping for w in self.workers) >= n:
                    print(f"memproxy listening on http://{host}:{port} ({n} workers)", flush=True)
                    announced = True
                self._step_roll()
                self._replace_missing()
            self._stop_all()
            return 0
        finally:
            signal.set_wakeup_fd(-1)
            self._sock.close()
            os.close(wake_r)
            os.close(wake_w)

    def _on_stop(self, signum: int, _: Any) -> None:
        self._stop = True

    def _on_hup(self, signum: int, _: Any) -> None:
        self._roll_requested = True

    # --- workers --------------------------------------------------------------------------------------

    def _spawn(self) -> _Worker:
        assert self._sock is not None
        listen_fd = self._sock.fileno()
        ready_r, ready_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "proxy", "serve", *self.argv],
                pass_fds=(listen_fd, ready_w),
                env={**os.environ, LISTEN_FD_ENV: str(listen_fd), READY_FD_ENV: str(ready_w)},
            )
        finally:
            os.close(ready_w)
        os.set_blocking(ready_r, False)
        self._started += 1
        worker = _Worker(self._started, proc, ready_r, time.monotonic())
        self.workers.append(worker)
        self._sel.register(ready_r, selectors.EVENT_READ, worker)
        log.info("supervisor: %s started", worker.name)
        return worker

    def _read_ready(self, worker: _Worker) -> None:
        if worker.ready_fd is None:
            return
        try:
            data = os.read(worker.ready_fd, 64)
        except BlockingIOError:
            return
        self._close_ready(worker)
        if data:  # b"": the worker closed the pipe without a word (it is exiting)
            worker.ready = True
            self._ever_ready = True
            self._failures = 0
            log.info("supervisor: %s ready after %.1f s", worker.name, time.monotonic() - worker.started)

    def _close_ready(self, worker: _Worker) -> None:
        if worker.ready_fd is not None:
            self._sel.unregister(worker.ready_fd)
            os.close(worker.ready_fd)
            worker.ready_fd = None

    def _reap(self) -> bool:
        """Forget the workers that exited; whether one died before it was ready."""
        failed = False
        for worker in list(self.workers):
            code = worker.proc.poll()
            if code is None:
                continue
            self.workers.remove(worker)
            self._read_ready(worker)  # a readiness written just before it died still counts
            self._close_ready(worker)
            if worker is self._outgoing:
                self._outgoing = None
            if worker.stopping:
                log.info("supervisor: %s stopped (%s)", worker.name, _exit_text(code))
                continue
            log.warning("supervisor: %s died (%s)", worker.name, _exit_text(code))
            if not worker.ready:
                failed = True
                self._failures += 1
                self._next_spawn = time.monotonic() + min(_MAX_BACKOFF_S, 2.0 ** (self._failures - 1))
            if worker is self._incoming:
                log.error(
                    "supervisor: the new %s died before it was ready: rolling restart ended", worker.name
                )
                self._roll = self._incoming = None
        return failed

    def _replace_missing(self) -> None:
        live = [w for w in self.workers if not w.stopping]
        if len(live) < self.settings.workers and time.monotonic() >= self._next_spawn:
            self._spawn()

    def _stop_worker(self, worker: _Worker) -> None:
        worker.stopping = True
        log.info("supervisor: stopping %s", worker.name)
        worker.proc.send_signal(signal.SIGTERM)

    def _stop_all(self) -> None:
        log.info("supervisor: stopping %d workers", len(self.workers))
        for worker in self.workers:
            if not worker.stopping:
                self._stop_worker(worker)
        deadline = time.monotonic() + self.settings.shutdown_timeout_s + _EXIT_MARGIN_S
        while self.workers and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.1)
        for worker in self.workers:
            log.warning("supervisor: %s did not stop in time: killed", worker.name)
            worker.proc.kill()
            worker.proc.wait()
        log.info("supervisor %d: stopped", os.getpid())

    # --- rolling restart ------------------------------------------------------------------------------

    def _step_roll(self) -> None:
        if self._roll_requested:
            self._roll_requested = False
            if self._roll is not None:
                log.info("supervisor: SIGHUP during a rolling restart: it goes on")
            else:
                self._roll = [w for w in self.workers if not w.stopping]
                log.info("supervisor: rolling restart of %d workers", len(self._roll))
        if self._roll is None or self._outgoing is not None:  # not rolling, or an old worker still stopping
            return
        self._roll = [w for w in self._roll if w in self.workers and not w.stopping]
        if self._incoming is None:
            if not self._roll:
                log.info("supervisor: rolling restart done")
                self._roll = None
                return
            self._incoming = self._spawn()
            return
        if not self._incoming.ready:
            if time.monotonic() - self._incoming.started > READY_TIMEOUT_S:
                log.error(
                    "supervisor: the new %s was not ready within %.0f s: rolling restart ended",
                    self._incoming.name,
                    READY_TIMEOUT_S,
                )
                self._stop_worker(self._incoming)
                self._roll = self._incoming = None
            return
        self._incoming = None
        if self._roll:  # else the old one died meanwhile and the new one took its place
            self._outgoing = self._roll.pop(0)
            self._stop_worker(self._outgoing)


def _drain_pipe(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        return
