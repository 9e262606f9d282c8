"""Token-to-sentence pooling, numerically as sentence-transformers' Pooling module does it.

Inputs are right-padded; pooling runs in float32 whatever dtype the model computed in, so a bf16 forward
loses precision only inside the transformer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["pool"]


def _mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def _mean_sqrt_len(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (hidden * mask).sum(dim=1) / torch.sqrt(mask.sum(dim=1).clamp(min=1e-9))


def _max(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # Same sentinel as sentence-transformers, so an all-padding row yields the same value.
    return hidden.masked_fill(mask == 0, -1e9).max(dim=1).values


def _cls(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return hidden[:, 0]


def _last_token(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    last = (mask.squeeze(-1).sum(dim=1).long() - 1).clamp(min=0)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


def _weighted_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    positions = torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=hidden.dtype).view(1, -1, 1)
    weights = mask * positions
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)


_POOLERS = {
    "mean": _mean,
    "mean_sqrt_len_tokens": _mean_sqrt_len,
    "max": _max,
    "cls": _cls,
    "lasttoken": _last_token,
    "weightedmean": _weighted_mean,
}


def pool(
    hidden: torch.Tensor, attention_mask: torch.Tensor, modes: Sequence[str], normalize: bool
) -> torch.Tensor:
    """(batch, seq, dim) hidden states -> (batch, dim * len(modes)) float32 sentence vectors."""
    hidden = hidden.float()
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    parts = [_POOLERS[mode](hidden, mask) for mode in modes]
    vectors = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
    if normalize:
        vectors = torch.nn.functional.normalize(vectors, p=2.0, dim=-1)
    return vectors
