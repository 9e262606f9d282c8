"""ml-commons' ``configuration`` object of a container request, read as its constructor reads it.

:func:`parse_configuration` keeps the recognised keys, each read leniently (:mod:`.lenient`) and checked on
its own, plus the rules ml-commons' constructor applies to one object; the defaults and the rules that need
the stored container (create's cross-field rules, the merge of an update) are the core's
(:mod:`proxy.core.configuration`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.api.opensearch_memory.lenient import as_bool, as_int, as_object, as_str, as_str_list, token_error
from proxy.core.configuration import STRATEGY_TYPES
from proxy.core.retention.policy import parse_policy
from proxy.errors import BadRequest

__all__ = ["EMBEDDING_TYPES", "MAX_INFER_SIZE_LIMIT", "parse_configuration"]

EMBEDDING_TYPES = ("TEXT_EMBEDDING", "SPARSE_ENCODING")
# ml-commons FunctionName values: a known name that is not an embedding type gets a different message.
_FUNCTION_NAMES = frozenset(
    {
        "LINEAR_REGRESSION",
        "KMEANS",
        "AD_LIBSVM",
        "SAMPLE_ALGO",
        "LOCAL_SAMPLE_CALCULATOR",
        "FIT_RCF",
        "BATCH_RCF",
        "ANOMALY_LOCALIZATION",
        "RCF_SUMMARIZE",
        "LOGISTIC_REGRESSION",
        "TEXT_EMBEDDING",
        "METRICS_CORRELATION",
        "REMOTE",
        "SPARSE_ENCODING",
        "SPARSE_TOKENIZE",
        "TEXT_SIMILARITY",
        "QUESTION_ANSWERING",
        "AGENT",
        "CONNECTOR",
        "TOOL",
    }
)
MAX_INFER_SIZE_LIMIT = 10


def _embedding_type(value: Any) -> str:
    text = as_str(value).upper()
    if text not in _FUNCTION_NAMES:
        raise BadRequest("Wrong function name")
    if text not in EMBEDDING_TYPES:
        raise BadRequest("Embedding model type must be either TEXT_EMBEDDING or SPARSE_ENCODING")
    return text


def _parse_strategy(raw: Any, *, is_update: bool) -> dict[str, Any]:
    obj = as_object(raw)
    strategy: dict[str, Any] = {}
    if obj.get("id") is not None:
        strategy["id"] = as_str(obj["id"])
    if obj.get("enabled") is not None:
        strategy["enabled"] = as_bool(obj["enabled"])
    if obj.get("type") is not None:
        text = as_str(obj["type"]).upper()
        if text not in STRATEGY_TYPES:
            raise BadRequest(
                f"Invalid memory type: {obj['type']}. Must be SEMANTIC, USER_PREFERENCE, or SUMMARY"
            )
        strategy["type"] = text
    if obj.get("namespace") is not None:
        strategy["namespace"] = as_str_list(obj["namespace"])
    if obj.get("configuration") is not None:
        strategy["configuration"] = as_object(obj["configuration"])
    if not is_update and "type" not in strategy:
        # ml-commons does not validate this and fails with a 500 later; memproxy says what is wrong.
        raise BadRequest("Invalid memory type: null. Must be SEMANTIC, USER_PREFERENCE, or SUMMARY")
    return strategy


def parse_configuration(raw: Any, *, is_update: bool = False) -> dict[str, Any]:
    """Only the recognised keys, typed and checked on their own; unknown keys are dropped."""
    obj = as_object(raw)
    cfg: dict[str, Any] = {}
    for key in ("index_prefix", "llm_id", "embedding_model_id", "tenant_id"):
        if obj.get(key) is not None:
            cfg[key] = as_str(obj[key])
    if obj.get("embedding_model_type") is not None:
        cfg["embedding_model_type"] = _embedding_type(obj["embedding_model_type"])
    if obj.get("embedding_dimension") is not None:
        cfg["embedding_dimension"] = as_int(obj["embedding_dimension"])
    if obj.get("max_infer_size") is not None:
        cfg["max_infer_size"] = as_int(obj["max_infer_size"])
    for key in ("disable_history", "disable_session", "use_system_index"):
        if obj.get(key) is not None:
            cfg[key] = as_bool(obj[key])
    if obj.get("strategies") is not None:
        if not isinstance(obj["strategies"], list):
            raise token_error("START_ARRAY", obj["strategies"])
        cfg["strategies"] = [_parse_strategy(s, is_update=is_update) for s in obj["strategies"]]
    for key in ("index_settings", "parameters"):
        if obj.get(key) is not None:
            cfg[key] = as_object(obj[key])
    if "retention_policy" in obj:
        cfg["retention_policy"] = parse_policy(obj["retention_policy"])
    _check_embedding_fields(cfg)
    if cfg.get("max_infer_size", 0) > MAX_INFER_SIZE_LIMIT:
        raise BadRequest(f"Maximum infer size cannot exceed {MAX_INFER_SIZE_LIMIT}")
    return cfg


def _check_embedding_fields(cfg: Mapping[str, Any]) -> None:
    model_type, model_id = cfg.get("embedding_model_type"), cfg.get("embedding_model_id")
    if model_type is not None and model_id is None:
        raise BadRequest("Embedding model ID is required when embedding model type is provided")
    if model_id is not None and model_type is None:
        raise BadRequest("Embedding model type is required when embedding model ID is provided")
    if model_type == "TEXT_EMBEDDING" and cfg.get("embedding_dimension") is None:
        raise BadRequest("Dimension is required for TEXT_EMBEDDING")
    if model_type == "SPARSE_ENCODING" and cfg.get("embedding_dimension") is not None:
        raise BadRequest("Dimension is not allowed for SPARSE_ENCODING")
