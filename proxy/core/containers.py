"""Memory containers (= GoodMem spaces): create / get / update / delete / search / list.

The record itself is :mod:`proxy.core.container_record` and its indices :mod:`proxy.core.container_indices`;
the container documents live in the container index (:mod:`proxy.store.containers`). Every operation takes
typed values: the HTTP slices parse their wire formats first (ml-commons' lenient scalars and its
``configuration`` object in :mod:`proxy.api.opensearch_memory`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.configuration import complete_for_create, merge_update, validate_backend_roles
from proxy.core.container_indices import create_memory_indices, prepare_long_term
from proxy.core.container_record import MEMORY_TYPES, Container, ContainerNotFound, parse_memory_type
from proxy.core.index_families import FamilyClaim, check_family_names, claim_family, split_shared
from proxy.core.longterm_mirror import drop_mirror
from proxy.core.retention.policy import OPT_OUT_KEY
from proxy.core.search import check_caller_dsl
from proxy.core.services import Services
from proxy.errors import BadRequest, Conflict, MemproxyError
from proxy.store import containers as store
from proxy.store import goodmem as goodmem_docs
from proxy.store import memories as docs
from proxy.store.client import IndexMissing
from proxy.store.containers import CONTAINER_INDEX
from proxy.store.query import Exists, Filter, MatchAll, RawDsl, Term
from proxy.store.search import empty_search_response

__all__ = [
    "ContainerPage",
    "check_llm_id",
    "create_container",
    "delete_container",
    "every_container",
    "get_container",
    "list_containers",
    "search_containers",
    "update_container",
]


# --- create / get ----------------------------------------------------------------------------------

_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]*$")


def _check_custom_id(container_id: str) -> None:
    """ml-commons 3.9's rules for a caller-chosen container id."""
    if not container_id.strip():
        raise BadRequest("memory container id is invalid")
    if container_id.startswith("_"):
        raise BadRequest("memory container id must not start with '_'")
    if container_id.startswith("-"):
        raise BadRequest("memory container id must not start with '-'")
    if len(container_id.encode()) > 512:
        raise BadRequest("memory container id is too long, max length is 512")
    if not _CUSTOM_ID.match(container_id):
        raise BadRequest(
            "memory container id must contain only letters, digits, underscores, and hyphens, and must start "
            "with a letter or digit"
        )


async def create_container(
    svc: Services,
    *,
    name: str,
    description: str | None = None,
    configuration: Mapping[str, Any] | None = None,
    backend_roles: Sequence[str] | None = None,
    goodmem: Mapping[str, Any] | None = None,
    container_id: str | None = None,
    owner: Mapping[str, Any] | None = None,
    claim: FamilyClaim | None = None,
) -> Container:
    """Validate, create the memory indices the configuration enables, then store the container document.

    ``configuration`` holds typed values (ml-commons' keys: the OpenSearch slice parses its wire object;
    GoodMem spaces pass ``embedding_model_type: TEXT_EMBEDDING``, ``embedding_model_id`` and
    ``embedding_dimension``); the defaults and cross-field rules of create are applied here. The indices come
    first so a failure leaves no container document behind; indices are shared and reused, never half-owned.
    ``claim`` names the caller of a caller-chosen family, who must be allowed to join it
    (:mod:`proxy.core.index_families`); ``None`` without authentication or for a family memproxy chose.
    """
    if container_id is not None:
        _check_custom_id(container_id)
    retention_on = "retention_policy" in (configuration or {}) and (await svc.retention.current()).enabled
    cfg = complete_for_create(configuration or {}, retention_enabled=retention_on)
    await check_llm_id(svc, cfg.get("llm_id"))
    roles = validate_backend_roles(backend_roles) if backend_roles is not None else []
    now = now_ms()
    container = Container(
        id=container_id or str(uuid.uuid4()),
        name=name,
        description=description,
        created_time=now,
        last_updated_time=now,
        configuration=cfg,
        backend_roles=roles,
        goodmem=dict(goodmem) if goodmem is not None else None,
        # ml-commons' ``owner`` (the security plugin's user) of whoever created it; none without auth.
        extra={"owner": dict(owner)} if owner is not None else {},
    )
    check_family_names(container)
    # Before anything touches the family's indices (prepare_long_term may extend a shared mapping).
    await claim_family(svc, container, claim)
    await prepare_long_term(svc, container)
    await store.ensure_container_index(svc.store)
    if container_id is not None:
        if await docs.get_doc(svc.store, CONTAINER_INDEX, container_id) is not None:
            raise Conflict(f"memory container id '{container_id}' already exists")
        # A caller-chosen id may have been used before: whatever a deleted predecessor left behind (a delete
        # that kept its memories, or one interrupted half-way) must not come back with the new container.
        await _purge_everything_of(svc, container_id)
    await create_memory_indices(svc, container, MEMORY_TYPES)
    try:
        result = await docs.index_doc(
            svc.store, CONTAINER_INDEX, container.source(), doc_id=container.id, create=True, refresh=True
        )
    except Conflict as exc:
        raise Conflict(f"memory container id '{container.id}' already exists") from exc
    return replace(container, seq_no=result.get("_seq_no"), primary_term=result.get("_primary_term"))


