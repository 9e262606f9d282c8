"""The model registry: every embedder, reranker and LLM memproxy can call, by id, whichever API registered it.

Three sources, looked up in this order:

1. local models loaded at start-up (``--embedder ID=PATH``, ``--reranker ID=PATH``): in-process, batched;
2. remote models named at start-up (``--llm ID=URL,...``, ``--reranker ID=URL,...``, ``--embedder
   ID=URL,...``): held in memory, their keys read from the environment;
3. runtime models, registered through the GoodMem API (``/v1/embedders``, ``/v1/rerankers``, ``/v1/llms``)
   or ml-commons' model APIs, stored in ``memproxy-models`` so every memproxy process sees them (each
   process caches a lookup for ``ttl_s``; its own writes are seen at once).

A caller gets a *handle* (``EmbeddingModel``, ``RerankModel``, ``ChatModel``) and calls it; HTTP clients
are made once per model version and closed at shutdown. Credentials are decrypted only to build a client.
"""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from proxy.config import DEFAULT_TRUSTED_MODEL_ENDPOINTS
from proxy.core.models.records import KIND, ModelRecord, ProviderCall
from proxy.errors import BadRequest, NotFound
from proxy.models import (
    AddressPolicy,
    ChatClient,
    ChatResult,
    ProviderClient,
    ProviderSettings,
    RemoteEmbedder,
    RemoteReranker,
)
from proxy.models.addresses import literal_ip, parse_allowed
from proxy.models.connector import connector_client, parse_action, predict, render_payload
from proxy.models.secrets import SecretBox, generate_key
from proxy.store.models import ModelDocs

if TYPE_CHECKING:  # proxy.embedding imports torch; pure core code must not pay for that
    from proxy.embedding import EmbedderRegistry
    from proxy.embedding.rerank import LocalReranker
    from proxy.models.embeddings import EmbedWire
    from proxy.models.rerank import RerankWire

__all__ = [
    "CallLimits",
    "ChatModel",
    "ConnectorModel",
    "EmbeddingModel",
    "ModelRegistry",
    "RerankModel",
    "StartupModel",
    "UnknownModel",
    "UntrustedEndpoint",
]

log = logging.getLogger(__name__)


class UntrustedEndpoint(BadRequest):
    """A registered model's URL matches none of ``--trusted-model-endpoints``, or is memproxy's cluster."""

    def __init__(self, url: str, why: str | None = None):
        why = why or "it matches none of memproxy's trusted model endpoints (--trusted-model-endpoints)"
        super().__init__(f"the model endpoint {url} is not allowed: {why}")
        self.url = url


_LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
_LOOPBACK_IP = literal_ip("127.0.0.1")


def _host_port(url: str, *, raw: bool = False) -> tuple[str, int | None]:
    """(host, port) with the scheme's default port filled in and (unless ``raw``) every loopback name as
    one."""
    parts = urllib.parse.urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        port = None
    if raw:
        return host, port
    return ("loopback" if host in _LOOPBACK or host.startswith("127.") else host), port


class UnknownModel(NotFound):
    """No model of the wanted kind has this id; each API words its own message from ``model_id``."""

    def __init__(self, model_id: str, kind: str):
        super().__init__(f"{kind} model with ID {model_id} not found")
        self.model_id = model_id
        self.kind = kind


@dataclass(frozen=True)
class CallLimits:
    """Timeouts, retries and concurrency of every remote call (``--model-timeout-s`` and friends)."""

    timeout_s: float = 30.0
    max_retries: int = 2
    max_concurrency: int = 8


@dataclass(frozen=True)
class StartupModel:
    """A remote model named by a start-up flag; ``api_key`` came from the environment (never stored)."""

    model_id: str
    kind: KIND
    call: ProviderCall
    api_key: str | None = field(default=None, repr=False)
    name: str | None = None


# --- handles ---------------------------------------------------------------------------------------------


class EmbeddingModel(Protocol):
    model_id: str
    dimension: int | None  # None: a remote model that has not told yet (probe it with one text)
    local: bool

    # ``query``: the texts are search queries, not documents to store. Asymmetric models embed the two
    # differently (Cohere's input_type); the others ignore it.
    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]: ...


class RerankModel(Protocol):
    model_id: str

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]: ...


class ChatModel(Protocol):
    model_id: str

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        json_output: bool = False,
    ) -> ChatResult: ...


@dataclass
class _LocalEmbedding:
    model_id: str
    dimension: int | None
    embedder: Any  # proxy.embedding.Embedder
    local: bool = True

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        vectors = await self.embedder.embed(list(texts))
        return [[float(x) for x in v] for v in vectors]


@dataclass
class _RemoteEmbedding:
    model_id: str
    dimension: int | None
    remote: RemoteEmbedder
    local: bool = False

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        return await self.remote.embed(texts, query=query) if texts else []


