"""Pure RL math on torch tensors (the role of verl's ``core_algos``): advantage estimators, KL
estimators and loss aggregations registered by name, the policy/value losses, the whole objective of
a micro-batch written once (``objective``), and the algorithm presets."""

from agentcollapse.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_group_advantages,
    dr_grpo_advantages,
    gae_advantages,
    group_advantages,
    grpo_advantages,
    masked_whiten,
    register_adv_est,
    whiten_across,
)
from agentcollapse.algorithms.correction import ROLLOUT_CORRECTIONS, CorrectionStats, rollout_correction_weights
from agentcollapse.algorithms.kl import KL_ESTIMATORS, kl_penalty, register_kl
from agentcollapse.algorithms.losses import (
    LOSS_AGG_MODES,
    PolicyLossOutput,
    aggregate_loss,
    entropy_from_logits,
    masked_mean,
    policy_loss,
    register_loss_agg,
    value_loss,
)
from agentcollapse.algorithms.objective import ObjectiveTerms, aggregation_pair, micro_batch_weight, rl_objective
from agentcollapse.algorithms.presets import (
    PRESETS,
    AlgorithmPreset,
    advantage_kinds,
    get_preset,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ROLLOUT_CORRECTIONS",
    "CorrectionStats",
    "rollout_correction_weights",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "PRESETS",
    "AlgorithmPreset",
    "ObjectiveTerms",
    "PolicyLossOutput",
    "aggregate_loss",
    "aggregation_pair",
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
    "whiten_across",
    "micro_batch_weight",
    "rl_objective",
    "policy_loss",
    "register_adv_est",
    "register_kl",
    "register_loss_agg",
    "advantage_kinds",
    "value_loss",
]
