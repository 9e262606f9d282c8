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
import re
from collections.abc import Mapping
from typing import Any

from proxy.core.containers import (
    Container,
    create_container,
    delete_container,
    get_container,
    list_containers,
)
from proxy.core.containers import update_container as update_container_core
from proxy.core.goodmem import instance
from proxy.core.goodmem._svc import Svc, now_ms
from proxy.core.goodmem.auth import Principal, authorize_space
from proxy.core.goodmem.chunking import DEFAULT_CHUNKING, ChunkingConfig, parse_chunking
from proxy.core.goodmem.embedders import resolve_embedder
from proxy.core.goodmem.paging import Page, clamp, decode_offset, encode_offset
from proxy.core.goodmem.validation import apply_labels, check_labels, check_name, check_uuid
from proxy.errors import BadRequest, Conflict, Forbidden, NotFound
from proxy.store import goodmem as gstore

__all__ = [
    "NIL_UUID",
    "create_space",
    "delete_space",
    "get_space",
    "list_spaces",
    "read_space",
    "space_chunking",
    "space_index_prefix",
    "space_json",
    "space_owner",
    "update_space",
]

NIL_UUID = "00000000-0000-0000-0000-000000000000"
_SPACE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,511}$")
_SORT_KEYS = {
    "created_time": "created",
    "created_at": "created",
    "updated_time": "updated",
    "updated_at": "updated",
    "name": "name",
}
_LIST_BATCH = 1000


def _gm(container: Container) -> dict[str, Any]:
    return dict(container.goodmem or {})


def space_owner(container: Container, default_owner: str | None = None) -> str:
    """The owner id; containers created through the OpenSearch API belong to root (``default_owner``)."""
    return str(_gm(container).get("owner_id") or default_owner or NIL_UUID)


def space_chunking(container: Container) -> ChunkingConfig:
    raw = _gm(container).get("default_chunking_config")
    return ChunkingConfig.model_validate(raw) if isinstance(raw, Mapping) else DEFAULT_CHUNKING


def _space_embedders(container: Container, owner: str) -> list[dict[str, Any]]:
    gm = _gm(container)
    entries = gm.get("space_embedders")
    if not entries:
        if container.embedder_id is None:
            return []
        entries = [{"embedder_id": container.embedder_id, "default_retrieval_weight": 1.0}]
    out = []
    for e in entries:
        out.append(
            {
                "spaceId": container.id,
                "embedderId": str(e["embedder_id"]),
                "defaultRetrievalWeight": float(e.get("default_retrieval_weight", 1.0)),
                "createdAt": int(e.get("created_at") or container.created_time),
                "updatedAt": int(e.get("updated_at") or container.created_time),
                "createdById": str(e.get("created_by_id") or owner),
                "updatedById": str(e.get("updated_by_id") or owner),
            }
        )
    return out


def space_json(container: Container, *, default_owner: str | None = None) -> dict[str, Any]:
    """The GoodMem Space (union of both generations: ``publicRead`` for Gen A)."""
    gm = _gm(container)
    owner = space_owner(container, default_owner)
    return {
        "spaceId": container.id,
        "name": container.name,
        "labels": dict(gm.get("labels") or {}),
        "spaceEmbedders": _space_embedders(container, owner),
        "createdAt": int(container.created_time),
        "updatedAt": int(container.last_updated_time),
        "ownerId": owner,
        "createdById": str(gm.get("created_by_id") or owner),
        "updatedById": str(gm.get("updated_by_id") or owner),
        "publicRead": bool(gm.get("public_read", False)),
        "defaultChunkingConfig": space_chunking(container).to_json(),
    }


def _check_space_id(space_id: str) -> str:
    if not isinstance(space_id, str) or not _SPACE_ID.match(space_id):
        raise BadRequest(f"Invalid UUID format for spaceId: {space_id!r}")
    return space_id


async def get_space(svc: Svc, space_id: str, *, cached: bool = False) -> Container:
    """The container behind a space id; 404 'Space not found' when there is none. ``cached`` (retrieval
    only) may reuse a read from the last seconds (proxy.core.cache)."""
    try:
        return await get_container(svc, _check_space_id(space_id), cached=cached)
    except NotFound:
        raise NotFound("Space not found") from None


async def read_space(svc: Svc, principal: Principal, space_id: str, op: str = "READ_SPACE") -> Container:
    """The space, after checking ``op`` for the caller (404 missing, 403 not allowed)."""
    container = await get_space(svc, space_id)
    await authorize_space(svc, principal, container, op)
    return container


