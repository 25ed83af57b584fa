"""The policy update of one RL iteration, in named phases over one plan:

1. :func:`plan_update`: the kept sequences, their optimizer steps (mini-batches) and this rank's
   micro-batches, one :class:`MicroBatch` each, with every step's loss weights;
2. :func:`score`: behaviour and reference log-probs and old values (no grad; the reference pass runs
   each group's prompt once, :func:`reference_logprobs`);
3. :func:`assign_advantages`: group-relative per trajectory, or GAE (PPO);
4. :func:`optimise`: per PPO epoch one optimizer step per mini-batch; each micro-batch's statistics as
   (weighted sum, weight) pairs;
5. :func:`summarise`: the iteration's ``actor/*``, ``critic/*`` and ``perf/*`` metrics, the pairs of every
   micro-batch, rank and step divided out (the same whatever the micro-batching or strategy).

The math is in ``agentcollapse.algorithms``; these functions run it on the module's model. On several
ranks every rank holds the whole kept batch; each optimizer step's micro-batches are those of one
process, dealt so that every rank runs the same number (a rank short of work runs a zero-weight
padding micro-batch), and the strategy (DDP, FSDP) synchronises gradients at each step's last
backward (``lightning.distributed``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from agentcollapse.algorithms import (
    ObjectiveTerms,
    aggregation_pair,
    compute_group_advantages,
    gae_advantages,
    micro_batch_weight,
    rl_objective,
    rollout_correction_weights,
    whiten_across,
)
from agentcollapse.lightning import distributed
from agentcollapse.lightning.hooks import Selection
from agentcollapse.models.continuations import continuation_logprobs
from agentcollapse.rollout.batch import RolloutBatch
from agentcollapse.rollout.sequences import Sequences, build_sequences, collate

if TYPE_CHECKING:  # the module is lightning.module's AgentRLModule, which imports this file
    from lightning import LightningModule

__all__ = [
    "STAT_KEYS",
    "MicroBatch",
    "StepWeight",
    "UpdatePlan",
    "assign_advantages",
    "first_response_position",
    "forward_positions",
    "micro_batches",
    "mini_batches",
    "optimise",
    "plan_update",
    "reference_logprobs",
    "score",
    "summarise",
]

Stat = tuple[int, int, float, float]  # (epoch, one-process order, weighted sum, weight) of one micro-batch
STAT_KEYS = ("pg_loss", "kl", "entropy", "clipfrac", "lower_clipfrac", "approx_kl", "value_loss")
# the rollout engine's log-probs against the trainer's (vLLM only), and the correction's statistics
ENGINE_STAT_NAMES = {
    "engine_logp_abs_diff": "rollout/engine_logp_abs_diff",
    "rollout_is_ratio_mean": "actor/rollout_is_ratio_mean",
    "rollout_corrected_frac": "actor/rollout_corrected_frac",
}


@dataclass
class MicroBatch:
    """One forward/backward of this rank, and what the phases attach to it."""

    members: list[int]  # sequence indices into the plan's Sequences
    tensors: dict[str, torch.Tensor]  # collate()'s padded batch
    step: int  # the optimizer step (mini-batch) it belongs to
    order: int  # its index among every rank's micro-batches: the one-process order of statistics
    old_logp: torch.Tensor | None = None  # None: on-policy, the update's own detached log-probs
    ref_logp: torch.Tensor | None = None  # with a KL term: the reference policy's (adapter off)
    old_values: torch.Tensor | None = None  # PPO: the critic's values before the update
    advantages: torch.Tensor | None = None  # [rows, positions], zero off the response tokens
    value_targets: torch.Tensor | None = None  # PPO: GAE returns
    padding: bool = False  # a zero-weight stand-in that keeps this rank in step with the others
    token_weights: torch.Tensor | None = None  # the rollout correction's per-token loss weights (vLLM)
    positions: int = 0  # token positions its forward computes (a shared prompt counted once)


@dataclass(frozen=True)
class StepWeight:
    """What one optimizer step's micro-batch loss weights are relative to."""

    tokens: float  # response tokens in the step
    sequences: int  # sequences in the step
    share: float  # the step's share of one full mini-batch (verl's gradient accumulation)


@dataclass
class UpdatePlan:
    seqs: Sequences  # every kept sequence (global: every rank holds the whole kept batch)
    returns: torch.Tensor  # [kept groups, G] episode returns
    steps: list[list[int]]  # sequence indices of each optimizer step
    weights: list[StepWeight]  # one per step
    micro: list[MicroBatch]  # this rank's micro-batches, step by step
    on_policy: bool  # one epoch of one step: the behaviour policy is the one being updated


