"""``/v1/memories``: create (JSON or multipart), get, delete, content, list per space, batch
create/get/delete.

Batch answers are 200 when every item succeeded and 207 when some failed; an item's ``error.code`` is the HTTP
status the same failure would have had alone.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from proxy.api import body as body_reader
from proxy.api.body import PayloadTooLarge
from proxy.api.goodmem.downloads import bytes_reply
from proxy.api.goodmem.memory_wire import (
    BatchDeleteBody,
    BatchGetBody,
    MemoryCreateBody,
    batch_create_items,
    memory_query,
)
from proxy.api.goodmem.render import memory_json, page_image_json
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.wire import Query, json_body, page_reply, reply
from proxy.api.guards import current_limits
from proxy.core.goodmem import memories as core
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.documents import latest_jobs
from proxy.core.goodmem.memory_list import batch_delete_memories, list_memories
from proxy.core.goodmem.pages import PageFilter, list_page_images, page_image
from proxy.core.goodmem.records import MemoryRecord
from proxy.core.jobs import Job
from proxy.errors import BadRequest, MemproxyError, NotFound

__all__ = ["routes"]

routes = web.RouteTableDef()


def _reason(exc: Exception) -> str:
    # aiohttp's own errors carry their text in ``message`` and repeat the offending bytes in str().
    return str(getattr(exc, "message", None) or exc).splitlines()[0][:200]


async def _multipart(request: web.Request) -> tuple[Any, dict[str, tuple[bytes, str | None]]]:
    """(the JSON of the ``request``/``requests`` part, {part name: (bytes, content type)} of the file
    parts)."""
    reader = await request.multipart()
    meta: Any = None
    files: dict[str, tuple[bytes, str | None]] = {}
    while True:
        try:
            part = await reader.next()
        except (ValueError, HttpProcessingError) as exc:
            # aiohttp's multipart reader: no starting boundary, a bad part header, a line over its limit.
            raise BadRequest(f"Malformed multipart body: {_reason(exc)}") from None
        if part is None:
            break
        if not isinstance(part, BodyPartReader):
            continue
        try:
            data = await part.read(decode=True)
        except (ValueError, HttpProcessingError) as exc:
            raise BadRequest(f"Malformed multipart body: {_reason(exc)}") from None
        limit = current_limits().document_max_bytes
        if part.name not in ("request", "requests") and len(data) > limit:
            raise PayloadTooLarge(
                f"The uploaded file '{part.name}' has {len(data)} bytes, more than the {limit} one memory "
                "may hold (document_max_bytes)"
            )
        if part.name in ("request", "requests"):
            try:
                meta = body_reader.decode_json(bytes(data))
            except body_reader.MalformedJson as exc:
                raise BadRequest(f"Malformed JSON in multipart part '{part.name}': {exc.detail}") from None
        elif part.name:
            files[part.name] = (bytes(data), part.headers.get("Content-Type"))
    if meta is None:
        raise BadRequest("A multipart create needs a 'request' part holding the JSON request")
    return meta, files


def _bind_file(item: Any, files: dict[str, tuple[bytes, str | None]], default_field: str = "file") -> Any:
    """Turn a file part into ``originalContentB64`` of the JSON item (its ``fileField``, else ``file``)."""
    if not isinstance(item, dict):
        return item
    name = item.get("fileField") or default_field
    if name not in files:
        return item
    data, part_type = files[name]
    out = dict(item)
    out["originalContentB64"] = base64.b64encode(data).decode("ascii")
    if not out.get("contentType") and part_type and part_type != "application/octet-stream":
        out["contentType"] = part_type
    return out


@routes.post("/v1/memories")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    if request.content_type.startswith("multipart/"):
        meta, files = await _multipart(request)
        body = _bind_file(meta, files)
    else:
        body = await json_body(request)
    record = await core.create_memory(goodmem(request), who, MemoryCreateBody.read(body))
    return reply(memory_json(record, include_content=False), status=201)


async def _memories_json(
    gm: GoodMem, records: list[MemoryRecord], *, include_content: bool, include_history: bool
) -> list[dict[str, Any]]:
    jobs = await latest_jobs(gm, records) if include_history else {}
    return [memory_json(r, include_content, jobs.get(r.memory_id)) for r in records]


@routes.get("/v1/memories/{id}")
async def get(request: web.Request) -> web.Response:
    who = await principal(request)
    query = Query(request)
    include, history = query.flag("includeContent"), query.flag("includeProcessingHistory")
    record = await core.get_memory(goodmem(request), who, request.match_info["id"])
    [out] = await _memories_json(goodmem(request), [record], include_content=include, include_history=history)
    return reply(out)


@routes.delete("/v1/memories/{id}")
async def delete(request: web.Request) -> web.Response:
    who = await principal(request)
    await core.delete_memory(goodmem(request), who, request.match_info["id"])
    return web.Response(status=204)


@routes.get("/v1/memories/{id}/content")
async def content(request: web.Request) -> web.Response:
    who = await principal(request)
    record = await core.get_memory(goodmem(request), who, request.match_info["id"])
    if record.content_b64 is None:
        raise NotFound("The memory has no inline content")
    data = base64.b64decode(record.content_b64)
    return bytes_reply(request, data, record.content_type, record.content_sha256)


def _page_filter(query: Query) -> PageFilter:
    return PageFilter(
        start_page=query.integer("startPageIndex"),
        end_page=query.integer("endPageIndex"),
        dpi=query.integer("dpi"),
        content_type=query.text("contentType") or None,
    )


@routes.get("/v1/memories/{id}/pages")
async def pages(request: web.Request) -> web.Response:
    who = await principal(request)
    query = Query(request)
    page = await list_page_images(
        goodmem(request),
        who,
        request.match_info["id"],
        _page_filter(query),
        query.integer("maxResults"),
        query.text("nextToken"),
    )
    return page_reply("pageImages", [page_image_json(row) for row in page.items], page)


@routes.get("/v1/memories/{id}/pages/{pageIndex}/image")
async def page_image_bytes(request: web.Request) -> web.Response:
    who = await principal(request)
    raw_index = request.match_info["pageIndex"]
    if not raw_index.isdigit():
        await core.get_memory(goodmem(request), who, request.match_info["id"])  # 404/403 before a 400
        raise BadRequest("pageIndex must be a non-negative integer")
    image = await page_image(
        goodmem(request), who, request.match_info["id"], int(raw_index), _page_filter(Query(request))
    )
    return bytes_reply(request, image.data, image.content_type, image.sha256)


@routes.get("/v1/spaces/{spaceId}/memories")
async def list_in_space(request: web.Request) -> web.Response:
    who = await principal(request)
    # Off the event loop: the filter expression's parse (up to 32 KiB, proxy.filters) is CPU work.
    query = await asyncio.to_thread(memory_query, Query(request))
    history = Query(request).flag("includeProcessingHistory")
    page = await list_memories(goodmem(request), who, request.match_info["spaceId"], query)
    items = await _memories_json(
        goodmem(request), page.items, include_content=query.include_content, include_history=history
    )
    return page_reply("memories", items, page)


def _error(exc: MemproxyError) -> dict[str, Any]:
    return {"code": int(exc.status), "message": exc.message}


def _batch_reply(results: list[dict[str, Any]], **extra: Any) -> web.Response:
    status = 200 if all(r["success"] for r in results) else 207
    return reply({"results": results, **extra}, status=status)


@routes.post("/v1/memories:batchCreate")
async def batch_create(request: web.Request) -> web.Response:
    who = await principal(request)
    if request.content_type.startswith("multipart/"):
        meta, files = await _multipart(request)
        if not isinstance(meta, list):
            raise BadRequest("The multipart 'requests' part must be a JSON array")
        requests: Any = [_bind_file(item, files, default_field="") for item in meta]
    else:
        requests = (await json_body(request)).get("requests")
    items = await core.batch_create_memories(goodmem(request), who, batch_create_items(requests))
    return _batch_reply([_batch_entry(item, include_content=False) for item in items])


def _batch_entry(item: core.ItemResult, *, include_content: bool, job: Job | None = None) -> dict[str, Any]:
    """One result of batchCreate / batchGet: the memory on success, the error otherwise."""
    if item.record is not None:
        return {
            "success": True,
            "memoryId": item.record.memory_id,
            "memory": memory_json(item.record, include_content, job),
        }
    assert item.error is not None
    entry: dict[str, Any] = {"success": False, "error": _error(item.error)}
    if item.memory_id:
        entry["memoryId"] = item.memory_id
    return entry


@routes.post("/v1/memories:batchGet")
async def batch_get(request: web.Request) -> web.Response:
    who = await principal(request)
    body = BatchGetBody.parse(await json_body(request))
    items = await core.batch_get_memories(goodmem(request), who, body.memory_ids)
    jobs = {}
    if body.include_processing_history:
        jobs = await latest_jobs(goodmem(request), [i.record for i in items if i.record is not None])
    return _batch_reply(
        [
            _batch_entry(
                item,
                include_content=body.include_content,
                job=jobs.get(item.record.memory_id) if item.record is not None else None,
            )
            for item in items
        ]
    )


@routes.post("/v1/memories:batchDelete")
async def batch_delete(request: web.Request) -> web.Response:
    who = await principal(request)
    body = await asyncio.to_thread(BatchDeleteBody.parse, await json_body(request))  # its selectors' filters
    items = await batch_delete_memories(goodmem(request), who, body.items)
    out: list[dict[str, Any]] = []
    total = 0
    for index, (item, deleted) in enumerate(items):
        entry: dict[str, Any] = {
            "success": item.error is None,
            "requestIndex": index,
            "deletedCount": deleted,
        }
        if item.memory_id:
            entry["memoryId"] = item.memory_id
        if item.error is not None:
            entry["error"] = _error(item.error)
        total += deleted
        out.append(entry)
    return _batch_reply(out, totalDeleted=total)