def _parse_embedders(svc: Svc, value: Any) -> list[tuple[Any, float]]:
    if not isinstance(value, list) or not value:
        raise BadRequest("spaceEmbedders must list at least one embedder")
    out: list[tuple[Any, float]] = []
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise BadRequest(f"spaceEmbedders[{i}] must be an object with embedderId")
        info = resolve_embedder(svc, entry.get("embedderId"))
        weight = entry.get("defaultRetrievalWeight", 1.0)
        if weight is None:
            weight = 1.0
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
            raise BadRequest(f"spaceEmbedders[{i}].defaultRetrievalWeight must be a number >= 0")
        if any(str(prev.id) == str(info.id) for prev, _ in out):
            raise BadRequest(f"spaceEmbedders lists embedder {info.id} twice")
        out.append((info, float(weight)))
    return out


async def _owners(svc: Svc) -> str | None:
    return await instance.root_user_id(svc)


async def _name_taken(svc: Svc, name: str, owner: str, *, exclude: str | None = None) -> bool:
    root = await _owners(svc)
    page = await list_containers(svc, query={"term": {"name.keyword": name}}, size=_LIST_BATCH)
    return any(c.name == name and c.id != exclude and space_owner(c, root) == owner for c in page.containers)


async def create_space(svc: Svc, principal: Principal, body: Mapping[str, Any]) -> Container:
    name = check_name(body.get("name"))
    labels = check_labels(body.get("labels"))
    embedders = _parse_embedders(svc, body.get("spaceEmbedders"))
    chunking = (
        parse_chunking(body["defaultChunkingConfig"], field="defaultChunkingConfig")
        if body.get("defaultChunkingConfig") is not None
        else DEFAULT_CHUNKING
    )
    public_read = body.get("publicRead", False)
    if not isinstance(public_read, bool):
        raise BadRequest("publicRead must be a boolean")
    owner = principal.user_id
    if body.get("ownerId") is not None:
        owner = check_uuid(body["ownerId"], "ownerId")
        if owner != principal.user_id and not principal.is_admin:
            raise Forbidden("Permission denied: creating a space for another owner requires an administrator")
        if await gstore.get_doc(svc.store, gstore.USERS, owner) is None:
            raise NotFound("Owner not found")
    space_id = check_uuid(body["spaceId"], "spaceId") if body.get("spaceId") is not None else None
    if await _name_taken(svc, name, owner):
        raise Conflict("A space with this name already exists")
    now = now_ms()
    first = embedders[0][0]
    goodmem = {
        "labels": labels,
        "space_embedders": [
            {
                "embedder_id": str(info.id),
                "default_retrieval_weight": weight,
                "created_at": now,
                "updated_at": now,
                "created_by_id": principal.user_id,
                "updated_by_id": principal.user_id,
            }
            for info, weight in embedders
        ],
        "default_chunking_config": chunking.to_json(),
        "owner_id": owner,
        "created_by_id": principal.user_id,
        "updated_by_id": principal.user_id,
        "public_read": public_read,
    }
    configuration = {
        "index_prefix": space_index_prefix([str(info.id) for info, _ in embedders]),
        "embedding_model_type": "TEXT_EMBEDDING",
        "embedding_model_id": str(first.id),
        "embedding_dimension": int(first.dimension),
    }
    try:
        return await create_container(
            svc, name=name, configuration=configuration, goodmem=goodmem, container_id=space_id
        )
    except Conflict:
        raise Conflict("A space with this ID already exists") from None


def space_index_prefix(embedder_ids: list[str]) -> str:
    """The index prefix of a GoodMem space: spaces with the same embedder list share their indices.

    A long-term index is built for one embedding (its ``memory_embedding`` dimension and model), so spaces on
    different embedders cannot share ml-commons' ``default`` prefix; one prefix per embedder list keeps every
    combination valid while spaces that agree still share one index.
    """
    digest = hashlib.sha256(",".join(embedder_ids).encode()).hexdigest()[:12]
    return f"goodmem-{digest}"


async def _visible_space_ids(svc: Svc, principal: Principal) -> tuple[set[str], bool]:
    """Spaces granted to the caller (any operation), and whether an ANY grant covers every space."""
    res = await gstore.search(
        svc.store,
        gstore.GRANTS,
        {
            "size": 10_000,
            "_source": ["resource_id", "selector"],
            "query": {
                "bool": {
                    "should": [
                        {"term": {"principal_id": principal.user_id}},
                        {"term": {"all_authenticated": True}},
                    ],
                    "minimum_should_match": 1,
                    "must_not": [{"exists": {"field": "revoked_at"}}],
                }
            },
        },
    )
    ids: set[str] = set()
    any_space = False
    for hit in res.get("hits", {}).get("hits", []):
        src = hit["_source"]
        if src.get("selector") == "ANY":
            any_space = True
        elif src.get("resource_id"):
            ids.add(str(src["resource_id"]))
    return ids, any_space


