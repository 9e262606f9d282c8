"""A container's ``configuration``: its defaults, cross-field rules and merging, with ml-commons' texts.

The configuration arrives typed (the OpenSearch slice parses ml-commons' wire object, GoodMem builds its own);
``complete_for_create`` fills the defaults and applies the cross-field rules of create; ``merge_update``
applies an update the way ``PUT /memory_containers/{id}`` does. Embedding models are memproxy's embedders:
``embedding_model_id`` names one in the registry and ``embedding_dimension`` must equal its dimension.
"""

from __future__ import annotations

import re
import secrets
import unicodedata
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.core.retention.policy import merge_policy
from proxy.errors import BadRequest, Forbidden, NotFound

__all__ = [
    "CONFIG_KEY_ORDER",
    "STRATEGY_TYPES",
    "check_embedding_dimension",
    "complete_for_create",
    "embedding_signature",
    "has_embedding",
    "merge_update",
    "new_strategy_id",
    "reject_retention_policy",
    "validate_backend_roles",
    "validate_index_prefix",
]

CONFIG_KEY_ORDER = (
    "index_prefix",
    "llm_id",
    "embedding_model_type",
    "embedding_model_id",
    "embedding_dimension",
    "max_infer_size",
    "strategies",
    "index_settings",
    "parameters",
    "disable_history",
    "disable_session",
    "use_system_index",
    "tenant_id",
    "retention_policy",
)

STRATEGY_TYPES = ("SEMANTIC", "USER_PREFERENCE", "SUMMARY")
DEFAULT_MAX_INFER_SIZE = 5

_RETENTION_DISABLED = (
    "Cannot set retention_policy: the memory retention feature is not enabled. To enable it, please update "
    "the cluster setting plugins.ml_commons.memory.retention_enabled"
)
_BACKEND_ROLE_CHARS = re.compile(r"^[\w:+=,.@\-/]+$", re.UNICODE)


def reject_retention_policy(cfg: Mapping[str, Any]) -> None:
    """Retention is off (ml-commons' default): a non-empty policy is refused as 3.8 refuses it."""
    if cfg.get("retention_policy"):
        raise Forbidden(_RETENTION_DISABLED)


def _policy(current: Mapping[str, Any] | None, parsed: Mapping[str, Any], retention_enabled: bool) -> Any:
    """The stored policy after create (``current`` None) or update; refused while retention is off."""
    if not retention_enabled:
        reject_retention_policy(parsed)
        return (current or {}).get("retention_policy")
    if "retention_policy" not in parsed:
        return (current or {}).get("retention_policy")
    return merge_policy((current or {}).get("retention_policy"), parsed["retention_policy"]) or None


def has_embedding(cfg: Mapping[str, Any]) -> bool:
    return bool(cfg.get("embedding_model_type")) and bool(cfg.get("embedding_model_id"))


def embedding_signature(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "embedding_model_id": cfg.get("embedding_model_id"),
        "embedding_model_type": cfg.get("embedding_model_type"),
        "dimension": cfg.get("embedding_dimension"),
    }


def _check_strategies_need_models(cfg: Mapping[str, Any]) -> None:
    if not cfg.get("strategies"):
        return
    missing_llm = not cfg.get("llm_id")
    missing_embedding = not (
        cfg.get("embedding_model_id")
        and cfg.get("embedding_model_type")
        and (
            cfg.get("embedding_dimension") is not None or cfg.get("embedding_model_type") == "SPARSE_ENCODING"
        )
    )
    if not (missing_llm or missing_embedding):
        return
    if missing_llm and missing_embedding:
        what = "LLM model and embedding model"
    elif missing_llm:
        what = "LLM model (llm_id)"
    else:
        what = "embedding model (embedding_model_id, embedding_model_type, dimension)"
    raise BadRequest(
        "Strategies require both an LLM model and embedding model to be configured. "
        f"Missing: {what}. Strategies use LLM for fact extraction and embedding model for semantic search."
    )


