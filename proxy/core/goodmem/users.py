"""GoodMem users: the caller (``/v1/users/me``), lookups by id/email/username, and admin-managed users.

Users exist so that API keys have a subject and spaces an owner. The root user is created by system init; an
administrator creates further users (Gen B ``POST /v1/users``) and issues their keys (``subjectPrincipalId``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.core.goodmem._svc import Svc, new_id, now_ms
from proxy.core.goodmem.auth import Principal, require_admin
from proxy.core.goodmem.paging import Page, clamp, decode_offset, encode_offset
from proxy.core.goodmem.validation import apply_labels, check_labels, check_uuid
from proxy.errors import BadRequest, Conflict, Forbidden, NotFound
from proxy.store import goodmem as gstore

__all__ = [
    "create_user",
    "delete_user",
    "get_user",
    "get_user_by",
    "list_users",
    "new_user_doc",
    "update_user",
    "user_json",
]


def user_json(doc: Mapping[str, Any]) -> dict[str, Any]:
    """UserResponse; ``displayName`` is always present because Gen A requires it."""
    out: dict[str, Any] = {
        "userId": doc["user_id"],
        "email": doc.get("email") or "",
        "displayName": doc.get("display_name") or "",
        "labels": dict(doc.get("labels") or {}),
        "createdAt": int(doc["created_at"]),
        "updatedAt": int(doc["updated_at"]),
        "createdById": doc.get("created_by_id") or doc["user_id"],
        "updatedById": doc.get("updated_by_id") or doc["user_id"],
    }
    if doc.get("username"):
        out["username"] = doc["username"]
    if doc.get("deleted_at"):
        out["deletedAt"] = doc["deleted_at"]
        out["deletedById"] = doc.get("deleted_by_id")
    return out


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


def _check_email(value: Any) -> str:
    if not isinstance(value, str) or "@" not in value or len(value) > 320 or value.strip() != value:
        raise BadRequest("email must be a valid email address")
    return value


async def _unique(svc: Svc, field: str, value: str, *, exclude: str | None = None) -> None:
    query: dict[str, Any] = {
        "bool": {"filter": [{"term": {field: value}}], "must_not": [{"exists": {"field": "deleted_at"}}]}
    }
    if exclude:
        query["bool"]["must_not"].append({"term": {"user_id": exclude}})
    if await gstore.count(svc.store, gstore.USERS, query):
        raise Conflict(f"A user with this {field.replace('_lower', '')} already exists")


async def create_user(svc: Svc, principal: Principal, body: Mapping[str, Any]) -> dict[str, Any]:
    require_admin(principal, "creating users")
    email = _check_email(body.get("email"))
    user_id = check_uuid(body["userId"], "userId") if body.get("userId") is not None else new_id()
    username = body.get("username")
    if username is not None and (not isinstance(username, str) or not username or len(username) > 255):
        raise BadRequest("username must be 1..255 characters")
    display = body.get("displayName") or ""
    if not isinstance(display, str) or len(display) > 255:
        raise BadRequest("displayName must be a string of at most 255 characters")
    await _unique(svc, "email_lower", email.lower())
    if username:
        await _unique(svc, "username", username)
    doc = new_user_doc(
        user_id=user_id,
        email=email,
        actor_id=principal.user_id,
        display_name=display,
        username=username,
        labels=check_labels(body.get("labels"), strict_keys=True),
    )
    await gstore.index_doc(
        svc.store,
        gstore.USERS,
        user_id,
        doc,
        create=True,
        conflict_message="A user with this ID already exists",
    )
    return doc


def _readable(principal: Principal, doc: Mapping[str, Any]) -> None:
    if not principal.is_admin and doc.get("user_id") != principal.user_id:
        raise Forbidden("Permission denied: cannot read another user")


async def get_user(
    svc: Svc, principal: Principal, user_id: str, *, include_deleted: bool = False
) -> dict[str, Any]:
    doc = await gstore.get_doc(svc.store, gstore.USERS, check_uuid(user_id, "id"))
    if doc is None or (doc.get("deleted_at") and not include_deleted):
        raise NotFound("User not found")
    _readable(principal, doc)
    return doc


async def get_user_by(svc: Svc, principal: Principal, field: str, value: str) -> dict[str, Any]:
    """Lookup by ``email`` (case-insensitive) or ``username``."""
    key = {"email": "email_lower", "username": "username"}[field]
    term = value.lower() if field == "email" else value
    res = await gstore.search(
        svc.store,
        gstore.USERS,
        {
            "size": 1,
            "query": {
                "bool": {"filter": [{"term": {key: term}}], "must_not": [{"exists": {"field": "deleted_at"}}]}
            },
        },
    )
    hits = res.get("hits", {}).get("hits", [])
    if not hits:
        raise NotFound("User not found")
    doc: dict[str, Any] = hits[0]["_source"]
    _readable(principal, doc)
    return doc


async def list_users(
    svc: Svc, principal: Principal, *, max_results: int | None = None, next_token: str | None = None
) -> Page:
    """Admins see every active user; anyone else sees only themselves."""
    query: dict[str, Any] = {"bool": {"must_not": [{"exists": {"field": "deleted_at"}}]}}
    if not principal.is_admin:
        query["bool"]["filter"] = [{"term": {"user_id": principal.user_id}}]
    size = clamp(max_results, 50, 1000)
    start = decode_offset(next_token)
    res = await gstore.search(
        svc.store,
        gstore.USERS,
        {
            "from": start,
            "size": size + 1,
            "query": query,
            "sort": [{"created_at": "asc"}, {"user_id": "asc"}],
        },
    )
    docs = [h["_source"] for h in res.get("hits", {}).get("hits", [])]
    more = len(docs) > size
    return Page(items=docs[:size], next_token=encode_offset(start + size) if more else None)


async def update_user(
    svc: Svc, principal: Principal, user_id: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    doc = await get_user(svc, principal, user_id)
    if "email" in body and body["email"] is not None:
        email = _check_email(body["email"])
        await _unique(svc, "email_lower", email.lower(), exclude=doc["user_id"])
        doc["email"], doc["email_lower"] = email, email.lower()
    if body.get("username") is not None:
        await _unique(svc, "username", str(body["username"]), exclude=doc["user_id"])
        doc["username"] = str(body["username"])
    if body.get("displayName") is not None:
        doc["display_name"] = str(body["displayName"])
    doc["labels"] = apply_labels(
        doc.get("labels") or {}, body.get("replaceLabels"), body.get("mergeLabels"), strict_keys=True
    )
    doc["updated_at"] = now_ms()
    doc["updated_by_id"] = principal.user_id
    await gstore.index_doc(svc.store, gstore.USERS, doc["user_id"], doc)
    svc.caches.access_changed()
    return doc


async def delete_user(svc: Svc, principal: Principal, user_id: str) -> None:
    """Admin only; the user is tombstoned and their keys stop working at once."""
    require_admin(principal, "deleting users")
    doc = await get_user(svc, principal, user_id)
    if "ROOT" in (doc.get("roles") or ()):
        raise BadRequest("The root user cannot be deleted")
    now = now_ms()
    doc.update(
        deleted_at=now, deleted_by_id=principal.user_id, updated_at=now, updated_by_id=principal.user_id
    )
    await gstore.index_doc(svc.store, gstore.USERS, doc["user_id"], doc)
    await gstore.delete_by_query(svc.store, gstore.APIKEYS, {"term": {"user_id": doc["user_id"]}})
    svc.caches.access_changed()
