"""The GoodMem instance record: whether ``POST /v1/system/init`` ran, and who the root user is."""

from __future__ import annotations

import weakref
from typing import Any

from proxy.core.goodmem._svc import Svc
from proxy.store import goodmem as gstore
from proxy.store.client import Store

__all__ = ["INSTANCE_DOC", "instance_record", "remember", "root_user_id"]

INSTANCE_DOC = "instance"

# The instance record never changes once written, so a found one is cached per store.
_cache: weakref.WeakKeyDictionary[Store, dict[str, Any]] = weakref.WeakKeyDictionary()


async def instance_record(svc: Svc) -> dict[str, Any] | None:
    cached = _cache.get(svc.store)
    if cached is not None:
        return cached
    doc = await gstore.get_doc(svc.store, gstore.SYSTEM, INSTANCE_DOC)
    if doc is not None and doc.get("root_user_id"):
        _cache[svc.store] = doc
    return doc


async def root_user_id(svc: Svc) -> str | None:
    """The root user's id, the owner of containers created through the OpenSearch API; None before init."""
    doc = await instance_record(svc)
    return str(doc["root_user_id"]) if doc and doc.get("root_user_id") else None


def remember(svc: Svc, record: dict[str, Any]) -> None:
    """Cache the record this process just wrote (a re-initialised node must not keep serving the old root)."""
    _cache[svc.store] = record
