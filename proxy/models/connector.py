"""ml-commons HTTP connectors, executed as ml-commons executes them: a ``predict`` action whose URL, headers
and request-body template are filled from the connector's and the call's parameters and its credential.

What ml-commons does and this module repeats (docs/models.md, "ml-commons connectors"):

* ``${parameters.NAME}`` takes the call's parameter, else the connector's; a value that is not a string
  (a list of inputs, say) is written as JSON, a string is written JSON-escaped without quotes, so
  ``"${parameters.model}"`` and ``${parameters.input}`` both make valid JSON. ``${credential.NAME}`` takes
  the credential's value. A placeholder left unfilled is refused before anything is sent.
* ``text_docs`` inputs go through the action's pre-process function (the built-in ``openai``/``cohere``/
  ``default`` embedding ones put the texts in ``input`` or ``texts``); the answer goes through its
  post-process function (the built-in embedding ones read one vector per text), or is returned whole as
  ``dataAsMap``.

Painless pre/post-process scripts are not run: memproxy runs no user scripts of this kind, and says so when
such a connector is created.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.errors import BadRequest
from proxy.models.addresses import AddressPolicy
from proxy.models.provider import ProviderClient, ProviderSettings

__all__ = [
    "BUILTIN_POST_PROCESS",
    "BUILTIN_PRE_PROCESS",
    "ConnectorAction",
    "PredictOutput",
    "connector_client",
    "parse_action",
    "predict",
    "render_payload",
]

# Built-in pre-process functions: which parameter receives the texts of ``text_docs`` (as a JSON list).
BUILTIN_PRE_PROCESS = {
    "connector.pre_process.openai.embedding": "input",
    "connector.pre_process.cohere.embedding": "texts",
    "connector.pre_process.default.embedding": "texts",
    "connector.pre_process.bedrock.embedding": "inputText",
}
# Built-in post-process functions for embeddings: where the vectors are in the provider's answer.
BUILTIN_POST_PROCESS = {
    "connector.post_process.openai.embedding": "openai",
    "connector.post_process.cohere.embedding": "cohere",
    "connector.post_process.default.embedding": "default",
}
_PLACEHOLDER = re.compile(r"\$\{(parameters|credential)\.([^}]+)\}")


@dataclass(frozen=True)
class ConnectorAction:
    """A connector's ``predict`` action, checked."""

    method: str
    url: str
    headers: dict[str, str]
    request_body: str | None
    pre_process: str | None
    post_process: str | None


def _text_field(action: Mapping[str, Any], name: str) -> str | None:
    value = action.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"connector action field {name} must be a string")
    return value


def parse_action(actions: Any) -> ConnectorAction:
    """The ``predict`` action of a connector's ``actions`` (400 when there is none memproxy can run)."""
    if not isinstance(actions, list) or not actions:
        raise BadRequest("Connector actions are required")
    predict_actions = [a for a in actions if isinstance(a, dict) and a.get("action_type") == "predict"]
    if not predict_actions:
        raise BadRequest("memproxy runs connectors with a predict action; none was given")
    action = predict_actions[0]
    method = str(action.get("method") or "POST").upper()
    if method != "POST":
        raise BadRequest(f"memproxy runs connector actions that POST; this one uses {method}")
    url = _text_field(action, "url")
    if not url:
        raise BadRequest("the connector's predict action needs a url")
    headers = action.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise BadRequest("connector action headers must be an object of strings")
    pre = _text_field(action, "pre_process_function")
    post = _text_field(action, "post_process_function")
    for name, value, builtin in (("pre", pre, BUILTIN_PRE_PROCESS), ("post", post, BUILTIN_POST_PROCESS)):
        if value and value not in builtin:
            raise BadRequest(
                f"memproxy does not run painless {name}-process scripts in connectors; use one of "
                + ", ".join(sorted(builtin))
            )
    return ConnectorAction(
        method=method,
        url=url,
        headers={str(k): v for k, v in headers.items()},
        request_body=_text_field(action, "request_body"),
        pre_process=pre,
        post_process=post,
    )


def _param_text(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)[1:-1]  # escaped for a JSON string, without its quotes
    return json.dumps(value)


def _substitute(
    template: str, parameters: Mapping[str, Any], credential: Mapping[str, str]
) -> tuple[str, list[str]]:
    """The template with every placeholder it can fill filled, and the names of those it cannot."""
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        space, name = match.group(1), match.group(2)
        if space == "credential":
            if name in credential:
                return credential[name]
        elif name in parameters:
            return _param_text(parameters[name])
        missing.append(name)
        return match.group(0)

    return _PLACEHOLDER.sub(replace, template), missing