def _check_strategy_namespaces(cfg: Mapping[str, Any]) -> None:
    for strategy in cfg.get("strategies") or ():
        if not strategy.get("namespace"):
            raise BadRequest("Strategy namespace is required. Please provide a non-empty namespace array.")


def new_strategy_id(strategy_type: str) -> str:
    return f"{strategy_type.lower()}_{uuid.uuid4().hex[:8]}"


def _finish_strategy(strategy: Mapping[str, Any]) -> dict[str, Any]:
    """ml-commons' serialisation order: id, enabled, type, namespace, configuration."""
    out: dict[str, Any] = {
        "id": strategy.get("id") or new_strategy_id(strategy["type"]),
        "enabled": strategy.get("enabled", True),
        "type": strategy["type"],
        "namespace": list(strategy.get("namespace") or []),
    }
    if strategy.get("configuration") is not None:
        out["configuration"] = strategy["configuration"]
    return out


_INVALID_PREFIX_CHARS = ("\\", "/", "*", "?", '"', "<", ">", "|", " ", ",")


def validate_index_prefix(prefix: str) -> None:
    """ml-commons 3.4+ checks, plus lower case (ml-commons lets upper case through and fails later)."""
    if any(unicodedata.category(ch) == "Cc" for ch in prefix):
        raise BadRequest("Index prefix must not contain any control characters", os_type="parse_exception")

    def bad(why: str) -> BadRequest:
        return BadRequest(f"missing or invalid index prefix [{prefix}] {why}", os_type="parse_exception")

    if any(ch in prefix for ch in _INVALID_PREFIX_CHARS):
        raise bad('must not contain the following characters [ , ", *, \\, <, |, ,, >, /, ?]')
    if "#" in prefix:
        raise bad("must not contain '#'")
    if ":" in prefix:
        raise bad("must not contain ':'")
    if prefix[0] in "_-+":
        raise bad("must not start with '_', '-', or '+'")
    if prefix in {".", ".."}:
        raise bad("must not be '.' or '..'")
    if len(prefix.encode()) > 255:
        raise bad(f"index name is too long, ({len(prefix.encode())} > 255)")
    if prefix != prefix.lower():
        raise bad("must be lowercase")


def complete_for_create(parsed: Mapping[str, Any], *, retention_enabled: bool = False) -> dict[str, Any]:
    """Defaults and cross-field rules of create, in ml-commons' order; the stored key order. A
    ``retention_policy`` (parsed by :func:`proxy.core.retention.policy.parse_policy`) needs retention on."""
    cfg = dict(parsed)
    policy = _policy(None, cfg, retention_enabled)
    _check_strategies_need_models(cfg)
    _check_strategy_namespaces(cfg)
    use_system_index = cfg.get("use_system_index", True)
    prefix = cfg.get("index_prefix")
    if prefix is None or not prefix.strip():
        prefix = "default" if use_system_index else secrets.token_hex(4)
    validate_index_prefix(prefix)
    out: dict[str, Any] = {
        "index_prefix": prefix,
        "llm_id": cfg.get("llm_id"),
        "embedding_model_type": cfg.get("embedding_model_type"),
        "embedding_model_id": cfg.get("embedding_model_id"),
        "embedding_dimension": cfg.get("embedding_dimension"),
        "max_infer_size": cfg.get("max_infer_size", DEFAULT_MAX_INFER_SIZE) if cfg.get("llm_id") else None,
        "strategies": [_finish_strategy(s) for s in cfg.get("strategies") or ()],
        "index_settings": cfg.get("index_settings") or None,
        "parameters": cfg.get("parameters") or None,
        "disable_history": cfg.get("disable_history", False),
        "disable_session": cfg.get("disable_session", False),
        "use_system_index": use_system_index,
        "tenant_id": cfg.get("tenant_id"),
        "retention_policy": policy,
    }
    return _ordered(out)


def _ordered(cfg: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: cfg[k] for k in CONFIG_KEY_ORDER if cfg.get(k) is not None and cfg.get(k) not in ([], {})}
    for key in ("disable_history", "disable_session", "use_system_index"):
        out[key] = bool(cfg.get(key, False))
    return {k: out[k] for k in CONFIG_KEY_ORDER if k in out}


