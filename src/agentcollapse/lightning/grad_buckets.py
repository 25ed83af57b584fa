"""``GradBucketAnalysis``: gradient norms of the task and regulariser terms per reward-variance bucket.

METHOD.md section 4: split the prompts of a rollout batch into 6 RV quantile buckets and measure, per
bucket, the gradient norm over the trainable (LoRA) parameters of the policy-gradient term alone and of
the KL + entropy regulariser alone. The paper finds the task norm rising with RV while the regulariser
norm stays flat, so low-RV prompts contribute mostly regulariser pressure.

Like ``CollapseDiagnostics`` it runs on the full batch before filtering (the module calls ``on_rollout``
on every callback that has it). It is read-only: gradients come from ``torch.autograd.grad``, so no
parameter's ``.grad`` and no optimizer state is touched; the model runs in eval mode (no dropout, so no
torch RNG is drawn) and every submodule's train/eval flag is restored afterwards. A run with it enabled
therefore makes exactly the same updates as one without it.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import numpy as np
import torch

from agentcollapse.algorithms import (
    aggregate_loss,
    compute_group_advantages,
    entropy_from_logits,
    kl_penalty,
    policy_loss,
)
from agentcollapse.filtering import group_scores, rv_quantile_buckets
from agentcollapse.rollout.batch import RolloutBatch
from agentcollapse.rollout.sequences import build_sequences, collate

NUM_BUCKETS = 6


def group_loss_terms(module: Any, batch: RolloutBatch, groups: list[int] | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(task_loss, reg_loss) of ``module``'s update objective restricted to the prompt ``groups`` of ``batch``.

    The same terms as ``AgentRLModule.update`` with ``scale=1`` and one on-policy epoch (old log-prob
    = the detached current one, so the ratio is 1), aggregated over the subset's sequences exactly as
    the update aggregates over the kept ones:

    - ``task_loss``: the clipped policy-gradient loss. Advantages are computed on the FULL batch
      returns and then indexed, so each prompt keeps its own group normalisation whatever subset is
      asked for (group advantages only depend on the prompt's own row anyway).
    - ``reg_loss``: ``kl_coef * KL(pi || ref) - entropy_coef * entropy`` (KL only when kl_coef > 0,
      as in the update; the reference is the model with its adapter disabled).

    The critic's value loss is left out (it is neither term). Both tensors carry the autograd graph
    (the caller runs the forward under grad); call with the model in the mode you want measured.
    """
    algo = module.algo
    model = module.model
    groups = [int(g) for g in groups]
    device = next(model.parameters()).device
    zero = torch.zeros((), device=device)
    if not groups:
        return zero, zero
    returns = torch.as_tensor(batch.returns(), dtype=torch.float32)
    if algo.advantage in ("grpo", "dr_grpo"):
        full_adv = compute_group_advantages(algo.advantage, returns)
    else:
        # PPO/GAE: the update uses critic-based, batch-whitened token advantages, which depend on the
        # value head and on the whole batch. For a per-prompt SNR analysis we use the group-normalised
        # (GRPO) advantage instead: it isolates each prompt's reward variance, which is what the
        # buckets are about. The regulariser term is the same as the update's.
        full_adv = compute_group_advantages("grpo", returns)
    traj_adv = full_adv[groups].reshape(-1)  # [len(groups) * G], the order of batch.select_groups
    sub = batch.select_groups(groups)
    seqs = build_sequences(sub)
    n = len(seqs.input_ids)
    if n == 0:
        return zero, zero
    total_tokens = float(sum(sum(m) for m in seqs.loss_mask)) or 1.0
    norm_length = module.cfg.rollout.max_new_tokens
    task = zero
    reg = zero
    for idx in module.micro_batches(seqs):
        mb = collate(seqs, idx, module.pad_id, device)
        mask = mb["response_mask"]
        logits, logp, _ = module.forward_sequences(mb, with_values=False)
        advantages = traj_adv[[seqs.traj_index[i] for i in idx]].to(device)[:, None] * mask
        pl = policy_loss(
            logp, logp.detach(), advantages, mask, algo.clip_low, algo.clip_high, algo.clip_ratio_c,
            algo.dual_clip, algo.loss_agg_mode, norm_length=norm_length,
        )
        ent = aggregate_loss(entropy_from_logits(logits[:, :-1]), mask, algo.loss_agg_mode, norm_length=norm_length)
        reg_mb = -algo.entropy_coef * ent
        if algo.kl_coef > 0:
            with torch.no_grad(), model.disable_adapter():
                ref_logp = module.forward_sequences(mb, with_values=False)[1]
            kl = aggregate_loss(kl_penalty(logp, ref_logp, algo.kl_estimator), mask, algo.loss_agg_mode, norm_length=norm_length)
            reg_mb = reg_mb + algo.kl_coef * kl
        weight = module.micro_batch_weight(algo.loss_agg_mode, float(mask.sum()), total_tokens, len(idx), n)
        task = task + pl.loss * weight
        reg = reg + reg_mb * weight
    return task, reg


