"""Pure RL math on torch tensors: advantages, KL estimators, losses and algorithm presets."""

from agentcollapse.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_group_advantages,
    dr_grpo_advantages,
    gae_advantages,
    grpo_advantages,
    group_advantages,
    masked_whiten,
)
from agentcollapse.algorithms.kl import KL_ESTIMATORS, kl_penalty
from agentcollapse.algorithms.losses import (
    LOSS_AGG_MODES,
    PolicyLossOutput,
    aggregate_loss,
    entropy_from_logits,
    masked_mean,
    policy_loss,
    value_loss,
)
from agentcollapse.algorithms.presets import (
    ADVANTAGE_KINDS,
    PRESETS,
    AlgorithmPreset,
    get_preset,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ADVANTAGE_KINDS",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "PRESETS",
    "AlgorithmPreset",
    "PolicyLossOutput",
    "aggregate_loss",
    "compute_group_advantages",
    "dr_grpo_advantages",
    "entropy_from_logits",
    "gae_advantages",
    "get_preset",
    "grpo_advantages",
    "group_advantages",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "policy_loss",
    "value_loss",
]
