"""``/v1/system/info`` and ``/v1/system/init`` (bootstrap of the root user and its key, exactly once)."""

from __future__ import annotations

import logging
from typing import Any

from proxy import __version__
from proxy.core.goodmem import instance
from proxy.core.goodmem._svc import Svc, new_id, now_ms
from proxy.core.goodmem.apikeys import issue_key
from proxy.core.goodmem.users import new_user_doc
from proxy.errors import Conflict, NotFound
from proxy.store import goodmem as gstore

__all__ = ["ROOT_EMAIL", "init_system", "instance_json", "system_info"]

log = logging.getLogger(__name__)

ROOT_EMAIL = "root@goodmem.local"


def system_info() -> dict[str, Any]:
    """SystemInfoResponse: memproxy's version in GoodMem's shape."""
    parts = [int(p) if p.isdigit() else 0 for p in [*__version__.split("+")[0].split("."), "0", "0"][:3]]
    return {
        "version": __version__,
        "major": parts[0],
        "minor": parts[1],
        "patch": parts[2],
        "dirty": False,
        "capabilities": {"server": "memproxy", "store": "opensearch", "embedders": "local"},
    }


async def init_system(svc: Svc) -> dict[str, Any]:
    """Create the root user and a root API key the first time; later calls report alreadyInitialized.

    The instance record is written first with ``op_type=create``, so concurrent calls (from any number of
    proxy processes) agree on one winner; only the winner creates the user and key.
    """
    root_id = new_id()
    record = {"root_user_id": root_id, "created_at": now_ms()}
    try:
        await gstore.index_doc(svc.store, gstore.SYSTEM, instance.INSTANCE_DOC, record, create=True)
    except Conflict:
        return {"alreadyInitialized": True, "message": "System already initialized"}
    instance.remember(svc, record)
    svc.caches.access_changed()
    user = new_user_doc(
        user_id=root_id, email=ROOT_EMAIL, actor_id=root_id, roles=("ROOT",), display_name="Root User"
    )
    await gstore.index_doc(svc.store, gstore.USERS, root_id, user)
    key = await issue_key(svc, user_id=root_id, actor_id=root_id, labels={"purpose": "root"})
    log.info("GoodMem system initialized; root user %s", root_id)
    return {
        "alreadyInitialized": False,
        "message": "System initialized successfully",
        "rootApiKey": key.raw_key,
        "userId": root_id,
    }


async def instance_json(svc: Svc) -> dict[str, Any]:
    """Gen B GoodMemInstance: the instance id (= its root user's id) and its owner (root)."""
    record = await instance.instance_record(svc)
    if record is None:
        raise NotFound("System not initialized")
    root, created = str(record["root_user_id"]), int(record.get("created_at") or 0)
    return {
        "instanceId": root,
        "ownerId": root,
        "createdAt": created,
        "updatedAt": created,
        "createdById": root,
        "updatedById": root,
    }
