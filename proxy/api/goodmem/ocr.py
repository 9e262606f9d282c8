"""``POST /v1/ocr:document``: OCR of a PDF or an image, page by page, as the GoodMem SDKs call it
(``client.ocr.document(file_path=...)``). Tesseract does the recognition (proxy.documents); each line it finds
is one layout cell of category TEXT."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from aiohttp import web
from pydantic import field_validator

from proxy.api.body import PayloadTooLarge
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.wire import WireModel, json_body, reply, wire_field
from proxy.api.guards import current_limits
from proxy.documents import DocumentError, OcrDocPage, OcrDocument, OcrTimeout, OcrUnavailable, ocr_document
from proxy.errors import BadRequest, DeadlineExceeded, Unavailable

__all__ = ["routes"]

routes = web.RouteTableDef()

_FORMATS = ("AUTO", "PDF", "TIFF", "PNG", "JPEG", "BMP")
# google.rpc.Code values for a page's status.
_DEADLINE_EXCEEDED, _INTERNAL = 4, 13


class OcrBody(WireModel):
    """``OcrDocumentRequest``."""

    content: bytes = wire_field("content")
    format: str | None = wire_field("format")
    include_raw_json: bool = wire_field("includeRawJson", False)
    include_markdown: bool = wire_field("includeMarkdown", False)
    start_page: int | None = wire_field("startPage")
    end_page: int | None = wire_field("endPage")

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, value: Any) -> bytes:
        if value is None:
            raise BadRequest("content is required (the document's bytes, base64)")
        if not isinstance(value, str):
            raise BadRequest("content must be a base64 string")
        try:
            data = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest("content is not valid base64") from None
        if not data:
            raise BadRequest("content must not be empty")
        limit = current_limits().document_max_bytes
        if len(data) > limit:
            raise PayloadTooLarge(f"The document has {len(data)} bytes, more than the {limit} allowed")
        return data

    @field_validator("format", mode="before")
    @classmethod
    def _format(cls, value: Any) -> str | None:
        if value is None:
            return None
        if value not in _FORMATS:
            raise BadRequest(f"format must be one of {', '.join(_FORMATS)}")
        return None if value == "AUTO" else str(value)

    @field_validator("include_raw_json", "include_markdown", mode="before")
    @classmethod
    def _flag(cls, value: Any) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise BadRequest("includeRawJson and includeMarkdown must be booleans")
        return value

    @field_validator("start_page", "end_page", mode="before")
    @classmethod
    def _page(cls, value: Any) -> int | None:
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BadRequest("startPage and endPage must be non-negative integers")
        return value


def _page_json(page: OcrDocPage, body: OcrBody) -> dict[str, Any]:
    if page.result is None:
        code = _DEADLINE_EXCEEDED if "time" in (page.error or "").lower() else _INTERNAL
        return {"pageIndex": page.index, "status": {"code": code, "message": page.error}}
    cells = [
        {
            "bbox": {"x1": c.bbox[0], "y1": c.bbox[1], "x2": c.bbox[2], "y2": c.bbox[3]},
            "categoryLabel": c.category.lower(),
            "category": c.category,
            "text": c.text,
        }
        for c in page.result.cells
    ]
    out: dict[str, Any] = {
        "layout": {"cells": cells},
        "timings": {
            "queueWaitMs": round(page.queue_wait_ms),
            "renderMs": round(page.render_ms),
            "ocrMs": round(page.ocr_ms),
            "totalMs": round(page.total_ms),
        },
        "image": {"widthPx": page.width_px, "heightPx": page.height_px, "dpi": page.dpi},
    }
    if body.include_markdown:
        out["markdown"] = "\n\n".join(c.text for c in page.result.cells)
    if body.include_raw_json:
        out["rawJson"] = json.dumps({"cells": cells}, ensure_ascii=False)
    return {"pageIndex": page.index, "page": out}


def _document_json(doc: OcrDocument, body: OcrBody) -> dict[str, Any]:
    return {
        "detectedFormat": doc.detected_format,
        "pageCount": len(doc.pages),
        "pages": [_page_json(p, body) for p in doc.pages],
        "timings": {
            "wallTimeMs": round(doc.wall_ms),
            "sumQueueWaitMs": round(sum(p.queue_wait_ms for p in doc.pages)),
            "sumRenderMs": round(sum(p.render_ms for p in doc.pages)),
            "sumOcrMs": round(sum(p.ocr_ms for p in doc.pages)),
            "sumPageTotalMs": round(sum(p.total_ms for p in doc.pages)),
        },
    }


@routes.post("/v1/ocr:document")
async def ocr(request: web.Request) -> web.Response:
    await principal(request)  # any authenticated caller: OCR reads nothing stored
    body = OcrBody.parse(await json_body(request))
    limits = goodmem(request).documents.limits
    try:
        doc = await ocr_document(
            body.content, body.format, limits, start_page=body.start_page, end_page=body.end_page
        )
    except OcrUnavailable as exc:
        raise Unavailable(exc.message) from None
    except OcrTimeout as exc:
        raise DeadlineExceeded(exc.message) from None
    except DocumentError as exc:
        raise BadRequest(exc.message) from None
    return reply(_document_json(doc, body))
