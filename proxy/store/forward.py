"""Byte-for-byte forwarding of requests that are not memproxy's own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from proxy.errors import NotFound
from proxy.store.client import Store, opaque_id_headers, unreachable, url

__all__ = ["HOP_BY_HOP", "UpstreamResponse", "forward", "resolve_indices", "strip_hop_by_hop"]

# RFC 9110 §7.6.1 plus Host, which aiohttp sets for the upstream.
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
    )
)


def strip_hop_by_hop(headers: Mapping[str, str]) -> CIMultiDict[str]:
    listed = {v.strip().lower() for v in headers.get("Connection", "").split(",") if v.strip()}
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in headers.items():
        if key.lower() not in HOP_BY_HOP and key.lower() not in listed:
            out.add(key, value)
    return out


class UpstreamResponse:
    """An open upstream response; iterate ``chunks()`` and then ``release()``."""

    def __init__(self, resp: aiohttp.ClientResponse):
        self._resp = resp
        self.status = resp.status
        self.reason = resp.reason
        self.headers = strip_hop_by_hop(resp.headers)

    async def chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._resp.content.iter_chunked(64 * 1024):
            yield chunk

    def release(self) -> None:
        self._resp.release()


async def forward(
    store: Store,
    method: str,
    raw_path_qs: str,
    headers: Mapping[str, str],
    body: AsyncIterator[bytes] | bytes | None,
) -> UpstreamResponse:
    """Send one request upstream; the body streams through without being buffered. ``raw_path_qs`` is
    sent as it is: ``encoded=True`` keeps the URL library from decoding or resolving dot segments in it,
    so the node routes exactly the path the policy checked.

    With several nodes, a request whose connection was refused goes to the next one (nothing of it was
    sent, and its body is still unread); one that failed after that is a 503 with ``Retry-After``: the
    caller's request may not be safe to repeat, and its body is spent."""
    sent = strip_hop_by_hop(headers)
    if "X-Opaque-Id" not in sent:  # the caller's own X-Opaque-Id wins: its tooling is looking for it
        sent.update(opaque_id_headers())

    async def send(host: str) -> aiohttp.ClientResponse:
        target = URL(host + raw_path_qs, encoded=True)
        return await store.passthrough_http.request(
            method, target, headers=sent, data=body, allow_redirects=False
        )

    resp = await store.passthrough_hosts.first_answer(
        send,
        move_on=(aiohttp.ClientConnectorError,),
        give_up=(aiohttp.ClientConnectionError, TimeoutError),
        set_aside_on_give_up=True,
        unreachable=unreachable,
    )
    return UpstreamResponse(resp)


async def resolve_indices(store: Store, expression: str) -> set[str]:
    """Every concrete index ``expression`` reaches on the cluster (wildcards, aliases, exclusions, date
    math, hidden indices included), asked with memproxy's own credentials; empty when it names nothing that
    exists (a missing index is the node's to refuse later)."""
    try:
        answer = await store.request(
            "GET",
            url("_resolve", "index", expression),
            params={"expand_wildcards": "all", "ignore_unavailable": "true", "allow_no_indices": "true"},
        )
    except NotFound:
        return set()
    names = {str(i["name"]) for i in answer.get("indices", ())}
    for alias in answer.get("aliases", ()):
        names.update(str(i) for i in alias.get("indices", ()))
    for stream in answer.get("data_streams", ()):
        names.update(str(i) for i in stream.get("backing_indices", ()))
    return names
