"""GoodMem's three model resources (embedders, rerankers, LLMs) as records of the model registry, and what
they share: provider types, the registry record, duplicate detection, credentials, visibility, edits.

A model a client registers is one ``ModelRecord`` (kind ``embedder`` / ``reranker`` / ``llm``, api
``goodmem``) in ``memproxy-models``: its ``view`` is the GoodMem response (camelCase, never the
credentials), its ``call`` says how ``proxy.models`` reaches it, its credential (the
``EndpointAuthentication`` sent) is sealed by the registry and never read back except to make a call.

Built-in models (memproxy's local embedders and rerankers, and remote models named by start-up flags) are
listed beside the records with their stable ids. They are not records: they cannot be deleted, their identity
(endpoint, model, dimensionality...) is fixed, and what a client edits of them (display name, description,
labels, version, monitoring endpoint) is kept in ``memproxy-goodmem-embedders``, keyed by model id.

Who may do what (docs/goodmem-api.md, "Embedders, rerankers and LLMs"): any authenticated caller creates
models it owns (another owner: administrators only) and reads the built-in ones, its own and those an
administrator owns (the instance's); updating and deleting a record needs its owner or an administrator;
editing a built-in model needs an administrator. Stored credentials are returned to no one.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.ids import NIL_UUID, new_id, now_ms
from proxy.core.goodmem.users import is_active_user
from proxy.core.goodmem.validation import LabelChange
from proxy.core.identity import ADMIN_ROLES, Principal
from proxy.core.models import ModelRecord, ProviderCall
from proxy.errors import BadRequest, Conflict, Forbidden, MemproxyError, NotFound
from proxy.store.client import OpenSearchError
from proxy.store.goodmem import EMBEDDERS, USERS

__all__ = [
    "DESCRIPTIVE",
    "EMBEDDER",
    "LLM",
    "RERANKER",
    "FailedPrecondition",
    "KindSpec",
    "ModelKind",
    "ModelQuery",
    "ModelUpdate",
    "NewModel",
    "ProviderModel",
    "check_credentials_read",
    "create_model",
    "delete_record",
    "filter_models",
    "inferred_capabilities",
    "instance_context",
    "list_all",
    "load_model",
    "may_change",
    "overlays",
    "startup_models",
    "update_model",
    "with_overlay",
]

ModelKind = Literal["embedder", "reranker", "llm"]


class FailedPrecondition(MemproxyError):
    """GoodMem's FAILED_PRECONDITION: a change the resource's current use forbids (an embedder in use)."""

    status = 412


@dataclass(frozen=True)
class KindSpec:
    """One resource: its names, the provider types its clients may send, and how memproxy reaches each."""

    kind: ModelKind
    noun: str
    article: str
    id_field: str
    provider_types: tuple[str, ...]
    # providerType → proxy.models' wire format (embedders, rerankers) or chat provider (LLMs).
    wires: Mapping[str, str]
    default_paths: Mapping[str, str]
    default_path: str
    flag: str

    def path_for(self, provider_type: str) -> str:
        return self.default_paths.get(provider_type, self.default_path)

    @property
    def lower(self) -> str:
        return self.noun if self.noun.isupper() else self.noun.lower()

    def wire(self, provider_type: str, dialect: str | None) -> str:
        """The wire format for ``provider_type``; 400 for one memproxy does not speak."""
        if provider_type not in self.provider_types:
            allowed = ", ".join(self.provider_types)
            raise BadRequest(f"providerType must be one of {allowed} for {self.article} {self.lower}")
        # DashScope's OpenAI-compatible mode is the OpenAI wire (an LLM's default); its native ones are not.
        if provider_type == "DASHSCOPE" and self.kind == "llm" and dialect in (None, "OPENAI_COMPATIBLE"):
            return "generic"
        if provider_type == "DASHSCOPE" and self.kind == "embedder" and dialect == "OPENAI_COMPATIBLE":
            return "openai"
        wire = self.wires.get(provider_type)
        if wire is None:
            native = f" ({dialect} dialect)" if dialect else ""
            raise BadRequest(
                f"memproxy does not speak the {provider_type}{native} {self.lower} API; use a provider "
                f"whose wire format it speaks: {', '.join(sorted(self.wires))}"
                + (
                    " (DASHSCOPE with dashscopeApiDialect OPENAI_COMPATIBLE)"
                    if self.kind == "embedder"
                    else ""
                )
            )
        return wire


EMBEDDER = KindSpec(
    kind="embedder",
    noun="Embedder",
    article="an",
    id_field="embedderId",
    provider_types=("OPENAI", "VLLM", "TEI", "LLAMA_CPP", "VOYAGE", "COHERE", "JINA", "DASHSCOPE", "GEMINI"),
    # OpenAI, vLLM, llama.cpp, Jina and Voyage all answer OpenAI's embeddings shape.
    wires={
        "OPENAI": "openai",
        "VLLM": "openai",
        "LLAMA_CPP": "openai",
        "JINA": "openai",
        "VOYAGE": "openai",
        "TEI": "tei",
        "COHERE": "cohere",
    },
    default_paths={"COHERE": "/v2/embed", "TEI": "/embed"},
    default_path="/embeddings",
    flag="--embedder",
)
RERANKER = KindSpec(
    kind="reranker",
    noun="Reranker",
    article="a",
    id_field="rerankerId",
    # Gen B's reranker validator; Gen A reuses the embedder enum, whose OPENAI/GEMINI are no rerankers.
    provider_types=("VLLM", "TEI", "LLAMA_CPP", "VOYAGE", "COHERE", "JINA", "DASHSCOPE"),
    # llama.cpp's server answers Jina's rerank shape.
    wires={
        "TEI": "tei",
        "COHERE": "cohere",
        "JINA": "jina",
        "VOYAGE": "voyage",
        "VLLM": "vllm",
        "LLAMA_CPP": "jina",
    },
    default_paths={"COHERE": "/v2/rerank", "JINA": "/v1/rerank"},
    default_path="/rerank",
    flag="--reranker",
)
LLM = KindSpec(
    kind="llm",
    noun="LLM",
    article="an",
    id_field="llmId",
    provider_types=(
        "OPENAI",
        "LITELLM_PROXY",
        "OPEN_ROUTER",
        "DASHSCOPE",
        "VLLM",
        "OLLAMA",
        "LLAMA_CPP",
        "CUSTOM_OPENAI_COMPATIBLE",
    ),
    # Every LLM is reached by OpenAI-compatible chat completions; the provider picks proxy.models.chat's
    # per-provider defaults.
    wires={
        "OPENAI": "openai",
        "LITELLM_PROXY": "litellm",
        "OPEN_ROUTER": "openrouter",
        "VLLM": "vllm",
        "OLLAMA": "ollama",
        "LLAMA_CPP": "llamacpp",
        "CUSTOM_OPENAI_COMPATIBLE": "generic",
    },
    default_paths={},
    default_path="/chat/completions",
    flag="--llm",
)
SPECS: dict[str, KindSpec] = {s.kind: s for s in (EMBEDDER, RERANKER, LLM)}

# What a client may edit of a built-in model (kept as an overlay); everything else is its identity.
DESCRIPTIVE = ("displayName", "description", "version", "monitoringEndpoint")
# Overlay document key → view field.
_OVERLAY = {
    "display_name": "displayName",
    "description": "description",
    "version": "version",
    "monitoring_endpoint": "monitoringEndpoint",
    "labels": "labels",
    "created_at": "createdAt",
    "updated_at": "updatedAt",
    "updated_by_id": "updatedById",
}


@dataclass(frozen=True)
class ProviderModel:
    """One GoodMem embedder, reranker or LLM: its response fields and whether memproxy itself provides it."""

    spec: KindSpec
    model_id: str
    view: dict[str, Any]
    builtin: bool = False

    @property
    def owner_id(self) -> str:
        return str(self.view.get("ownerId") or NIL_UUID)

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.view.get("labels") or {})

    @classmethod
    def of_record(cls, record: ModelRecord) -> ProviderModel:
        spec = SPECS[record.kind]
        return cls(spec, record.model_id, {spec.id_field: record.model_id, **record.view})


# --- requests ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NewModel:
    """``POST /v1/{embedders,rerankers,llms}``, validated field by field (the service checks the provider,
    the endpoint, the owner and duplicates). ``fields`` holds the kind's own response fields as sent
    (camelCase: ``dimensionality``, ``capabilities``...), ``credentials`` the EndpointAuthentication."""

    display_name: str
    provider_type: str
    endpoint_url: str
    model_identifier: str
    api_path: str | None = None
    description: str | None = None
    supported_modalities: tuple[str, ...] = ("TEXT",)
    credentials: dict[str, Any] | None = field(default=None, repr=False)
    labels: dict[str, str] = field(default_factory=dict)
    version: str | None = None
    monitoring_endpoint: str | None = None
    owner_id: str | None = None
    model_id: str | None = None
    dialect: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelUpdate:
    """``PUT /v1/{kind}/{id}``: ``changes`` maps each response field sent to its new value (absent: kept;
    ``apiPath`` "" restores the provider default); ``provider_type`` is only compared (immutable)."""

    provider_type: object = None
    changes: dict[str, Any] = field(default_factory=dict)
    credentials: dict[str, Any] | None = field(default=None, repr=False)
    labels: LabelChange = field(default_factory=LabelChange)


@dataclass(frozen=True)
class ModelQuery:
    provider_type: str | None = None
    owner_id: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


# --- shared pieces -------------------------------------------------------------------------------------


async def instance_context(gm: GoodMem) -> tuple[str, int]:
    """(root user id, instance creation time): the owner and birth of every built-in model."""
    record = await gm.instance.get()
    if record is None:
        return NIL_UUID, now_ms()
    return str(record["root_user_id"]), int(record.get("created_at") or now_ms())


async def overlays(gm: GoodMem, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The client edits of built-in models, by model id."""
    try:
        return await gm.docs.mget(EMBEDDERS, list(ids))
    except OpenSearchError:
        return {}


