"""Byte-for-byte forwarding of requests that are not memproxy's own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import aiohttp
from multidict import CIMultiDict

from proxy.errors import Unavailable
from proxy.store.client import Store

__all__ = ["HOP_BY_HOP", "UpstreamResponse", "forward", "strip_hop_by_hop"]

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
    body: AsyncIterator[bytes] | None,
) -> UpstreamResponse:
    """Send one request upstream; the body streams through without being buffered."""
    url = store.settings.opensearch_url + raw_path_qs
    try:
        resp = await store.http.request(
            method, url, headers=strip_hop_by_hop(headers), data=body, allow_redirects=False
        )
    except (aiohttp.ClientConnectionError, TimeoutError) as exc:
        raise Unavailable(f"OpenSearch at {store.settings.opensearch_url} is unreachable: {exc}") from exc
    return UpstreamResponse(resp)
