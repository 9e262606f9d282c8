"""OpenAI-compatible chat completions: one client for every server that speaks ``POST /chat/completions``.

The per-provider table holds what differs between those servers: where the API lives under the server's
root and whether JSON mode (``response_format: {"type": "json_object"}``) is understood. A server that does
not know JSON mode may refuse the field outright, so it is sent only where the table says it is supported;
elsewhere the caller's prompt has to ask for JSON itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.models.provider import ProviderClient, api_path

__all__ = ["CHAT_PROVIDERS", "ChatClient", "ChatProvider", "ChatResult"]


@dataclass(frozen=True)
class ChatProvider:
    base_path: str  # under the server's root; kept once when the configured base URL already ends with it
    json_mode: bool


CHAT_PROVIDERS: dict[str, ChatProvider] = {
    "openai": ChatProvider("/v1", json_mode=True),
    "vllm": ChatProvider("/v1", json_mode=True),
    "ollama": ChatProvider("/v1", json_mode=True),  # Ollama's OpenAI-compatible endpoint
    "llamacpp": ChatProvider("/v1", json_mode=True),  # llama.cpp's llama-server
    "litellm": ChatProvider("/v1", json_mode=True),
    "openrouter": ChatProvider("/api/v1", json_mode=True),
    # Any other OpenAI-compatible server: whether it accepts response_format is unknown, so it is not sent.
    "generic": ChatProvider("/v1", json_mode=False),
}


@dataclass(frozen=True)
class ChatResult:
    text: str
    finish_reason: str | None
    usage: dict[str, Any]


class ChatClient:
    """Chat completions against one provider; the ``ProviderClient`` (and its session) is the caller's."""

    def __init__(self, client: ProviderClient, *, path: str | None = None) -> None:
        self.client = client
        self.provider = CHAT_PROVIDERS.get(client.settings.provider, CHAT_PROVIDERS["generic"])
        # An explicit path (GoodMem's ``apiPath``) is used as given under the base URL.
        default = api_path(client.settings.base_url, self.provider.base_path, "/chat/completions")
        self.path = path if path is not None else default

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        model: str,
        temperature: float | None = None,
        max_tokens: int | None = None,
        json_output: bool = False,
    ) -> ChatResult:
        body: dict[str, Any] = {"model": model, "messages": list(messages)}
        if temperature is not None:
            body["temperature"] = temperature
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if json_output and self.provider.json_mode:
            body["response_format"] = {"type": "json_object"}
        return self._parse(await self.client.post_json(self.path, body))

    def _parse(self, answer: Any) -> ChatResult:
        bad = self.client.bad_shape
        if not isinstance(answer, dict):
            raise bad(f"a chat completion that is not a JSON object but {type(answer).__name__}")
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices:
            raise bad("a chat completion without choices")
        choice = choices[0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise bad("a chat completion whose first choice has no message")
        content = message.get("content")
        if not isinstance(content, str) or not content.strip():
            raise bad("a chat completion with empty content")
        finish = choice.get("finish_reason")
        usage = answer.get("usage")
        return ChatResult(
            text=content,
            finish_reason=finish if isinstance(finish, str) else None,
            usage=usage if isinstance(usage, dict) else {},
        )