async def _all_containers(svc: Svc) -> list[Container]:
    out: list[Container] = []
    after: list[Any] | None = None
    while True:
        page = await list_containers(svc, size=_LIST_BATCH, search_after=after)
        out.extend(page.containers)
        if len(page.containers) < _LIST_BATCH or page.next_search_after is None:
            return out
        after = page.next_search_after


async def list_spaces(
    svc: Svc,
    principal: Principal,
    *,
    owner_id: str | None = None,
    name_filter: str | None = None,
    labels: Mapping[str, str] | None = None,
    max_results: int | None = None,
    next_token: str | None = None,
    sort_by: str | None = None,
    sort_order: str | None = None,
) -> tuple[Page, str | None]:
    """Spaces the caller may read, narrowed by owner / name glob / labels; (page, root user id)."""
    key = _SORT_KEYS.get(sort_by or "created_time")
    if key is None:
        raise BadRequest("sortBy must be one of created_time, updated_time, name")
    order = (sort_order or "DESCENDING").upper()
    if order not in ("ASCENDING", "DESCENDING", "SORT_ORDER_UNSPECIFIED"):
        raise BadRequest("sortOrder must be ASCENDING or DESCENDING")
    size = clamp(max_results, 50, 1000)
    start = decode_offset(next_token)
    root = await _owners(svc)
    spaces = await _all_containers(svc)
    if not principal.is_admin:
        granted, any_space = await _visible_space_ids(svc, principal)
        spaces = [
            c
            for c in spaces
            if any_space
            or space_owner(c, root) == principal.user_id
            or _gm(c).get("public_read")
            or c.id in granted
        ]
    if owner_id:
        spaces = [c for c in spaces if space_owner(c, root) == owner_id]
    if name_filter:
        spaces = [c for c in spaces if fnmatch.fnmatchcase(c.name, name_filter)]
    for k, v in (labels or {}).items():
        spaces = [c for c in spaces if (_gm(c).get("labels") or {}).get(k) == v]

    def sort_key(c: Container) -> tuple[Any, str]:
        value: Any = {"created": c.created_time, "updated": c.last_updated_time, "name": c.name}[key]
        return value, c.id

    spaces.sort(key=sort_key, reverse=order == "DESCENDING")
    window = spaces[start : start + size]
    more = start + size < len(spaces)
    return Page(items=window, next_token=encode_offset(start + size) if more else None), root


def _check_immutable(body: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """spaceEmbedders, defaultChunkingConfig and ownerId cannot change (repeating them unchanged is fine)."""
    if body.get("ownerId") is not None and body["ownerId"] != current["ownerId"]:
        raise BadRequest("ownerId is immutable")
    given = body.get("spaceEmbedders")
    if given is not None:
        have = [e["embedderId"] for e in current["spaceEmbedders"]]
        if (
            not isinstance(given, list)
            or [e.get("embedderId") if isinstance(e, Mapping) else e for e in given] != have
        ):
            raise BadRequest("spaceEmbedders is immutable")
    chunking = body.get("defaultChunkingConfig")
    if chunking is not None and parse_chunking(chunking).to_json() != current["defaultChunkingConfig"]:
        raise BadRequest("defaultChunkingConfig is immutable")


async def update_space(svc: Svc, principal: Principal, space_id: str, body: Mapping[str, Any]) -> Container:
    container = await read_space(svc, principal, space_id, "UPDATE_SPACE")
    root = await _owners(svc)
    current = space_json(container, default_owner=root)
    _check_immutable(body, current)
    gm = _gm(container)
    if not gm:  # first GoodMem update of a container made through the OpenSearch API
        gm = {"owner_id": current["ownerId"], "created_by_id": current["ownerId"], "public_read": False}
    name = None
    if body.get("name") is not None:
        name = check_name(body["name"])
        if name != container.name and await _name_taken(svc, name, current["ownerId"], exclude=container.id):
            raise Conflict("A space with this name already exists")
    gm["labels"] = apply_labels(gm.get("labels") or {}, body.get("replaceLabels"), body.get("mergeLabels"))
    if body.get("publicRead") is not None:
        if not isinstance(body["publicRead"], bool):
            raise BadRequest("publicRead must be a boolean")
        gm["public_read"] = body["publicRead"]
    gm["updated_by_id"] = principal.user_id
    updated, _ = await update_container_core(svc, container.id, name=name, goodmem=gm)
    return updated


async def delete_space(svc: Svc, principal: Principal, space_id: str) -> None:
    """Cascade: chunks (long-term documents), then the container with its records and grants."""
    container = await read_space(svc, principal, space_id, "DELETE_SPACE")
    try:
        await delete_container(svc, container.id, purge_memories=True)
    except NotFound:
        raise NotFound("Space not found") from None
