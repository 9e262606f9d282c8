"""``python -m proxy`` / ``memproxy``: run the proxy in the foreground."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from aiohttp import web

from proxy.api.guards import install_quiet_request_handler
from proxy.app import make_app
from proxy.config import parse_settings

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    settings = parse_settings(argv)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # opensearch-py logs every call at INFO and every failed call with a traceback at WARNING; memproxy
    # reports what matters itself (an unreachable cluster is a 503, not a stack trace in the log).
    logging.getLogger("opensearch").setLevel(logging.ERROR)
    install_quiet_request_handler()  # a bare 400 for a request aiohttp cannot parse (proxy.api.guards)
    web.run_app(
        make_app(settings),
        loop=_new_loop(settings.event_loop),
        host=settings.host,
        port=settings.port,
        access_log=None,
        # A client that goes away cancels its handler, so abandoned searches and embeddings stop early.
        handler_cancellation=True,
        print=lambda _: print(f"memproxy listening on http://{settings.host}:{settings.port}", flush=True),
    )


def _new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


if __name__ == "__main__":
    main()
