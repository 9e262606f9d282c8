"""``/v1/users``: me, get by id / email / username, and (admin) create, list, update, delete; the request
bodies as wire models, read into ``proxy.core.goodmem.users``' typed requests."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import unquote

from aiohttp import web
from pydantic import BeforeValidator

from proxy.api.goodmem.coerce import json_bool
from proxy.api.goodmem.render import JOB_STATUS, user_json
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.wire import (
    Query,
    WireModel,
    json_body,
    label_change,
    labels_field,
    page_reply,
    raw_field,
    reply,
    uuid_or_none,
    wire_field,
)
from proxy.core.goodmem import users as core
from proxy.core.goodmem.erasure import (
    UserErasure,
    UserErasureResult,
    check_may_erase,
    enqueue_user_erasure,
    erase_user,
    find_user_erasure,
    result_from_json,
)
from proxy.core.goodmem.users import NewUser, UserUpdate
from proxy.errors import BadRequest

__all__ = ["routes"]

routes = web.RouteTableDef()


def _email(value: Any) -> str:
    if not isinstance(value, str) or "@" not in value or len(value) > 320 or value.strip() != value:
        raise BadRequest("email must be a valid email address")
    return value


def _username(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value or len(value) > 255):
        raise BadRequest("username must be 1..255 characters")
    return value


def _display_name(value: Any) -> str:
    value = value or ""
    if not isinstance(value, str) or len(value) > 255:
        raise BadRequest("displayName must be a string of at most 255 characters")
    return value


class NewUserBody(WireModel):
    email: Annotated[str, BeforeValidator(_email)] = wire_field("email")
    user_id: Annotated[str | None, uuid_or_none("userId")] = wire_field("userId")
    username: Annotated[str | None, BeforeValidator(_username)] = wire_field("username")
    display_name: Annotated[str, BeforeValidator(_display_name)] = wire_field("displayName")
    labels: Annotated[dict[str, str], labels_field(strict_keys=True)] = wire_field("labels")

    def to_core(self) -> NewUser:
        return NewUser(
            email=self.email,
            user_id=self.user_id,
            username=self.username,
            display_name=self.display_name,
            labels=self.labels,
        )


def _str_or_none(value: Any) -> str | None:
    return str(value) if value is not None else None


class UserUpdateBody(WireModel):
    email: Annotated[str | None, BeforeValidator(lambda v: _email(v) if v is not None else None)] = (
        wire_field("email")
    )
    username: Annotated[str | None, BeforeValidator(_str_or_none)] = wire_field("username")
    display_name: Annotated[str | None, BeforeValidator(_str_or_none)] = wire_field("displayName")
    replace_labels: Any = raw_field("replaceLabels")
    merge_labels: Any = raw_field("mergeLabels")

    def to_core(self) -> UserUpdate:
        labels = label_change(self.replace_labels, self.merge_labels, strict_keys=True)
        return UserUpdate(
            email=self.email, username=self.username, display_name=self.display_name, labels=labels
        )


@routes.get("/v1/users/me")
async def me(request: web.Request) -> web.Response:
    who = await principal(request)
    return reply(user_json(await core.get_user(goodmem(request), who, who.user_id)))


@routes.get("/v1/users/email/{email}")
async def by_email(request: web.Request) -> web.Response:
    who = await principal(request)
    email = unquote(request.match_info["email"])
    return reply(user_json(await core.get_user_by(goodmem(request), who, "email", email)))


@routes.get("/v1/users/username/{username}")
async def by_username(request: web.Request) -> web.Response:
    who = await principal(request)
    name = unquote(request.match_info["username"])
    return reply(user_json(await core.get_user_by(goodmem(request), who, "username", name)))


@routes.post("/v1/users")
async def create(request: web.Request) -> web.Response:
    who = await principal(request)
    req = NewUserBody.parse(await json_body(request)).to_core()
    return reply(user_json(await core.create_user(goodmem(request), who, req)), status=201)


@routes.get("/v1/users")
async def list_users(request: web.Request) -> web.Response:
    who = await principal(request)
    q = Query(request)
    page = await core.list_users(
        goodmem(request), who, max_results=q.integer("maxResults"), next_token=q.text("nextToken")
    )
    return page_reply("users", [user_json(u) for u in page.items], page)


@routes.get("/v1/users/{id}")
async def get(request: web.Request) -> web.Response:
    who = await principal(request)
    include_deleted = Query(request).flag("includeDeleted")
    return reply(
        user_json(
            await core.get_user(
                goodmem(request), who, request.match_info["id"], include_deleted=include_deleted
            )
        )
    )


@routes.put("/v1/users/{id}")
async def update(request: web.Request) -> web.Response:
    who = await principal(request)
    req = UserUpdateBody.parse(await json_body(request)).to_core()
    return reply(user_json(await core.update_user(goodmem(request), who, request.match_info["id"], req)))


@routes.delete("/v1/users/{id}")
async def delete(request: web.Request) -> web.Response:
    who = await principal(request)
    await core.delete_user(goodmem(request), who, request.match_info["id"])
    return web.Response(status=204)


class UserErasureBody(WireModel):
    delete_user: Any = raw_field("deleteUser")


def _erasure_json(user_id: str, result: UserErasureResult) -> dict[str, Any]:
    receipt, check = result.receipt, result.receipt.verification
    return {
        "userId": user_id,
        "spaceIds": sorted(result.space_ids),
        "erasedAt": receipt.erased_at,
        "indices": [
            {"index": index, "deleted": deleted, "ids": ids, "idsComplete": len(ids) == deleted}
            for index, deleted, ids in receipt.indices()
        ],
        "totalDeleted": receipt.total,
        "userDeleted": result.user_deleted,
        "verification": {
            "verified": check.verified,
            "rounds": check.rounds,
            "searched": [{"index": i, "found": n} for i, n in sorted(check.found.items())],
        },
    }


@routes.post("/v1/users/{id}:erase")
async def erase(request: web.Request) -> web.Response:
    """memproxy extension: erase a user's data (docs/goodmem-api.md, "Erasing a user's data")."""
    who = await principal(request)
    user_id = request.match_info["id"]
    check_may_erase(who, user_id)
    body = UserErasureBody.parse(await json_body(request, required=False))
    req = UserErasure(user_id, delete_user=json_bool(body.delete_user, "deleteUser", False))
    if not Query(request).flag("waitForCompletion", True):
        job = await enqueue_user_erasure(goodmem(request), who, req)
        return reply({"jobId": job.job_id, "status": JOB_STATUS[job.state]}, status=202)
    result = await erase_user(goodmem(request), who, req)
    # A verification that still finds data (writes that kept coming) is not reported as a success.
    return reply(_erasure_json(user_id, result), status=200 if result.receipt.verification.verified else 409)


@routes.get("/v1/users/{id}/erasures/{jobId}")
async def erasure_job(request: web.Request) -> web.Response:
    """An erasure job of the user (``waitForCompletion=false``) and, once it ended, its receipt."""
    who = await principal(request)
    user_id = request.match_info["id"]
    job = await find_user_erasure(goodmem(request), who, user_id, request.match_info["jobId"])
    receipt = _erasure_json(user_id, result_from_json(job.result)) if job.result is not None else None
    return reply(
        {
            "jobId": job.job_id,
            "status": JOB_STATUS.get(job.state, "BACKGROUND_JOB_STATUS_UNSPECIFIED"),
            "attempts": job.attempts,
            "createdAt": job.created_at,
            "finishedAt": job.finished_at,
            "lastError": job.last_error,
            "receipt": receipt,
        }
    )
