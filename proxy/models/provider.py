"""One HTTP client per remote model provider: timeouts, retries, a concurrency limit, typed errors.

Every remote model (chat, embeddings, rerank) goes through ``ProviderClient.post_json``, so the rules that
keep a slow or broken provider from hanging a request live here once:

* each attempt has a bounded total timeout (``timeout_s``); a timeout is not retried, because the caller's
  own deadline is what a retry would spend;
* 429, 5xx and connection errors are retried ``max_retries`` times with exponential backoff and full
  jitter, waiting what ``Retry-After`` asks for instead (capped, so a provider cannot park us for minutes);
* at most ``max_concurrency`` requests are in flight per client (an ``asyncio.Semaphore`` held for the
  attempt only, never while sleeping between attempts);
* failures become ``ProviderError`` kinds that are also ``proxy.errors`` kinds, so the API layer renders
  them without knowing about providers.

Where a call may go is decided here once too: redirects are never followed (a 3xx is a model error: a
trusted endpoint that redirects would otherwise carry the call, body and headers, to any host it names,
memproxy's own cluster included), and the connector's socket factory refuses every address
``settings.addresses`` does not allow, on the address actually connected to (``proxy.models.addresses``).
A body quoted in an error message is only ever a provider's own error text, read from its JSON error shape;
an answer of any other shape is described, never echoed (it may be whatever the endpoint reached).

The API key is sent as a header and nowhere else: it is left out of ``repr``, and every text that came from
the provider (which may echo the key back, as OpenAI's "Incorrect API key provided" does) is redacted before
it reaches an error message or a log line.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from proxy.errors import DeadlineExceeded, MemproxyError, Overloaded, Unavailable
from proxy.models.addresses import OPEN, AddressPolicy, RefusedAddress

__all__ = [
    "AUTH_HEADERS",
    "EndpointRefused",
    "ProviderBadAnswer",
    "ProviderClient",
    "ProviderError",
    "ProviderOverloaded",
    "ProviderRejected",
    "ProviderSettings",
    "ProviderTimeout",
    "ProviderUnavailable",
    "api_path",
    "join_url",
]

log = logging.getLogger(__name__)

# How each provider wants its key: (header, value prefix). Every provider memproxy speaks to today uses
# ``Authorization: Bearer`` (OpenAI, vLLM, Ollama, llama.cpp, LiteLLM, OpenRouter, TEI, Cohere, Jina,
# Voyage); Azure OpenAI is the one real API that differs, with its own ``api-key`` header.
_BEARER = ("Authorization", "Bearer ")
AUTH_HEADERS: dict[str, tuple[str, str]] = {
    "openai": _BEARER,
    "vllm": _BEARER,
    "ollama": _BEARER,
    "llamacpp": _BEARER,
    "litellm": _BEARER,
    "openrouter": _BEARER,
    "tei": _BEARER,
    "cohere": _BEARER,
    "jina": _BEARER,
    "voyage": _BEARER,
    "azure_openai": ("api-key", ""),
}

# A provider's own error text is kept for the caller, but bounded: some answer whole HTML pages.
_MESSAGE_CHARS = 500
_BODY_CHARS = 10_000
_REDACTED = "[redacted]"


@dataclass(frozen=True)
class ProviderSettings:
    """Where a provider is and how hard to try. ``api_key`` is never part of ``repr``."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)
    provider: str = "openai"
    timeout_s: float = 30.0
    max_retries: int = 2
    max_concurrency: int = 8
    # First backoff step; attempt n waits a random time in [0, backoff_base_s * 2**n] (full jitter).
    backoff_base_s: float = 0.5
    # The most a Retry-After header may make us wait before one retry.
    retry_after_cap_s: float = 10.0
    # Headers sent as given (an ml-commons connector's own, with its credential filled in).
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # Other texts treated like ``api_key`` (a connector's credential values): redacted from every message.
    secrets: tuple[str, ...] = field(default=(), repr=False)
    # The addresses this client may connect to (checked at connect time); the registry passes its own.
    addresses: AddressPolicy = OPEN

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.max_retries < 0 or self.max_concurrency < 1:
            raise ValueError("timeout_s must be > 0, max_retries >= 0 and max_concurrency >= 1")


