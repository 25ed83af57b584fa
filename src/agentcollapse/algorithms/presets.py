"""Named algorithm settings (GRPO, Dr. GRPO, DAPO, PPO) as the literature and docs/method.md section 6 set them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from agentcollapse.algorithms.advantages import ADVANTAGE_ESTIMATORS
from agentcollapse.algorithms.kl import KL_ESTIMATORS
from agentcollapse.algorithms.losses import DEFAULT_POLICY_LOSS, LOSS_AGG_MODES, POLICY_LOSSES
from agentcollapse.errors import UserError, one_of

if TYPE_CHECKING:
    from agentcollapse.config import AlgorithmConfig

__all__ = ["PRESETS", "AlgorithmPreset", "advantage_kinds", "algorithm_preset", "get_preset", "with_overrides"]

TOKEN_LEVEL_ADVANTAGE = "gae"  # PPO's critic-based advantage; every other kind is a registered group estimator


def advantage_kinds() -> tuple[str, ...]:
    """Every valid ``advantage``: the registered group estimators, then GAE."""
    return (*ADVANTAGE_ESTIMATORS.names(), TOKEN_LEVEL_ADVANTAGE)


@dataclass(frozen=True)
class AlgorithmPreset:
    """One RL algorithm's knobs: advantage estimator, loss aggregation, clipping, KL and entropy
    regularisers, and whether a critic (GAE) is trained. Validated on construction."""

    name: str
    advantage: str  # a registered group estimator ("grpo", "dr_grpo") or "gae" (critic)
    loss_agg_mode: str
    clip_low: float
    clip_high: float
    dual_clip: bool
    clip_ratio_c: float
    kl_coef: float
    kl_estimator: str
    entropy_coef: float
    use_critic: bool
    gamma: float
    lam: float
    dynamic_sampling: bool = False  # DAPO: refill the batch with groups whose rewards vary
    policy_loss: str = DEFAULT_POLICY_LOSS  # a registered policy loss (losses.POLICY_LOSSES)
    sapo_tau_pos: float = 1.0  # SAPO gate temperature where A > 0 (TRL / verl default)
    sapo_tau_neg: float = 1.05  # SAPO gate temperature where A <= 0 (TRL / verl default)

    def __post_init__(self) -> None:
        if self.policy_loss not in POLICY_LOSSES:
            raise ValueError(f"policy_loss {self.policy_loss!r} not in {list(POLICY_LOSSES)}")
        if self.dual_clip and self.policy_loss != DEFAULT_POLICY_LOSS:
            raise ValueError(f"dual_clip applies to policy_loss={DEFAULT_POLICY_LOSS} only, not {self.policy_loss}")
        if not (self.sapo_tau_pos > 0 and self.sapo_tau_neg > 0):
            raise ValueError(f"SAPO temperatures must be > 0, got ({self.sapo_tau_pos}, {self.sapo_tau_neg})")
        if self.advantage not in advantage_kinds():
            raise ValueError(f"advantage {self.advantage!r} not in {list(advantage_kinds())}")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"loss_agg_mode {self.loss_agg_mode!r} not in {list(LOSS_AGG_MODES)}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator {self.kl_estimator!r} not in {list(KL_ESTIMATORS)}")
        if self.use_critic != (self.advantage == TOKEN_LEVEL_ADVANTAGE):
            raise ValueError("use_critic must be True exactly when advantage is 'gae'")
        if not (0 <= self.clip_low < 1 and self.clip_high >= 0):
            raise ValueError(f"bad clip range ({self.clip_low}, {self.clip_high})")
        if self.dual_clip and self.clip_ratio_c <= 1:
            raise ValueError(f"clip_ratio_c must be > 1, got {self.clip_ratio_c}")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ValueError("kl_coef and entropy_coef must be >= 0")


_COMMON: dict[str, Any] = dict(
    dual_clip=True,  # verl's default policy loss (dual clip, Ye et al. 2020), which RAGEN runs on
    clip_ratio_c=3.0,  # verl default clip_ratio_c
    entropy_coef=0.001,  # docs/method.md section 6: entropy bonus 0.001 in all the authors' runs
    kl_estimator="k3",  # verl/RAGEN kl_loss_type low_var_kl (k3); unused where kl_coef = 0
)

PRESETS: dict[str, AlgorithmPreset] = {
    "grpo": AlgorithmPreset(
        name="grpo",
        advantage="grpo",  # Shao et al. 2024 (DeepSeekMath): (R - mean) / std within the group
        loss_agg_mode="token-mean",  # verl/RAGEN default (the GRPO paper uses seq-mean-token-mean)
        clip_low=0.2,
        clip_high=0.2,  # PPO/GRPO symmetric clip epsilon 0.2
        kl_coef=0.001,  # RAGEN/verl GRPO example: kl_loss_coef 0.001 with low_var_kl
        use_critic=False,
        gamma=1.0,
        lam=1.0,  # no critic; gamma/lam unused
        **_COMMON,
    ),
    "dr_grpo": AlgorithmPreset(
        name="dr_grpo",
        advantage="dr_grpo",  # Liu et al. 2025 (Dr. GRPO): mean-centred, no std division
        loss_agg_mode="seq-mean-token-sum-norm",  # Dr. GRPO: constant normaliser, no 1/|o| bias
        clip_low=0.2,
        clip_high=0.2,  # Dr. GRPO keeps PPO's symmetric clip 0.2
        kl_coef=0.0,  # Dr. GRPO drops the KL term (verl recipe: use_kl_loss=False)
        use_critic=False,
        gamma=1.0,
        lam=1.0,  # no critic; gamma/lam unused
        **_COMMON,
    ),
    "dapo": AlgorithmPreset(
        name="dapo",
        advantage="grpo",  # Yu et al. 2025 (DAPO): group-normalised advantages as in GRPO
        loss_agg_mode="token-mean",  # DAPO: token-level policy-gradient loss
        clip_low=0.2,
        clip_high=0.28,  # DAPO clip-higher: eps_low 0.2, eps_high 0.28
        kl_coef=0.0,  # DAPO removes the KL penalty
        use_critic=False,
        gamma=1.0,
        lam=1.0,  # no critic; gamma/lam unused
        dynamic_sampling=True,  # DAPO: train only on groups whose rewards vary, refilled by more rollouts
        **_COMMON,
    ),
    "ppo": AlgorithmPreset(
        name="ppo",
        advantage="gae",  # Schulman et al. 2017: critic + GAE
        loss_agg_mode="token-mean",  # verl/RAGEN default aggregation
        clip_low=0.2,
        clip_high=0.2,  # PPO clip epsilon 0.2
        kl_coef=0.001,  # RAGEN default kl_loss_coef 0.001 (low_var_kl)
        use_critic=True,
        gamma=1.0,
        lam=1.0,  # docs/method.md section 6: GAE with gamma = lambda = 1
        **_COMMON,
    ),
}


def with_overrides(preset: AlgorithmPreset, **overrides: Any) -> AlgorithmPreset:
    """``preset`` with ``overrides`` laid over it; a ``policy_loss`` other than the preset's also brings
    its own defaults (GSPO's small clip range, ...) for every setting that ``overrides`` leaves out."""
    loss = overrides.get("policy_loss", preset.policy_loss)
    if loss not in POLICY_LOSSES:
        raise ValueError(f"unknown policy_loss {loss!r}; choose one of {', '.join(POLICY_LOSSES)}")
    defaults = {k: v for k, v in POLICY_LOSSES.get(loss).defaults.items() if k not in overrides}
    return preset.__class__(**{**preset.__dict__, **defaults, **overrides})


def get_preset(name: str) -> AlgorithmPreset:
    """The preset called ``name`` (a key of PRESETS)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm preset {name!r}; valid: {sorted(PRESETS)}") from None


def algorithm_preset(cfg: AlgorithmConfig) -> AlgorithmPreset:
    """The preset named by a run config's ``algorithm.name`` with every non-null field of that section laid
    over it (and the chosen ``policy_loss``'s own defaults under them); a one-line :class:`UserError` for an
    unknown preset or loss, or settings the preset rejects."""
    if cfg.name not in PRESETS:
        raise UserError(f"unknown algorithm {cfg.name!r}; valid algorithms: {', '.join(sorted(PRESETS))} (choose with algorithm=<name>)")
    if cfg.policy_loss is not None and cfg.policy_loss not in POLICY_LOSSES:
        one_of("algorithm.policy_loss", cfg.policy_loss, POLICY_LOSSES.names())
    preset = PRESETS[cfg.name]
    overrides = {f.name: getattr(cfg, f.name) for f in fields(preset) if f.name != "name" and getattr(cfg, f.name, None) is not None}
    try:
        return with_overrides(preset, **overrides)
    except (ValueError, TypeError) as exc:
        raise UserError(f"bad algorithm settings: {exc}") from None
