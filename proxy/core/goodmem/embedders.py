"""GoodMem embedders = memproxy's local embedding models (the registry), and how GoodMem embeds a text.

The models are configured at start-up (the built-in default plus ``--embedder ID=PATH``); their ids are
stable. What a client may edit (display name, description, labels, version, monitoring endpoint) is kept in
``memproxy-goodmem-embedders``. Registering a remote endpoint is not supported: create answers 501 and says
how to register a local model; changing a local model's identity (model, dimensions, endpoint) is a 400.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.ids import NIL_UUID, now_ms
from proxy.core.goodmem.validation import LabelChange
from proxy.core.identity import Principal, require_admin
from proxy.core.tasks import gather
from proxy.errors import BadRequest, Conflict, NotFound, Unimplemented
from proxy.store.client import OpenSearchError
from proxy.store.goodmem import EMBEDDERS

if TYPE_CHECKING:  # proxy.embedding imports torch; pure core code must not pay for that
    from proxy.embedding import EmbedderInfo

__all__ = [
    "LOCAL_ENDPOINT",
    "LOCAL_PROVIDER",
    "REGISTER_HINT",
    "Embedder",
    "EmbedderUpdate",
    "NewEmbedder",
    "canonical_embedder_id",
    "create_embedder",
    "delete_embedder",
    "embed_text",
    "find_embedder",
    "get_embedder",
    "list_embedders",
    "resolve_embedder",
    "update_embedder",
]

# The closest provider of both generations' enums: a self-hosted sentence-transformers model, like TEI serves.
LOCAL_PROVIDER = "TEI"
LOCAL_ENDPOINT = "local://memproxy"
REGISTER_HINT = (
    "memproxy serves local embedding models only; register one at start-up with "
    "--embedder ID=PATH (a sentence-transformers model directory; env MEMPROXY_EMBEDDERS) "
    "and list them with GET /v1/embedders"
)


# --- the registry ------------------------------------------------------------------------------------------


def _infos(gm: GoodMem) -> list[EmbedderInfo]:
    return list(gm.embedders.infos())


def find_embedder(gm: GoodMem, embedder_id: str) -> EmbedderInfo | None:
    """The registry's EmbedderInfo for an id (or an alias the registry knows); None when unknown."""
    for info in _infos(gm):
        if str(info.id) == embedder_id or str(info.id).lower() == embedder_id.lower():
            return info
    try:
        found: Any = gm.embedders.get(embedder_id)
    except Exception:  # the registry's own "unknown embedder" error
        return None
    if found is None:
        return None
    wanted = str(getattr(found, "id", getattr(getattr(found, "info", None), "id", "")))
    return next((i for i in _infos(gm) if str(i.id) == wanted), None)


def resolve_embedder(gm: GoodMem, embedder_id: Any, *, missing: type[Exception] = BadRequest) -> EmbedderInfo:
    """The EmbedderInfo a space refers to; a space naming an unknown embedder is 400 'Embedder not found'."""
    if not isinstance(embedder_id, str) or not embedder_id:
        raise BadRequest("embedderId is required")
    info = find_embedder(gm, embedder_id)
    if info is None:
        raise missing("Embedder not found")
    return info


def canonical_embedder_id(gm: GoodMem, embedder_id: str) -> str:
    """The registry's id for an id or alias; unknown ids stay as given (and then match no space)."""
    info = find_embedder(gm, embedder_id)
    return str(info.id) if info is not None else embedder_id


async def embed_text(gm: GoodMem, embedder_ids: Iterable[str], text: str) -> dict[str, list[float]]:
    """``text`` embedded once by each distinct embedder, concurrently, by id (a full queue: 429)."""
    ids = list(dict.fromkeys(embedder_ids))

    vectors = await gather([gm.svc.embed_text(e, text) for e in ids])
    return dict(zip(ids, vectors, strict=True))


# --- the embedders as GoodMem shows them ---------------------------------------------------------------


@dataclass(frozen=True)
class Embedder:
    """A local model as a GoodMem embedder: the registry's facts, overlaid with what clients edited."""

    info: EmbedderInfo
    display_name: str
    description: str
    labels: dict[str, str]
    owner_id: str
    created_at: int
    updated_at: int
    updated_by_id: str
    version: Any = None
    monitoring_endpoint: Any = None

    provider_type = LOCAL_PROVIDER
    api_path = "/embed"
    distribution_type = "DENSE"

    @classmethod
    def of(
        cls, info: EmbedderInfo, overlay: Mapping[str, Any] | None, owner_id: str, created_at: int
    ) -> Embedder:
        ov = overlay or {}
        description = ov.get("description")
        if description is None:
            description = (
                f"Local model {info.model_path} ({info.pooling} pooling) on {info.device}/{info.dtype}"
            )
        return cls(
            info=info,
            display_name=ov.get("display_name") or str(info.name or info.id),
            description=description,
            labels=dict(ov.get("labels") or {}),
            owner_id=owner_id,
            created_at=int(ov.get("created_at") or created_at),
            updated_at=int(ov.get("updated_at") or created_at),
            updated_by_id=ov.get("updated_by_id") or owner_id,
            version=ov.get("version"),
            monitoring_endpoint=ov.get("monitoring_endpoint"),
        )

    @property
    def embedder_id(self) -> str:
        return str(self.info.id)

    @property
    def endpoint_url(self) -> str:
        return f"{LOCAL_ENDPOINT}/{self.info.id}"

    @property
    def model_identifier(self) -> str:
        return str(self.info.name or self.info.id)

    @property
    def dimensionality(self) -> int:
        return int(self.info.dimension)

    @property
    def max_sequence_length(self) -> int | None:
        max_tokens = getattr(self.info, "max_tokens", None)
        return int(max_tokens) if max_tokens else None

    def identity(self) -> dict[str, Any]:
        """What makes the model what it is, by its GoodMem field name (absent: None)."""
        return {
            "endpointUrl": self.endpoint_url,
            "apiPath": self.api_path,
            "modelIdentifier": self.model_identifier,
            "dimensionality": self.dimensionality,
            "distributionType": self.distribution_type,
            "maxSequenceLength": self.max_sequence_length,
        }


