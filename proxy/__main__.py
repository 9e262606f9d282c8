"""``python -m proxy`` / ``memproxy``: run the proxy in the foreground (``memproxy [serve] [flags]``), or one
of the client commands of :mod:`proxy.cli` (``memproxy ingest|search|inspect|export|import ...``)."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import Sequence

from proxy.cli import COMMANDS, run

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    # ``memproxy ingest ...`` and the other client commands (proxy.cli); anything else runs the server, as
    # ``memproxy [flags]`` always has, and ``memproxy serve [flags]`` says so explicitly.
    if args and args[0] in COMMANDS:
        sys.exit(run(args))
    if args[:1] == ["migrate-layout"]:
        sys.exit(_migrate_layout(args[1:]))
    _serve(args[1:] if args[:1] == ["serve"] else args)


def _serve(argv: Sequence[str]) -> None:
    # Imported here, not above: a client command must not pay seconds for the server's imports (torch).
    from aiohttp import web

    from proxy.api.connections import ConnectionLimits
    from proxy.api.guards import install_quiet_request_handler
    from proxy.app import make_app
    from proxy.config import parse_settings
    from proxy.observability import configure_logging

    settings = parse_settings(argv)
    # Text or JSON lines, each carrying the id of the request it was logged for (proxy.observability).
    configure_logging(settings.log_level, settings.log_format, sys.stderr)
    # opensearch-py logs every call at INFO and every failed call with a traceback at WARNING; memproxy
    # reports what matters itself (an unreachable cluster is a 503, not a stack trace in the log).
    logging.getLogger("opensearch").setLevel(logging.ERROR)
    # A bare 400 for a request aiohttp cannot parse, read deadlines and a cap of connections per address.
    install_quiet_request_handler(
        ConnectionLimits(
            header_timeout_s=settings.header_timeout_s,
            body_timeout_s=settings.body_timeout_s,
            max_per_address=settings.max_connections_per_address,
        )
    )
    app = make_app(settings)
    # The objects of every imported module (torch's included) leave the collector's view: a full collection
    # would scan them all, pausing every thread (the event loop too) for hundreds of ms whenever one
    # request's garbage, a filter parse, say, triggers one. Only objects made from now on are scanned.
    gc.collect()
    gc.freeze()
    web.run_app(
        app,
        loop=_new_loop(settings.event_loop),
        host=settings.host,
        port=settings.port,
        access_log=None,
        # A client that goes away cancels its handler, so abandoned searches and embeddings stop early.
        handler_cancellation=True,
        print=lambda _: print(f"memproxy listening on http://{settings.host}:{settings.port}", flush=True),
    )


def _migrate_layout(argv: Sequence[str]) -> int:
    """``memproxy migrate-layout INDEX... [--suffix S] [--batch N] [server flags]``: move legacy memory
    indices into the routed layout (proxy.store.migrate; docs/data-model.md). It talks to OpenSearch with
    the server's own connection flags; run it again after any failure to resume."""
    import argparse
    import json

    from proxy.config import parse_settings
    from proxy.store.client import Store
    from proxy.store.migrate import DEFAULT_SUFFIX, migrate_layout

    own = argparse.ArgumentParser(prog="memproxy migrate-layout")
    own.add_argument("indices", nargs="+", metavar="INDEX", help="memory index names to migrate")
    own.add_argument("--suffix", default=DEFAULT_SUFFIX, help="the new index is INDEX-SUFFIX")
    own.add_argument("--batch", type=int, default=500, help="documents per copy request")
    opts, rest = own.parse_known_args(argv)
    settings = parse_settings(rest)

    async def go() -> int:
        store = Store(settings)
        try:
            for index in opts.indices:
                report = await migrate_layout(store, index, suffix=opts.suffix, batch=opts.batch)
                print(json.dumps(report.__dict__), flush=True)
        finally:
            await store.close()
        return 0

    return asyncio.run(go())


def _new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


if __name__ == "__main__":
    main()
