"""``GradBucketAnalysis``: gradient norms of the task and regulariser terms per reward-variance bucket.

docs/method.md section 4: split the prompts of a rollout batch into 6 RV quantile buckets and measure, per
bucket, the gradient norm over the trainable (LoRA) parameters of the policy-gradient term alone and of
the KL + entropy regulariser alone. The paper finds the task norm rising with RV while the regulariser
norm stays flat, so low-RV prompts contribute mostly regulariser pressure.

Like ``CollapseDiagnostics`` it is a rollout hook (``lightning.hooks``): it sees the full batch before
filtering. It is read-only: gradients come from ``torch.autograd.grad``, so no
parameter's ``.grad`` and no optimizer state is touched; the model runs in eval mode (no dropout, so no
torch RNG is drawn) and every submodule's train/eval flag is restored afterwards. A run with it enabled
therefore makes exactly the same updates as one without it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

import lightning as L
from agentcollapse.algorithms import ADVANTAGE_ESTIMATORS, compute_group_advantages, micro_batch_weight, rl_objective
from agentcollapse.config import RunConfig
from agentcollapse.filtering import group_scores, rv_buckets
from agentcollapse.lightning.hooks import HookResult
from agentcollapse.lightning.update import micro_batches
from agentcollapse.rollout.batch import RolloutBatch
from agentcollapse.rollout.sequences import build_sequences, collate

NUM_BUCKETS = 6


def group_loss_terms(module: Any, batch: RolloutBatch, groups: list[int] | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(task_loss, reg_loss) of ``module``'s update objective restricted to the prompt ``groups`` of ``batch``.

    The update's own objective (:func:`agentcollapse.algorithms.rl_objective`) with ``scale=1`` and one
    on-policy epoch (old log-prob = the detached current one, so the ratio is 1), aggregated over the
    subset's sequences exactly as the update aggregates over the kept ones. Advantages are computed on
    the FULL batch returns and then indexed, so each prompt keeps its own group normalisation. For
    PPO the group-normalised (GRPO) advantage stands in for the critic's GAE, which depends on the value
    head and the whole batch: the buckets are about each prompt's reward variance. The critic's value
    loss is neither term and is left out. Both tensors carry the autograd graph.
    """
    algo = module.algo
    model = module.model
    groups = [int(g) for g in groups]
    device = next(model.parameters()).device
    zero = torch.zeros((), device=device)
    if not groups:
        return zero, zero
    returns = torch.as_tensor(batch.returns(), dtype=torch.float32)
    estimator = algo.advantage if algo.advantage in ADVANTAGE_ESTIMATORS else "grpo"
    traj_adv = compute_group_advantages(estimator, returns)[groups].reshape(-1)  # the order of select_groups
    seqs = build_sequences(batch.select_groups(groups))
    n = len(seqs.input_ids)
    if n == 0:
        return zero, zero
    total_tokens = float(sum(sum(m) for m in seqs.loss_mask)) or 1.0
    task = zero
    reg = zero
    for idx in micro_batches(seqs, module.cfg.algorithm.micro_batch_size, share_prompts=module.prompts_shared()):
        mb = collate(seqs, idx, module.pad_id, device)
        mask = mb["response_mask"]
        entropy, logp, _ = module.forward_sequences(mb, with_values=False)
        advantages = traj_adv[[seqs.traj_index[i] for i in idx]].to(device)[:, None] * mask
        ref_logp = None
        if algo.kl_coef > 0:
            with torch.no_grad(), model.disable_adapter():
                ref_logp = module.forward_sequences(mb, with_values=False, with_entropy=False)[1]
        weight = micro_batch_weight(algo.loss_agg_mode, float(mask.sum()), total_tokens, len(idx), n)
        terms = rl_objective(
            algo, entropy, logp, logp.detach(), advantages, mask, module.cfg.rollout.max_new_tokens, weight=weight, ref_logp=ref_logp
        )
        task = task + terms.task
        reg = reg + terms.regulariser
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

    def __init__(self, every: int = 0, num_buckets: int = NUM_BUCKETS, mode: str = "quantile") -> None:
        self.every = int(every)
        self.num_buckets = int(num_buckets)
        self.mode = mode  # quantile: equal-count RV buckets; fixed_rv: the authors' fixed reward-std edges

    @classmethod
    def from_run_config(cls, cfg: RunConfig) -> GradBucketAnalysis:
        return cls(every=cfg.diagnostics.grad_buckets_every, mode=cfg.diagnostics.grad_buckets_mode)

    def due(self, step: int) -> bool:
        return self.every > 0 and (step == 1 or step % self.every == 0)

    def on_rollout(self, module: Any, batch: RolloutBatch, step: int) -> HookResult:
        return HookResult(metrics=self.measure(module, batch, step))

    def measure(self, module: Any, batch: RolloutBatch, step: int) -> dict[str, float]:
        if not self.due(step) or batch.group_size < 2 or batch.num_prompts == 0:
            return {}  # RV needs >= 2 rollouts per prompt
        returns = batch.returns()
        if not np.all(np.isfinite(returns)):
            return {}  # the update's own NaN/inf handling deals with such a batch; nothing to measure
        started = time.perf_counter()
        rv = group_scores(returns, "reward_variance")  # logged as grad_bucket/<k>/rv_mean
        # The authors' fixed edges are in units of the reward std; quantile buckets rank alike either way.
        buckets = rv_buckets(group_scores(returns, "reward_std") if self.mode == "fixed_rv" else rv, self.num_buckets, self.mode)
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