def with_overlay(view: Mapping[str, Any], overlay: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(view)
    for key, name in _OVERLAY.items():
        value = (overlay or {}).get(key)
        if value is not None:
            out[name] = dict(value) if isinstance(value, Mapping) else value
    return out


def _audit(view: dict[str, Any], owner: str, created: int) -> dict[str, Any]:
    return {
        **view,
        "labels": {},
        "ownerId": owner,
        "createdAt": created,
        "updatedAt": created,
        "createdById": owner,
        "updatedById": owner,
    }


def inferred_capabilities(provider_type: str) -> dict[str, bool]:
    """What an OpenAI-compatible chat endpoint offers, when the client did not say (GoodMem infers too)."""
    return {
        "supportsChat": True,
        "supportsCompletion": False,
        "supportsFunctionCalling": provider_type in ("OPENAI", "OPEN_ROUTER", "LITELLM_PROXY"),
        "supportsSystemMessages": True,
        "supportsStreaming": True,
        "supportsSamplingParameters": True,
    }


def _provider_type_of(spec: KindSpec, wire: str) -> str:
    """A start-up model's GoodMem providerType: the first whose wire format it speaks."""
    if spec.kind == "llm" and wire in ("openai", "generic"):
        return "OPENAI" if wire == "openai" else "CUSTOM_OPENAI_COMPATIBLE"
    return next((p for p, w in spec.wires.items() if w == wire), "CUSTOM_OPENAI_COMPATIBLE")


async def startup_models(gm: GoodMem, spec: KindSpec, owner: str, created: int) -> list[ProviderModel]:
    """The remote models of this kind named by start-up flags (``--llm``, ``--reranker``, ``--embedder``
    with a URL), and for rerankers the local cross-encoders."""
    registry = gm.svc.models
    out: list[ProviderModel] = []
    if spec.kind == "reranker":
        for model_id, local in registry.rerankers.items():
            info = local.info()
            view: dict[str, Any] = {
                spec.id_field: model_id,
                "displayName": str(info.name or model_id),
                "description": f"Local cross-encoder {info.model_path} on {info.device}/{info.dtype}",
                "providerType": "TEI",
                "endpointUrl": f"local://memproxy/{model_id}",
                "apiPath": "/rerank",
                "modelIdentifier": str(info.name or model_id),
                "supportedModalities": ["TEXT"],
            }
            out.append(ProviderModel(spec, model_id, _audit(view, owner, created), builtin=True))
    for model_id, startup in registry.startup.items():
        if startup.kind != spec.kind:
            continue
        call = startup.call
        wire = call.chat_provider if spec.kind == "llm" else call.wire
        provider_type = _provider_type_of(spec, wire)
        view = {
            spec.id_field: model_id,
            "displayName": startup.name or model_id,
            "description": f"Configured at start-up ({spec.flag} {model_id})",
            "providerType": provider_type,
            "endpointUrl": call.endpoint_url,
            "apiPath": call.api_path or spec.path_for(provider_type),
            "modelIdentifier": call.model or model_id,
            "supportedModalities": ["TEXT"],
        }
        if spec.kind == "embedder":
            view.update(dimensionality=int(call.dimension or 0), distributionType="DENSE")
        if spec.kind == "llm":
            view["capabilities"] = inferred_capabilities(provider_type)
        out.append(ProviderModel(spec, model_id, _audit(view, owner, created), builtin=True))
    return out


def canonical_url(value: str) -> str:
    """``endpointUrl`` as compared and stored: scheme and host lower-cased, the default port and a trailing
    slash dropped (GoodMem canonicalises before its duplicate check)."""
    try:
        parts = urllib.parse.urlsplit(value.strip())
        port = parts.port
    except ValueError:
        raise BadRequest(f"endpointUrl is not a valid URL: {value!r}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"endpointUrl must be an http(s) URL with a host, got {value!r}")
    if parts.query or parts.fragment:
        raise BadRequest("endpointUrl must not carry a query string or fragment")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        raise BadRequest("endpointUrl must not carry credentials; send them in credentials")
    return urllib.parse.urlunsplit((scheme, host, parts.path.rstrip("/"), "", ""))


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def fingerprint(spec: KindSpec, view: Mapping[str, Any], credentials: Mapping[str, Any] | None) -> str:
    """GoodMem's duplicate rule: same owner, provider, canonical endpoint, path, model (and for embedders
    dimensionality and distribution) and the same credentials."""
    keys = ["ownerId", "providerType", "endpointUrl", "apiPath", "modelIdentifier"]
    if spec.kind == "embedder":
        keys += ["dimensionality", "distributionType"]
    same = {k: view.get(k) for k in keys}
    same["credentials"] = _digest(dict(credentials)) if credentials else None
    return _digest(same)


def _auth_header(credentials: Mapping[str, Any] | None) -> tuple[str, str]:
    """(header, prefix) the credential is sent in: Authorization/"Bearer " unless the client said."""
    api_key = (credentials or {}).get("apiKey") or {}
    header = str(api_key.get("headerName") or "Authorization")
    prefix = api_key.get("prefix")
    if prefix is None:
        prefix = "Bearer " if header.lower() == "authorization" else ""
    return header, str(prefix)


def _call(spec: KindSpec, view: Mapping[str, Any], credentials: Mapping[str, Any] | None) -> dict[str, Any]:
    wire = spec.wire(str(view["providerType"]), view.get("dashscopeApiDialect"))
    header, prefix = _auth_header(credentials)
    call = ProviderCall(
        wire="openai" if spec.kind == "llm" else wire,
        endpoint_url=str(view["endpointUrl"]),
        api_path=str(view.get("apiPath") or spec.path_for(str(view["providerType"]))),
        model=str(view["modelIdentifier"]),
        dimension=int(view["dimensionality"]) if spec.kind == "embedder" else None,
        header_name=header,
        prefix=prefix,
        chat_provider=wire if spec.kind == "llm" else "generic",
    )
    return call.to_doc()


# --- visibility ----------------------------------------------------------------------------------------


async def _admin_owners(gm: GoodMem, owners: set[str]) -> set[str]:
    """Which of ``owners`` are administrators (root included): what they own is the instance's."""
    root = await gm.instance.root_user_id()
    admins = {root} if root else set()
    rest = [o for o in owners if o not in admins]
    if rest:
        try:
            users = await gm.docs.mget(USERS, rest)
        except OpenSearchError:
            users = {}
        admins |= {uid for uid, doc in users.items() if set(doc.get("roles") or ()) & ADMIN_ROLES}
    return admins


async def _visible(gm: GoodMem, principal: Principal, models: list[ProviderModel]) -> list[ProviderModel]:
    if principal.is_admin:
        return models
    admins = await _admin_owners(gm, {m.owner_id for m in models if not m.builtin})
    return [m for m in models if m.builtin or m.owner_id in (principal.user_id, *admins)]


def may_change(principal: Principal, model: ProviderModel) -> bool:
    """Update or delete: the owner of a registered model, or an administrator."""
    if principal.is_admin:
        return True
    return not model.builtin and model.owner_id == principal.user_id


def check_credentials_read(spec: KindSpec) -> None:
    """``includeCredentials=true``: memproxy returns stored credentials to no one (it holds them only to
    call the provider), so READ_<X>_CREDENTIALS is granted to nobody."""
    raise Forbidden(
        f"Permission denied: memproxy never returns stored credentials "
        f"(READ_{spec.kind.upper()}_CREDENTIALS is granted to no one)"
    )


# --- operations --------------------------------------------------------------------------------------


async def _records(gm: GoodMem, spec: KindSpec) -> list[ProviderModel]:
    found = await gm.svc.models.find([spec.kind], api="goodmem")
    return [ProviderModel.of_record(r) for r in found]


def filter_models(models: list[ProviderModel], query: ModelQuery) -> list[ProviderModel]:
    """``ownerId``, ``providerType`` and label filters narrow what the caller may read (never widen)."""
    out = models
    if query.provider_type:
        out = [m for m in out if m.view.get("providerType") == query.provider_type]
    if query.owner_id:
        out = [m for m in out if m.owner_id == query.owner_id]
    for key, value in query.labels.items():
        out = [m for m in out if m.labels.get(key) == value]
    return out


async def list_all(
    gm: GoodMem, principal: Principal, spec: KindSpec, builtins: list[ProviderModel], query: ModelQuery
) -> list[ProviderModel]:
    """Built-in models first (in configuration order), then the registered ones, newest first."""
    every = [*builtins, *await _records(gm, spec)]
    return filter_models(await _visible(gm, principal, every), query)


async def load_model(
    gm: GoodMem, principal: Principal, spec: KindSpec, model_id: str, builtins: list[ProviderModel]
) -> ProviderModel:
    """One model the caller may read: 404 when there is none, 403 when it is someone else's."""
    model = next((m for m in builtins if m.model_id == model_id), None)
    if model is None:
        record = await gm.svc.models.get(model_id, [spec.kind])
        if record is None or record.api != "goodmem":
            raise NotFound(f"{spec.noun} not found")
        model = ProviderModel.of_record(record)
    if not await _visible(gm, principal, [model]):
        raise Forbidden(f"Permission denied: cannot read this {spec.lower}")
    return model


async def _owner(gm: GoodMem, principal: Principal, spec: KindSpec, owner_id: str | None) -> str:
    owner = owner_id or principal.user_id
    if owner != principal.user_id:
        if not principal.is_admin:
            raise Forbidden(
                f"Permission denied: creating {spec.article} {spec.lower} for another owner requires an "
                "administrator"
            )
        if not await is_active_user(gm, owner):
            raise NotFound("Owner not found")
    return owner


async def _refuse_duplicate(gm: GoodMem, spec: KindSpec, fp: str, exclude: str | None = None) -> None:
    same = [r for r in await gm.svc.models.find([spec.kind], fingerprint=fp) if r.model_id != exclude]
    if same:
        raise Conflict(
            f"{spec.article.capitalize()} {spec.lower} with the same configuration already exists "
            f"({spec.id_field} {same[0].model_id})"
        )


async def create_model(
    gm: GoodMem, principal: Principal, spec: KindSpec, req: NewModel, taken: set[str]
) -> ProviderModel:
    """Register a provider model: checked, deduplicated, stored with its credential sealed. ``taken``: the
    ids of the built-in models (a client-chosen id may name none of them)."""
    owner = await _owner(gm, principal, spec, req.owner_id)
    spec.wire(req.provider_type, req.dialect)
    endpoint = canonical_url(req.endpoint_url)
    registry = gm.svc.models
    registry.check_endpoint(endpoint)
    model_id = req.model_id or new_id()
    exists = f"{spec.article.capitalize()} {spec.lower} with this ID already exists"
    if model_id in taken or await registry.get(model_id) is not None:
        raise Conflict(exists)
    now = now_ms()
    view: dict[str, Any] = {
        spec.id_field: model_id,
        "displayName": req.display_name,
        "providerType": req.provider_type,
        "endpointUrl": endpoint,
        "apiPath": req.api_path or spec.path_for(req.provider_type),
        "modelIdentifier": req.model_identifier,
        **req.fields,
        "supportedModalities": list(req.supported_modalities),
        "labels": dict(req.labels),
        "ownerId": owner,
        "createdAt": now,
        "updatedAt": now,
        "createdById": principal.user_id,
        "updatedById": principal.user_id,
    }
    for name, value in (
        ("description", req.description),
        ("version", req.version),
        ("monitoringEndpoint", req.monitoring_endpoint),
        ("dashscopeApiDialect", req.dialect),
    ):
        if value is not None:
            view[name] = value
    fp = fingerprint(spec, view, req.credentials)
    await _refuse_duplicate(gm, spec, fp)
    record = ModelRecord(
        model_id=model_id,
        kind=spec.kind,
        api="goodmem",
        owner_id=owner,
        created_at=now,
        updated_at=now,
        view=view,
        call=_call(spec, view, req.credentials),
        provider=req.provider_type,
        fingerprint=fp,
        credential=await registry.seal(model_id, req.credentials),
    )
    try:
        await registry.save(record, create=True)
    except Conflict:
        raise Conflict(exists) from None
    return ProviderModel.of_record(record)


async def _update_builtin(
    gm: GoodMem, principal: Principal, model: ProviderModel, req: ModelUpdate
) -> ProviderModel:
    """A built-in model: only its descriptive fields and labels change (an overlay); its identity is fixed
    by memproxy's configuration."""
    spec = model.spec
    for name, value in req.changes.items():
        if (
            name not in DESCRIPTIVE
            and value != model.view.get(name)
            and not (name == "apiPath" and not value)
        ):
            raise BadRequest(
                f"{name} of a built-in {spec.lower} cannot change: it is set by memproxy's start-up "
                f"configuration ({spec.flag}); register a provider model with POST /v1/{spec.kind}s instead"
            )
    if req.credentials is not None:
        raise BadRequest(f"a built-in {spec.lower} takes no credentials")
    overlay = (await overlays(gm, [model.model_id])).get(model.model_id) or {}
    for key, name in _OVERLAY.items():
        if name in DESCRIPTIVE and name in req.changes:
            overlay[key] = req.changes[name]
    overlay["labels"] = req.labels.apply(model.labels)
    overlay.update(embedder_id=model.model_id, updated_at=now_ms(), updated_by_id=principal.user_id)
    overlay.setdefault("created_at", model.view.get("createdAt"))
    await gm.docs.put(EMBEDDERS, model.model_id, overlay)
    return ProviderModel(spec, model.model_id, with_overlay(model.view, overlay), builtin=True)


async def update_model(
    gm: GoodMem,
    principal: Principal,
    model: ProviderModel,
    req: ModelUpdate,
    *,
    in_use: int | None = None,
) -> ProviderModel:
    """Apply a partial update. ``in_use`` (embedders: the spaces that use it) makes changing what defines
    its vectors a 412."""
    spec = model.spec
    if not may_change(principal, model):
        raise Forbidden(f"Permission denied: only the owner or an administrator may update this {spec.lower}")
    if req.provider_type is not None and req.provider_type != model.view.get("providerType"):
        raise BadRequest("providerType is immutable")
    if model.builtin:
        return await _update_builtin(gm, principal, model, req)
    registry = gm.svc.models
    record = await registry.get(model.model_id, [spec.kind])
    if record is None:
        raise NotFound(f"{spec.noun} not found")
    view = dict(record.view)
    for name, value in req.changes.items():
        if name == "apiPath" and not value:
            value = spec.path_for(str(view["providerType"]))
        if name == "endpointUrl":
            value = canonical_url(str(value))
        view[name] = value
    if in_use:
        changed = [
            k
            for k in ("dimensionality", "distributionType", "modelIdentifier")
            if view.get(k) != record.view.get(k)
        ]
        if changed:
            raise FailedPrecondition(
                f"Cannot change {', '.join(changed)} of an embedder in use by {in_use} space(s): their "
                "stored vectors were made by the current model"
            )
    view["labels"] = req.labels.apply(dict(record.view.get("labels") or {}))
    registry.check_endpoint(str(view["endpointUrl"]))
    credentials = req.credentials if req.credentials is not None else await registry.unseal(record)
    fp = fingerprint(spec, view, credentials)
    await _refuse_duplicate(gm, spec, fp, exclude=record.model_id)
    now = max(now_ms(), record.updated_at + 1)  # the version keys the registry's HTTP client
    view.update(updatedAt=now, updatedById=principal.user_id)
    sealed = record.credential
    if req.credentials is not None:
        sealed = await registry.seal(record.model_id, req.credentials)
    updated = ModelRecord(
        model_id=record.model_id,
        kind=record.kind,
        api=record.api,
        owner_id=record.owner_id,
        created_at=record.created_at,
        updated_at=now,
        view=view,
        call=_call(spec, view, credentials),
        provider=record.provider,
        fingerprint=fp,
        credential=sealed,
    )
    await registry.save(updated)
    return ProviderModel.of_record(updated)


async def delete_record(gm: GoodMem, principal: Principal, model: ProviderModel) -> None:
    """Remove a registered model (its sealed credential goes with it); built-in ones are 400."""
    spec = model.spec
    if model.builtin:
        raise BadRequest(
            f"A built-in {spec.lower} cannot be deleted through the API; remove its {spec.flag} flag "
            "from memproxy's configuration"
        )
    if not may_change(principal, model):
        raise Forbidden(f"Permission denied: only the owner or an administrator may delete this {spec.lower}")
    if not await gm.svc.models.remove(model.model_id):
        raise NotFound(f"{spec.noun} not found")
