"""The cluster's own identity (the security plugin): who a caller's credentials name.

memproxy asks with **the caller's** ``Authorization`` header on the pass-through session, which carries no
credentials or client certificate of memproxy's, so the answer is the caller's identity and nobody else's.
``GET /_plugins/_security/authinfo`` answers 401 to credentials the cluster refuses, and exists only where
the security plugin is installed (elsewhere the node answers 400 "no handler found"). Tested on the secured
profile (OpenSearch 2.19.1 with the security plugin): ``tests/secured/test_profile.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from proxy.store.client import OpenSearchError, Store, node_error, opaque_id_headers, unreachable, url

__all__ = ["ClusterUser", "authinfo", "cluster_has_security"]

# The node's answers that mean "no such route": the cluster has no security plugin.
_NO_HANDLER = (400, 404)


@dataclass(frozen=True)
class ClusterUser:
    """A cluster user as the security plugin resolved it: backend roles come from the authentication
    backend (internal users, LDAP, SAML, ...), roles are the security roles they map to."""

    name: str
    backend_roles: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()


async def _authinfo_call(store: Store, authorization: str | None) -> tuple[int, Any]:
    """(status, parsed body) of one authinfo call carrying exactly ``authorization`` (none: anonymous)."""
    headers = {"Authorization": authorization} if authorization else {}
    headers.update(opaque_id_headers())
    # The pass-through session has no overall timeout (a caller's long request is the caller's business);
    # this call is memproxy's own, so it gets the timeout of every other call memproxy makes.
    timeout = aiohttp.ClientTimeout(total=store.settings.opensearch_timeout_s)

    async def ask(host: str) -> tuple[int, bytes]:
        target = host + url("_plugins", "_security", "authinfo")
        async with store.passthrough_http.get(
            target, headers=headers, allow_redirects=False, timeout=timeout
        ) as resp:
            return resp.status, await resp.read()

    # A GET: another node may answer it, whether or not this one saw it.
    status, raw = await store.passthrough_hosts.first_answer(
        ask,
        move_on=(aiohttp.ClientConnectionError,),
        give_up=(aiohttp.ClientError, TimeoutError),
        set_aside_on_give_up=False,
        unreachable=unreachable,
    )
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:  # "Unauthorized" comes as text/plain
        return status, raw.decode("utf-8", "replace")


def _failure(status: int, body: Any) -> OpenSearchError:
    error = body.get("error", body) if isinstance(body, dict) else body
    # A 2xx/3xx that is not an authinfo answer is the node misbehaving: a bad gateway, not the caller's fault.
    return node_error(status if status >= 400 else 502, error)


async def authinfo(store: Store, authorization: str) -> ClusterUser | None:
    """The cluster user the caller's ``Authorization`` header names; None when the cluster refuses those
    credentials (401). Any other failure raises the store's typed errors (:func:`node_error`), and an
    unreachable node :class:`proxy.errors.Unavailable`."""
    status, body = await _authinfo_call(store, authorization)
    if status == 401:
        return None
    if status != 200 or not isinstance(body, dict) or not body.get("user_name"):
        raise _failure(status, body)
    return ClusterUser(
        name=str(body["user_name"]),
        backend_roles=tuple(str(r) for r in body.get("backend_roles") or ()),
        roles=tuple(str(r) for r in body.get("roles") or ()),
    )


async def cluster_has_security(store: Store) -> bool:
    """Whether the cluster authenticates callers itself, probed with an anonymous authinfo: refused (401,
    403) or answered (200, a cluster with anonymous access on) only where the security plugin is installed;
    without it the route does not exist (400 "no handler found", 404). Anything else (a 503 while the
    security index is not yet initialised, say) raises, so the caller asks again later."""
    status, body = await _authinfo_call(store, None)
    if status in (200, 401, 403):
        return True
    if status in _NO_HANDLER:
        return False
    raise _failure(status, body)
