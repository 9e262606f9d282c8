"""Who the caller is, and what they may do to a container: one model for every API and route.

**Principals.** A caller is authenticated in one of two ways, whichever API or forwarded route they use:

- a **GoodMem API key** (``x-api-key``, ``Authorization: Bearer``, or basic auth with the key as the
  password, which is how opensearch-py's ``http_auth`` sends it). The key's sha256 is the id of its document,
  so authentication is one realtime GET of the key plus one of its user, kept for ``--cache-ttl-s`` in the
  read cache (expiry and validity windows are still checked on every request);
- the caller's own **cluster credentials**, when the cluster runs the security plugin: memproxy asks the
  cluster who they are (``_plugins/_security/authinfo``, sent with the caller's ``Authorization`` and never
  memproxy's own), and takes the user name, backend roles and roles from the answer, as ml-commons does.

**Containers** (= GoodMem spaces). The operations are GoodMem's (:data:`SPACE_OPS`); the ml-commons routes
map onto them. A caller may perform an operation when they are an administrator (GoodMem ``ROOT``/``ADMIN``,
or a cluster user with ``all_access``), own the container, share a backend role with it (ml-commons'
rule: the container's ``backend_roles``, else its owner's), or hold a grant (one principal or all
authenticated principals; ``EXACT``/``DIRECT_MEMBERS_OF`` a space, or ``ANY`` space). ``publicRead`` is an
all-authenticated grant of the read operations. Any grant on a space also lets its audience see the space
itself (READ_SPACE), because one cannot use a space one cannot see. Backend roles never confer
MANAGE_ACCESS or DELETE_SPACE: ml-commons lets only the owner (and administrators) delete a container.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.core.cache import Caches
from proxy.core.clock import now_ms
from proxy.core.container_record import Container
from proxy.core.tasks import BackgroundTasks
from proxy.errors import Conflict, Forbidden, Unauthenticated
from proxy.store.client import IndexMissing, Store
from proxy.store.containers import list_containers
from proxy.store.goodmem import APIKEYS, GRANTS, SYSTEM, USERS, GoodMemIndices
from proxy.store.query import And, Exists, MatchAll, Not, Or, Term, Terms
from proxy.store.security import ClusterUser, authinfo, cluster_has_security

__all__ = [
    "ADMIN_ROLES",
    "CLUSTER_ADMIN_ROLES",
    "PUBLIC_READ_OPS",
    "SPACE_OPS",
    "Identity",
    "IdentityState",
    "InstanceRecord",
    "Principal",
    "authenticate",
    "authenticate_cluster",
    "authorize_space",
    "can_access_space",
    "can_see",
    "find_key",
    "hash_key",
    "require_admin",
    "space_owner_id",
    "visible_container_ids",
    "visible_space_ids",
]

SPACE_OPS = frozenset(
    {
        "READ_SPACE",
        "UPDATE_SPACE",
        "DELETE_SPACE",
        "LIST_MEMORY",
        "READ_MEMORY",
        "CREATE_MEMORY",
        "DELETE_MEMORY",
        "MANAGE_ACCESS",
    }
)
PUBLIC_READ_OPS = frozenset({"READ_SPACE", "LIST_MEMORY", "READ_MEMORY"})
# What sharing a backend role with a container allows: everything but deleting it and granting access.
_BACKEND_ROLE_OPS = SPACE_OPS - {"DELETE_SPACE", "MANAGE_ACCESS"}
ADMIN_ROLES = frozenset({"ROOT", "ADMIN"})
CLUSTER_ADMIN_ROLES = frozenset({"all_access"})
# lastUsedAt is refreshed at most this often per key, off the request path.
_TOUCH_EVERY_MS = 60_000
INSTANCE_DOC = "instance"


@dataclass(frozen=True)
class Principal:
    """The authenticated caller.

    ``user_id`` is whom they act as and what ownership records: a GoodMem user id, or a cluster user's
    name. ``cluster_authorization`` is the caller's own ``Authorization`` header when the cluster
    authenticated them; only pass-through forwards it, and it is never printed.
    """

    user_id: str
    api_key_id: str | None = None
    roles: tuple[str, ...] = ()
    backend_roles: tuple[str, ...] = ()
    cluster_authorization: str | None = field(default=None, repr=False, compare=False)

    @property
    def is_admin(self) -> bool:
        return any(r in ADMIN_ROLES or r in CLUSTER_ADMIN_ROLES for r in self.roles)

    @property
    def from_cluster(self) -> bool:
        return self.cluster_authorization is not None

    def owner_record(self) -> dict[str, Any]:
        """ml-commons' ``owner`` object of what this caller creates (the security plugin's user shape)."""
        return {"name": self.user_id, "backend_roles": list(self.backend_roles), "roles": list(self.roles)}


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
        """The root user's id (the owner of containers nobody else owns); None before init."""
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


