"""GoodMem rerankers and LLMs: the provider models clients register (``/v1/rerankers``, ``/v1/llms``),
listed beside memproxy's built-in ones (local cross-encoders, ``--reranker`` and ``--llm`` start-up models).

Both are registry records (``proxy.core.goodmem.providers``); retrieval's post-processor reaches them by id
through the registry (``svc.models.rerank_model`` / ``chat_model``). An LLM always has ``capabilities``:
when the client gives none (or leaves flags out) they are inferred from the provider, and creation reports
that with an ``LLM_CAPABILITY_INFERRED`` status, as GoodMem does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.providers import (
    LLM,
    RERANKER,
    KindSpec,
    ModelQuery,
    ModelUpdate,
    NewModel,
    ProviderModel,
    create_model,
    delete_record,
    inferred_capabilities,
    instance_context,
    list_all,
    load_model,
    overlays,
    startup_models,
    update_model,
    with_overlay,
)
from proxy.core.identity import Principal

__all__ = [
    "CreatedLLM",
    "Status",
    "builtin_models",
    "create_llm",
    "create_reranker",
    "delete_model",
    "get_model",
    "list_models",
    "update_model_of",
]


@dataclass(frozen=True)
class Status:
    """A GoodMemStatus: a non-fatal note on what the server did."""

    code: str
    message: str


@dataclass(frozen=True)
class CreatedLLM:
    llm: ProviderModel
    statuses: list[Status] = field(default_factory=list)


async def builtin_models(gm: GoodMem, spec: KindSpec) -> list[ProviderModel]:
    owner, created = await instance_context(gm)
    models = await startup_models(gm, spec, owner, created)
    edits = await overlays(gm, [m.model_id for m in models])
    return [
        ProviderModel(spec, m.model_id, with_overlay(m.view, edits.get(m.model_id)), builtin=True)
        for m in models
    ]


async def list_models(
    gm: GoodMem, principal: Principal, spec: KindSpec, query: ModelQuery
) -> list[ProviderModel]:
    return await list_all(gm, principal, spec, await builtin_models(gm, spec), query)


async def get_model(gm: GoodMem, principal: Principal, spec: KindSpec, model_id: str) -> ProviderModel:
    return await load_model(gm, principal, spec, model_id, await builtin_models(gm, spec))


async def _taken(gm: GoodMem, spec: KindSpec) -> set[str]:
    return {m.model_id for m in await builtin_models(gm, spec)}


async def create_reranker(gm: GoodMem, principal: Principal, req: NewModel) -> ProviderModel:
    return await create_model(gm, principal, RERANKER, req, await _taken(gm, RERANKER))


async def create_llm(gm: GoodMem, principal: Principal, req: NewModel) -> CreatedLLM:
    """Register an LLM; ``capabilities`` the client left out are inferred and said so in ``statuses``."""
    given: dict[str, Any] = dict(req.fields.get("capabilities") or {})
    inferred = inferred_capabilities(req.provider_type)
    missing = [k for k in inferred if given.get(k) is None]
    capabilities = {k: given[k] if given.get(k) is not None else inferred[k] for k in inferred}
    statuses: list[Status] = []
    if missing:
        statuses.append(
            Status(
                "LLM_CAPABILITY_INFERRED",
                f"capabilities {', '.join(missing)} were not given; inferred from providerType "
                f"{req.provider_type} (an OpenAI-compatible chat endpoint)",
            )
        )
    req = replace(req, fields={**req.fields, "capabilities": capabilities})
    llm = await create_model(gm, principal, LLM, req, await _taken(gm, LLM))
    return CreatedLLM(llm, statuses)


async def update_model_of(
    gm: GoodMem, principal: Principal, current: ProviderModel, req: ModelUpdate
) -> ProviderModel:
    """Update a model the caller could read (``get_model``: a 404 or 403 comes before the body's 400)."""
    return await update_model(gm, principal, current, req)


async def delete_model(gm: GoodMem, principal: Principal, spec: KindSpec, model_id: str) -> None:
    await delete_record(gm, principal, await get_model(gm, principal, spec, model_id))