@dataclass(frozen=True)
class NewEmbedder:
    """``POST /v1/embedders``, validated (memproxy answers it with 409 or 501, never by registering)."""

    embedder_id: str | None = None


@dataclass(frozen=True)
class EmbedderUpdate:
    """``PUT /v1/embedders/{id}``, validated. ``provider_type`` and ``identity`` (GoodMem field name → value
    sent) may only repeat the current values; the descriptive fields replace theirs when not None."""

    provider_type: object = None
    identity: Mapping[str, object] = field(default_factory=dict)
    credentials: bool = False
    display_name: str | None = None
    description: str | None = None
    version: str | None = None
    monitoring_endpoint: str | None = None
    labels: LabelChange = field(default_factory=LabelChange)


async def _context(gm: GoodMem) -> tuple[str, int]:
    record = await gm.instance.get()
    if record is None:
        return NIL_UUID, now_ms()
    return str(record["root_user_id"]), int(record.get("created_at") or now_ms())


async def _overlays(gm: GoodMem, ids: list[str]) -> dict[str, dict[str, Any]]:
    try:
        return await gm.docs.mget(EMBEDDERS, ids)
    except OpenSearchError:
        return {}


async def list_embedders(
    gm: GoodMem,
    *,
    provider_type: str | None = None,
    owner_id: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[Embedder]:
    owner, created = await _context(gm)
    infos = _infos(gm)
    overlays = await _overlays(gm, [str(i.id) for i in infos])
    out = [Embedder.of(i, overlays.get(str(i.id)), owner, created) for i in infos]
    if provider_type:
        out = [e for e in out if e.provider_type == provider_type]
    if owner_id:
        out = [e for e in out if e.owner_id == owner_id]
    for key, value in (labels or {}).items():
        out = [e for e in out if e.labels.get(key) == value]
    return out


async def get_embedder(gm: GoodMem, embedder_id: str) -> Embedder:
    info = resolve_embedder(gm, embedder_id, missing=NotFound)
    owner, created = await _context(gm)
    overlay = (await _overlays(gm, [str(info.id)])).get(str(info.id))
    return Embedder.of(info, overlay, owner, created)


async def create_embedder(gm: GoodMem, principal: Principal, req: NewEmbedder) -> Embedder:
    """Registering remote endpoints is not supported: 409 for a local id, else 501 with how to add a model."""
    if req.embedder_id is not None and find_embedder(gm, req.embedder_id) is not None:
        raise Conflict("An embedder with this ID already exists")
    raise Unimplemented(REGISTER_HINT)


async def update_embedder(
    gm: GoodMem, principal: Principal, embedder_id: str, req: EmbedderUpdate
) -> Embedder:
    """Edit the descriptive attributes of a local embedder; its model identity is fixed."""
    require_admin(principal, "updating embedders")
    current = await get_embedder(gm, embedder_id)
    if req.provider_type not in (None, current.provider_type):
        raise BadRequest("providerType is immutable")
    have = current.identity()
    for name, value in req.identity.items():
        if value is not None and value != have.get(name):
            raise BadRequest(f"{name} of a local embedder cannot change; {REGISTER_HINT}")
    if req.credentials:
        raise BadRequest("local embedders take no credentials")
    overlay = (await _overlays(gm, [current.embedder_id])).get(current.embedder_id) or {}
    for name, value in (
        ("display_name", req.display_name),
        ("description", req.description),
        ("version", req.version),
        ("monitoring_endpoint", req.monitoring_endpoint),
    ):
        if value is not None:
            overlay[name] = value
    overlay["labels"] = req.labels.apply(current.labels)
    overlay.update(embedder_id=current.embedder_id, updated_at=now_ms(), updated_by_id=principal.user_id)
    overlay.setdefault("created_at", current.created_at)
    await gm.docs.put(EMBEDDERS, current.embedder_id, overlay)
    return await get_embedder(gm, current.embedder_id)


async def delete_embedder(gm: GoodMem, principal: Principal, embedder_id: str) -> None:
    """409 while a space uses it (as GoodMem); else 400: a local model is removed by its start-up flag."""
    require_admin(principal, "deleting embedders")
    info = resolve_embedder(gm, embedder_id, missing=NotFound)
    used = await gm.docs.containers_using_embedder(str(info.id))
    if used:
        raise Conflict(f"Embedder is in use by {used} space(s)")
    raise BadRequest(
        f"A local embedder cannot be deleted through the API; remove its --embedder flag. {REGISTER_HINT}"
    )