class IdentityState(Protocol):
    """What authentication and authorization read: :class:`Identity`, or the GoodMem state built on it."""

    @property
    def store(self) -> Store: ...

    @property
    def docs(self) -> GoodMemIndices: ...

    @property
    def caches(self) -> Caches: ...

    @property
    def instance(self) -> InstanceRecord: ...

    @property
    def background(self) -> BackgroundTasks: ...


@dataclass(frozen=True)
class Identity:
    """The identity state of one application: memproxy's own indices (keys, users, grants, the instance
    record), the read caches, and the background work authentication starts (``lastUsedAt`` refreshes)."""

    store: Store
    docs: GoodMemIndices
    caches: Caches
    instance: InstanceRecord
    background: BackgroundTasks = field(default_factory=BackgroundTasks)
    _security: _SecurityProbe = field(default_factory=lambda: _SecurityProbe())

    @classmethod
    def create(cls, store: Store, caches: Caches) -> Identity:
        docs = GoodMemIndices(store)
        return cls(store=store, docs=docs, caches=caches, instance=InstanceRecord(docs))

    async def cluster_security(self) -> bool:
        """Whether the cluster authenticates callers itself (asked once, then again after a failure)."""
        return await self._security.get(self.store)

    async def close(self) -> None:
        await self.background.close()


class _SecurityProbe:
    """The cluster's answer to "do you run the security plugin?", kept once it was given."""

    def __init__(self) -> None:
        self._known: bool | None = None

    async def get(self, store: Store) -> bool:
        if self._known is None:
            self._known = await cluster_has_security(store)  # an unreachable node raises: asked again later
        return self._known


def hash_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()


# --- authentication ---------------------------------------------------------------------------------


async def authenticate(state: IdentityState, raw_key: str | None) -> Principal:
    """The caller behind an API key (None: the request had none); 401 when it is not usable now."""
    if raw_key is None:
        raise Unauthenticated("No API key provided.")
    principal = await find_key(state, raw_key)
    if principal is None:
        raise Unauthenticated("Invalid or expired API key.")
    return principal


async def find_key(state: IdentityState, raw_key: str) -> Principal | None:
    """The caller behind an API key, or None when it is no usable key (unknown, revoked, expired, or its
    user deleted)."""
    key_hash = hash_key(raw_key)
    try:
        doc, user = await state.caches.principals.get(key_hash, lambda: _load_key(state, key_hash))
    except _NoSuchKey:
        return None
    now = now_ms()
    # Validity windows are checked on every request, cached or not.
    if not _usable(doc, now) or user.get("deleted_at"):
        return None
    _touch(state, key_hash, doc, now)
    return Principal(
        user_id=str(doc["user_id"]), api_key_id=str(doc["api_key_id"]), roles=tuple(user.get("roles") or ())
    )


async def authenticate_cluster(state: IdentityState, authorization: str) -> Principal | None:
    """The cluster user behind the caller's own ``Authorization`` header (None: the cluster refused it)."""
    try:
        user: ClusterUser = await state.caches.principals.get(
            "cluster:" + hash_key(authorization), lambda: _load_cluster_user(state, authorization)
        )
    except _NoSuchKey:
        return None
    return Principal(
        user_id=user.name,
        roles=user.roles,
        backend_roles=user.backend_roles,
        cluster_authorization=authorization,
    )


async def _load_cluster_user(state: IdentityState, authorization: str) -> ClusterUser:
    user = await authinfo(state.store, authorization)
    if user is None:
        raise _NoSuchKey  # not cached: a refused password may be right a moment later
    return user


class _NoSuchKey(Exception):
    """Raised, not returned, so that the cache (which keeps only successful loads) never keeps it."""


