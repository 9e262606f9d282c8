"""``/openai/v1/embeddings`` and ``/openai/v1/models``: the registry's embedders, spoken as OpenAI."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web

from proxy.api.openai.models import parse_embeddings_request
from proxy.app_keys import EMBEDDERS
from proxy.embedding import Embedder, EmbedderInfo, EmbedderRegistry, UnknownEmbedder
from proxy.errors import BadRequest, NotFound

__all__ = ["PREFIX", "routes", "unknown"]

PREFIX = "/openai/v1"

routes = web.RouteTableDef()


# Embeddings serialised per turn of the event loop: one json.dumps of a full float answer (2048 x 384)
# would hold the loop for about 0.4 s.
_SLICE = 128


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _reply(body: dict[str, Any]) -> web.Response:
    return web.Response(text=_dumps(body), content_type="application/json")


def _embedder(registry: EmbedderRegistry, model: str) -> Embedder:
    try:
        return registry.get(model)
    except UnknownEmbedder:
        message = f"The model `{model}` does not exist."
        raise NotFound(message, details={"param": "model", "code": "model_not_found"}) from None


def _card(name: str, info: EmbedderInfo) -> dict[str, Any]:
    # OpenAI's `created` is when a model was published; the local analogue, stable across restarts, is
    # when its directory was last written.
    try:
        created = int(Path(info.model_path).stat().st_mtime)
    except OSError:
        created = 0
    return {"id": name, "object": "model", "created": created, "owned_by": "memproxy"}


def _base64(vector: list[float]) -> str:
    # What OpenAI sends and its client decodes: little-endian float32, base64.
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


async def _data(vectors: list[list[float]], *, base64_encoded: bool) -> str:
    """The ``data`` array as JSON text, serialised a slice at a time."""
    slices = []
    for start in range(0, len(vectors), _SLICE):
        items = [
            {"object": "embedding", "index": i, "embedding": _base64(v) if base64_encoded else v}
            for i, v in enumerate(vectors[start : start + _SLICE], start)
        ]
        slices.append(_dumps(items)[1:-1])
        await asyncio.sleep(0)
    return "[" + ",".join(slices) + "]"


@routes.post(PREFIX + "/embeddings")
async def embeddings(request: web.Request) -> web.Response:
    body = parse_embeddings_request(await request.read())
    embedder = _embedder(request.app[EMBEDDERS], body.model)
    dimension = embedder.info.dimension
    if body.dimensions is not None and body.dimensions != dimension:
        raise BadRequest(
            f"Model `{body.model}` only produces {dimension}-d vectors; 'dimensions' must be {dimension} "
            "or left out (vectors are never truncated).",
            details={"param": "dimensions"},
        )
    vectors, counts = await embedder.embed_counted(body.input)
    tokens = sum(counts)
    data = await _data(vectors, base64_encoded=body.encoding_format == "base64")
    usage = _dumps({"prompt_tokens": tokens, "total_tokens": tokens})
    text = f'{{"object":"list","data":{data},"model":{_dumps(body.model)},"usage":{usage}}}'
    return web.Response(text=text, content_type="application/json")


@routes.get(PREFIX + "/models")
async def list_models(request: web.Request) -> web.Response:
    registry = request.app[EMBEDDERS]
    data = [_card(name, info) for info in registry.infos() for name in registry.names(info.id)]
    return _reply({"object": "list", "data": data})


@routes.get(PREFIX + "/models/{model:.+}")
async def get_model(request: web.Request) -> web.Response:
    name = request.match_info["model"]
    return _reply(_card(name, _embedder(request.app[EMBEDDERS], name).info))


async def unknown(request: web.Request) -> web.Response:
    raise NotFound(f"Invalid URL ({request.method} {request.path})")
