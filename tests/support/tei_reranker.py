"""A TEI reranker for tests: the network edge a registered GoodMem reranker calls (TEI's ``POST /rerank``
wire format), served on a free port of 127.0.0.1 from a thread of its own."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web

from tests.conftest import free_port

__all__ = ["TeiReranker"]


class TeiReranker:
    """TEI's ``POST /rerank``: ``{"query", "texts"}`` → ``[{"index", "score"}]`` sorted by score; the score
    is the share of the query's words found in the text. Records each call's Authorization header."""

    def __init__(self) -> None:
        self.port = free_port()
        self.calls: list[tuple[str | None, dict[str, Any]]] = []
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _rerank(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append((request.headers.get("Authorization"), body))
        if not isinstance(body.get("query"), str) or not isinstance(body.get("texts"), list):
            return web.json_response({"error": "bad request", "error_type": "Validation"}, status=422)
        words = set(body["query"].lower().split())
        scores = [len(words & set(t.lower().split())) / max(len(words), 1) for t in body["texts"]]
        ranked = sorted(enumerate(scores), key=lambda p: -p[1])
        return web.json_response([{"index": i, "score": s} for i, s in ranked])

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/rerank", self._rerank)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def __enter__(self) -> TeiReranker:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