def micro_batches(seqs: Sequences, size: int, members: list[int] | None = None, share_prompts: bool = False) -> list[list[int]]:
    """Micro-batches of ``size`` similar-length sequences (little padding), in a fixed order, over
    ``members`` (sequence indices; all of them by default).

    ``share_prompts`` (the module can run a micro-batch's shared prompt once,
    ``AgentRLModule.prompts_shared``): where it computes fewer token positions, each micro-batch holds
    sequences of one first prompt only (a group's), sorted by length within the group. That wins when
    prompts are most of a sequence (single-turn tasks: Countdown's 80-token prompt and 40-token
    answers), and loses to sorting the whole batch by length when later turns make a group's lengths
    spread (multi-turn FrozenLake: measured 1.4x slower updates before this choice was made)."""
    pool = range(len(seqs.input_ids)) if members is None else members
    order = sorted(pool, key=lambda i: len(seqs.input_ids[i]))
    by_length = [order[i : i + size] for i in range(0, len(order), size)]
    if not share_prompts:
        return by_length
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in order:
        groups.setdefault(tuple(seqs.input_ids[i][: first_response_position(seqs.loss_mask[i])]), []).append(i)
    by_prompt = [group[k : k + size] for group in groups.values() for k in range(0, len(group), size)]
    return by_prompt if _positions(seqs, by_prompt, shared=True) < _positions(seqs, by_length, shared=False) else by_length


def forward_positions(rows: int, width: int, shared_prefix: int) -> int:
    """Token positions one forward over ``rows`` sequences padded to ``width`` computes, the
    ``shared_prefix`` tokens every row begins with run once (``AgentRLModule.forward_sequences``)."""
    return rows * width - (rows - 1) * shared_prefix


def _positions(seqs: Sequences, batches: list[list[int]], shared: bool) -> int:
    """:func:`forward_positions` summed over ``batches``, each padded to its longest sequence, with
    (``shared``) the prompt every row of a batch shares run once (as ``collate`` and ``forward_sequences`` do)."""
    total = 0
    for idx in batches:
        width = max(len(seqs.input_ids[i]) for i in idx)
        prompt = min(first_response_position(seqs.loss_mask[i]) for i in idx) - 1 if shared else 0
        total += forward_positions(len(idx), width, max(prompt, 0))
    return total


