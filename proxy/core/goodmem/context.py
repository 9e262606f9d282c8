"""What every GoodMem operation takes first: :class:`GoodMem`, the GoodMem state of one application.

It holds the shared ``Services`` (store, embedders, read caches) and the application's
:class:`proxy.core.identity.Identity` (memproxy's own indices, the instance record once read, the background
work), which every API shares; GoodMem's operations reach them through it. One is made per application when
it starts (the GoodMem slice's ``cleanup_ctx``); nothing of it lives at module level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from proxy.core.cache import Caches
from proxy.core.identity import Identity, InstanceRecord
from proxy.core.jobs import JobQueue
from proxy.core.services import Services
from proxy.core.tasks import BackgroundTasks
from proxy.documents import Limits
from proxy.store.client import Store
from proxy.store.goodmem import GoodMemIndices

if TYPE_CHECKING:  # proxy.embedding imports torch; pure core code must not pay for that
    from proxy.embedding import EmbedderRegistry

__all__ = ["DocumentSettings", "GoodMem"]


@dataclass(frozen=True)
class DocumentSettings:
    """The operator's document settings (proxy.config: document_max_pages, ocr_timeout_s, page_image_dpi,
    sync_max_chars; docs/documents.md)."""

    limits: Limits = field(default_factory=Limits)
    sync_max_chars: int = 100_000


@dataclass(frozen=True)
class GoodMem:
    """The GoodMem state of one application; see the module docstring. ``jobs``: the durable job queue
    that documents and long texts are processed through (None: every memory is processed in its request,
    which tests of the core alone rely on)."""

    svc: Services
    identity: Identity
    jobs: JobQueue | None = None
    documents: DocumentSettings = field(default_factory=DocumentSettings)

    @classmethod
    def create(
        cls,
        svc: Services,
        identity: Identity | None = None,
        *,
        jobs: JobQueue | None = None,
        documents: DocumentSettings | None = None,
    ) -> GoodMem:
        """``identity``: the application's (shared with the other APIs); a fresh one for tests."""
        return cls(
            svc=svc,
            identity=identity or Identity.create(svc.store, svc.caches),
            jobs=jobs,
            documents=documents or DocumentSettings(),
        )

    @property
    def docs(self) -> GoodMemIndices:
        return self.identity.docs

    @property
    def instance(self) -> InstanceRecord:
        return self.identity.instance

    @property
    def background(self) -> BackgroundTasks:
        return self.identity.background

    @property
    def store(self) -> Store:
        return self.svc.store

    @property
    def embedders(self) -> EmbedderRegistry:
        return self.svc.embedders

    @property
    def caches(self) -> Caches:
        return self.svc.caches