async def _load_key(state: IdentityState, key_hash: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The key's document and its user's."""
    doc = await state.docs.get(APIKEYS, key_hash)
    if doc is None:
        raise _NoSuchKey
    user = await state.docs.get(USERS, str(doc["user_id"]))
    if user is None:
        raise _NoSuchKey
    return doc, user


def _usable(doc: Mapping[str, Any], now: int) -> bool:
    if doc.get("status") != "ACTIVE" or doc.get("revoked_at"):
        return False
    if doc.get("expires_at") is not None and int(doc["expires_at"]) <= now:
        return False
    return not (doc.get("valid_from") is not None and int(doc["valid_from"]) > now)


def _touch(state: IdentityState, doc_id: str, doc: dict[str, Any], now: int) -> None:
    """Record lastUsedAt without delaying the request (and without a write per request)."""
    if now - int(doc.get("last_used_at") or 0) < _TOUCH_EVERY_MS:
        return
    doc["last_used_at"] = now  # the cached copy too, so the next requests do not write again
    state.background.spawn(
        state.docs.update_fields(APIKEYS, doc_id, {"last_used_at": now}), "lastUsedAt update"
    )


# --- authorization ----------------------------------------------------------------------------------


def require_admin(principal: Principal, what: str = "this operation") -> None:
    if not principal.is_admin:
        raise Forbidden(f"Permission denied: {what} requires an administrator")


def _goodmem_attrs(container: Container) -> Mapping[str, Any]:
    return container.goodmem or {}


def _owner_record(container: Container) -> Mapping[str, Any]:
    owner = container.extra.get("owner")
    return owner if isinstance(owner, Mapping) else {}


async def space_owner_id(state: IdentityState, container: Container) -> str | None:
    """The container's owner: the GoodMem owner, else ml-commons' ``owner.name``, else root (containers
    written before owners were recorded, or under ``--auth none``)."""
    owner = _goodmem_attrs(container).get("owner_id") or _owner_record(container).get("name")
    if owner:
        return str(owner)
    return await state.instance.root_user_id()


def _shares_backend_role(principal: Principal, container: Container) -> bool:
    if not principal.backend_roles:
        return False
    roles = container.backend_roles or list(_owner_record(container).get("backend_roles") or ())
    return bool(set(principal.backend_roles).intersection(str(r) for r in roles))


async def can_access_space(state: IdentityState, principal: Principal, container: Container, op: str) -> bool:
    if op not in SPACE_OPS:
        raise ValueError(f"unknown space operation {op!r}")
    if principal.is_admin:
        return True
    if await space_owner_id(state, container) == principal.user_id:
        return True
    if op in _BACKEND_ROLE_OPS and _shares_backend_role(principal, container):
        return True
    if op == "MANAGE_ACCESS":
        return False
    if op in PUBLIC_READ_OPS and _goodmem_attrs(container).get("public_read"):
        return True
    ops = tuple(sorted(SPACE_OPS)) if op == "READ_SPACE" else (op,)
    space_id = container.id
    return await state.caches.grants.get(
        (principal.user_id, space_id, ops), lambda: _has_grant(state, principal, space_id, list(ops))
    )


async def authorize_space(state: IdentityState, principal: Principal, container: Container, op: str) -> None:
    """Raise 403 unless ``principal`` may perform ``op`` on the space ``container``."""
    if not await can_access_space(state, principal, container, op):
        raise Forbidden(f"Permission denied: {op} on space {container.id}")


async def _has_grant(state: IdentityState, principal: Principal, space_id: str, ops: list[str]) -> bool:
    where = And(
        (
            Terms("operation", tuple(ops)),
            Or((Term("principal_id", principal.user_id), Term("all_authenticated", True))),
            Or(
                (
                    Term("selector", "ANY"),
                    And((Term("resource_kind", "SPACE"), Term("resource_id", space_id))),
                )
            ),
            Not(Exists("revoked_at")),
        )
    )
    return await state.docs.count(GRANTS, where) > 0


async def visible_space_ids(state: IdentityState, principal: Principal) -> tuple[set[str], bool]:
    """Spaces granted to the caller (any operation), and whether an ANY grant covers every space."""
    audience = Or((Term("principal_id", principal.user_id), Term("all_authenticated", True)))
    hits = await state.docs.search_all(
        GRANTS, And((audience, Not(Exists("revoked_at")))), key="grant_id", fields=("resource_id", "selector")
    )
    ids: set[str] = set()
    any_space = False
    for hit in hits:
        src = hit["_source"]
        if src.get("selector") == "ANY":
            any_space = True
        elif src.get("resource_id"):
            ids.add(str(src["resource_id"]))
    return ids, any_space


async def can_see(
    state: IdentityState, principal: Principal, container: Container, granted: tuple[set[str], bool]
) -> bool:
    """Whether a listing shows ``container`` to ``principal`` (``granted``: :func:`visible_space_ids`)."""
    ids, any_space = granted
    return (
        principal.is_admin
        or any_space
        or container.id in ids
        or _goodmem_attrs(container).get("public_read") is True
        or _shares_backend_role(principal, container)
        or await space_owner_id(state, container) == principal.user_id
    )


_LIST_BATCH = 1000


async def visible_container_ids(state: IdentityState, principal: Principal) -> list[str] | None:
    """The ids of every container ``principal`` may see; None for an administrator, who sees all."""
    if principal.is_admin:
        return None
    granted = await visible_space_ids(state, principal)
    ids: list[str] = []
    after: list[Any] | None = None
    while True:
        try:
            page = await list_containers(state.store, MatchAll(), size=_LIST_BATCH, search_after=after)
        except IndexMissing:
            return ids
        hits = page["hits"]["hits"]
        for hit in hits:
            container = Container.from_hit(hit)
            if await can_see(state, principal, container, granted):
                ids.append(container.id)
        if len(hits) < _LIST_BATCH:
            return ids
        after = hits[-1].get("sort")
