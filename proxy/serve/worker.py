"""One memproxy process serving the application, on its own port or as a worker of
:mod:`proxy.serve.supervisor` on the listening socket the supervisor bound (its descriptor inherited).

Either way SIGTERM or SIGINT stops it gracefully (docs/operations.md), so that a restart drops nothing:

1. **Draining.** Health answers 503 (a load balancer's readiness probe takes the process out), every response
   from now on says ``Connection: close`` (the client's next request opens a connection elsewhere), and the
   job runner claims no more jobs.
2. **No new connections.** The listening socket is closed. A worker closes only its own descriptor of the
   socket its supervisor shares among all workers: connections waiting in the kernel's accept queue stay
   there and the other workers accept them (one queue for all, unlike SO_REUSEPORT, whose closing socket
   would reset its own queue).
3. **Idle keep-alive connections** get a short grace (:data:`KEEPALIVE_GRACE_S`) to bring one more request,
   answered with ``Connection: close``; those still idle then are closed (a client finds them closed before
   it reuses them).
4. **In-flight requests and streams** (a GoodMem retrieve's NDJSON or SSE) finish, for at most
   ``--shutdown-timeout-s`` in all; what is still running then is cancelled.
5. **Cleanup** (the application's ``cleanup_ctx``, aiohttp's own sequence): the job runner hands back the
   jobs still running (PENDING and due at once, the attempt not counted: docs/jobs.md), the store closes;
   the process exits 0.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable

from aiohttp import web

from proxy.api.connections import ConnectionLimits
from proxy.api.guards import install_quiet_request_handler
from proxy.app import make_app
from proxy.app_keys import DRAINING, JOBS
from proxy.config import Settings

__all__ = ["KEEPALIVE_GRACE_S", "run_worker"]

log = logging.getLogger("proxy.serve")

# How long a stopping process waits for idle keep-alive connections to bring one more request (answered with
# "Connection: close") before it closes them; at most half of --shutdown-timeout-s.
KEEPALIVE_GRACE_S = 2.0
# How often a supervised worker checks that its supervisor still runs.
_PARENT_CHECK_S = 1.0


def run_worker(settings: Settings, *, listen_fd: int | None = None, ready_fd: int | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then stop gracefully. ``listen_fd``: a listening socket to serve (a
    supervised worker's), else ``settings.host``/``port`` is bound; ``ready_fd``: a pipe written to once the
    application is up and serving (the supervisor's readiness signal)."""
    # A bare 400 for a request aiohttp cannot parse, read deadlines and a cap of connections per address.
    install_quiet_request_handler(
        ConnectionLimits(
            header_timeout_s=settings.header_timeout_s,
            body_timeout_s=settings.body_timeout_s,
            max_per_address=settings.max_connections_per_address,
        )
    )
    if listen_fd is not None:
        # SIGHUP is the supervisor's (a rolling restart); a terminal's hang-up reaches it, not the workers.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    app = make_app(settings)
    # The objects of every imported module (torch's included) leave the collector's view: a full collection
    # would scan them all, pausing every thread (the event loop too) for hundreds of ms whenever one
    # request's garbage, a filter parse, say, triggers one. Only objects made from now on are scanned.
    gc.collect()
    gc.freeze()
    with asyncio.Runner(loop_factory=_loop_factory(settings.event_loop)) as runner:
        runner.run(_serve(app, settings, listen_fd, ready_fd))


async def _serve(
    app: web.Application, settings: Settings, listen_fd: int | None, ready_fd: int | None
) -> None:
    grace_s = min(KEEPALIVE_GRACE_S, settings.shutdown_timeout_s / 2)
    runner = web.AppRunner(
        app,
        access_log=None,
        # A client that goes away cancels its handler, so abandoned searches and embeddings stop early.
        handler_cancellation=True,
        # What is left of the bound once the keep-alive grace is over (step 4 of the module docstring).
        shutdown_timeout=settings.shutdown_timeout_s - grace_s,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    watch: asyncio.Task[None] | None = None
    try:
        await runner.setup()  # the application's start-up: store, embedders, services, job workers
        site: web.BaseSite
        if listen_fd is None:
            site = web.TCPSite(runner, settings.host, settings.port)
        else:
            site = web.SockSite(runner, socket.socket(fileno=listen_fd))
        await site.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if ready_fd is None:
            print(f"memproxy listening on http://{settings.host}:{settings.port}", flush=True)
        else:
            log.info("worker %d serving http://%s:%d", os.getpid(), settings.host, settings.port)
            os.write(ready_fd, b"ready\n")
            os.close(ready_fd)
            watch = loop.create_task(_watch_parent(os.getppid(), stop), name="supervisor watch")
        await stop.wait()
        log.info(
            "process %d stopping: %d connection(s) open, finishing in-flight requests (at most %g s)",
            os.getpid(),
            len(runner.server.connections) if runner.server else 0,
            settings.shutdown_timeout_s,
        )
        await _drain(runner, app, grace_s)
    finally:
        # aiohttp's shutdown: sites closed, in-flight handlers awaited (bounded), then the cleanup_ctx in
        # reverse: the job runner hands its running jobs back before the store closes.
        await runner.cleanup()
        if watch is not None:
            watch.cancel()
    log.info("process %d stopped", os.getpid())


async def _drain(runner: web.AppRunner, app: web.Application, grace_s: float) -> None:
    """Steps 1 to 3 of the module docstring; ``runner.cleanup()`` does the rest."""
    loop = asyncio.get_running_loop()
    app[DRAINING].set()
    app[JOBS].drain()
    for site in list(runner.sites):
        await site.stop()
    server = runner.server
    if server is None:
        return
    deadline = loop.time() + grace_s
    # A connection gone quiet since its last answer is idle; it goes away once it has been answered with
    # "Connection: close", so the wait ends early when every client came back (or none is connected).
    while loop.time() < deadline and any(not _busy(c) for c in server.connections):
        await asyncio.sleep(0.05)
    server.pre_shutdown()  # idle connections close now, busy ones once their answer is sent


def _busy(connection: web.RequestHandler) -> bool:
    # aiohttp's own flag for "a handler runs on this connection" (it is what its shutdown waits on).
    return bool(getattr(connection, "_request_in_progress", False))


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    """A worker whose supervisor died (kill -9) stops gracefully instead of serving on unsupervised."""
    while not stop.is_set():
        await asyncio.sleep(_PARENT_CHECK_S)
        if os.getppid() != parent:
            log.warning("worker %d: the supervisor (pid %d) is gone; stopping", os.getpid(), parent)
            stop.set()


def _loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop
