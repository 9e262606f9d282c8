"""Who may use the console, and how a person signs in.

The console needs an administrator: a GoodMem key of a ROOT or ADMIN user, or, when the cluster runs the
security plugin, cluster credentials with ``all_access`` (the rule of :attr:`Principal.is_admin`). The login
form's credential is checked by the identity module every API uses (:func:`proxy.api.identity.identify`)
and then kept in an HttpOnly, ``SameSite=Strict`` cookie scoped to the console's path, so no script can read
it and no other site's page can send it. Every POST also carries a token derived from that cookie with a
secret of this process (an HMAC), which a page of another origin cannot know.

Anonymous visitors, and visitors whose key stopped working, are sent to the login page; a signed-in
non-administrator gets the 403 page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from proxy.api.console.render import ConsoleState, render
from proxy.api.identity import CONSOLE_PREFIX, Credentials, identify
from proxy.app_keys import PRINCIPAL
from proxy.core.identity import Principal
from proxy.embedding.fairness import current_caller, set_caller
from proxy.errors import BadRequest, Forbidden, MemproxyError, Unauthenticated

__all__ = [
    "COOKIE",
    "LOGIN_PATH",
    "console_middleware",
    "credentials_from_form",
    "csrf_token",
    "session_cookie",
]

COOKIE = "memproxy_console"
LOGIN_PATH = CONSOLE_PREFIX + "/login"
# Pages anyone may fetch: the login form itself and the console's static files.
_OPEN_PREFIXES = (LOGIN_PATH, CONSOLE_PREFIX + "/static/")
CSRF_FIELD = "csrf"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def credentials_from_form(form: Any) -> Credentials:
    """The login form's credential: an API key, or a cluster user and password (sent to the cluster as
    basic auth, which is also how a key given as a password is accepted)."""
    key = str(form.get("api_key") or "").strip()
    if key:
        return Credentials(api_key=key)
    user = str(form.get("username") or "")
    password = str(form.get("password") or "")
    if user and password:
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return Credentials(basic_password=password, authorization=f"Basic {token}")
    raise BadRequest("Enter an API key, or a cluster user name and password.")


def session_cookie(creds: Credentials) -> str:
    """The cookie value that carries ``creds`` (url-safe base64 of a small JSON object)."""
    doc = {"k": creds.api_key} if creds.api_key is not None else {"a": creds.authorization}
    # Unpadded, so the cookie needs no quoting.
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode("ascii").rstrip("=")


def _cookie_credentials(value: str) -> Credentials | None:
    try:
        doc = json.loads(base64.urlsafe_b64decode(value.encode("ascii") + b"=" * (-len(value) % 4)))
    except (ValueError, binascii.Error, UnicodeError):
        return None  # not a cookie the console wrote: the visitor signs in again
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("k"), str):
        return Credentials(api_key=doc["k"])
    auth = doc.get("a")
    if isinstance(auth, str) and auth.startswith("Basic "):
        try:
            _, _, password = base64.b64decode(auth[6:]).decode("utf-8").partition(":")
        except (ValueError, binascii.Error, UnicodeError):
            return None
        return Credentials(basic_password=password, authorization=auth)
    return None


def csrf_token(state: ConsoleState, cookie: str) -> str:
    return hmac.new(state.secret, cookie.encode("ascii"), hashlib.sha256).hexdigest()


async def _signed_in(request: web.Request, state: ConsoleState) -> tuple[Principal, str] | None:
    """The visitor behind the console cookie, with the cookie; None when there is none or it names nobody
    any more (a revoked key, a changed password)."""
    cookie = request.cookies.get(COOKIE)
    creds = _cookie_credentials(cookie) if cookie else None
    if cookie is None or creds is None:
        return None
    try:
        return await identify(request, creds), cookie
    except Unauthenticated:
        return None


def _is_open(path: str) -> bool:
    return any(path == p or path.startswith(p) for p in _OPEN_PREFIXES)


async def _check_csrf(request: web.Request, state: ConsoleState, cookie: str) -> None:
    form = await request.post()
    sent = str(form.get(CSRF_FIELD) or "")
    if not hmac.compare_digest(sent, csrf_token(state, cookie)):
        raise Forbidden("This form is out of date or did not come from the console: reload the page.")


def _security_headers(response: web.StreamResponse) -> None:
    # Pages show what memproxy stores: never cached, never framed, no script but the console's own file.
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault(
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'",
    )


@web.middleware
async def console_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Sign-in, the administrator rule, CSRF, and the console's error pages (HTML, not an API's JSON)."""
    state = ConsoleState.of(request)
    try:
        if _is_open(request.path):
            response = await handler(request)
        else:
            found = await _signed_in(request, state)
            if found is None:
                return web.Response(status=303, headers={"Location": LOGIN_PATH})
            principal, cookie = found
            request[PRINCIPAL] = principal
            request["console_csrf"] = csrf_token(state, cookie)
            if not principal.is_admin:
                raise Forbidden("The console is for administrators: this credential is not one.")
            if request.method == "POST":
                await _check_csrf(request, state, cookie)
            token = set_caller(principal.user_id)
            try:
                response = await handler(request)
            finally:
                current_caller.reset(token)
    except MemproxyError as exc:
        response = render(
            request, "error.html", {"status": exc.status, "message": exc.message}, status=exc.status
        )
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = render(
            request, "error.html", {"status": exc.status, "message": exc.reason}, status=exc.status
        )
    _security_headers(response)
    return response
