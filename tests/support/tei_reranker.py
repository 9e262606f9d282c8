"""A TEI reranker for tests: the network edge a registered GoodMem reranker calls (TEI's ``POST /rerank``
wire format), served on a free port of 127.0.0.1 from a thread of its own."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tests.support.threaded_app import ThreadedApp

__all__ = ["TeiReranker"]


class TeiReranker(ThreadedApp):
    """TEI's ``POST /rerank``: ``{"query", "texts"}`` → ``[{"index", "score"}]`` sorted by score; the score
    is the share of the query's words found in the text. Records each call's Authorization header."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str | None, dict[str, Any]]] = []

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

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/rerank", self._rerank)
        return app
