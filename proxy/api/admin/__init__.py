"""memproxy's own administration routes: export and import of a whole container (proxy.core.transfer).

``GET /_memproxy/containers/{id}/_export`` streams the container as NDJSON; ``POST
/_memproxy/containers/{id}/_import[?create=true]`` reads that NDJSON back. Both are for administrators only
(a GoodMem admin key, or a cluster administrator): an export holds every memory of the container and its
private GoodMem records, an import writes documents verbatim. Errors are OpenSearch-shaped, as every
``/_memproxy`` route's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from proxy.api.body import MalformedJson, decode_json, dumps, utf8
from proxy.app_keys import PRINCIPAL, SERVICES, SETTINGS
from proxy.core import transfer
from proxy.core.identity import require_admin
from proxy.errors import BadRequest, MemproxyError

__all__ = ["mount", "routes"]

log = logging.getLogger(__name__)

routes = web.RouteTableDef()

_C = "/_memproxy/containers/{memory_container_id}"
# Lines go out in groups of about this many bytes: one write per line would cost a syscall each.
_FLUSH_BYTES = 256 * 1024


def _admin_only(request: web.Request) -> None:
    who = request.get(PRINCIPAL)
    if who is not None:  # None: --auth none, where every route is open
        require_admin(who, f"{request.method} {request.path}")


@routes.get(_C + "/_export")
async def export(request: web.Request) -> web.StreamResponse:
    _admin_only(request)
    lines = transfer.export_container(request.app[SERVICES], request.match_info["memory_container_id"])
    # The header line is read before the answer starts, so a missing container is an ordinary 404.
    header = await anext(lines)
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson; charset=utf-8"})
    await response.prepare(request)
    buffer = bytearray(utf8(dumps(header, separators=(",", ":")) + "\n"))
    try:
        async for line in lines:
            buffer += utf8(dumps(line, separators=(",", ":")) + "\n")
            if len(buffer) >= _FLUSH_BYTES:
                await response.write(bytes(buffer))
                buffer.clear()
    except MemproxyError as exc:
        # The status line is out: the one way left to say "failed" is to end the stream without its final
        # chunk, which a client reads as a cut-off answer, never as a complete export.
        log.warning("export of %s failed after %d bytes: %s", request.path, response.body_length, exc.message)
        if request.transport is not None:
            request.transport.close()
        return response
    await response.write(bytes(buffer))
    await response.write_eof()
    return response


async def _lines(request: web.Request) -> AsyncIterator[tuple[int, Any]]:
    """The body's non-blank lines, numbered from 1 and decoded, read as they arrive (a chunked body of any
    size streams through; one line may not exceed ``max_body_bytes``)."""
    limit = request.app[SETTINGS].max_body_bytes
    pending = b""
    number = 0
    async for chunk in request.content.iter_any():
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            number += 1
            if raw.strip():
                yield number, _decode(raw)
        if len(pending) > limit:
            raise BadRequest(f"line {number + 1}: longer than {limit} bytes")
    if pending.strip():
        yield number + 1, _decode(pending)


def _decode(raw: bytes) -> Any:
    try:
        return decode_json(raw)
    except MalformedJson as exc:
        return BadRequest(f"not valid JSON: {exc.detail}")


def _flag(value: str | None) -> bool:
    if value is None or value.lower() == "false":
        return False
    if value == "" or value.lower() == "true":
        return True
    raise BadRequest(f"create must be true or false, not {value!r}")


@routes.post(_C + "/_import")
async def import_(request: web.Request) -> web.Response:
    _admin_only(request)
    summary = await transfer.import_container(
        request.app[SERVICES],
        request.match_info["memory_container_id"],
        _lines(request),
        create=_flag(request.query.get("create")),
    )
    return web.json_response(
        {
            "memory_container_id": summary.container_id,
            "created": summary.created,
            "imported": summary.total,
            "by_kind": summary.imported,
        }
    )


def mount(app: web.Application) -> None:
    app.add_routes(routes)
