"""Models named by start-up flags: ``ID=PATH`` (a local model directory) or ``ID=URL#options`` (remote).

Options follow ``#`` (a URL fragment is never sent to a server, so the URL itself stays intact) as
``key=value`` pairs separated by commas: ``provider`` (the wire format, see docs/models.md), ``model`` (the
provider's model name), ``dimension`` (embedders), ``path`` (the API path under the URL, when the
provider's default is not right), ``key_env`` (the environment variable holding the API key; the key itself
is never written on a command line, where the process list would show it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from proxy.core.models.records import KIND, ProviderCall
from proxy.core.models.registry import StartupModel
from proxy.models import CHAT_PROVIDERS, EMBED_PATHS, RERANK_WIRES

__all__ = ["LocalModelPath", "parse_model_flag"]

# The wire formats proxy.models speaks, per kind (an LLM's "provider" picks its chat defaults).
_WIRES = {"embedder": set(EMBED_PATHS), "reranker": set(RERANK_WIRES), "llm": set(CHAT_PROVIDERS)}
_DEFAULT_WIRE = {"embedder": "openai", "reranker": "tei", "llm": "openai"}


@dataclass(frozen=True)
class LocalModelPath:
    model_id: str
    path: str


def parse_model_flag(entry: str, kind: KIND, environ: Mapping[str, str]) -> StartupModel | LocalModelPath:
    """One flag value; raises ValueError with the flag's own words when it cannot be used."""
    model_id, sep, target = entry.partition("=")
    model_id, target = model_id.strip(), target.strip()
    if not sep or not model_id or not target:
        raise ValueError(f"--{kind} expects ID=PATH or ID=URL#options, got {entry!r}")
    if not target.startswith(("http://", "https://")):
        if kind == "llm":
            raise ValueError(
                f"--llm {model_id}: an LLM is reached over HTTP; give ID=URL#provider=...,model=..."
            )
        return LocalModelPath(model_id, target)
    url, _, fragment = target.partition("#")
    options: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in fragment.split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"--{kind} {model_id}: option {part!r} is not key=value")
        options[key.strip()] = value.strip()
    unknown = set(options) - {"provider", "model", "dimension", "path", "key_env"}
    if unknown:
        raise ValueError(f"--{kind} {model_id}: unknown option(s) {', '.join(sorted(unknown))}")
    wire = options.get("provider", _DEFAULT_WIRE[kind]).lower()
    if wire not in _WIRES[kind]:
        raise ValueError(f"--{kind} {model_id}: provider must be one of {', '.join(sorted(_WIRES[kind]))}")
    api_key = None
    if options.get("key_env"):
        api_key = environ.get(options["key_env"])
        if not api_key:
            raise ValueError(f"--{kind} {model_id}: the environment variable {options['key_env']} is not set")
    dimension = None
    if "dimension" in options:
        if not options["dimension"].isdigit() or int(options["dimension"]) < 1:
            raise ValueError(f"--{kind} {model_id}: dimension must be a positive integer")
        dimension = int(options["dimension"])
    if kind == "embedder" and dimension is None:
        raise ValueError(f"--embedder {model_id}: a remote embedder needs dimension=N")
    if wire != "tei" and not options.get("model"):
        raise ValueError(f"--{kind} {model_id}: provider {wire} needs model=NAME")
    call = ProviderCall(
        wire="openai" if kind == "llm" else wire,
        endpoint_url=url,
        api_path=options.get("path"),
        model=options.get("model"),
        dimension=dimension,
        chat_provider=wire if kind == "llm" else "generic",
    )
    return StartupModel(model_id=model_id, kind=kind, call=call, api_key=api_key, name=options.get("model"))
