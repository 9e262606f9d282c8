"""The CLI's HTTP client of a running memproxy, and the exit codes every command shares.

The CLI is a client of the two public APIs (and of the admin export/import routes) and nothing else: it
imports no server code, so what it does is what any other client could do. An error answer becomes
:class:`ApiError` carrying the API's own message, read from whichever envelope the route uses (GoodMem's
``{"error": "..."}``, OpenSearch's ``{"error": {"reason": ...}}``, OpenAI's ``{"error": {"message": ...}}``).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp

__all__ = [
    "AUTH_OR_CONNECT",
    "DEFAULT_URL",
    "FAILED",
    "OK",
    "USAGE",
    "Api",
    "ApiError",
    "CliError",
    "api_message",
]

OK = 0
FAILED = 1  # some items failed, or the API refused the request
USAGE = 2  # argparse's own code for a bad command line
AUTH_OR_CONNECT = 3  # memproxy cannot be reached, or refused the credentials

DEFAULT_URL = "http://127.0.0.1:9280"


class CliError(Exception):
    """A command ends with ``code`` after printing ``message`` on stderr."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class ApiError(CliError):
    """An error answer: its status and the API's own message (401/403 end the command with code 3)."""

    def __init__(self, status: int, message: str):
        super().__init__(AUTH_OR_CONNECT if status in (401, 403) else FAILED, message)
        self.status = status


def api_message(body: Any, fallback: str) -> str:
    """The human message of an error body in any of memproxy's API envelopes."""
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(error, str):
        return error
    if isinstance(error, Mapping):
        for key in ("reason", "message"):
            if isinstance(error.get(key), str):
                return str(error[key])
    if isinstance(body, Mapping) and isinstance(body.get("message"), str):
        return str(body["message"])
    return fallback


def env_default(name: str, fallback: str | None = None) -> str | None:
    return os.environ.get(name) or fallback


class Api:
    """One session against ``url``; ``api_key`` goes out as ``x-api-key`` on every request."""

    def __init__(self, url: str, api_key: str | None, *, timeout_s: float = 600):
        self.url = url.rstrip("/")
        headers = {"x-api-key": api_key} if api_key else {}
        self._session = aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout_s, sock_connect=30)
        )

    async def __aenter__(self) -> Api:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._session.close()

    def _unreachable(self, exc: Exception) -> CliError:
        return CliError(AUTH_OR_CONNECT, f"cannot connect to memproxy at {self.url}: {exc}")

    async def _raise_for(self, response: aiohttp.ClientResponse) -> None:
        if response.status < 400:
            return
        text = await response.text(errors="replace")
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = None
        raise ApiError(response.status, api_message(body, f"HTTP {response.status}: {text[:200]}"))

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (),
    ) -> tuple[int, Any]:
        """(status, decoded JSON body) of one request; an error status raises :class:`ApiError` unless it
        is one of ``ok``."""
        try:
            async with self._session.request(method, self.url + path, json=body, params=params) as response:
                if response.status not in ok:
                    await self._raise_for(response)
                text = await response.text()
                return response.status, json.loads(text) if text.strip() else None
        except aiohttp.ClientConnectionError as exc:
            raise self._unreachable(exc) from None

    async def lines(
        self, method: str, path: str, *, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[bytes]:
        """The lines of a streamed answer (NDJSON), as they arrive."""
        try:
            async with self._session.request(method, self.url + path, json=body, headers=headers) as response:
                await self._raise_for(response)
                # The reader's own readline refuses lines over its buffer size; an export line holds a
                # whole GoodMem record, so lines are cut here.
                pending = b""
                async for chunk in response.content.iter_any():
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    for line in complete:
                        yield line
                if pending:
                    yield pending
        except aiohttp.ClientPayloadError as exc:
            # The server failed after the answer had started (a stream has no later status to send).
            raise CliError(FAILED, f"the answer was cut off: {exc}") from None
        except aiohttp.ClientConnectionError as exc:
            raise self._unreachable(exc) from None

    async def upload(
        self, path: str, data: AsyncIterator[bytes], *, params: Mapping[str, str] | None = None
    ) -> Any:
        """POST a body streamed from ``data`` (chunked, so no size limit applies to the whole); the JSON
        answer."""
        try:
            async with self._session.post(
                self.url + path,
                data=data,
                params=params,
                headers={"Content-Type": "application/x-ndjson"},
            ) as response:
                await self._raise_for(response)
                return await response.json()
        except aiohttp.ClientConnectionError as exc:
            raise self._unreachable(exc) from None
