"""GoodMem embedders = memproxy's local embedding models (the registry), presented as EmbedderResponse.

The models are configured at start-up (the built-in default plus ``--embedder ID=PATH``); their ids are
stable. What a client may edit (display name, description, labels, version, monitoring endpoint) is kept in
``memproxy-goodmem-embedders``. Registering a remote endpoint is not supported: create answers 501 and says
how to register a local model; changing a local model's identity (model, dimensions, endpoint) is a 400.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.core.goodmem import instance
from proxy.core.goodmem._svc import Svc, now_ms
from proxy.core.goodmem.auth import Principal, require_admin
from proxy.core.goodmem.validation import apply_labels
from proxy.errors import BadRequest, Conflict, NotFound, Unimplemented
from proxy.store import goodmem as gstore
from proxy.store.client import OpenSearchError

__all__ = [
    "LOCAL_ENDPOINT",
    "LOCAL_PROVIDER",
    "create_embedder",
    "delete_embedder",
    "embedder_json",
    "find_embedder",
    "get_embedder",
    "list_embedders",
    "resolve_embedder",
    "update_embedder",
]

# The closest provider of both generations' enums: a self-hosted sentence-transformers model, like TEI serves.
LOCAL_PROVIDER = "TEI"
LOCAL_ENDPOINT = "local://memproxy"
NIL_UUID = "00000000-0000-0000-0000-000000000000"
_EDITABLE = ("displayName", "description", "version", "monitoringEndpoint")
_IDENTITY = (
    "endpointUrl",
    "apiPath",
    "modelIdentifier",
    "dimensionality",
    "distributionType",
    "maxSequenceLength",
)
REGISTER_HINT = (
    "memproxy serves local embedding models only; register one at start-up with "
    "--embedder ID=PATH (a sentence-transformers model directory; env MEMPROXY_EMBEDDERS) "
    "and list them with GET /v1/embedders"
)


def _infos(svc: Svc) -> list[Any]:
    return list(svc.embedders.infos())


def find_embedder(svc: Svc, embedder_id: str) -> Any | None:
    """The registry's EmbedderInfo for an id (or an alias the registry knows); None when unknown."""
    for info in _infos(svc):
        if str(info.id) == embedder_id or str(info.id).lower() == embedder_id.lower():
            return info
    try:
        found = svc.embedders.get(embedder_id)
    except Exception:  # the registry's own "unknown embedder" error
        return None
    if found is None:
        return None
    wanted = str(getattr(found, "id", getattr(getattr(found, "info", None), "id", "")))
    return next((i for i in _infos(svc) if str(i.id) == wanted), None)


def resolve_embedder(svc: Svc, embedder_id: Any, *, missing: type[Exception] = BadRequest) -> Any:
    """The EmbedderInfo a space refers to; a space naming an unknown embedder is 400 'Embedder not found'."""
    if not isinstance(embedder_id, str) or not embedder_id:
        raise BadRequest("embedderId is required")
    info = find_embedder(svc, embedder_id)
    if info is None:
        raise missing("Embedder not found")
    return info


def embedder_json(
    info: Any, overlay: Mapping[str, Any] | None, owner_id: str, created_at: int
) -> dict[str, Any]:
    """EmbedderResponse with both generations' required fields."""
    ov = overlay or {}
    out: dict[str, Any] = {
        "embedderId": str(info.id),
        "displayName": ov.get("display_name") or str(info.name or info.id),
        "providerType": LOCAL_PROVIDER,
        "endpointUrl": f"{LOCAL_ENDPOINT}/{info.id}",
        "apiPath": "/embed",
        "modelIdentifier": str(info.name or info.id),
        "dimensionality": int(info.dimension),
        "distributionType": "DENSE",
        "supportedModalities": ["TEXT"],
        "labels": dict(ov.get("labels") or {}),
        "ownerId": owner_id,
        "createdAt": int(ov.get("created_at") or created_at),
        "updatedAt": int(ov.get("updated_at") or created_at),
        "createdById": owner_id,
        "updatedById": ov.get("updated_by_id") or owner_id,
    }
    if getattr(info, "max_tokens", None):
        out["maxSequenceLength"] = int(info.max_tokens)
    description = ov.get("description")
    if description is None:
        description = f"Local model {info.model_path} ({info.pooling} pooling) on {info.device}/{info.dtype}"
    out["description"] = description
    for src, dst in (("version", "version"), ("monitoring_endpoint", "monitoringEndpoint")):
        if ov.get(src) is not None:
            out[dst] = ov[src]
    return out


async def _context(svc: Svc) -> tuple[str, int]:
    record = await instance.instance_record(svc)
    if record is None:
        return NIL_UUID, now_ms()
    return str(record["root_user_id"]), int(record.get("created_at") or now_ms())