def mini_batches(seqs: Sequences, size: int) -> list[list[int]]:
    """The sequence indices of each optimizer step: whole trajectories in batch order, ``size`` of
    them per step (verl's ppo_mini_batch_size), or every sequence in one step when it is 0. A filter
    that keeps fewer groups then also takes fewer steps, as in the authors' code."""
    if not size:
        return [list(range(len(seqs.input_ids)))]
    step_of = {t: k // size for k, t in enumerate(sorted(set(seqs.traj_index)))}
    steps: list[list[int]] = [[] for _ in range(max(step_of.values(), default=-1) + 1)]
    for i, t in enumerate(seqs.traj_index):
        steps[step_of[t]].append(i)
    return steps


def plan_update(module: LightningModule, rollout: RolloutBatch, selection: Selection) -> UpdatePlan:
    """The kept sequences of ``selection``, their steps and weights, and this rank's micro-batches."""
    cfg = module.cfg.algorithm
    kept_groups, traj_mask = selection.groups, selection.trajectory_mask
    batch = rollout.select_groups(kept_groups)
    returns = torch.as_tensor(batch.returns(), dtype=torch.float32, device=module.device)
    seqs = build_sequences(batch)
    if traj_mask is not None:  # trajectory-level filter: drop unkept trajectories' sequences
        flat = traj_mask[kept_groups].reshape(-1)
        keep = [i for i, t in enumerate(seqs.traj_index) if flat[t]]
        seqs = Sequences(
            *[[getattr(seqs, f)[i] for i in keep] for f in ("input_ids", "loss_mask", "traj_index", "is_last")],
            sample_logp=None if seqs.sample_logp is None else [seqs.sample_logp[i] for i in keep],
        )
    steps = mini_batches(seqs, cfg.mini_batch_size)
    # One process's micro-batches, dealt to the ranks by padded size so that each runs the same
    # number per step (a padding micro-batch where a rank has fewer): the gradient summed over
    # ranks is the one process's sum over every micro-batch.
    rank, size = distributed.world()
    micro: list[MicroBatch] = []
    offset = 0
    for step, members in enumerate(steps):
        every = micro_batches(seqs, cfg.micro_batch_size, members, share_prompts=module.prompts_shared())
        costs = [len(idx) * max(len(seqs.input_ids[i]) for i in idx) for idx in every]
        shares = distributed.deal_evenly(costs, size)
        for k in shares[rank]:
            tensors = collate(seqs, every[k], module.pad_id, module.device)
            positions = forward_positions(*tensors["input_ids"].shape, module.shared_prefix_length(tensors))
            micro.append(MicroBatch(every[k], tensors, step, offset + k, positions=positions))
        for _ in range(max(map(len, shares)) - len(shares[rank])):
            shortest = [every[0][0]]  # micro_batches sorts by length: the cheapest forward there is
            micro.append(MicroBatch(shortest, collate(seqs, shortest, module.pad_id, module.device), step, -1, padding=True))
        offset += len(every)
    # Each micro-batch's loss weight within its step; a step of fewer trajectories than
    # mini_batch_size counts for its share of one, as verl's gradient accumulation does.
    weights = []
    for members in steps:
        tokens = float(sum(sum(seqs.loss_mask[i]) for i in members)) or 1.0
        share = len({seqs.traj_index[i] for i in members}) / cfg.mini_batch_size if cfg.mini_batch_size else 1.0
        weights.append(StepWeight(tokens, len(members), share))
    return UpdatePlan(seqs, returns, steps, weights, micro, on_policy=cfg.ppo_epochs == 1 and len(steps) == 1)


@torch.no_grad()
def score(module: LightningModule, plan: UpdatePlan) -> None:
    """Behaviour log-probs, reference log-probs (adapter off) and old values of every micro-batch.
    With one epoch of one step the update runs on the behaviour policy itself, so its own detached
    log-probs are the old ones and that forward is skipped."""
    algo = module.algo
    for mb in plan.micro:
        if not (plan.on_policy and not algo.use_critic):
            _, logp, values = module.forward_sequences(mb.tensors, with_values=algo.use_critic, with_entropy=False)
            mb.old_logp = None if plan.on_policy else logp
            mb.old_values = values
    if algo.kl_coef > 0:
        reference_logprobs(module, plan)


def first_response_position(loss_mask: list[int]) -> int:
    """Index of a sequence's first generated token (its length when it has none)."""
    return next((p for p, m in enumerate(loss_mask) if m), len(loss_mask))


@torch.no_grad()
def reference_logprobs(module: LightningModule, plan: UpdatePlan) -> None:
    """The reference policy's (adapter off) log-probs of every micro-batch, aligned with its
    ``response_mask`` (zero off each sequence's tokens after its prompt).

    A group's G sequences start with the same prompt, so each sequence is scored as a continuation
    of its first prompt (``continuation_logprobs``): each distinct prompt runs one forward and each
    sequence only its own tokens after it, where a forward over every whole sequence would run each
    prompt G times. Equal to that forward up to float rounding (tested). The forwards follow the
    data, not the micro-batches, so FSDP's weights are gathered once around them (``whole_weights``)."""
    seqs = plan.seqs
    members = sorted({i for mb in plan.micro for i in mb.members})
    starts = {i: first_response_position(seqs.loss_mask[i]) for i in members}
    pairs = [(seqs.input_ids[i][: starts[i]], seqs.input_ids[i][starts[i] :]) for i in members]
    with distributed.whole_weights(module), module.model.disable_adapter():
        scored = continuation_logprobs(
            module.model, pairs, batch_size=module.cfg.algorithm.reference_batch_size, autocast=module.update_autocast
        )
    by_sequence = dict(zip(members, scored))
    for mb in plan.micro:
        mask = mb.tensors["response_mask"]
        first_target = int(mb.tensors["logits_from"]) + 1  # input position of response_mask's column 0
        ref = torch.zeros(mask.shape, dtype=torch.float32)
        for row, i in enumerate(mb.members):
            logp = by_sequence[i]
            column = starts[i] - first_target
            ref[row, column : column + len(logp)] = logp
        mb.ref_logp = ref.to(mask.device)


def assign_advantages(module: LightningModule, plan: UpdatePlan) -> None:
    """Group-relative advantages per trajectory, credited to every response token; or GAE (PPO),
    whitened over every rank's tokens."""
    algo, seqs = module.algo, plan.seqs
    real = [mb for mb in plan.micro if not mb.padding]
    for mb in plan.micro:
        if mb.padding:  # weight 0 makes its loss 0 whatever this is; zeros keep it out of the whitening
            mb.advantages = torch.zeros_like(mb.tensors["response_mask"])
            mb.value_targets = mb.old_values.detach() if mb.old_values is not None else None
    if not algo.use_critic:
        traj_adv = compute_group_advantages(algo.advantage, plan.returns).reshape(-1)
        for mb in real:
            per_seq = traj_adv[[seqs.traj_index[i] for i in mb.members]]
            mb.advantages = per_seq[:, None] * mb.tensors["response_mask"]
        return
    flat_returns = plan.returns.reshape(-1)
    raw = []
    for mb in real:
        mask = mb.tensors["response_mask"]
        rewards = torch.zeros_like(mask)
        for row, i in enumerate(mb.members):
            if seqs.is_last[i] and mask[row].any():  # the return is credited at the last token
                rewards[row, int(torch.nonzero(mask[row]).max())] = float(flat_returns[seqs.traj_index[i]])
        adv, mb.value_targets = gae_advantages(rewards, mb.old_values, mask, algo.gamma, algo.lam)
        raw.append(adv)
    reduce = None if distributed.world()[1] == 1 else (lambda t: distributed.sum_across(t.to(module.device)))
    whitened = whiten_across(raw, [mb.tensors["response_mask"] for mb in real], reduce=reduce)
    for mb, adv in zip(real, whitened):
        mb.advantages = adv


def optimise(module: LightningModule, plan: UpdatePlan, loss_scale: float) -> tuple[dict[str, list], list[float], bool]:
    """Per PPO epoch one optimizer step per mini-batch. Returns this rank's statistics, each micro-batch's
    as ``(epoch, one-process order, weighted sum, weight)`` (:func:`summarise` divides the sums), the
    gradient norm of each step taken, and whether a NaN/inf loss or gradient stopped the update.

    Losses (``pg_loss``, ``kl``, ``value_loss``) weigh each micro-batch as the gradient does
    (``aggregation_pair``: tokens for ``token-mean``, sequences for the ``seq-mean-*`` modes); token
    means (entropy, clip fractions, approx. KL, the engine's statistics) by tokens; the
    ``sequence_mask`` correction's share by sequences. A step that is not taken (NaN/inf) adds none of
    its statistics, on any rank; the engine's, measured before any step, stay."""
    stats: dict[str, list[Stat]] = {k: [] for k in (*STAT_KEYS, *ENGINE_STAT_NAMES)}
    grad_norms: list[float] = []
    opt = module.optimizers()
    params = [p for g in opt.param_groups for p in g["params"]]
    wrapper = module.trainer.strategy.model  # DDP's wrapper, or the module itself (FSDP, one process)
    scale = loss_scale * distributed.gradient_scale()
    for epoch in range(module.cfg.algorithm.ppo_epochs):
        for step, weight in enumerate(plan.weights):
            opt.zero_grad(set_to_none=True)
            taken, nonfinite = _accumulate_step(module, wrapper, plan, epoch, step, weight, scale, stats)
            if distributed.any_rank(nonfinite):
                opt.zero_grad(set_to_none=True)
                return stats, grad_norms, True
            grad_norm = torch.nn.utils.clip_grad_norm_(params, module.cfg.algorithm.max_grad_norm)
            grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm  # FSDP: a DTensor
            if not torch.isfinite(grad_norm):
                opt.zero_grad(set_to_none=True)
                return stats, grad_norms, True
            grad_norms.append(float(grad_norm))
            opt.step()
            for name, entries in taken.items():
                stats[name].extend(entries)
    return stats, grad_norms, False


def _accumulate_step(
    module: LightningModule,
    wrapper: torch.nn.Module,
    plan: UpdatePlan,
    epoch: int,
    step: int,
    weight: StepWeight,
    scale: float,
    stats: dict[str, list[Stat]],
) -> tuple[dict[str, list[Stat]], bool]:
    """The backwards of one optimizer step's micro-batches on this rank, their gradients summed.
    Returns the step's loss statistics, which count only if the step is taken, and whether a loss
    was NaN/inf; the engine's statistics (epoch 0) go straight into ``stats``."""
    taken: dict[str, list[Stat]] = {k: [] for k in STAT_KEYS}
    nonfinite = False
    mine = [m for m in plan.micro if m.step == step]
    for k, mb in enumerate(mine):
        # every rank runs len(mine) backwards: the strategy syncs gradients at the last one
        with distributed.gradient_sync(wrapper, module, enabled=k == len(mine) - 1):
            terms, tokens = _micro_batch_objective(module, mb, epoch, weight, stats)
            loss = terms.total * scale
            # A NaN/inf loss skips the step, after the backwards every rank must still join.
            nonfinite = nonfinite or not bool(torch.isfinite(loss))
            module.manual_backward(loss)
            if not (mb.padding or nonfinite):
                _record_terms(taken, (epoch, mb.order), terms, module.algo.loss_agg_mode, tokens, len(mb.members))
    return taken, nonfinite


def _micro_batch_objective(
    module: LightningModule, mb: MicroBatch, epoch: int, weight: StepWeight, stats: dict[str, list[Stat]]
) -> tuple[ObjectiveTerms, float]:
    """One micro-batch's forward and RL objective at its share of the step's loss (0 for padding),
    and its response tokens."""
    algo, cfg = module.algo, module.cfg
    mask = mb.tensors["response_mask"]
    tokens = float(mask.sum())
    entropy, logp, values = module.forward_sequences(mb.tensors, with_values=algo.use_critic)
    old = logp.detach() if mb.old_logp is None else mb.old_logp
    if epoch == 0 and "sample_logp" in mb.tensors and not mb.padding:
        # the engine sampled these tokens: measure (and correct for) its log-probs
        # against the trainer's, before any optimizer step of this update
        mb.token_weights, c = rollout_correction_weights(
            old, mb.tensors["sample_logp"], mask, cfg.algorithm.rollout_correction, cfg.algorithm.rollout_correction_cap
        )
        key = (epoch, mb.order)
        stats["engine_logp_abs_diff"].append((*key, c.logp_abs_diff * c.tokens, c.tokens))
        stats["rollout_is_ratio_mean"].append((*key, c.ratio_mean * c.tokens, c.tokens))
        stats["rollout_corrected_frac"].append((*key, c.corrected_frac * c.corrected_of, c.corrected_of))
    w = (
        0.0
        if mb.padding
        else weight.share * micro_batch_weight(algo.loss_agg_mode, tokens, weight.tokens, len(mb.members), weight.sequences)
    )
    terms = rl_objective(
        algo,
        entropy,
        logp,
        old,
        mb.advantages,
        mask,
        cfg.rollout.max_new_tokens,
        weight=w,
        ref_logp=mb.ref_logp if algo.kl_coef > 0 else None,
        values=values,
        value_targets=mb.value_targets if values is not None else None,
        old_values=mb.old_values if values is not None else None,
        token_weights=mb.token_weights,
    )
    return terms, tokens


def _record_terms(
    taken: dict[str, list[Stat]], key: tuple[int, int], terms: ObjectiveTerms, loss_agg_mode: str, tokens: float, sequences: int
) -> None:
    """A micro-batch's statistics as (weighted sum, weight) pairs: losses weighed as the gradient
    weighs them, token means by tokens."""
    losses = {"pg_loss": terms.policy.loss, "kl": terms.kl, "value_loss": terms.value_loss}
    for name, value in losses.items():
        if value is not None:
            taken[name].append((*key, *aggregation_pair(loss_agg_mode, float(value.detach()), tokens, sequences)))
    policy = terms.policy
    means = {
        "entropy": terms.entropy,
        "clipfrac": policy.clipfrac,
        "lower_clipfrac": policy.lower_clipfrac,
        "approx_kl": policy.approx_kl,
    }
    for name, value in means.items():
        taken[name].append((*key, float(value) * tokens, tokens))


def summarise(
    plan: UpdatePlan, stats: dict[str, list], grad_norms: list[float], loss_scale: float, nonfinite_total: int
) -> dict[str, float]:
    """The update's metrics: every rank's (weighted sum, weight) pairs gathered and each statistic
    their sum over every micro-batch, epoch and optimizer step divided by their weight, so that it is
    the value of the whole update's tokens (or sequences) aggregated in one piece, whatever the
    micro-batching or strategy (``math.fsum``: exactly rounded, so the order of the pairs does not
    matter). ``actor/grad_norm`` is the mean over the optimizer steps of each step's norm."""
    parts = distributed.gather_objects(stats)
    out = {}
    for name in stats:
        entries = [e for part in parts for e in part[name]]
        weight = math.fsum(e[3] for e in entries)
        if entries and weight > 0:
            key = ENGINE_STAT_NAMES.get(name, "critic/value_loss" if name == "value_loss" else f"actor/{name}")
            out[key] = math.fsum(e[2] for e in entries) / weight
    if grad_norms:
        out["actor/grad_norm"] = float(np.mean(grad_norms))
    out["actor/nonfinite_loss_count"] = float(nonfinite_total)
    out["actor/loss_scale"] = float(loss_scale)
    out["actor/num_sequences"] = float(len(plan.seqs.input_ids))
    out["actor/optimizer_steps"] = float(len(grad_norms))
    out["perf/update_tokens"] = float(sum(mb.positions for mb in plan.micro if not mb.padding))
    return out
