"""The connection to OpenSearch: one async opensearch-py client and one aiohttp session per app.

``proxy.store`` is the only package that talks to OpenSearch. Node errors come back as
:class:`OpenSearchError` (status and the node's own ``error`` object, so the OpenSearch front-end can
return them verbatim); an unreachable node is :class:`proxy.errors.Unavailable`.
"""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp
from opensearchpy import AsyncOpenSearch
from opensearchpy import exceptions as os_exc

from proxy.config import Settings
from proxy.errors import MemproxyError, Unavailable

__all__ = ["OpenSearchError", "Store"]


class OpenSearchError(MemproxyError):
    """An error answered by the node itself; ``body`` is its ``error`` value (an object or a string)."""

    def __init__(self, status: int, body: Any):
        reason = body.get("reason", str(body)) if isinstance(body, dict) else str(body)
        os_type = body.get("type", "exception") if isinstance(body, dict) else "exception"
        super().__init__(reason, os_type=os_type)
        self.status = status
        self.body = body


def _ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if not settings.opensearch_url.startswith("https"):
        return None
    ctx = ssl.create_default_context(cafile=settings.opensearch_ca_certs)
    if not settings.opensearch_verify_certs:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if settings.opensearch_client_cert:
        ctx.load_cert_chain(settings.opensearch_client_cert, settings.opensearch_client_key)
    return ctx


def translate_error(exc: Exception) -> MemproxyError:
    """Map an opensearch-py exception to the project's tree."""
    if isinstance(exc, os_exc.ConnectionError | os_exc.ConnectionTimeout):
        return Unavailable(f"OpenSearch is unreachable: {exc.error if hasattr(exc, 'error') else exc}")
    if isinstance(exc, os_exc.TransportError) and isinstance(exc.status_code, int):
        info = exc.info
        body = info.get("error", info) if isinstance(info, dict) else (info or exc.error)
        return OpenSearchError(exc.status_code, body)
    return MemproxyError(f"OpenSearch call failed: {exc}")


class Store:
    """Owns the clients; data operations live in sibling modules that take a ``Store``."""

    def __init__(self, settings: Settings):
        self.settings = settings
        auth = None
        if settings.opensearch_username:
            auth = (settings.opensearch_username, settings.opensearch_password or "")
        self.client = AsyncOpenSearch(
            hosts=[settings.opensearch_url],
            http_auth=auth,
            ssl_context=_ssl_context(settings),
            timeout=settings.opensearch_timeout_s,
            max_retries=0,
        )
        # Pass-through must relay bytes exactly: the session never decompresses and adds none of the
        # headers aiohttp would otherwise invent (an Accept-Encoding the client never sent gets gzip back).
        self.http = aiohttp.ClientSession(
            auto_decompress=False,
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
            connector=aiohttp.TCPConnector(limit=256, ssl=_ssl_context(settings) or True),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )

    async def close(self) -> None:
        await self.client.close()
        await self.http.close()

    async def request(
        self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """One call to the node; raises the project's errors, never opensearch-py's."""
        try:
            return await self.client.transport.perform_request(method, path, body=body, params=params)
        except Exception as exc:
            raise translate_error(exc) from exc

    async def cluster_health(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", "/_cluster/health")
        return result
