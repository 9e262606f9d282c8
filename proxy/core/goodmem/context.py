"""What every GoodMem operation takes first: :class:`GoodMem`, the GoodMem state of one application.

It holds the shared ``Services`` (store, embedders, read caches), GoodMem's own indices, the instance record
once read, and the background tasks GoodMem starts (``lastUsedAt`` refreshes). One is made per application
when it starts and closed when it stops (the GoodMem slice's ``cleanup_ctx``), which cancels what is still
running; nothing of it lives at module level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proxy.core.cache import Caches
from proxy.core.goodmem.tasks import BackgroundTasks
from proxy.core.services import Services
from proxy.errors import Conflict
from proxy.store.client import Store
from proxy.store.goodmem import SYSTEM, GoodMemIndices

if TYPE_CHECKING:  # proxy.embedding imports torch; pure core code must not pay for that
    from proxy.embedding import EmbedderRegistry

__all__ = ["GoodMem", "InstanceRecord"]

INSTANCE_DOC = "instance"


class InstanceRecord:
    """The GoodMem instance record (whether ``/v1/system/init`` ran, and who the root user is).

    It never changes once written, so a found one is kept for the life of the application.
    """

    def __init__(self, docs: GoodMemIndices) -> None:
        self._docs = docs
        self._found: dict[str, Any] | None = None

    async def get(self) -> dict[str, Any] | None:
        if self._found is not None:
            return self._found
        doc = await self._docs.get(SYSTEM, INSTANCE_DOC)
        if doc is not None and doc.get("root_user_id"):
            self._found = doc
        return doc

    async def root_user_id(self) -> str | None:
        """The root user's id (the owner of containers the OpenSearch API created); None before init."""
        doc = await self.get()
        return str(doc["root_user_id"]) if doc and doc.get("root_user_id") else None

    async def create(self, record: dict[str, Any]) -> bool:
        """Write the record unless one exists (any process may race); True when this call wrote it."""
        try:
            await self._docs.put(SYSTEM, INSTANCE_DOC, record, create=True)
        except Conflict:
            return False
        # Remember what this process wrote (a re-initialised node must not keep serving the old root).
        self._found = record
        return True


@dataclass(frozen=True)
class GoodMem:
    """The GoodMem state of one application; see the module docstring."""

    svc: Services
    docs: GoodMemIndices
    instance: InstanceRecord
    background: BackgroundTasks = field(default_factory=BackgroundTasks)

    @classmethod
    def create(cls, svc: Services) -> GoodMem:
        docs = GoodMemIndices(svc.store)
        return cls(svc=svc, docs=docs, instance=InstanceRecord(docs))

    async def close(self) -> None:
        await self.background.close()

    @property
    def store(self) -> Store:
        return self.svc.store

    @property
    def embedders(self) -> EmbedderRegistry:
        return self.svc.embedders

    @property
    def caches(self) -> Caches:
        return self.svc.caches
