"""GoodMem users: the caller (``/v1/users/me``), lookups by id/email/username, and admin-managed users.

Users exist so that API keys have a subject and spaces an owner. The root user is created by system init; an
administrator creates further users (Gen B ``POST /v1/users``) and issues their keys (``subjectPrincipalId``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.ids import check_uuid, new_id, now_ms
from proxy.core.goodmem.paging import Page, Window
from proxy.core.goodmem.validation import LabelChange
from proxy.core.identity import Principal, require_admin
from proxy.errors import BadRequest, Conflict, Forbidden, NotFound
from proxy.store.goodmem import APIKEYS, USERS
from proxy.store.query import Exists, Filter, Not, Term, all_of

__all__ = [
    "NewUser",
    "User",
    "UserUpdate",
    "create_user",
    "delete_user",
    "get_user",
    "get_user_by",
    "is_active_user",
    "list_users",
    "new_user_doc",
    "update_user",
]

_NOT_DELETED = Not(Exists("deleted_at"))


@dataclass(frozen=True)
class User:
    """A user as the API shows it (the stored document's defaults applied)."""

    user_id: str
    email: str
    display_name: str
    labels: dict[str, str]
    created_at: int
    updated_at: int
    created_by_id: str
    updated_by_id: str
    username: str | None = None
    roles: tuple[str, ...] = ()
    deleted_at: int | None = None
    deleted_by_id: str | None = None

    @classmethod
    def from_source(cls, doc: Mapping[str, Any]) -> User:
        user_id = str(doc["user_id"])
        return cls(
            user_id=user_id,
            email=doc.get("email") or "",
            display_name=doc.get("display_name") or "",
            labels=dict(doc.get("labels") or {}),
            created_at=int(doc["created_at"]),
            updated_at=int(doc["updated_at"]),
            created_by_id=doc.get("created_by_id") or user_id,
            updated_by_id=doc.get("updated_by_id") or user_id,
            username=doc.get("username") or None,
            roles=tuple(doc.get("roles") or ()),
            deleted_at=doc.get("deleted_at") or None,
            deleted_by_id=doc.get("deleted_by_id"),
        )


@dataclass(frozen=True)
class NewUser:
    """``POST /v1/users``, validated."""

    email: str
    user_id: str | None = None
    username: str | None = None
    display_name: str = ""
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class UserUpdate:
    """``PUT /v1/users/{id}``, validated; None leaves a field as it is."""

    email: str | None = None
    username: str | None = None
    display_name: str | None = None
    labels: LabelChange = field(default_factory=LabelChange)


def new_user_doc(
    *,
    user_id: str,
    email: str,
    actor_id: str,
    roles: tuple[str, ...] = ("USER",),
    display_name: str = "",
    username: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    now = now_ms()
    return {
        "user_id": user_id,
        "email": email,
        "email_lower": email.lower(),
        "display_name": display_name,
        "username": username,
        "roles": list(roles),
        "labels": dict(labels or {}),
        "created_at": now,
        "updated_at": now,
        "created_by_id": actor_id,
        "updated_by_id": actor_id,
    }


async def _unique(gm: GoodMem, field: str, value: str, *, exclude: str | None = None) -> None:
    other = Not(Term("user_id", exclude)) if exclude else None
    if await gm.docs.count(USERS, all_of([Term(field, value), _NOT_DELETED, other])):
        raise Conflict(f"A user with this {field.replace('_lower', '')} already exists")


async def create_user(gm: GoodMem, principal: Principal, req: NewUser) -> User:
    require_admin(principal, "creating users")
    user_id = req.user_id or new_id()
    await _unique(gm, "email_lower", req.email.lower())
    if req.username:
        await _unique(gm, "username", req.username)
    doc = new_user_doc(
        user_id=user_id,
        email=req.email,
        actor_id=principal.user_id,
        display_name=req.display_name,
        username=req.username,
        labels=req.labels,
    )
    await gm.docs.put(USERS, user_id, doc, create=True, conflict_message="A user with this ID already exists")
    return User.from_source(doc)


async def is_active_user(gm: GoodMem, user_id: str) -> bool:
    """Whether ``user_id`` names a user that exists and was not deleted (one who may own things)."""
    doc = await gm.docs.get(USERS, user_id)
    return doc is not None and not doc.get("deleted_at")


def _readable(principal: Principal, doc: Mapping[str, Any]) -> None:
    if not principal.is_admin and doc.get("user_id") != principal.user_id:
        raise Forbidden("Permission denied: cannot read another user")


async def _load(gm: GoodMem, principal: Principal, user_id: str, *, include_deleted: bool) -> dict[str, Any]:
    doc = await gm.docs.get(USERS, check_uuid(user_id, "id"))
    if doc is None or (doc.get("deleted_at") and not include_deleted):
        raise NotFound("User not found")
    _readable(principal, doc)
    return doc


async def get_user(gm: GoodMem, principal: Principal, user_id: str, *, include_deleted: bool = False) -> User:
    return User.from_source(await _load(gm, principal, user_id, include_deleted=include_deleted))


async def get_user_by(gm: GoodMem, principal: Principal, field: str, value: str) -> User:
    """Lookup by ``email`` (case-insensitive) or ``username``."""
    key = {"email": "email_lower", "username": "username"}[field]
    term = value.lower() if field == "email" else value
    hits = await gm.docs.search(USERS, all_of([Term(key, term), _NOT_DELETED]), size=1)
    if not hits:
        raise NotFound("User not found")
    doc: dict[str, Any] = hits[0]["_source"]
    _readable(principal, doc)
    return User.from_source(doc)


async def list_users(
    gm: GoodMem, principal: Principal, *, max_results: int | None, next_token: str | None
) -> Page[User]:
    """Admins see every active user; anyone else sees only themselves."""
    where: Filter = _NOT_DELETED
    if not principal.is_admin:
        where = all_of([_NOT_DELETED, Term("user_id", principal.user_id)])
    window = Window.of(max_results, next_token, default=50, high=1000)
    start, size = window.probe()
    hits = await gm.docs.search(USERS, where, start=start, size=size, sort=("created_at", "user_id"))
    return window.page([User.from_source(h["_source"]) for h in hits])


async def update_user(gm: GoodMem, principal: Principal, user_id: str, req: UserUpdate) -> User:
    doc = await _load(gm, principal, user_id, include_deleted=False)
    if req.email is not None:
        await _unique(gm, "email_lower", req.email.lower(), exclude=doc["user_id"])
        doc["email"], doc["email_lower"] = req.email, req.email.lower()
    if req.username is not None:
        await _unique(gm, "username", req.username, exclude=doc["user_id"])
        doc["username"] = req.username
    if req.display_name is not None:
        doc["display_name"] = req.display_name
    doc["labels"] = req.labels.apply(doc.get("labels") or {}, strict_keys=True)
    doc["updated_at"] = now_ms()
    doc["updated_by_id"] = principal.user_id
    await gm.docs.put(USERS, doc["user_id"], doc)
    gm.caches.access_changed()
    return User.from_source(doc)


async def delete_user(gm: GoodMem, principal: Principal, user_id: str) -> None:
    """Admin only; the user is tombstoned and their keys stop working at once."""
    require_admin(principal, "deleting users")
    doc = await _load(gm, principal, user_id, include_deleted=False)
    if "ROOT" in (doc.get("roles") or ()):
        raise BadRequest("The root user cannot be deleted")
    now = now_ms()
    doc.update(
        deleted_at=now, deleted_by_id=principal.user_id, updated_at=now, updated_by_id=principal.user_id
    )
    await gm.docs.put(USERS, doc["user_id"], doc)
    await gm.docs.delete_by_query(APIKEYS, Term("user_id", doc["user_id"]))
    gm.caches.access_changed()