async def check_llm_id(svc: Services, llm_id: str | None) -> None:
    """ml-commons' check of a container's ``llm_id``: the model must exist (any state). Known LLMs are
    ml-commons remote models, GoodMem LLMs and ``--llm`` start-up models."""
    if llm_id is None:
        return
    startup = svc.models.startup.get(llm_id)
    if startup is not None and startup.kind == "llm":
        return
    if await svc.models.get(llm_id, ("llm", "remote")) is not None:
        return
    raise BadRequest(f"LLM model with ID {llm_id} not found")


async def get_container(svc: Services, container_id: str, *, cached: bool = False) -> Container:
    """The container record; 404 when there is none. ``cached`` (the search paths only) may reuse a read
    from the last seconds (proxy.core.cache)."""
    if cached:
        return await svc.caches.containers.get(container_id, lambda: _read_container(svc, container_id))
    return await _read_container(svc, container_id)


async def _read_container(svc: Services, container_id: str) -> Container:
    try:
        found = await docs.get_doc(svc.store, CONTAINER_INDEX, container_id)
    except IndexMissing:
        raise ContainerNotFound(container_id, index_missing=True) from None
    if found is None:
        raise ContainerNotFound(container_id)
    return Container.from_hit(found)


# --- update ----------------------------------------------------------------------------------------

_UPDATE_ATTEMPTS = 3


