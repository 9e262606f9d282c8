"""Reads a sentence-transformers model directory: which pooling, whether to normalise, where to truncate.

Only the module chain Transformer -> Pooling -> (Normalize) is supported; anything else (Dense layers,
custom modules) is refused at load time rather than silently producing vectors the model never meant.
A directory without ``modules.json`` is a plain transformers model and gets sentence-transformers'
own fallback: mean pooling, no normalisation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.embedding.errors import ModelLoadError

__all__ = ["POOLING_MODES", "ModelLayout", "read_layout"]

POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")

# Legacy boolean keys, in the order sentence-transformers concatenates their outputs.
_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclass(frozen=True)
class ModelLayout:
    """The parts of a sentence-transformers configuration the engine applies."""

    transformer_dir: Path
    pooling: tuple[str, ...]
    normalize: bool
    max_seq_length: int | None
    do_lower_case: bool


def _read_json(path: Path, model_path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(str(model_path), f"unreadable {path.name}: {exc}") from exc


def _module_kind(type_name: str) -> str:
    # modules.json names classes by import path, which moved between versions
    # (sentence_transformers.models.Pooling, ...base.modules.pooling.Pooling): the class name decides.
    return type_name.rsplit(".", 1)[-1]


def pooling_modes(config: dict[str, Any], model_path: Path) -> tuple[str, ...]:
    """The pooling modes a ``1_Pooling/config.json`` declares, in concatenation order."""
    declared = config.get("pooling_mode")
    if declared is None:
        modes = tuple(mode for key, mode in _LEGACY_POOLING_KEYS.items() if config.get(key))
        modes = modes or ("mean",)
    elif isinstance(declared, str):
        modes = (declared,)
    else:
        modes = tuple(declared)
    for mode in modes:
        if mode not in POOLING_MODES:
            raise ModelLoadError(str(model_path), f"unsupported pooling mode {mode!r}")
    if config.get("include_prompt") is False:
        raise ModelLoadError(str(model_path), "pooling with include_prompt=false is not supported")
    return modes


def read_layout(model_path: Path) -> ModelLayout:
    """Reads ``modules.json`` and the configs it points to; raises ModelLoadError on what we cannot honour."""
    modules_file = model_path / "modules.json"
    if not modules_file.is_file():
        return ModelLayout(model_path, ("mean",), False, None, False)

    modules = _read_json(modules_file, model_path)
    if not isinstance(modules, list) or not modules:
        raise ModelLoadError(str(model_path), "modules.json is not a non-empty list")
    transformer_dir: Path | None = None
    pooling: tuple[str, ...] = ("mean",)
    normalize = False
    for module in sorted(modules, key=lambda m: int(m.get("idx", 0))):
        kind = _module_kind(str(module.get("type", "")))
        module_dir = model_path / str(module.get("path", ""))
        if kind == "Transformer" and transformer_dir is None:
            transformer_dir = module_dir
        elif kind == "Pooling":
            pooling = pooling_modes(_read_json(module_dir / "config.json", model_path), model_path)
        elif kind == "Normalize":
            normalize = True
        else:
            raise ModelLoadError(
                str(model_path), f"unsupported sentence-transformers module {module.get('type')!r}"
            )
    if transformer_dir is None:
        raise ModelLoadError(str(model_path), "modules.json declares no Transformer module")

    max_seq_length: int | None = None
    do_lower_case = False
    st_config_file = transformer_dir / "sentence_bert_config.json"
    if st_config_file.is_file():
        st_config = _read_json(st_config_file, model_path)
        if st_config.get("max_seq_length") is not None:
            max_seq_length = int(st_config["max_seq_length"])
        do_lower_case = bool(st_config.get("do_lower_case", False))
    return ModelLayout(transformer_dir, pooling, normalize, max_seq_length, do_lower_case)
