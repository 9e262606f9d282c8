"""``infer: true``: fact extraction and consolidation by an LLM (docs/infer.md)."""

from proxy.core.infer.parse import InferError
from proxy.core.infer.pipeline import (
    Decision,
    InferPlan,
    InferRequest,
    StrategyPlan,
    apply_plan,
    plan_infer,
)

__all__ = ["Decision", "InferError", "InferPlan", "InferRequest", "StrategyPlan", "apply_plan", "plan_infer"]
