"""An aiohttp app served on a free port of 127.0.0.1 from a thread of its own, for the network-edge doubles
that synchronous tests start as context managers (``with TeiEmbedder() as tei: ...``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web

from tests.conftest import free_port

__all__ = ["ThreadedApp"]


class ThreadedApp:
    """Subclasses build their routes in :meth:`app`; ``self.port`` is chosen before it is called."""

    def __init__(self) -> None:
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def app(self) -> web.Application:
        raise NotImplementedError

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app())
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
