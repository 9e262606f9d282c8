"""A memory's page images (rendered by its document job, proxy.core.goodmem.documents): listed and served to
readers of the memory."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.memories import get_memory
from proxy.core.goodmem.paging import Page, Window
from proxy.core.identity import Principal
from proxy.errors import BadRequest, NotFound

__all__ = ["PageFilter", "PageImageBytes", "list_page_images", "page_image"]


@dataclass(frozen=True)
class PageFilter:
    """``startPageIndex``/``endPageIndex`` (inclusive), ``dpi`` and ``contentType`` rendition filters."""

    start_page: int | None = None
    end_page: int | None = None
    dpi: int | None = None
    content_type: str | None = None

    def check(self) -> None:
        for name, value in (("startPageIndex", self.start_page), ("endPageIndex", self.end_page)):
            if value is not None and value < 0:
                raise BadRequest(f"{name} must be 0 or more")
        if self.start_page is not None and self.end_page is not None and self.end_page < self.start_page:
            raise BadRequest("endPageIndex must not be less than startPageIndex")
        if self.dpi is not None and self.dpi <= 0:
            raise BadRequest("dpi must be positive")


@dataclass(frozen=True)
class PageImageBytes:
    data: bytes
    content_type: str
    sha256: str


async def list_page_images(
    gm: GoodMem,
    principal: Principal,
    memory_id: str,
    where: PageFilter,
    max_results: int | None,
    next_token: str | None,
) -> Page[dict[str, Any]]:
    """The page-image rows of a memory the caller may read, by page then DPI."""
    where.check()
    record = await get_memory(gm, principal, memory_id)
    window = Window.of(max_results, next_token, default=50, high=500)
    start, size = window.probe()
    rows = await gm.docs.pages(
        record.memory_id,
        start_page=where.start_page,
        end_page=where.end_page,
        dpi=where.dpi,
        content_type=where.content_type,
        size=size,
        start=start,
    )
    return window.page(rows)


async def page_image(
    gm: GoodMem, principal: Principal, memory_id: str, page_index: int, where: PageFilter
) -> PageImageBytes:
    """One page's image; without filters the page's only rendition (several: 400, name dpi/contentType)."""
    if page_index < 0:
        raise BadRequest("pageIndex must be 0 or more")
    where.check()
    record = await get_memory(gm, principal, memory_id)
    rows = await gm.docs.pages(
        record.memory_id,
        start_page=page_index,
        end_page=page_index,
        dpi=where.dpi,
        content_type=where.content_type,
        size=2,
        with_image=True,
    )
    if not rows:
        raise NotFound(f"Page image {page_index} not found")
    if len(rows) > 1:
        raise BadRequest(f"Page {page_index} has several renditions: choose one with dpi and/or contentType")
    row = rows[0]
    return PageImageBytes(
        data=base64.b64decode(row["image_b64"]),
        content_type=str(row["content_type"]),
        sha256=str(row.get("image_content_sha256") or ""),
    )
