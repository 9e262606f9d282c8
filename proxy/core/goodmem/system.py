"""``/v1/system/init`` (bootstrap of the root user and its key, exactly once) and the instance record."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from proxy.core.goodmem.apikeys import IssuedKey, issue_key
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.ids import new_id, now_ms
from proxy.core.goodmem.users import new_user_doc
from proxy.core.identity import IdentityState
from proxy.errors import NotFound
from proxy.store.goodmem import USERS

__all__ = ["ROOT_EMAIL", "Initialized", "Instance", "get_instance", "init_system", "issue_root_key"]

log = logging.getLogger(__name__)

ROOT_EMAIL = "root@goodmem.local"


@dataclass(frozen=True)
class Initialized:
    """What init did: nothing (``root_api_key`` None, it ran before), or created the root user and key."""

    root_api_key: str | None = None
    user_id: str | None = None


@dataclass(frozen=True)
class Instance:
    """The GoodMem instance: its id is its root user's id."""

    root_user_id: str
    created_at: int


async def init_system(gm: GoodMem) -> Initialized:
    """Create the root user and a root API key the first time; later calls do nothing.

    The instance record is written first with ``op_type=create``, so concurrent calls (from any number of
    proxy processes) agree on one winner; only the winner creates the user and key.
    """
    root_id = new_id()
    if not await gm.instance.create({"root_user_id": root_id, "created_at": now_ms()}):
        return Initialized()
    gm.caches.access_changed()
    user = new_user_doc(
        user_id=root_id, email=ROOT_EMAIL, actor_id=root_id, roles=("ROOT",), display_name="Root User"
    )
    await gm.docs.put(USERS, root_id, user)
    key = await issue_key(gm, user_id=root_id, actor_id=root_id, labels={"purpose": "root"})
    log.info("GoodMem system initialized; root user %s", root_id)
    return Initialized(root_api_key=key.raw_key, user_id=root_id)


async def get_instance(gm: IdentityState) -> Instance:
    record = await gm.instance.get()
    if record is None:
        raise NotFound("System not initialized")
    return Instance(root_user_id=str(record["root_user_id"]), created_at=int(record.get("created_at") or 0))


async def issue_root_key(identity: IdentityState) -> IssuedKey:
    """One more key for the root user: the way back when the key init answered is lost (init answers it
    once per cluster, and the local node keeps its data across restarts). Only ``memproxy root-key`` calls
    this, with memproxy's own cluster credentials: whoever has those can write memproxy's indices anyway.
    """
    instance = await get_instance(identity)
    root = await identity.docs.get(USERS, instance.root_user_id)
    if root is None or root.get("deleted_at"):
        raise NotFound(f"The root user {instance.root_user_id} does not exist")
    root_id = instance.root_user_id
    key = await issue_key(identity, user_id=root_id, actor_id=root_id, labels={"purpose": "root-key"})
    log.info("issued a further root API key %s", key.key.api_key_id)
    return key
