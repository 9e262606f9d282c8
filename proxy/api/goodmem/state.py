"""The GoodMem slice's state on the application, and the caller of a request.

:data:`GOODMEM` (the core's per-application GoodMem state) and :data:`RETRIEVER` (retrieval over it) are set
up by :func:`goodmem_ctx`, a ``cleanup_ctx`` the slice adds when it is mounted (after the shared services
exist), and closed with the application, which cancels GoodMem's background work. The keys live here, not in
``proxy.app_keys``, because ``proxy.core.goodmem`` is the GoodMem slice's alone.

Credentials are read by the identity middleware (``proxy.api.identity``) for every API; GoodMem handlers
take the caller from :func:`principal`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from proxy.app_keys import IDENTITY, JOBS, PRINCIPAL, SERVICES, SETTINGS
from proxy.core.goodmem.context import DocumentSettings, GoodMem
from proxy.core.goodmem.documents import register_documents
from proxy.core.goodmem.erasure import register_user_erasure
from proxy.core.goodmem.retrieve import Retriever
from proxy.core.identity import Principal
from proxy.documents import Limits
from proxy.errors import Unauthenticated

__all__ = ["GOODMEM", "RETRIEVER", "goodmem", "goodmem_ctx", "principal", "retriever"]

GOODMEM = web.AppKey("goodmem", GoodMem)
RETRIEVER = web.AppKey("goodmem_retriever", Retriever)


async def goodmem_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    documents = DocumentSettings(
        limits=Limits(
            max_pages=settings.document_max_pages,
            ocr_timeout_s=settings.ocr_timeout_s,
            page_image_dpi=settings.page_image_dpi,
            max_draws=settings.document_max_draws,
            max_form_depth=settings.document_max_form_depth,
            max_page_chars=settings.document_max_page_chars,
            max_chars=settings.document_max_chars,
            page_timeout_s=settings.document_page_timeout_s,
            text_timeout_s=settings.document_text_timeout_s,
        ),
        sync_max_chars=settings.sync_max_chars,
    )
    gm = GoodMem.create(app[SERVICES], app[IDENTITY], jobs=app[JOBS].queue, documents=documents)
    register_documents(app[JOBS], gm)  # documents and long texts are processed as durable jobs
    register_user_erasure(app[JOBS], gm)  # POST /v1/users/{id}:erase?waitForCompletion=false
    app[GOODMEM] = gm
    app[RETRIEVER] = Retriever(gm, max_per_caller=settings.retrieve_max_per_caller)
    yield


def goodmem(request: web.Request) -> GoodMem:
    return request.app[GOODMEM]


def retriever(request: web.Request) -> Retriever:
    return request.app[RETRIEVER]


async def principal(request: web.Request) -> Principal:
    """The authenticated caller, established by the identity middleware (proxy.api.identity) before any
    GoodMem handler runs; 401 if a route somehow reached here without one."""
    who = request.get(PRINCIPAL)
    if who is None:
        raise Unauthenticated("No API key provided.")
    return who
