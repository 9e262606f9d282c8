"""``memproxy [serve]``: one process serving the port (:mod:`proxy.serve.worker`), or with ``--workers N``
a supervisor running N of them on it (:mod:`proxy.serve.supervisor`). Both stop gracefully on SIGTERM, and
the supervisor restarts its workers one at a time on SIGHUP (docs/operations.md)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

__all__ = ["serve"]


def serve(argv: Sequence[str]) -> None:
    from proxy.config import parse_settings
    from proxy.observability import configure_logging
    from proxy.serve.supervisor import LISTEN_FD_ENV, READY_FD_ENV

    settings = parse_settings(argv)
    # Text or JSON lines, each carrying the id of the request it was logged for (proxy.observability).
    configure_logging(settings.log_level, settings.log_format, sys.stderr)
    # opensearch-py logs every call at INFO and every failed call with a traceback at WARNING; memproxy
    # reports what matters itself (an unreachable cluster is a 503, not a stack trace in the log).
    logging.getLogger("opensearch").setLevel(logging.ERROR)
    listen_fd = os.environ.pop(LISTEN_FD_ENV, None)
    ready_fd = os.environ.pop(READY_FD_ENV, None)
    if listen_fd is None and settings.workers > 1:
        from proxy.serve.supervisor import Supervisor

        sys.exit(Supervisor(argv, settings).run())
    # Imported here: the supervisor must not pay seconds (and memory) for the server's imports (torch).
    from proxy.serve.worker import run_worker

    run_worker(
        settings,
        listen_fd=None if listen_fd is None else int(listen_fd),
        ready_fd=None if ready_fd is None else int(ready_fd),
    )
    # Stopped cleanly: everything durable is written and the store is closed. The interpreter's own teardown
    # (freeing torch's and every other module's objects) would take seconds more, which a rolling restart
    # waits for at each step: exit now, once the logs are out.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