def grad_norm(loss: torch.Tensor, params: list[torch.Tensor], retain_graph: bool = False) -> float:
    """L2 norm of d loss / d params via ``torch.autograd.grad`` (``.grad`` fields stay untouched)."""
    if not loss.requires_grad:
        return 0.0
    grads = torch.autograd.grad(loss, params, retain_graph=retain_graph, allow_unused=True)
    norms = [g.detach().float().norm(2) for g in grads if g is not None]
    if not norms:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack(norms), 2))


class GradBucketAnalysis(L.Callback):
    """Per RV bucket k (0 = lowest RV): ``grad_bucket/<k>/task_norm``, ``.../reg_norm``, ``.../rv_mean``.

    Runs at step 1 and every ``every`` steps (0 = never). Buckets come from
    :func:`agentcollapse.filtering.rv_quantile_buckets`; with fewer than 6 prompts the highest-numbered
    buckets are empty and are skipped.
    """

    def __init__(self, every: int = 0, num_buckets: int = NUM_BUCKETS) -> None:
        self.every = int(every)
        self.num_buckets = int(num_buckets)

    def due(self, step: int) -> bool:
        return self.every > 0 and (step == 1 or step % self.every == 0)

    def on_rollout(self, module: Any, batch: RolloutBatch, step: int) -> dict[str, float]:
        if not self.due(step) or batch.group_size < 2 or batch.num_prompts == 0:
            return {}  # RV needs >= 2 rollouts per prompt
        returns = batch.returns()
        if not np.all(np.isfinite(returns)):
            return {}  # the update's own NaN/inf handling deals with such a batch; nothing to measure
        started = time.perf_counter()
        rv = group_scores(returns, "reward_variance")
        buckets = rv_quantile_buckets(rv, self.num_buckets)
        params = [p for p in module.model.parameters() if p.requires_grad]
        modes = {m: m.training for m in module.modules()}
        out: dict[str, float] = {}
        try:
            module.eval()  # deterministic forward: no dropout, no RNG drawn
            with torch.enable_grad():
                for k, groups in enumerate(buckets):
                    if len(groups) == 0:
                        continue
                    task, reg = group_loss_terms(module, batch, groups)
                    task_norm = grad_norm(task, params, retain_graph=True)
                    reg_norm = grad_norm(reg, params)
                    out[f"grad_bucket/{k}/task_norm"] = task_norm
                    out[f"grad_bucket/{k}/reg_norm"] = reg_norm
                    out[f"grad_bucket/{k}/rv_mean"] = float(rv[groups].mean())
        finally:
            for m, training in modes.items():
                m.training = training
        out["perf/grad_bucket_time_s"] = time.perf_counter() - started
        return out
