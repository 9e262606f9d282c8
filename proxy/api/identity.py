"""Who is calling: one middleware establishes the caller of every request, before any handler runs.

Every route but the public ones (:data:`PUBLIC_ROUTES`: health, and GoodMem's bootstrap ``system/info`` and
``system/init``) needs a credential, read here and nowhere else:

- ``x-api-key: <key>`` or ``Authorization: Bearer <key>``: a GoodMem API key;
- ``Authorization: Basic`` whose password is a GoodMem API key (the user name is ignored), which is how
  opensearch-py's ``http_auth=("any", key)`` and other OpenSearch clients send it;
- otherwise, when the cluster runs the security plugin, the caller's own cluster credentials (any scheme
  the cluster accepts), which the cluster itself verifies (:func:`proxy.core.identity.authenticate_cluster`).

A request without any is refused with 401 in its API's shape (the error middleware sits outside this one),
and so is one whose credential is wrong. What an authenticated caller may then do is decided per container
by :mod:`proxy.core.identity`, and per forwarded request by :mod:`proxy.api.passthrough`.

``--auth none`` makes the ml-commons routes, the OpenAI routes and pass-through behave like OpenSearch
without the security plugin: anonymous callers may do anything there (and any credential is ignored and
forwarded to the cluster untouched). GoodMem routes keep needing their keys: GoodMem has no anonymous mode.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web

from proxy.api.errors import is_goodmem_path, is_openai_path
from proxy.api.metrics import METRICS_PATH
from proxy.app_keys import IDENTITY, PRINCIPAL, SETTINGS
from proxy.core.identity import Principal, authenticate_cluster, find_key
from proxy.embedding.fairness import current_caller, set_caller
from proxy.errors import BadRequest, MemproxyError, Unauthenticated

__all__ = [
    "CONSOLE_PREFIX",
    "PUBLIC_ROUTES",
    "Credentials",
    "identify",
    "identity_middleware",
    "read_credentials",
]

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PUBLIC_ROUTES = frozenset(
    {
        ("GET", "/_memproxy/health"),
        ("HEAD", "/_memproxy/health"),
        ("GET", "/v1/system/info"),
        ("HEAD", "/v1/system/info"),
        ("POST", "/v1/system/init"),
        # The OpenAPI document holds no data: clients and tools read it before they have a key.
        ("GET", "/_memproxy/openapi.json"),
        ("HEAD", "/_memproxy/openapi.json"),
    }
)
# The inspection console (proxy.api.console) signs people in with a form and keeps the credential in its own
# cookie, which only its pages accept: it establishes the caller itself, through identify(), and shows its
# login page to anonymous visitors instead of a 401.
CONSOLE_PREFIX = "/_memproxy/console"


@dataclass(frozen=True)
class Credentials:
    """What a request presented: a GoodMem key, basic-auth user and password, and the raw header."""

    api_key: str | None = None
    basic_password: str | None = field(default=None, repr=False)
    authorization: str | None = field(default=None, repr=False)

    @property
    def present(self) -> bool:
        return self.api_key is not None or self.authorization is not None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    lower = name.lower()
    for key, val in headers.items():  # plain dicts are not case-insensitive
        if key.lower() == lower:
            return val
    return None


def _text(value: str, what: str) -> str:
    """aiohttp decodes header bytes with ``surrogateescape``: a surrogate means the bytes were not UTF-8,
    and such a key could never have been issued (nor hashed)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"The {what} header is not valid UTF-8") from None
    return value


def read_credentials(headers: Mapping[str, str]) -> Credentials:
    """The credentials of a request (nothing looked up yet); 400 when a credential header is unreadable."""
    key = _header(headers, "x-api-key")
    if key is not None and key.strip():
        return Credentials(api_key=_text(key, "x-api-key").strip())
    auth = _header(headers, "authorization")
    if auth is None or not auth.strip():
        return Credentials()
    auth = _text(auth, "Authorization").strip()
    scheme, _, token = auth.partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        return Credentials(api_key=token, authorization=auth)
    if scheme.lower() == "basic" and token:
        try:
            decoded = base64.b64decode(token, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise BadRequest("The Authorization header's basic credentials are not valid") from None
        _, sep, password = decoded.partition(":")
        if not sep:
            raise BadRequest("The Authorization header's basic credentials are not user:password")
        return Credentials(basic_password=password, authorization=auth)
    return Credentials(authorization=auth)


async def identify(request: web.Request, creds: Credentials) -> Principal:
    """The caller behind ``creds`` (which are present); 401 when they name nobody."""
    identity = request.config_dict[IDENTITY]  # a sub-application's handler (the console's) asks too
    if creds.api_key is not None:
        principal = await find_key(identity, creds.api_key)
        if principal is not None:
            return principal
        if creds.authorization is None:  # x-api-key: a key and nothing else
            raise Unauthenticated("Invalid or expired API key.")
    if creds.basic_password:
        principal = await find_key(identity, creds.basic_password)
        if principal is not None:
            return principal
    if creds.authorization is not None and await identity.cluster_security():
        principal = await authenticate_cluster(identity, creds.authorization)
        if principal is not None:
            return principal
    raise Unauthenticated("Invalid credentials: neither a usable API key nor a user the cluster accepts.")


def _missing(request: web.Request) -> Unauthenticated:
    if is_goodmem_path(request.path) or is_openai_path(request.path):
        return Unauthenticated("No API key provided.")
    # The security plugin's words and challenge, so OpenSearch clients react as they do to the cluster.
    return Unauthenticated(
        f"Missing authentication information for REST request [{request.path}]",
        os_type="security_exception",
        headers={"WWW-Authenticate": 'Basic realm="memproxy"'},
    )


HEALTH_PATH = "/_memproxy/health"


async def _identify_if_sent(request: web.Request) -> None:
    """On a public route that shows more to an administrator (health): the caller, when a credential was
    sent and names someone. A wrong or unreadable one leaves the request anonymous, as if none were sent:
    the route is public, so it refuses nobody."""
    try:
        creds = read_credentials(request.headers)
        if creds.present:
            request[PRINCIPAL] = await identify(request, creds)
    except MemproxyError:
        pass


@web.middleware
async def identity_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if (request.method, request.path) in PUBLIC_ROUTES:
        if request.path == HEALTH_PATH:
            await _identify_if_sent(request)
        return await handler(request)
    if request.path == METRICS_PATH and request.app[SETTINGS].metrics_public:
        return await handler(request)  # the operator opened it to scrapers without a key
    if request.path == CONSOLE_PREFIX or request.path.startswith(CONSOLE_PREFIX + "/"):
        return await handler(request)
    if request.app[SETTINGS].auth == "none" and not is_goodmem_path(request.path):
        return await handler(request)  # security disabled: anonymous, as ml-commons without the plugin
    creds = read_credentials(request.headers)
    if not creds.present:
        raise _missing(request)
    principal = await identify(request, creds)
    request[PRINCIPAL] = principal
    # The embedding queue shares its room fairly between callers (proxy.embedding.fairness).
    token = set_caller(principal.user_id)
    try:
        return await handler(request)
    finally:
        current_caller.reset(token)


def log_auth_mode(settings_auth: str) -> None:
    if settings_auth == "none":
        log.warning(
            "AUTHENTICATION IS OFF (--auth none): anyone who can reach this port may read, write and delete "
            "every memory container and forward any request to the cluster; for local experiments only."
        )