# --- errors ---------------------------------------------------------------------------------------------


class ProviderError(MemproxyError):
    """A remote model provider failed; 502 unless a subclass says otherwise (the gateway's fault)."""

    status = 502

    def __init__(
        self, message: str, *, provider: str, provider_status: int | None = None, body: str | None = None
    ):
        super().__init__(message)
        self.provider = provider
        self.provider_status = provider_status
        # The provider's own error body (redacted, bounded): ml-commons quotes it verbatim to its callers.
        self.provider_body = body


class ProviderUnavailable(ProviderError, Unavailable):
    """Unreachable (503), or answering 5xx after every retry (502)."""

    status = 503


class ProviderOverloaded(ProviderError, Overloaded):
    """Still 429 after every retry: the caller may try again later."""

    status = 429


class ProviderTimeout(ProviderError, DeadlineExceeded):
    status = 504


class ProviderRejected(ProviderError):
    """The provider refused the request (a 4xx other than 429); the message carries its own words."""


class ProviderBadAnswer(ProviderError):
    """The provider answered 2xx with something that is not JSON or not the expected shape."""


class EndpointRefused(ProviderError):
    """The endpoint resolved to an address the client's ``AddressPolicy`` refuses: nothing was sent. A 400:
    the model's URL is what is wrong, and another try would go to the same address."""

    status = 400


# --- helpers --------------------------------------------------------------------------------------------


def api_path(base_url: str, base_path: str, endpoint: str) -> str:
    """The path to post to under ``base_url``: ``base_path`` + ``endpoint``, or ``endpoint`` alone when the
    configured base URL already ends with ``base_path``.

    So ``https://api.openai.com`` and ``https://api.openai.com/v1`` both reach ``/v1/chat/completions``.
    """
    prefix = "/" + base_path.strip("/") if base_path.strip("/") else ""
    if prefix and urllib.parse.urlsplit(base_url).path.rstrip("/").endswith(prefix):
        prefix = ""
    return prefix + "/" + endpoint.strip("/")


def join_url(base_url: str, path: str) -> str:
    """``base_url`` + ``path``; an empty path is the base URL itself (an ml-commons connector's full URL)."""
    if not path:
        return base_url
    return base_url.rstrip("/") + "/" + path.lstrip("/")


def _retry_after(value: str | None, cap: float) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date), capped; None if absent."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            # An unreadable header is the provider's bug; fall back to our own backoff rather than fail.
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), cap)


