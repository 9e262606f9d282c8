"""GoodMem spaces ≡ memory containers (docs/data-model.md): create / get / list / update / delete.

A space is a container document whose ``goodmem`` object holds the space-only attributes (labels, space
embedders, default chunking, owner, publicRead). A container created through the OpenSearch API has no such
object and is presented with defaults: owner root, one space embedder (its embedding model), default chunking.
Listing filters in memory (the ``goodmem`` object is stored, not indexed), which is fine for the number of
spaces one instance holds.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core.container_record import Container
from proxy.core.containers import (
    create_container,
    delete_container,
    get_container,
    list_containers,
)
from proxy.core.containers import update_container as update_container_core
from proxy.core.goodmem.chunking import DEFAULT_CHUNKING, ChunkingConfig
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.embedders import EmbedderRef, resolve_embedder, verify_embedder
from proxy.core.goodmem.ids import NIL_UUID, check_space_id, now_ms
from proxy.core.goodmem.paging import Page, Window
from proxy.core.goodmem.users import is_active_user
from proxy.core.goodmem.validation import LabelChange
from proxy.core.identity import Principal, authorize_space, can_see, visible_space_ids
from proxy.errors import BadRequest, Conflict, Forbidden, NotFound
from proxy.store.query import Term

__all__ = [
    "SORT_KEYS",
    "NewSpace",
    "Space",
    "SpaceEmbedder",
    "SpaceEmbedderSpec",
    "SpaceQuery",
    "SpaceUpdate",
    "create_space",
    "delete_space",
    "get_space",
    "list_spaces",
    "may_transfer",
    "read_space",
    "show_space",
    "space_chunking",
    "space_index_prefix",
    "transfer_space",
    "update_space",
]

SORT_KEYS = {
    "created_time": "created",
    "created_at": "created",
    "updated_time": "updated",
    "updated_at": "updated",
    "name": "name",
}
_LIST_BATCH = 1000


# --- the space a container is ------------------------------------------------------------------------


def _gm(container: Container) -> dict[str, Any]:
    return dict(container.goodmem or {})


def _owner(container: Container, default_owner: str | None) -> str:
    """The owner id; containers created through the OpenSearch API belong to root (``default_owner``)."""
    return str(_gm(container).get("owner_id") or default_owner or NIL_UUID)


def space_chunking(container: Container) -> ChunkingConfig:
    raw = _gm(container).get("default_chunking_config")
    return ChunkingConfig.model_validate(raw) if isinstance(raw, Mapping) else DEFAULT_CHUNKING


@dataclass(frozen=True)
class SpaceEmbedder:
    space_id: str
    embedder_id: str
    default_retrieval_weight: float
    created_at: int
    updated_at: int
    created_by_id: str
    updated_by_id: str


@dataclass(frozen=True)
class Space:
    """A container seen as a GoodMem space, with the defaults of one the OpenSearch API created."""

    space_id: str
    name: str
    labels: dict[str, str]
    embedders: tuple[SpaceEmbedder, ...]
    created_at: int
    updated_at: int
    owner_id: str
    created_by_id: str
    updated_by_id: str
    public_read: bool
    chunking: ChunkingConfig

    @classmethod
    def of(cls, container: Container, root_user_id: str | None) -> Space:
        gm = _gm(container)
        owner = _owner(container, root_user_id)
        return cls(
            space_id=container.id,
            name=container.name,
            labels=dict(gm.get("labels") or {}),
            embedders=_space_embedders(container, owner),
            created_at=int(container.created_time),
            updated_at=int(container.last_updated_time),
            owner_id=owner,
            created_by_id=str(gm.get("created_by_id") or owner),
            updated_by_id=str(gm.get("updated_by_id") or owner),
            public_read=bool(gm.get("public_read", False)),
            chunking=space_chunking(container),
        )


def _space_embedders(container: Container, owner: str) -> tuple[SpaceEmbedder, ...]:
    entries = _gm(container).get("space_embedders")
    if not entries:
        if container.embedder_id is None:
            return ()
        entries = [{"embedder_id": container.embedder_id, "default_retrieval_weight": 1.0}]
    return tuple(
        SpaceEmbedder(
            space_id=container.id,
            embedder_id=str(e["embedder_id"]),
            default_retrieval_weight=float(e.get("default_retrieval_weight", 1.0)),
            created_at=int(e.get("created_at") or container.created_time),
            updated_at=int(e.get("updated_at") or container.created_time),
            created_by_id=str(e.get("created_by_id") or owner),
            updated_by_id=str(e.get("updated_by_id") or owner),
        )
        for e in entries
    )


def space_index_prefix(embedder_ids: list[str]) -> str:
    """The index prefix of a GoodMem space: spaces with the same embedder list share their indices.

    A long-term index is built for one embedding (its ``memory_embedding`` dimension and model), so spaces on
    different embedders cannot share ml-commons' ``default`` prefix; one prefix per embedder list keeps every
    combination valid while spaces that agree still share one index.
    """
    digest = hashlib.sha256(",".join(embedder_ids).encode()).hexdigest()[:12]
    return f"goodmem-{digest}"


# --- requests --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpaceEmbedderSpec:
    embedder_id: str
    weight: float = 1.0


@dataclass(frozen=True)
class NewSpace:
    """``POST /v1/spaces``, validated (embedder ids are resolved against the registry by the service)."""

    name: str
    embedders: tuple[SpaceEmbedderSpec, ...]
    labels: dict[str, str] = field(default_factory=dict)
    chunking: ChunkingConfig = field(default_factory=lambda: DEFAULT_CHUNKING)
    public_read: bool = False
    owner_id: str | None = None
    space_id: str | None = None


@dataclass(frozen=True)
class SpaceUpdate:
    """``PUT /v1/spaces/{id}``, validated. ``owner_id``, ``embedder_ids`` and ``chunking`` may only repeat the
    current values (they are immutable): they are kept as sent, to be compared."""

    name: str | None = None
    labels: LabelChange = field(default_factory=LabelChange)
    public_read: bool | None = None
    owner_id: object = None
    embedder_ids: tuple[object, ...] | None = None
    chunking: ChunkingConfig | None = None


@dataclass(frozen=True)
class SpaceQuery:
    """``GET /v1/spaces``: narrowing, order (a key of :data:`SORT_KEYS`) and the page."""

    owner_id: str | None = None
    name_filter: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    sort_by: str = "created_time"
    descending: bool = True
    max_results: int | None = None
    next_token: str | None = None


# --- operations ------------------------------------------------------------------------------------------


async def get_space(gm: GoodMem, space_id: str, *, cached: bool = False) -> Container:
    """The container behind a space id; 404 'Space not found' when there is none. ``cached`` (retrieval
    only) may reuse a read from the last seconds (proxy.core.cache)."""
    try:
        return await get_container(gm.svc, check_space_id(space_id), cached=cached)
    except NotFound:
        raise NotFound("Space not found") from None


async def read_space(gm: GoodMem, principal: Principal, space_id: str, op: str = "READ_SPACE") -> Container:
    """The space, after checking ``op`` for the caller (404 missing, 403 not allowed)."""
    container = await get_space(gm, space_id)
    await authorize_space(gm, principal, container, op)
    return container


async def show_space(gm: GoodMem, principal: Principal, space_id: str) -> Space:
    """GET /v1/spaces/{id}."""
    container = await read_space(gm, principal, space_id)
    return Space.of(container, await gm.instance.root_user_id())


async def _name_taken(gm: GoodMem, name: str, owner: str, *, exclude: str | None = None) -> bool:
    root = await gm.instance.root_user_id()
    page = await list_containers(gm.svc, query=Term("name.keyword", name), size=_LIST_BATCH)
    return any(c.name == name and c.id != exclude and _owner(c, root) == owner for c in page.containers)


async def create_space(gm: GoodMem, principal: Principal, req: NewSpace) -> Space:
    embedders: list[tuple[EmbedderRef, float]] = []
    for spec in req.embedders:
        ref = await resolve_embedder(gm, spec.embedder_id, principal=principal)
        if any(prev.embedder_id == ref.embedder_id for prev, _ in embedders):
            raise BadRequest(f"spaceEmbedders lists embedder {ref.embedder_id} twice")
        embedders.append((ref, spec.weight))
    owner = principal.user_id
    if req.owner_id is not None:
        owner = req.owner_id
        if owner != principal.user_id and not principal.is_admin:
            raise Forbidden("Permission denied: creating a space for another owner requires an administrator")
        if not await is_active_user(gm, owner):
            raise NotFound("Owner not found")
    if await _name_taken(gm, req.name, owner):
        raise Conflict("A space with this name already exists")
    for ref, _ in embedders:
        # A remote embedder is asked for one vector now, so that a declared dimensionality its endpoint does
        # not produce is refused here rather than found at search time.
        if not ref.local:
            await verify_embedder(gm, ref)
    now = now_ms()
    first = embedders[0][0]
    goodmem = {
        "labels": req.labels,
        "space_embedders": [
            {
                "embedder_id": ref.embedder_id,
                "default_retrieval_weight": weight,
                "created_at": now,
                "updated_at": now,
                "created_by_id": principal.user_id,
                "updated_by_id": principal.user_id,
            }
            for ref, weight in embedders
        ],
        "default_chunking_config": req.chunking.to_json(),
        "owner_id": owner,
        "created_by_id": principal.user_id,
        "updated_by_id": principal.user_id,
        "public_read": req.public_read,
    }
    configuration = {
        "index_prefix": space_index_prefix([ref.embedder_id for ref, _ in embedders]),
        "embedding_model_type": "TEXT_EMBEDDING",
        "embedding_model_id": first.embedder_id,
        "embedding_dimension": first.dimension,
    }
    try:
        container = await create_container(
            gm.svc, name=req.name, configuration=configuration, goodmem=goodmem, container_id=req.space_id
        )
    except Conflict:
        raise Conflict("A space with this ID already exists") from None
    return Space.of(container, await gm.instance.root_user_id())


async def _all_containers(gm: GoodMem) -> list[Container]:
    out: list[Container] = []
    after: list[Any] | None = None
    while True:
        page = await list_containers(gm.svc, size=_LIST_BATCH, search_after=after)
        out.extend(page.containers)
        if len(page.containers) < _LIST_BATCH or page.next_search_after is None:
            return out
        after = page.next_search_after


async def list_spaces(gm: GoodMem, principal: Principal, query: SpaceQuery) -> Page[Space]:
    """Spaces the caller may read, narrowed by owner / name glob / labels."""
    key = SORT_KEYS[query.sort_by]
    window = Window.of(query.max_results, query.next_token, default=50, high=1000)
    root = await gm.instance.root_user_id()
    spaces = await _all_containers(gm)
    if not principal.is_admin:
        # The one visibility rule of both APIs (proxy.core.identity): owner, grant, publicRead, backend role.
        granted = await visible_space_ids(gm, principal)
        spaces = [c for c in spaces if await can_see(gm, principal, c, granted)]
    if query.owner_id:
        spaces = [c for c in spaces if _owner(c, root) == query.owner_id]
    if query.name_filter:
        name_filter = query.name_filter
        spaces = [c for c in spaces if fnmatch.fnmatchcase(c.name, name_filter)]
    for k, v in query.labels.items():
        spaces = [c for c in spaces if (_gm(c).get("labels") or {}).get(k) == v]

    def sort_key(c: Container) -> tuple[Any, str]:
        value: Any = {"created": c.created_time, "updated": c.last_updated_time, "name": c.name}[key]
        return value, c.id

    spaces.sort(key=sort_key, reverse=query.descending)
    page = window.cut(spaces)
    return Page(items=[Space.of(c, root) for c in page.items], next_token=page.next_token)


def _check_immutable(req: SpaceUpdate, current: Space) -> None:
    """spaceEmbedders, defaultChunkingConfig and ownerId cannot change (repeating them unchanged is fine)."""
    if req.owner_id is not None and req.owner_id != current.owner_id:
        raise BadRequest("ownerId is immutable")
    if req.embedder_ids is not None and list(req.embedder_ids) != [e.embedder_id for e in current.embedders]:
        raise BadRequest("spaceEmbedders is immutable")
    if req.chunking is not None and req.chunking.to_json() != current.chunking.to_json():
        raise BadRequest("defaultChunkingConfig is immutable")


async def update_space(gm: GoodMem, principal: Principal, space_id: str, req: SpaceUpdate) -> Space:
    container = await read_space(gm, principal, space_id, "UPDATE_SPACE")
    root = await gm.instance.root_user_id()
    current = Space.of(container, root)
    _check_immutable(req, current)
    attrs = _gm(container)
    if not attrs:  # first GoodMem update of a container made through the OpenSearch API
        attrs = {"owner_id": current.owner_id, "created_by_id": current.owner_id, "public_read": False}
    if (
        req.name is not None
        and req.name != container.name
        and await _name_taken(gm, req.name, current.owner_id, exclude=container.id)
    ):
        raise Conflict("A space with this name already exists")
    attrs["labels"] = req.labels.apply(attrs.get("labels") or {})
    if req.public_read is not None:
        attrs["public_read"] = req.public_read
    attrs["updated_by_id"] = principal.user_id
    updated, _ = await update_container_core(gm.svc, container.id, name=req.name, goodmem=attrs)
    return Space.of(updated, root)


def may_transfer(principal: Principal, space: Space) -> bool:
    """GoodMem: "the current space owner, the GoodMem instance owner, or an instance administrator" may give
    a space away; a grant of UPDATE_SPACE (a space-scoped administrator) is not enough."""
    return principal.is_admin or principal.user_id == space.owner_id


async def transfer_space(gm: GoodMem, principal: Principal, space_id: str, new_owner_id: str) -> Space:
    """POST /v1/spaces/{id}:transferOwnership: the space's owner or an administrator gives it to another
    active user. Only the owner and the update audit change; memories, embedders and grants stay as they are
    (a grant to the old owner goes on granting)."""
    container = await read_space(gm, principal, space_id)
    root = await gm.instance.root_user_id()
    current = Space.of(container, root)
    if not may_transfer(principal, current):
        raise Forbidden("Permission denied: only the space's owner or an administrator may transfer it")
    if not await is_active_user(gm, new_owner_id):
        raise NotFound("New owner not found")
    if new_owner_id != current.owner_id and await _name_taken(
        gm, container.name, new_owner_id, exclude=container.id
    ):
        raise Conflict("The new owner already has a space with this name")
    attrs = _gm(container) or {"created_by_id": current.owner_id, "public_read": False}
    attrs["owner_id"] = new_owner_id
    attrs["updated_by_id"] = principal.user_id
    updated, _ = await update_container_core(gm.svc, container.id, goodmem=attrs)
    return Space.of(updated, root)


async def delete_space(gm: GoodMem, principal: Principal, space_id: str) -> None:
    """Cascade: chunks (long-term documents), then the container with its records and grants."""
    container = await read_space(gm, principal, space_id, "DELETE_SPACE")
    try:
        await delete_container(gm.svc, container.id, purge_memories=True)
    except NotFound:
        raise NotFound("Space not found") from None
