"""Index families: which containers use which memory indices, who may join a family, and what a delete may
drop.

A container's *family* is the set of index names it resolves to (:meth:`Container.index_name`): ml-commons'
``.plugins-ml-am-<prefix>-memory-<type>`` with ``use_system_index``, else ``<prefix>-memory-<type>``.
Everything here compares those resolved names, never prefix strings, so no spelling of a prefix reaches
another family's indices by a different route:

- **Names.** A non-system prefix must resolve to valid, non-hidden index names outside memproxy's own
  namespace: a leading ``.`` (which covers ``.plugins-ml-am-``: system names are reachable only through
  ``use_system_index: true``) and a name starting with ``memproxy-`` are refused (400).
- **Joining.** ml-commons lets containers share a prefix. memproxy lets a caller create a container onto
  an existing family only when they may administer every container already using it (an administrator, or
  their owner), or, when no container uses it but its indices exist, only an administrator. Two families
  are open to everyone: ml-commons' default (system prefix ``default``, where every container without a
  prefix lives) and those memproxy chooses itself (GoodMem spaces, which pass no claim). Without
  authentication (``--auth none``) every caller is an administrator, as in ml-commons without security.
- **Dropping.** A delete that asks for a memory type's index drops it only when no other container uses that
  index; otherwise it deletes only this container's documents from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.container_record import MEMORY_TYPES, Container
from proxy.core.identity import IdentityState, Principal, can_access_space
from proxy.core.services import Services
from proxy.errors import BadRequest, Forbidden
from proxy.store import containers as store
from proxy.store.client import IndexMissing
from proxy.store.query import And, Exists, Filter, Not, Or, Term, Terms

__all__ = [
    "SYSTEM_INDEX_BASE",
    "FamilyClaim",
    "check_family_names",
    "claim_family",
    "family_users",
    "split_shared",
]

SYSTEM_INDEX_BASE = ".plugins-ml-am-"
# memproxy's own indices (keys, users, grants, jobs, models, ...) all live under this name.
_PRIVATE_NAMESPACE = "memproxy-"
# ml-commons' default family: every container created without a prefix shares it.
_OPEN_SYSTEM_PREFIXES = frozenset({"default"})
_PAGE = 500


def _names(container: Container) -> dict[str, str]:
    """memory type → resolved index name, for every type the container enables."""
    return {t: name for t in MEMORY_TYPES if (name := container.index_name(t)) is not None}


def _used_names(container: Container) -> set[str]:
    """Every index the container's documents are in: its own, and both of an embedding switch under way
    (the old one is still written to during the grace period)."""
    names = set(_names(container).values())
    switch = container.embedding_switch or {}
    for side in ("source", "target"):
        index = (switch.get(side) or {}).get("index")
        if isinstance(index, str):
            names.add(index)
    return names


def check_family_names(container: Container) -> None:
    """400 unless every index name a non-system container resolves to is a valid, visible name of its own
    (system names are formed by memproxy and need no check)."""
    if container.configuration.get("use_system_index", True):
        return
    prefix = container.index_prefix

    def bad(why: str) -> BadRequest:
        return BadRequest(f"missing or invalid index prefix [{prefix}] {why}", os_type="parse_exception")

    for name in _names(container).values():
        if name.startswith("."):
            raise bad(
                "must not start with '.' unless use_system_index is true (hidden and system index names, "
                f"{SYSTEM_INDEX_BASE}* included, are reached only through use_system_index)"
            )
        if name.startswith(_PRIVATE_NAMESPACE):
            raise bad(f"must not name memproxy's own indices ({_PRIVATE_NAMESPACE}*)")
        if len(name.encode()) > 255:
            raise bad(f"index name is too long, ({len(name.encode())} > 255)")


def _candidate_prefixes(container: Container) -> list[str]:
    """Every stored ``index_prefix`` that could resolve to the same base as ``container``'s (a system prefix
    ``p`` and a legacy non-system ``.plugins-ml-am-p`` give the same names); the exact comparison follows."""
    prefix = container.index_prefix
    if container.configuration.get("use_system_index", True):
        return [prefix, SYSTEM_INDEX_BASE + prefix]
    if prefix.startswith(SYSTEM_INDEX_BASE):
        return [prefix, prefix[len(SYSTEM_INDEX_BASE) :]]
    return [prefix]


async def family_users(
    svc: Services, container: Container, *, enough: set[str] | None = None
) -> dict[str, list[Container]]:
    """index name → the *other* containers (either API: GoodMem spaces are containers) whose resolved
    indices include it, for each index of ``container``. ``enough``: stop reading once each of these index
    names has one other user (all a delete needs to know)."""
    mine = _names(container)
    users: dict[str, list[Container]] = {name: [] for name in mine.values()}
    prefixes = _candidate_prefixes(container)
    same_prefix: Filter = Terms("configuration.index_prefix", tuple(prefixes))
    if "default" in prefixes:  # a document without a prefix (written by ml-commons itself) is "default"
        same_prefix = Or((same_prefix, Not(Exists("configuration.index_prefix"))))
    selection = And((same_prefix, Not(Term("_id", container.id))))
    after: list[Any] | None = None
    while True:
        try:
            page = await store.list_containers(svc.store, selection, size=_PAGE, search_after=after)
        except IndexMissing:
            return users
        hits = page["hits"]["hits"]
        for hit in hits:
            other = Container.from_hit(hit)
            used = _used_names(other)
            for name in mine.values():
                if name in used:
                    users[name].append(other)
        if len(hits) < _PAGE or (enough is not None and all(users[n] for n in enough)):
            return users
        after = hits[-1].get("sort")


@dataclass(frozen=True)
class FamilyClaim:
    """Who is creating a container onto a caller-chosen family: checked by :func:`claim_family`."""

    state: IdentityState
    principal: Principal


async def claim_family(svc: Services, container: Container, claim: FamilyClaim | None) -> None:
    """403 unless ``claim``'s caller may put ``container`` onto its family (module docstring); ``None``: an
    unauthenticated deployment or a family memproxy chose."""
    if claim is None or claim.principal.is_admin:
        return
    cfg = container.configuration
    if cfg.get("use_system_index", True) and container.index_prefix in _OPEN_SYSTEM_PREFIXES:
        return
    users = {c.id: c for found in (await family_users(svc, container)).values() for c in found}
    if users:
        for other in users.values():
            if not await can_access_space(claim.state, claim.principal, other, "MANAGE_ACCESS"):
                raise _taken(container)
        return
    for name in _names(container).values():
        if await store.index_exists(svc.store, name):
            raise _taken(container)


def _taken(container: Container) -> Forbidden:
    # One answer whether other containers or bare indices hold the names: it says no more than that.
    return Forbidden(
        f"Cannot create memory container: the indices of index prefix [{container.index_prefix}] are in use "
        "and not yours to share. Choose another index_prefix.",
        os_type="security_exception",
    )


async def split_shared(
    svc: Services, container: Container, memory_types: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(indices to drop, indices to purge of this container's documents) for a delete that asks for
    ``memory_types``' indices: an index another container uses is only purged."""
    names = [n for t in dict.fromkeys(memory_types) if (n := container.index_name(t)) is not None]
    if not names:
        return [], []
    users = await family_users(svc, container, enough=set(names))
    return [n for n in names if not users[n]], [n for n in names if users[n]]