async def update_container(
    svc: Services,
    container_id: str,
    *,
    name: str | None = None,
    description: str | None = None,
    backend_roles: Sequence[str] | None = None,
    configuration: Mapping[str, Any] | None = None,
    goodmem: Mapping[str, Any] | None = None,
) -> tuple[Container, dict[str, Any]]:
    """Apply an update (ml-commons semantics for ``configuration``, typed values as for create); returns the
    new record and the node's index result. Read-modify-write under ``if_seq_no``, retried when another
    writer got there first."""
    roles = validate_backend_roles(backend_roles) if backend_roles is not None else None
    retention_on = "retention_policy" in (configuration or {}) and (await svc.retention.current()).enabled
    for attempt in range(_UPDATE_ATTEMPTS):
        current = await get_container(svc, container_id)
        new_llm = (configuration or {}).get("llm_id")
        if new_llm is not None and new_llm != current.configuration.get("llm_id"):
            await check_llm_id(svc, new_llm)
        updated = replace(
            current,
            name=name if name is not None else current.name,
            description=description if description is not None else current.description,
            backend_roles=roles if roles is not None else current.backend_roles,
            configuration=(
                merge_update(current.configuration, configuration, retention_enabled=retention_on)
                if configuration is not None
                else current.configuration
            ),
            extra=_retention_opt_out(current.extra, configuration, retention_on),
            goodmem=dict(goodmem) if goodmem is not None else current.goodmem,
            last_updated_time=now_ms(),
        )
        # First embedding model → long-term and history indices; new space embedders → their knn fields.
        exists = await prepare_long_term(svc, updated)
        if updated.embedder_id is not None and (current.embedder_id is None or not exists):
            await create_memory_indices(svc, updated, ("long-term", "history"))
        try:
            result = await docs.index_doc(
                svc.store,
                CONTAINER_INDEX,
                updated.source(),
                doc_id=container_id,
                refresh=True,
                if_seq_no=current.seq_no,
                if_primary_term=current.primary_term,
            )
        except Conflict:
            if attempt + 1 < _UPDATE_ATTEMPTS:
                continue
            raise
        svc.caches.containers.invalidate(container_id)
        return replace(
            updated, seq_no=result.get("_seq_no"), primary_term=result.get("_primary_term")
        ), result
    raise MemproxyError("Internal server error")  # pragma: no cover - the loop returns or raises


def _retention_opt_out(
    extra: Mapping[str, Any], configuration: Mapping[str, Any] | None, retention_on: bool
) -> dict[str, Any]:
    """``"retention_policy": null`` opts the container out of the cluster defaults too; a policy set later
    opts it back in. Kept beside the configuration (GET does not show it)."""
    out = dict(extra)
    if retention_on and configuration is not None and "retention_policy" in configuration:
        if configuration["retention_policy"] is None:
            out[OPT_OUT_KEY] = True
        else:
            out.pop(OPT_OUT_KEY, None)
    return out


# --- delete ----------------------------------------------------------------------------------------


async def delete_container(
    svc: Services,
    container_id: str,
    *,
    delete_memory_types: Sequence[str] = (),
    delete_all_memories: bool = False,
    purge_memories: bool = False,
) -> dict[str, Any]:
    """Delete the container document; returns the node's delete result.

    ``delete_memory_types`` / ``delete_all_memories`` delete those types' indices as ml-commons does, but an
    index another container still uses (compared by resolved name, :mod:`proxy.core.index_families`) only
    loses this container's documents (ml-commons refuses the whole delete with 409 when another container
    shares the prefix). ``purge_memories`` (memproxy, used by GoodMem) deletes this container's documents
    from every index it uses, which is safe on shared indices; a container that is a GoodMem space (it has a
    ``goodmem`` object) is always purged, whichever API deletes it; in any other container the GoodMem chunks
    (long-term documents with a ``memory_id``) go, so no chunk outlives its memory record. Its GoodMem
    memory records, their page images and grants always go, and the read caches forget it (and every cached
    permission) before this returns.
    """
    container = await get_container(svc, container_id)
    types = list(MEMORY_TYPES) if delete_all_memories else [parse_memory_type(t) for t in delete_memory_types]
    if purge_memories or container.goodmem is not None:
        for memory_type in MEMORY_TYPES:
            await _purge_index(svc, container, container.index_name(memory_type))
    elif (long_term := container.index_name("long-term")) is not None:
        # ml-commons keeps a deleted container's memories; GoodMem chunks go with their records (below).
        await docs.delete_by_query(
            svc.store, long_term, Exists("memory_id"), container_id=container.id, ignore_missing=True
        )
    result = await docs.delete_doc(svc.store, CONTAINER_INDEX, container_id, refresh=True)
    svc.caches.containers.invalidate(container_id)
    svc.caches.access_changed()
    # An embedding switch under way: its other index holds the container's memories too.
    await drop_mirror(svc, container)
    # The container is also a GoodMem space, whichever API deletes it: its memory records and grants go
    # with it, or they would linger unreachable in GoodMem's indices.
    await _purge_goodmem_documents(svc, container_id)
    # Decided last, so that a container created onto the family meanwhile still counts as a user.
    drop, shared = await split_shared(svc, container, types)
    for index in shared:
        await _purge_index(svc, container, index)
    for index in drop:
        await store.delete_index(svc.store, index)
    return result


