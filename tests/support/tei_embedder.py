"""A TEI embedder for tests: the network edge a remote ``--embedder …#provider=tei`` calls (TEI's
``POST /embed`` wire format: ``{"inputs": [...]}`` → one vector per input), served on a free port of
127.0.0.1 from a thread of its own.

``/<n>/embed`` answers ``n``-dimensional vectors, so one server stands in for several models of different
dimensions (a model's URL is ``url_for(n)``). A text's vector is a pseudo-random one seeded by the text's
SHA-256: the same text always gets the same vector, so a search for a memory's own text finds it with
cosine 1, and two different texts are nearly orthogonal. ``delay_s[n]`` slows each call of one dimension
(a long copy a test can interrupt); ``failing`` makes a dimension's calls answer 503."""

from __future__ import annotations

import asyncio
import hashlib
import random

from aiohttp import web

from tests.support.threaded_app import ThreadedApp

__all__ = ["TeiEmbedder", "hashed_vector"]


def hashed_vector(text: str, dimension: int) -> list[float]:
    rng = random.Random(hashlib.sha256(text.encode()).digest())
    return [rng.gauss(0.0, 1.0) for _ in range(dimension)]


class TeiEmbedder(ThreadedApp):
    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[int, int] = {}
        self.texts: dict[int, int] = {}
        self.delay_s: dict[int, float] = {}
        # Dimensions whose calls answer 503 (a provider that is down).
        self.failing: set[int] = set()

    def url_for(self, dimension: int) -> str:
        return f"http://127.0.0.1:{self.port}/{dimension}"

    async def _embed(self, request: web.Request) -> web.Response:
        dimension = int(request.match_info["dimension"])
        body = await request.json()
        inputs = body.get("inputs")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(t, str) for t in inputs):
            return web.json_response(
                {"error": "inputs must be strings", "error_type": "Validation"}, status=422
            )
        self.calls[dimension] = self.calls.get(dimension, 0) + 1
        if dimension in self.failing:
            return web.json_response({"error": "overloaded", "error_type": "Overloaded"}, status=503)
        self.texts[dimension] = self.texts.get(dimension, 0) + len(inputs)
        if self.delay_s.get(dimension):
            await asyncio.sleep(self.delay_s[dimension])
        return web.json_response([hashed_vector(t, dimension) for t in inputs])

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/{dimension:\\d+}/embed", self._embed)
        return app