@dataclass
class ConnectorModel:
    """An ml-commons remote model: embeds through the connector's pre/post-process functions, chats
    through its request template (``system_prompt``/``user_prompt``/``messages`` parameters)."""

    model_id: str
    client: ProviderClient
    action: Any  # proxy.models.connector.ConnectorAction
    parameters: dict[str, Any]
    credential: dict[str, str] = field(repr=False)
    dimension: int | None = None
    local: bool = False

    async def predict(self, parameters: Mapping[str, Any], text_docs: Sequence[str] | None = None) -> Any:
        _, _, body = render_payload(
            self.action, {**self.parameters, **parameters}, self.credential, text_docs
        )
        return await predict(self.client, self.action, body)

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        # A connector has one request template for both, as in ml-commons.
        if not texts:
            return []
        out = await self.predict({}, text_docs=list(texts))
        if out.vectors is None:
            raise BadRequest(
                f"model {self.model_id} has no embedding post-process function; it cannot embed text"
            )
        if len(out.vectors) != len(texts):
            raise self.client.bad_shape(f"{len(out.vectors)} embeddings for {len(texts)} inputs")
        return out.vectors

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        json_output: bool = False,
    ) -> ChatResult:
        system = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
        user = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") != "system")
        params = {"system_prompt": system, "user_prompt": user, "prompt": user, "messages": list(messages)}
        out = await self.predict(params)
        return ChatClient(self.client)._parse(out.answer)


@dataclass
class _ProviderRerank:
    model_id: str
    remote: RemoteReranker

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        return await self.remote.rerank(query, documents)


@dataclass
class _LocalRerank:
    model_id: str
    reranker: Any  # proxy.embedding.rerank.LocalReranker

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        return list(await self.reranker.score(query, documents))


@dataclass
class _ProviderChat:
    model_id: str
    chat: ChatClient
    model: str

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        json_output: bool = False,
    ) -> ChatResult:
        return await self.chat.complete(
            messages,
            model=self.model,
            temperature=temperature,
            max_tokens=max_tokens,
            json_output=json_output,
        )


# --- the registry ----------------------------------------------------------------------------------------

_EMBEDDING_KINDS: tuple[KIND, ...] = ("embedder", "remote")
_MAX_CACHED = 4096
_RERANK_KINDS: tuple[KIND, ...] = ("reranker",)
_LLM_KINDS: tuple[KIND, ...] = ("llm", "remote")


