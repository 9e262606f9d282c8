"""GoodMem embedders: memproxy's local models and the provider models clients register, and how a space
finds and uses one.

* Built-in: the local sentence-transformers models (the default one plus ``--embedder ID=PATH``) and the
  remote models named at start-up (``--embedder ID=URL#...``), listed with their stable ids; their identity
  is fixed, their descriptive fields editable (``proxy.core.goodmem.providers``), they cannot be deleted.
* Registered: ``POST /v1/embedders`` stores a provider model (OpenAI-compatible, TEI or Cohere wire) in the
  model registry; a space on it embeds through the registry (``svc.models.embedding_model``), at ingest and
  at retrieval alike.

A space checks its embedders when it is created: each must exist and be readable by the caller, and a remote
one is asked for one vector, so that a declared ``dimensionality`` the endpoint does not produce is refused
then (400) rather than found at search time. Deleting an embedder a space uses is 409; changing what defines
its vectors (``dimensionality``, ``distributionType``, ``modelIdentifier``) is 412.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.core.containers import list_containers
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.providers import (
    EMBEDDER,
    ModelQuery,
    ModelUpdate,
    NewModel,
    ProviderModel,
    create_model,
    delete_record,
    instance_context,
    list_all,
    load_model,
    overlays,
    startup_models,
    update_model,
    with_overlay,
)
from proxy.core.identity import Principal
from proxy.core.tasks import gather
from proxy.errors import BadRequest, Conflict, Forbidden, NotFound
from proxy.ids import is_uuid
from proxy.models import ProviderBadAnswer

if TYPE_CHECKING:  # proxy.embedding imports torch; pure core code must not pay for that
    from proxy.embedding import EmbedderInfo

__all__ = [
    "LOCAL_ENDPOINT",
    "LOCAL_PROVIDER",
    "EmbedderRef",
    "builtin_embedders",
    "canonical_embedder_id",
    "create_embedder",
    "delete_embedder",
    "embed_query",
    "find_local",
    "get_embedder",
    "list_embedders",
    "resolve_embedder",
    "spaces_using",
    "update_embedder",
    "verify_embedder",
]

# The closest provider of both generations' enums: a self-hosted sentence-transformers model, like TEI serves.
LOCAL_PROVIDER = "TEI"
LOCAL_ENDPOINT = "local://memproxy"
_LIST_BATCH = 1000


# --- finding an embedder -------------------------------------------------------------------------------


def find_local(gm: GoodMem, embedder_id: str) -> EmbedderInfo | None:
    """The local model for an id (or an alias the local registry knows); None when it is not local."""
    for info in gm.embedders.infos():
        if str(info.id) == embedder_id or str(info.id).lower() == embedder_id.lower():
            return info
    try:
        found: Any = gm.embedders.get(embedder_id)
    except Exception:  # the local registry's own "unknown embedder" error
        return None
    wanted = str(getattr(found, "id", getattr(getattr(found, "info", None), "id", "")))
    return next((i for i in gm.embedders.infos() if str(i.id) == wanted), None)


def canonical_embedder_id(gm: GoodMem, embedder_id: str) -> str:
    """The id a space stores for an id or alias: a local model's alias becomes its id; a registered or
    start-up model's id is its own canonical form (a UUID in canonical spelling)."""
    info = find_local(gm, embedder_id)
    if info is not None:
        return str(info.id)
    return str(uuid.UUID(embedder_id)) if is_uuid(embedder_id) else embedder_id


@dataclass(frozen=True)
class EmbedderRef:
    """An embedder a space names, resolved: its canonical id and vector length."""

    embedder_id: str
    dimension: int
    local: bool


async def verify_embedder(gm: GoodMem, ref: EmbedderRef) -> None:
    """Ask a remote embedder for one vector: its length must be the declared dimensionality."""
    model = await gm.svc.models.embedding_model(ref.embedder_id)
    try:
        vectors = await model.embed(["dimensionality check"])
    except ProviderBadAnswer as exc:
        raise BadRequest(
            f"Embedder {ref.embedder_id} does not answer as registered (dimensionality {ref.dimension}): "
            f"{exc.message}"
        ) from None
    if len(vectors) != 1 or len(vectors[0]) != ref.dimension:
        got = len(vectors[0]) if vectors else 0
        raise BadRequest(
            f"Embedder {ref.embedder_id} declares dimensionality {ref.dimension} but its endpoint answers "
            f"{got}-dimensional vectors"
        )


async def resolve_embedder(
    gm: GoodMem,
    embedder_id: Any,
    *,
    principal: Principal | None = None,
    missing: type[Exception] = BadRequest,
) -> EmbedderRef:
    """The embedder a space names: local, start-up or registered. Unknown: ``missing`` 'Embedder not
    found' (400 for a space, as live servers answer); one the caller may not read: 403."""
    if not isinstance(embedder_id, str) or not embedder_id:
        raise BadRequest("embedderId is required")
    info = find_local(gm, embedder_id)
    if info is not None:
        return EmbedderRef(str(info.id), int(info.dimension), local=True)
    wanted = canonical_embedder_id(gm, embedder_id)
    registry = gm.svc.models
    startup = registry.startup.get(wanted)
    if startup is not None and startup.kind == "embedder":
        ref = EmbedderRef(wanted, int(startup.call.dimension or 0), local=False)
    else:
        record = await registry.get(wanted, ["embedder"])
        if record is None or record.api != "goodmem":
            raise missing("Embedder not found")
        if principal is not None:
            try:
                await load_model(gm, principal, EMBEDDER, wanted, [])
            except Forbidden:
                raise Forbidden(f"Permission denied: cannot use embedder {wanted}") from None
        if record.view.get("distributionType") == "SPARSE":
            raise BadRequest(f"Embedder {wanted} is SPARSE; memproxy spaces store dense vectors only")
        ref = EmbedderRef(wanted, int(record.view["dimensionality"]), local=False)
    return ref