async def _overlays(svc: Svc, ids: list[str]) -> dict[str, dict[str, Any]]:
    try:
        return await gstore.mget(svc.store, gstore.EMBEDDERS, ids)
    except OpenSearchError:
        return {}


async def list_embedders(
    svc: Svc,
    *,
    provider_type: str | None = None,
    owner_id: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    owner, created = await _context(svc)
    infos = _infos(svc)
    overlays = await _overlays(svc, [str(i.id) for i in infos])
    out = [embedder_json(i, overlays.get(str(i.id)), owner, created) for i in infos]
    if provider_type:
        out = [e for e in out if e["providerType"] == provider_type]
    if owner_id:
        out = [e for e in out if e["ownerId"] == owner_id]
    for key, value in (labels or {}).items():
        out = [e for e in out if e["labels"].get(key) == value]
    return out


async def get_embedder(svc: Svc, embedder_id: str) -> dict[str, Any]:
    info = resolve_embedder(svc, embedder_id, missing=NotFound)
    owner, created = await _context(svc)
    overlay = (await _overlays(svc, [str(info.id)])).get(str(info.id))
    return embedder_json(info, overlay, owner, created)


def _validate_create(body: Mapping[str, Any]) -> None:
    for field in ("displayName", "providerType", "endpointUrl", "modelIdentifier"):
        if not isinstance(body.get(field), str) or not body[field]:
            raise BadRequest(f"{field} is required")
    dims = body.get("dimensionality")
    if isinstance(dims, bool) or not isinstance(dims, int) or dims <= 0:
        raise BadRequest("dimensionality is required and must be a positive integer")
    if body.get("distributionType", "DENSE") not in ("DENSE", "SPARSE"):
        raise BadRequest("distributionType must be DENSE or SPARSE")


async def create_embedder(svc: Svc, principal: Principal, body: Mapping[str, Any]) -> dict[str, Any]:
    """Registering remote endpoints is not supported: 409 for a local id, else 501 with how to add a model."""
    if isinstance(body.get("embedderId"), str) and find_embedder(svc, body["embedderId"]) is not None:
        raise Conflict("An embedder with this ID already exists")
    _validate_create(body)
    raise Unimplemented(REGISTER_HINT)


async def update_embedder(
    svc: Svc, principal: Principal, embedder_id: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    """Edit the descriptive attributes of a local embedder; its model identity is fixed."""
    require_admin(principal, "updating embedders")
    current = await get_embedder(svc, embedder_id)
    if body.get("providerType") not in (None, current["providerType"]):
        raise BadRequest("providerType is immutable")
    for field in _IDENTITY:
        if body.get(field) is not None and body[field] != current.get(field):
            raise BadRequest(f"{field} of a local embedder cannot change; {REGISTER_HINT}")
    if body.get("credentials") is not None:
        raise BadRequest("local embedders take no credentials")
    overlay = (await _overlays(svc, [current["embedderId"]])).get(current["embedderId"]) or {}
    for field in _EDITABLE:
        if body.get(field) is not None:
            if not isinstance(body[field], str) or (
                field == "displayName" and not 1 <= len(body[field]) <= 255
            ):
                raise BadRequest(
                    f"{field} must be a string" + (" of 1..255 characters" if field == "displayName" else "")
                )
            overlay[_snake(field)] = body[field]
    overlay["labels"] = apply_labels(current["labels"], body.get("replaceLabels"), body.get("mergeLabels"))
    now = now_ms()
    overlay.update(embedder_id=current["embedderId"], updated_at=now, updated_by_id=principal.user_id)
    overlay.setdefault("created_at", current["createdAt"])
    await gstore.index_doc(svc.store, gstore.EMBEDDERS, current["embedderId"], overlay)
    return await get_embedder(svc, current["embedderId"])


async def delete_embedder(svc: Svc, principal: Principal, embedder_id: str) -> None:
    """409 while a space uses it (as GoodMem); otherwise 400: a local model is removed by its start-up
    flag."""
    require_admin(principal, "deleting embedders")
    info = resolve_embedder(svc, embedder_id, missing=NotFound)
    from proxy.store.containers import CONTAINER_INDEX

    try:
        res = await svc.store.request(
            "POST",
            f"/{CONTAINER_INDEX}/_count",
            body={"query": {"term": {"configuration.embedding_model_id": str(info.id)}}},
            params={"ignore_unavailable": "true"},
        )
        used = int(res.get("count", 0))
    except OpenSearchError:
        used = 0
    if used:
        raise Conflict(f"Embedder is in use by {used} space(s)")
    raise BadRequest(
        f"A local embedder cannot be deleted through the API; remove its --embedder flag. {REGISTER_HINT}"
    )


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)