class ModelRegistry:
    def __init__(
        self,
        docs: ModelDocs,
        embedders: EmbedderRegistry,
        *,
        rerankers: Mapping[str, LocalReranker] | None = None,
        startup: Sequence[StartupModel] = (),
        secret_key: str | None = None,
        secret_source: str = "MEMPROXY_SECRET_KEY",
        limits: CallLimits | None = None,
        ttl_s: float = 5.0,
        trusted_endpoints: Sequence[str] = DEFAULT_TRUSTED_MODEL_ENDPOINTS,
        forbidden_endpoints: Sequence[str] = (),
        allow_private_endpoints: Sequence[str] = (),
    ) -> None:
        self.docs = docs
        self.embedders = embedders
        self.rerankers = dict(rerankers or {})
        self.startup = {m.model_id: m for m in startup}
        self.limits = limits or CallLimits()
        self.ttl_s = ttl_s
        self._trusted = [re.compile(p) for p in trusted_endpoints]
        # The cluster memproxy keeps its data in: a model pointing there would let its registrant send the
        # node requests (an ml-commons connector's body is the caller's own template) that write memproxy's
        # private indices or close them, whatever --trusted-model-endpoints allows.
        self._forbidden = {_host_port(u) for u in forbidden_endpoints}
        # Where a call may connect, checked on the resolved address at connect time (proxy.models.addresses).
        # Runtime models (registered through an API, by any user) reach public addresses and the ranges the
        # operator opened; models the operator named at start-up reach any address. Neither the cluster.
        # Resolving the cluster's name blocks once, here at start-up.
        cluster = [(h, p) for h, p in (_host_port(u, raw=True) for u in forbidden_endpoints) if p is not None]
        allowed = parse_allowed(allow_private_endpoints)
        self._runtime_addresses = AddressPolicy(allowed).with_forbidden(cluster)
        self._startup_addresses = AddressPolicy(allow_all=True).with_forbidden(cluster)
        self._secret_key = secret_key
        self._secret_source = secret_source
        self._box: SecretBox | None = None
        self._records: dict[str, tuple[float, ModelRecord | None]] = {}
        # One HTTP client per (model id, version): a re-registered model gets a new one.
        self._clients: dict[tuple[str, int], ProviderClient] = {}
        # What remote models that declare no dimension answered when asked (model id → dimension).
        self._dimensions: dict[str, int] = {}

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    def check_endpoint(self, url: str) -> None:
        """Refuse a runtime model whose URL is not trusted (``UntrustedEndpoint``): registering a model
        must not let a caller make memproxy post to any host of its network."""
        if not any(p.match(url) for p in self._trusted):
            raise UntrustedEndpoint(url)
        if _host_port(url) in self._forbidden:
            raise UntrustedEndpoint(url, "it is the OpenSearch cluster memproxy stores its data in")
        # An address written in the URL (in any form the resolver reads: 2130706433, [::ffff:127.0.0.1])
        # or a loopback name is refused now, for a clear 400 at registration; every address, names'
        # included, is checked again where the socket is made, which is the check that holds.
        host, port = _host_port(url, raw=True)
        named_loopback = host == "localhost" or host.endswith(".localhost")
        ip = _LOOPBACK_IP if named_loopback else literal_ip(host)
        reason = self._runtime_addresses.refusal(ip, port) if ip is not None else None
        if reason is not None:
            raise UntrustedEndpoint(url, reason)

    # --- credentials -----------------------------------------------------------------------------------

    async def box(self) -> SecretBox:
        """The credential cipher: the configured key, else the cluster's generated master key."""
        if self._box is None:
            if self._secret_key:
                self._box = SecretBox.from_text(self._secret_key, self._secret_source)
            else:
                key, created = await self.docs.master_key(generate_key())
                if created:
                    log.warning(
                        "no MEMPROXY_SECRET_KEY or --secret-key-file: generated a credential master key "
                        "and stored it in memproxy's private index memproxy-models-config (as ml-commons "
                        "keeps its own); stored credentials are then only as safe as the cluster's data"
                    )
                self._box = SecretBox.from_text(key, "the cluster (memproxy-models-config)")
        return self._box

    async def seal(self, model_id: str, credential: Mapping[str, Any] | None) -> str | None:
        if not credential:
            return None
        return (await self.box()).encrypt(json.dumps(dict(credential)), bound_to=model_id)

    async def unseal(self, record: ModelRecord) -> dict[str, Any]:
        if not record.credential:
            return {}
        text = (await self.box()).decrypt(record.credential, bound_to=record.model_id)
        value = json.loads(text)
        return value if isinstance(value, dict) else {}

    # --- documents --------------------------------------------------------------------------------------

    def _remember(self, model_id: str, record: ModelRecord | None, now: float) -> None:
        """Cache a lookup. Ids come from callers, so the cache is bounded: past ``_MAX_CACHED`` entries the
        expired ones go, and if that is not enough, all of them (a miss costs one node read)."""
        if len(self._records) >= _MAX_CACHED:
            self._records = {k: v for k, v in self._records.items() if now - v[0] < self.ttl_s}
            if len(self._records) >= _MAX_CACHED:
                self._records.clear()
        self._records[model_id] = (now, record)

    async def get(self, model_id: str, kinds: Sequence[KIND] | None = None) -> ModelRecord | None:
        """A runtime registry document by id (any kind when ``kinds`` is None)."""
        now = time.monotonic()
        cached = self._records.get(model_id)
        if cached is not None and now - cached[0] < self.ttl_s:
            record = cached[1]
        else:
            doc = await self.docs.get(model_id) if model_id else None
            record = ModelRecord.from_doc(model_id, doc) if doc is not None else None
            self._remember(model_id, record, now)
        if record is not None and kinds is not None and record.kind not in kinds:
            return None
        return record

    async def save(self, record: ModelRecord, *, create: bool = False) -> ModelRecord:
        await self.docs.put(record.model_id, record.to_doc(), create=create)
        self._remember(record.model_id, record, time.monotonic())
        self._dimensions.pop(record.model_id, None)
        return record

    async def remove(self, model_id: str) -> bool:
        removed = await self.docs.delete(model_id)
        self._records.pop(model_id, None)
        self._dimensions.pop(model_id, None)
        for key in [k for k in self._clients if k[0] == model_id]:
            await self._clients.pop(key).close()
        return removed

    async def find(self, kinds: Sequence[KIND], **terms: Any) -> list[ModelRecord]:
        found = await self.docs.find(kinds, {k: v for k, v in terms.items() if v is not None})
        return [ModelRecord.from_doc(doc_id, doc) for doc_id, doc in found]

    # --- handles ----------------------------------------------------------------------------------------

    def _client(self, record_key: tuple[str, int], settings: ProviderSettings) -> ProviderClient:
        client = self._clients.get(record_key)
        if client is None:
            client = self._clients[record_key] = ProviderClient(settings)
        return client

    def _addresses(self, found: ModelRecord | StartupModel) -> AddressPolicy:
        return self._startup_addresses if isinstance(found, StartupModel) else self._runtime_addresses

    def _provider_client(
        self,
        key: tuple[str, int],
        call: ProviderCall,
        api_key: str | None,
        kind: str,
        addresses: AddressPolicy,
    ) -> ProviderClient:
        headers: tuple[tuple[str, str], ...] = ()
        if api_key:
            headers = ((call.header_name or "Authorization", (call.prefix or "") + api_key),)
        settings = ProviderSettings(
            call.endpoint_url,
            provider=call.chat_provider if kind == "llm" else call.wire,
            timeout_s=self.limits.timeout_s,
            max_retries=self.limits.max_retries,
            max_concurrency=self.limits.max_concurrency,
            headers=headers,
            secrets=(api_key,) if api_key else (),
            addresses=addresses,
        )
        return self._client(key, settings)

    async def _connector(self, record: ModelRecord) -> ConnectorModel:
        action = parse_action(record.call.get("actions"))
        self.check_endpoint(action.url)
        parameters = dict(record.call.get("parameters") or {})
        credential = {str(k): str(v) for k, v in (await self.unseal(record)).items()}
        key = (record.model_id, record.updated_at)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = connector_client(
                action,
                parameters,
                credential,
                timeout_s=self.limits.timeout_s,
                max_retries=self.limits.max_retries,
                max_concurrency=self.limits.max_concurrency,
                addresses=self._runtime_addresses,
            )
        dimension = record.call.get("dimension")
        return ConnectorModel(
            record.model_id, client, action, parameters, credential, int(dimension) if dimension else None
        )

    async def _provider_record(
        self, model_id: str, kinds: Sequence[KIND]
    ) -> tuple[ModelRecord | StartupModel, ProviderCall | None, str | None]:
        startup = self.startup.get(model_id)
        if startup is not None and startup.kind in kinds:
            return startup, startup.call, startup.api_key
        record = await self.get(model_id, kinds)
        if record is None:
            raise UnknownModel(model_id, "/".join(kinds))
        if record.call.get("form") != "provider":
            return record, None, None
        self.check_endpoint(str(record.call.get("endpoint_url")))
        secret = await self.unseal(record)
        api_key = (secret.get("apiKey") or {}).get("inlineSecret") if secret else None
        return record, ProviderCall.from_doc(record.call), api_key

    async def dimension(self, model: EmbeddingModel) -> int:
        """The model's vector length: declared, or what it answers for one short text (asked once)."""
        if model.dimension is not None:
            return model.dimension
        known = self._dimensions.get(model.model_id)
        if known is None:
            (vector,) = await model.embed(["dimension probe"])
            known = self._dimensions[model.model_id] = len(vector)
        return known

    async def embedding_model(self, model_id: str) -> EmbeddingModel:
        """The model that embeds for ``model_id``: a local embedder (id or alias), else a remote one."""
        try:
            embedder = self.embedders.get(model_id)
        except NotFound:
            pass
        else:
            return _LocalEmbedding(str(embedder.info.id), int(embedder.info.dimension), embedder)
        found, call, api_key = await self._provider_record(model_id, _EMBEDDING_KINDS)
        if call is None:
            assert isinstance(found, ModelRecord)
            return await self._connector(found)
        version = found.updated_at if isinstance(found, ModelRecord) else 0
        client = self._provider_client((model_id, version), call, api_key, "embedder", self._addresses(found))
        remote = RemoteEmbedder(
            client,
            wire=cast("EmbedWire", call.wire),  # checked by RemoteEmbedder
            model=call.model,
            dimension=call.dimension,
            path=call.api_path,
        )
        return _RemoteEmbedding(model_id, call.dimension, remote)

    async def rerank_model(self, model_id: str) -> RerankModel:
        local = self.rerankers.get(model_id)
        if local is not None:
            return _LocalRerank(model_id, local)
        found, call, api_key = await self._provider_record(model_id, _RERANK_KINDS)
        if call is None:
            raise UnknownModel(model_id, "reranker")
        version = found.updated_at if isinstance(found, ModelRecord) else 0
        client = self._provider_client((model_id, version), call, api_key, "reranker", self._addresses(found))
        remote = RemoteReranker(
            client, wire=cast("RerankWire", call.wire), model=call.model, path=call.api_path
        )
        return _ProviderRerank(model_id, remote)

    async def chat_model(self, model_id: str) -> ChatModel:
        found, call, api_key = await self._provider_record(model_id, _LLM_KINDS)
        if call is None:
            assert isinstance(found, ModelRecord)
            return await self._connector(found)
        version = found.updated_at if isinstance(found, ModelRecord) else 0
        client = self._provider_client((model_id, version), call, api_key, "llm", self._addresses(found))
        return _ProviderChat(model_id, ChatClient(client, path=call.api_path), call.model or "")

    async def connector_model(self, record: ModelRecord) -> ConnectorModel:
        """The connector-backed handle of an ml-commons model document (``_predict``)."""
        return await self._connector(record)
