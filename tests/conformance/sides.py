"""One system under comparison, driven by opensearch-py as a real client drives it."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable
from typing import Any

from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import TransportError

from tests.conformance.compare import Reply, Trace

__all__ = ["MC", "SEMANTIC", "Side", "both", "new_prefix"]

MC = "/_plugins/_ml/memory_containers"
SEMANTIC = {"type": "SEMANTIC", "namespace": ["user_id"]}


def new_prefix(label: str) -> str:
    """One index prefix for both sides of a flow (each side has its own cluster), private to the flow."""
    return f"conf-{label}-{uuid.uuid4().hex[:8]}"


class Side:
    def __init__(self, name: str, url: str, embedding_model_id: str, llm_id: str):
        self.name = name
        self.url = url
        self.embedding_model_id = embedding_model_id
        self.llm_id = llm_id
        self.client = OpenSearch(hosts=[url], timeout=120)

    def __repr__(self) -> str:
        return f"Side({self.name})"

    def close(self) -> None:
        self.client.close()

    def trace(self) -> Trace:
        trace = Trace(self.name)
        trace.name(self.embedding_model_id, "<embedding_model>")
        trace.name(self.llm_id, "<llm>")
        return trace

    def embedding(self) -> dict[str, Any]:
        return {
            "embedding_model_type": "TEXT_EMBEDDING",
            "embedding_model_id": self.embedding_model_id,
            "embedding_dimension": 384,
        }

    def configuration(self, prefix: str, **extra: Any) -> dict[str, Any]:
        """A container with this side's models and one SEMANTIC strategy, on private non-system indices."""
        return {
            **self.embedding(),
            "llm_id": self.llm_id,
            "index_prefix": prefix,
            "use_system_index": False,
            "strategies": [SEMANTIC],
            **extra,
        }

    def run(self, fn: Callable[[OpenSearch], Any]) -> Reply:
        """A client call (``client.plugins.ml.*``); opensearch-py hides a success's status, which is 200."""
        try:
            return Reply(200, fn(self.client))
        except TransportError as exc:
            return _error_reply(exc)

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Reply:
        """A raw call with its real status (``transport.perform_request`` below the client's helpers)."""
        connection = self.client.transport.get_connection()
        data = None if body is None else body if isinstance(body, str) else json.dumps(body)
        try:
            status, _headers, raw = connection.perform_request(method, path, params=params or {}, body=data)
        except TransportError as exc:
            return _error_reply(exc)
        return Reply(status, json.loads(raw) if raw else None)


def both(sides: tuple[Side, Side], flow: Callable[..., Trace], *args: Any) -> tuple[Trace, Trace]:
    """The same flow on ml-commons, then on memproxy."""
    ref, mp = sides
    return flow(ref, *args), flow(mp, *args)


def _error_reply(exc: TransportError) -> Reply:
    if isinstance(exc, OSConnectionError):  # no answer at all is a failure of the run, not a reply
        raise exc
    info = exc.info
    if isinstance(info, str | bytes):
        with contextlib.suppress(ValueError):  # a plain-text error stays text
            info = json.loads(info)
    return Reply(int(exc.status_code), info)