def _provider_message(text: str) -> str | None:
    """The error text a provider put in its body, in the shapes the real APIs use, or None for any other
    body (HTML, plain text, JSON of another shape), which is not quoted: it may be whatever the endpoint
    reached, not a model's words.

    OpenAI-compatible: ``{"error": {"message"}}``; TEI: ``{"error": "...", "error_type"}``; Cohere, Jina:
    ``{"message"}``; Voyage, FastAPI servers: ``{"detail"}``.
    """
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        for key in ("error", "message", "detail"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return None


def _refused_address(exc: aiohttp.ClientError) -> RefusedAddress | None:
    """The policy's refusal behind a connection error, if that is what it is."""
    os_error = getattr(exc, "os_error", None)
    return os_error if isinstance(os_error, RefusedAddress) else None


class ProviderClient:
    """One provider endpoint: one ``aiohttp.ClientSession``, one semaphore. Close it with ``close()``."""

    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        self._semaphore = asyncio.Semaphore(settings.max_concurrency)
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"ProviderClient(provider={self.settings.provider!r}, base_url={self.settings.base_url!r})"

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> ProviderClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _get_session(self) -> aiohttp.ClientSession:
        # Created on first use, inside the running loop, as aiohttp requires.
        # The one session factory of every model call: its connector makes each socket through the address
        # policy, and no proxy from the environment is used (it would connect where the policy cannot see).
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(socket_factory=self.settings.addresses.socket_factory)
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._session

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = self.settings.api_key
        if key:
            name, prefix = AUTH_HEADERS.get(self.settings.provider, _BEARER)
            headers[name] = prefix + key
        headers.update(self.settings.headers)
        return headers

    def redact(self, text: str) -> str:
        """``text`` without the API key (or a secret header), which a provider may echo back in its errors."""
        secrets = [self.settings.api_key or "", *self.settings.secrets]
        for secret in sorted(secrets, key=len, reverse=True):
            if secret:
                text = text.replace(secret, _REDACTED)
        return text

    def _error(
        self, kind: type[ProviderError], message: str, status: int | None = None, body: str | None = None
    ) -> ProviderError:
        kept = self.redact(body)[:_BODY_CHARS] if body is not None else None
        return kind(self.redact(message), provider=self.settings.provider, provider_status=status, body=kept)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        return random.uniform(0, self.settings.backoff_base_s * 2**attempt)

    async def post_json(self, path: str, body: Any) -> Any:
        """POST ``body`` as JSON to ``base_url`` + ``path``: the decoded answer, or a ``ProviderError``."""
        settings = self.settings
        url = join_url(settings.base_url, path)
        name = settings.provider
        last: ProviderError | None = None
        for attempt in range(settings.max_retries + 1):
            if last is not None:
                log.warning("provider %s: %s, retrying (attempt %d)", name, last.message, attempt + 1)
            retry_after: float | None = None
            try:
                async with self._semaphore:
                    status, text, retry_header = await self._attempt(url, body)
            except TimeoutError as exc:
                raise self._error(
                    ProviderTimeout, f"provider {name} did not answer within {settings.timeout_s:g}s"
                ) from exc
            except aiohttp.ClientError as exc:
                refused = _refused_address(exc)
                if refused is not None:
                    host = urllib.parse.urlsplit(url).hostname
                    raise self._error(
                        EndpointRefused, f"the model endpoint {host} is not allowed: {refused.reason}"
                    ) from None
                # Connection refused, reset, DNS failure: worth another try.
                last = self._error(ProviderUnavailable, f"provider {name} is unreachable: {exc}")
            else:
                if 300 <= status < 400:
                    raise self._error(
                        ProviderRejected,
                        f"provider {name}: the model endpoint answered a redirect ({status}), which "
                        "memproxy does not follow",
                    )
                if status < 300:
                    return self._decode(text, status)
                said = _provider_message(text)
                # Only a provider's own error shape is quoted (and kept for ml-commons' "Error from remote
                # service"); any other answer is named by its status alone.
                kept = None if said is None else text
                message = (
                    "its answer is not a model error and is not shown"
                    if said is None
                    else self.redact(said)[:_MESSAGE_CHARS]
                )
                if status == 429:
                    last = self._error(
                        ProviderOverloaded, f"provider {name} is rate limiting: {message}", 429, kept
                    )
                    retry_after = _retry_after(retry_header, settings.retry_after_cap_s)
                elif status >= 500:
                    last = self._error(
                        ProviderUnavailable, f"provider {name} failed ({status}): {message}", status, kept
                    )
                    last.status = 502  # it answered, badly: a bad gateway rather than an absent one
                    retry_after = _retry_after(retry_header, settings.retry_after_cap_s)
                else:
                    raise self._error(
                        ProviderRejected, f"provider {name} refused ({status}): {message}", status, kept
                    )
            if attempt < settings.max_retries:
                await asyncio.sleep(self._backoff(attempt, retry_after))
        if last is None:  # unreachable: every pass of the loop returns, raises or sets ``last``
            raise RuntimeError("provider retry loop ended without an outcome")
        raise last

    async def _attempt(self, url: str, body: Any) -> tuple[int, str, str | None]:
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_s)
        async with self._get_session().post(
            url, json=body, headers=self._headers(), timeout=timeout, allow_redirects=False
        ) as resp:
            return resp.status, await resp.text(errors="replace"), resp.headers.get("Retry-After")

    def _decode(self, text: str, status: int) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            # Not quoted: a body that is not JSON is not a model's answer, and may be anything the endpoint
            # reached (another service's page, a document).
            raise self._error(
                ProviderBadAnswer,
                f"provider {self.settings.provider} answered {status} with a body that is not JSON "
                f"({len(text)} characters, not shown)",
                status,
            ) from exc

    def bad_shape(self, what: str) -> ProviderError:
        """The error for a JSON answer that is not what the wire format promises (``what`` says how)."""
        return self._error(ProviderBadAnswer, f"provider {self.settings.provider} answered {what}")