def _unfilled(missing: Sequence[str]) -> BadRequest:
    return BadRequest(f"Some parameter placeholder not filled in payload: {', '.join(missing)}")


def _fill(template: str, parameters: Mapping[str, Any], credential: Mapping[str, str]) -> str:
    text, missing = _substitute(template, parameters, credential)
    if missing:
        raise _unfilled(missing)
    return text


def render_payload(
    action: ConnectorAction,
    parameters: Mapping[str, Any],
    credential: Mapping[str, str],
    text_docs: Sequence[str] | None = None,
) -> tuple[str, dict[str, str], Any]:
    """(url, headers, JSON body) of one predict call."""
    params = dict(parameters)
    if text_docs is not None:
        target = BUILTIN_PRE_PROCESS.get(action.pre_process or "")
        if target is None:
            raise BadRequest("this connector has no pre-process function for text_docs; send parameters")
        params[target] = list(text_docs)
    body: Any = dict(params)
    if action.request_body is not None:
        # ml-commons' order: the filled body must be JSON ("Invalid payload: <body>", which is what an
        # unfilled unquoted placeholder gives), then every placeholder must be filled.
        text, missing = _substitute(action.request_body, params, credential)
        try:
            body = json.loads(text)
        except ValueError:
            shown = text
            for secret in sorted((v for v in credential.values() if v), key=len, reverse=True):
                shown = shown.replace(secret, "[redacted]")
            raise BadRequest(f"Invalid payload: {shown}") from None
        if missing:
            raise _unfilled(missing)
    url = _fill(action.url, params, credential)
    headers = {k: _fill(v, params, credential) for k, v in action.headers.items()}
    return url, headers, body


def connector_client(
    action: ConnectorAction,
    parameters: Mapping[str, Any],
    credential: Mapping[str, str],
    *,
    timeout_s: float,
    max_retries: int,
    max_concurrency: int,
    addresses: AddressPolicy,
) -> ProviderClient:
    """A client for the action's URL with its headers (credential filled in, and redacted from errors)."""
    url = _fill(action.url, parameters, credential)
    headers = tuple((k, _fill(v, parameters, credential)) for k, v in action.headers.items())
    settings = ProviderSettings(
        url,
        provider="connector",
        timeout_s=timeout_s,
        max_retries=max_retries,
        max_concurrency=max_concurrency,
        headers=headers,
        secrets=tuple(v for v in credential.values() if v),
        addresses=addresses,
    )
    return ProviderClient(settings)


@dataclass(frozen=True)
class PredictOutput:
    """What one predict call gave: the provider's whole answer, and the vectors when post-processed."""

    answer: Any
    vectors: list[list[float]] | None


def _vectors(kind: str, answer: Any, client: ProviderClient) -> list[list[float]]:
    if kind == "openai":
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise client.bad_shape("an OpenAI embeddings answer has a data list")
        items = sorted(
            (d for d in data if isinstance(d, dict)),
            key=lambda d: d.get("index", 0) if isinstance(d.get("index"), int) else 0,
        )
        raw: list[Any] = [d.get("embedding") for d in items]
    else:
        raw_any = answer.get("embeddings") if isinstance(answer, dict) else None
        if isinstance(raw_any, dict):  # Cohere v2: {"embeddings": {"float": [...]}}
            raw_any = raw_any.get("float")
        if not isinstance(raw_any, list):
            raise client.bad_shape("an embeddings answer has an embeddings list")
        raw = raw_any
    out: list[list[float]] = []
    for i, vec in enumerate(raw):
        if not (isinstance(vec, list) and vec and all(isinstance(x, int | float) for x in vec)):
            raise client.bad_shape(f"embedding {i} is a non-empty list of finite numbers")
        if not all(math.isfinite(float(x)) for x in vec):
            raise client.bad_shape(f"embedding {i} is a non-empty list of finite numbers")
        out.append([float(x) for x in vec])
    return out


async def predict(client: ProviderClient, action: ConnectorAction, body: Any) -> PredictOutput:
    """Post the rendered body; the answer, with its vectors when the action post-processes embeddings."""
    answer = await client.post_json("", body)
    kind = BUILTIN_POST_PROCESS.get(action.post_process or "")
    return PredictOutput(answer, _vectors(kind, answer, client) if kind else None)
