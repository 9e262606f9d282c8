"""``POST /v1/access-policy:check``: would the caller be allowed these operations, right now?

Every answer comes from the rule the operation's own route applies, called the same way (a read through the
route's loader, which raises 404 or 403; then the route's own predicate), so a check can never disagree with
the route it predicts. As in GoodMem, a missing target and a denial are both ``false``, and the answers are
advisory: the route checks again when it is called.

Targets memproxy does not have (service identities, decision models, extensions, log policies) do not exist,
so every check on one is ``false``; so is every operation memproxy does not serve (role administration,
instance ownership transfer), and reading stored credentials, which memproxy grants to no one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.core.goodmem import apikeys, embedders, memories, models, spaces, users
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.providers import EMBEDDER, LLM, RERANKER, KindSpec, ProviderModel, may_change
from proxy.core.identity import SPACE_OPS, Principal, can_access_space
from proxy.errors import BadRequest, Forbidden, NotFound

__all__ = ["MAX_CHECKS", "OPERATIONS", "RESOURCE_KINDS", "UNCHECKABLE", "AccessCheck", "check_access"]

MAX_CHECKS = 50
_CRUDL = ("CREATE", "READ", "UPDATE", "DELETE", "LIST")


def _each(verbs: Sequence[str], noun: str) -> tuple[str, ...]:
    return tuple(f"{verb}_{noun}" for verb in verbs)


# GoodMem's operations (the Gen B SDK's ``Operation``), as a check may name them.
OPERATIONS = frozenset(
    {
        *_each(_CRUDL, "USER"),
        "MANAGE_USER_ENROLLMENT",
        *_each(_CRUDL, "SERVICE_IDENTITY"),
        *_each(_CRUDL, "SPACE"),
        *_each(_CRUDL, "API_KEY"),
        *(
            op
            for noun in ("EMBEDDER", "RERANKER", "LLM", "DECISION_MODEL")
            for op in (*_each(_CRUDL, noun), f"PING_{noun}", f"EXECUTE_{noun}", f"READ_{noun}_CREDENTIALS")
        ),
        "PROXY_INFERENCE_TARGET",
        "OCR_DOCUMENT",
        *_each(("CREATE", "READ", "DELETE", "LIST"), "MEMORY"),
        *_each(_CRUDL, "EXTENSION"),
        "DOWNLOAD_EXTENSION",
        "READ_INSTANCE",
        "TRANSFER_INSTANCE_OWNERSHIP",
        "TRANSFER_RESOURCE_OWNERSHIP",
        "RELOAD_LICENSE",
        "DRAIN_SERVER",
        "PURGE_BACKGROUND_JOBS",
        *_each(("CREATE", "READ", "LIST", "DELETE"), "RETRIEVE_MEMORY_LOG_POLICY"),
        "MANAGE_ACCESS",
    }
)
# GoodMem refuses to check it (its list rule has no instance-wide preflight): a 400, not an answer.
UNCHECKABLE = frozenset({"LIST_RETRIEVE_MEMORY_LOG_POLICY"})
RESOURCE_KINDS = (
    "INSTANCE",
    "USER",
    "SERVICE_IDENTITY",
    "SPACE",
    "API_KEY",
    "EMBEDDER",
    "RERANKER",
    "LLM",
    "DECISION_MODEL",
    "MEMORY",
    "EXTENSION",
    "RETRIEVE_MEMORY_LOG_POLICY",
)
# Instance-level operations: any authenticated caller may (for what is their own: their spaces, keys and
# models; the user list shows a non-administrator only themselves), or administrators only.
_ANYONE = frozenset(
    {
        "READ_INSTANCE",
        "CREATE_SPACE",
        "LIST_SPACE",
        "CREATE_API_KEY",
        "LIST_API_KEY",
        "LIST_USER",
        "CREATE_EMBEDDER",
        "LIST_EMBEDDER",
        "CREATE_RERANKER",
        "LIST_RERANKER",
        "CREATE_LLM",
        "LIST_LLM",
        "OCR_DOCUMENT",
    }
)
_ADMINS = frozenset({"CREATE_USER", "MANAGE_ACCESS", "PURGE_BACKGROUND_JOBS"})
_MODEL_KINDS: dict[str, KindSpec] = {"EMBEDDER": EMBEDDER, "RERANKER": RERANKER, "LLM": LLM}


@dataclass(frozen=True)
class AccessCheck:
    """One check, validated: an operation on a target (``resource_id`` None only for INSTANCE)."""

    operation: str
    kind: str
    resource_id: str | None = None


async def check_access(gm: GoodMem, principal: Principal, checks: Sequence[AccessCheck]) -> list[bool]:
    """The answers, in the order of ``checks``."""
    return [await _allowed(gm, principal, c) for c in checks]


async def _allowed(gm: GoodMem, principal: Principal, check: AccessCheck) -> bool:
    try:
        return await _decide(gm, principal, check)
    except (NotFound, Forbidden, BadRequest):  # the route's loader: no such target (a malformed id names
        return False  # none), or not the caller's to touch


async def _decide(gm: GoodMem, principal: Principal, check: AccessCheck) -> bool:
    op, kind, rid = check.operation, check.kind, check.resource_id
    if kind == "INSTANCE":
        return op in _ANYONE or (op in _ADMINS and principal.is_admin)
    if rid is None:
        return False
    if kind == "SPACE":
        container = await spaces.get_space(gm, rid)
        if op == "TRANSFER_RESOURCE_OWNERSHIP":
            return spaces.may_transfer(
                principal, spaces.Space.of(container, await gm.instance.root_user_id())
            )
        return op in SPACE_OPS and await can_access_space(gm, principal, container, op)
    if kind == "MEMORY":
        if op not in ("READ_MEMORY", "DELETE_MEMORY"):
            return False
        await memories.load_memory(gm, principal, rid, op)
        return True
    if kind in _MODEL_KINDS:
        return await _model_allowed(gm, principal, _MODEL_KINDS[kind], op, rid)
    if kind == "USER":
        if op not in ("READ_USER", "UPDATE_USER", "DELETE_USER"):
            return False
        await users.get_user(gm, principal, rid)  # reading, updating: oneself, or an administrator
        return op != "DELETE_USER" or principal.is_admin
    if kind == "API_KEY":
        if op not in ("READ_API_KEY", "UPDATE_API_KEY", "DELETE_API_KEY"):
            return False
        await apikeys.get_api_key(gm, principal, rid)  # all three: the key's subject or owner, or an admin
        return True
    return False


async def _model_allowed(gm: GoodMem, principal: Principal, spec: KindSpec, op: str, model_id: str) -> bool:
    noun = spec.kind.upper()
    if op not in {f"{verb}_{noun}" for verb in ("READ", "UPDATE", "DELETE", "PING", "EXECUTE")}:
        return False  # READ_<X>_CREDENTIALS included: memproxy returns stored credentials to no one
    model: ProviderModel
    if spec is EMBEDDER:
        model = await embedders.get_embedder(gm, principal, model_id)
    else:
        model = await models.get_model(gm, principal, spec, model_id)
    if op.startswith("UPDATE_"):
        return may_change(principal, model)
    if op.startswith("DELETE_"):
        # A start-up model is removed from memproxy's configuration, never through the API.
        return not model.builtin and may_change(principal, model)
    return True  # reading, pinging and using a model all follow its read rule