def check_embedding_dimension(cfg: Mapping[str, Any], dimension: int) -> None:
    """``embedding_dimension`` must equal the embedder's (the knn field is built from it)."""
    declared = cfg.get("embedding_dimension")
    if declared is not None and declared != dimension:
        raise BadRequest(
            f"Embedding dimension {declared} does not match the dimension of embedding model "
            f"{cfg.get('embedding_model_id')} ({dimension})"
        )


def _merge_strategies(current: list[dict[str, Any]], updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged = [dict(s) for s in current]
    for upd in updates:
        if upd.get("id") is None:
            if "type" not in upd:
                raise BadRequest("Invalid memory type: null. Must be SEMANTIC, USER_PREFERENCE, or SUMMARY")
            if not upd.get("namespace"):
                raise BadRequest(
                    "Strategy namespace is required. Please provide a non-empty namespace array."
                )
            merged.append(_finish_strategy(upd))
            continue
        target = next((s for s in merged if s.get("id") == upd["id"]), None)
        if target is None:
            raise NotFound(f"Strategy with id {upd['id']} not found")
        if "type" in upd and upd["type"] != target.get("type"):
            old, new = target.get("type"), upd["type"]
            raise BadRequest(f"Cannot change strategy type from {old} to {new} for strategy {upd['id']}")
        if "namespace" in upd:
            if not upd["namespace"]:
                raise BadRequest(
                    "Strategy namespace is required. Please provide a non-empty namespace array."
                )
            target["namespace"] = upd["namespace"]
        for key in ("enabled", "configuration"):
            if key in upd:
                target[key] = upd[key]
    return [_finish_strategy(s) for s in merged]


def merge_update(
    current: Mapping[str, Any], parsed: Mapping[str, Any], *, retention_enabled: bool = False
) -> dict[str, Any]:
    """The configuration after ``PUT /memory_containers/{id}``; fixed-after-create keys are ignored. A
    ``retention_policy`` merges type by type and field by field (``null`` removes it)."""
    cfg = dict(current)
    cfg["retention_policy"] = _policy(current, parsed, retention_enabled)
    if has_embedding(current) and any(
        key in parsed and parsed[key] != current.get(key)
        for key in ("embedding_model_type", "embedding_model_id", "embedding_dimension")
    ):
        sig = embedding_signature(current)
        raise BadRequest(
            "Cannot change embedding configuration once strategies are configured. The long-term memory "
            "index already exists with specific embedding mappings. Current: {"
            f"embedding_model_id={sig['embedding_model_id']}, "
            f"embedding_model_type={sig['embedding_model_type']}, dimension={sig['dimension']}"
            "}. Create a new memory container if you need different embedding configuration."
        )
    for key in ("embedding_model_type", "embedding_model_id", "embedding_dimension"):
        if key in parsed:
            cfg[key] = parsed[key]
    if "llm_id" in parsed:
        # ml-commons' constructor quirk: llm_id without max_infer_size resets it to the default.
        cfg["llm_id"] = parsed["llm_id"]
        cfg["max_infer_size"] = parsed.get("max_infer_size", DEFAULT_MAX_INFER_SIZE)
    if parsed.get("strategies"):
        cfg["strategies"] = _merge_strategies(list(current.get("strategies") or []), parsed["strategies"])
    _check_strategies_need_models(cfg)
    return _ordered(cfg)


def validate_backend_roles(roles: Sequence[str]) -> list[str]:
    values = list(roles)
    for role in values:
        if not role.strip():
            raise BadRequest("Backend role cannot be empty or blank", os_type="parse_exception")
        if len(role) > 128:
            raise BadRequest(
                f"Backend role exceeds maximum length of 128 characters: {role}", os_type="parse_exception"
            )
        if not _BACKEND_ROLE_CHARS.match(role):
            raise BadRequest(
                "Backend role contains invalid characters. Only alphanumeric characters and :+=,.@-_/ are "
                f"allowed: {role}",
                os_type="parse_exception",
            )
    return values