async def _purge_index(svc: Services, container: Container, index: str | None) -> None:
    """This container's documents of ``index`` (a disabled type's ``None``: nothing)."""
    if index is not None:
        await docs.delete_by_query(
            svc.store, index, MatchAll(), container_id=container.id, ignore_missing=True
        )


async def _purge_goodmem_documents(svc: Services, container_id: str) -> None:
    """The space's GoodMem memory records, their page images and the grants on it; the caches forget them."""
    for index, key in (
        (goodmem_docs.PAGES, "space_id"),
        (goodmem_docs.MEMORIES, "space_id"),
        (goodmem_docs.GRANTS, "resource_id"),
    ):
        await docs.delete_by_query(svc.store, index, Term(key, container_id), ignore_missing=True)
    svc.caches.containers.invalidate(container_id)
    svc.caches.access_changed()


async def _purge_everything_of(svc: Services, container_id: str) -> None:
    """Every document that names ``container_id``: memories of every type in every memory index (any
    prefix), GoodMem memory records and grants; and what the caches remember of it."""
    await store.purge_container_documents(svc.store, container_id)
    await _purge_goodmem_documents(svc, container_id)


# --- search / list ---------------------------------------------------------------------------------


async def search_containers(
    svc: Services, body: Mapping[str, Any], *, only_ids: Sequence[str] | None = None
) -> dict[str, Any]:
    """ml-commons container ``_search`` of the caller's Search DSL body: the node's response (with
    ``_version``/``_seq_no`` on every hit); an empty one before the first container exists. ``only_ids``
    (a caller who may not see every container) narrows it inside the query, so paging stays exact. The body
    is checked against the Query DSL allowlist first (:func:`proxy.core.search.check_caller_dsl`)."""
    check_caller_dsl(svc, body)
    try:
        return await store.search_containers(svc.store, body, only_ids=only_ids)
    except IndexMissing:
        return empty_search_response()


@dataclass(frozen=True)
class ContainerPage:
    containers: list[Container]
    total: int
    # The last hit's sort values: pass as ``search_after`` for the next page (None when the page is empty).
    next_search_after: list[Any] | None


async def list_containers(
    svc: Services,
    *,
    query: Filter | Mapping[str, Any] | None = None,
    size: int = 100,
    from_: int = 0,
    search_after: Sequence[Any] | None = None,
) -> ContainerPage:
    """A page of the containers ``query`` matches (all of them by default), in creation order (ties broken by
    id), so ``search_after`` pages neither skip nor repeat. ``query`` is a store filter; a Query DSL object
    is taken as ``RawDsl``."""
    selection: Filter = RawDsl(query) if isinstance(query, Mapping) else (query or MatchAll())
    try:
        result = await store.list_containers(
            svc.store, selection, size=size, from_=from_, search_after=search_after
        )
    except IndexMissing:
        return ContainerPage([], 0, None)
    hits = result["hits"]["hits"]
    return ContainerPage(
        [Container.from_hit(h) for h in hits],
        int(result["hits"]["total"]["value"]),
        hits[-1].get("sort") if hits else None,
    )


async def every_container(svc: Services, *, page_size: int = 1000) -> AsyncIterator[Container]:
    """Every container, in creation order, a page at a time (for a caller that must look at all of them,
    e.g. to find those a principal may administer)."""
    after: list[Any] | None = None
    while True:
        page = await list_containers(svc, size=page_size, search_after=after)
        for container in page.containers:
            yield container
        if len(page.containers) < page_size or page.next_search_after is None:
            return
        after = page.next_search_after