async def embed_query(gm: GoodMem, embedder_ids: Iterable[str], text: str) -> dict[str, list[float]]:
    """A retrieve's query embedded once by each distinct embedder, concurrently, by id (a full queue:
    429)."""
    ids = list(dict.fromkeys(embedder_ids))
    vectors = await gather([gm.svc.embed_query(e, text) for e in ids])
    return dict(zip(ids, vectors, strict=True))


async def spaces_using(gm: GoodMem, embedder_id: str) -> int:
    """How many spaces embed with ``embedder_id``, in any position of their embedder list."""
    first = await gm.docs.containers_using_embedder(embedder_id)
    if first:
        return first
    # A space's further embedders live in its ``goodmem`` object, which is stored but not indexed.
    count = 0
    after: list[Any] | None = None
    while True:
        page = await list_containers(gm.svc, size=_LIST_BATCH, search_after=after)
        count += sum(1 for c in page.containers if embedder_id in [e for _, e in c.vector_fields()])
        if len(page.containers) < _LIST_BATCH or page.next_search_after is None:
            return count
        after = page.next_search_after


# --- the embedders as GoodMem shows them -----------------------------------------------------------------


def _local_view(info: EmbedderInfo) -> dict[str, Any]:
    view: dict[str, Any] = {
        "embedderId": str(info.id),
        "displayName": str(info.name or info.id),
        "description": (
            f"Local model {info.model_path} ({info.pooling} pooling) on {info.device}/{info.dtype}"
        ),
        "providerType": LOCAL_PROVIDER,
        "endpointUrl": f"{LOCAL_ENDPOINT}/{info.id}",
        "apiPath": "/embed",
        "modelIdentifier": str(info.name or info.id),
        "dimensionality": int(info.dimension),
        "distributionType": "DENSE",
    }
    max_tokens = getattr(info, "max_tokens", None)
    if max_tokens:
        view["maxSequenceLength"] = int(max_tokens)
    view["supportedModalities"] = ["TEXT"]
    return view


async def builtin_embedders(gm: GoodMem) -> list[ProviderModel]:
    """The local models, then the start-up remote ones, with the edits clients made."""
    owner, created = await instance_context(gm)
    local = [
        ProviderModel(
            EMBEDDER,
            str(info.id),
            {
                **_local_view(info),
                "labels": {},
                "ownerId": owner,
                "createdAt": created,
                "updatedAt": created,
                "createdById": owner,
                "updatedById": owner,
            },
            builtin=True,
        )
        for info in gm.embedders.infos()
    ]
    models = [*local, *await startup_models(gm, EMBEDDER, owner, created)]
    edits = await overlays(gm, [m.model_id for m in models])
    return [
        ProviderModel(EMBEDDER, m.model_id, with_overlay(m.view, edits.get(m.model_id)), builtin=True)
        for m in models
    ]


async def list_embedders(gm: GoodMem, principal: Principal, query: ModelQuery) -> list[ProviderModel]:
    return await list_all(gm, principal, EMBEDDER, await builtin_embedders(gm), query)


async def get_embedder(gm: GoodMem, principal: Principal, embedder_id: str) -> ProviderModel:
    return await load_model(
        gm, principal, EMBEDDER, canonical_embedder_id(gm, embedder_id), await builtin_embedders(gm)
    )


async def create_embedder(gm: GoodMem, principal: Principal, req: NewModel) -> ProviderModel:
    """Register a provider embedder (201); a client-chosen id that names a local model or anything in the
    registry is 409, and so is the same configuration registered again."""
    builtins = await builtin_embedders(gm)
    taken = {m.model_id for m in builtins}
    if req.model_id is not None and find_local(gm, req.model_id) is not None:
        raise Conflict("An embedder with this ID already exists")
    return await create_model(gm, principal, EMBEDDER, req, taken)


async def update_embedder(
    gm: GoodMem, principal: Principal, current: ProviderModel, req: ModelUpdate
) -> ProviderModel:
    """Update an embedder the caller could read (``get_embedder``: a 404 or 403 comes before the body's
    400)."""
    used = None
    if not current.builtin and any(
        k in req.changes for k in ("dimensionality", "distributionType", "modelIdentifier")
    ):
        used = await spaces_using(gm, current.model_id)
    return await update_model(gm, principal, current, req, in_use=used)


async def delete_embedder(gm: GoodMem, principal: Principal, embedder_id: str) -> None:
    """409 while a space uses it (as GoodMem); a built-in model is 400 (remove its start-up flag)."""
    try:
        current = await get_embedder(gm, principal, embedder_id)
    except NotFound:
        raise NotFound("Embedder not found") from None
    if current.builtin and not principal.is_admin:
        raise Forbidden("Permission denied: deleting embedders requires an administrator")
    used = await spaces_using(gm, current.model_id)
    if used:
        raise Conflict(f"Embedder is in use by {used} space(s)")
    await delete_record(gm, principal, current)
