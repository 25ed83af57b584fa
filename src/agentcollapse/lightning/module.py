"""The RL LightningModule: rollout -> advantages -> diagnostics/filter hooks -> clipped policy update.

Manual optimisation: each ``training_step`` is one RL iteration. The math lives in
``agentcollapse.algorithms`` and ``agentcollapse.filtering``; this module only orchestrates it.
"""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L
import numpy as np
import torch

from agentcollapse import envs
from agentcollapse.algorithms import (
    aggregate_loss,
    compute_group_advantages,
    entropy_from_logits,
    gae_advantages,
    get_preset,
    kl_penalty,
    masked_mean,
    policy_loss,
    value_loss,
)
from agentcollapse.algorithms.presets import AlgorithmPreset
from agentcollapse.config import RunConfig
from agentcollapse.errors import UserError
from agentcollapse.filtering import group_scores, loss_scale, select_groups, trajectory_filter
from agentcollapse.rollout.batch import RolloutBatch
from agentcollapse.rollout.runner import Policy, collect_rollouts, rollout_metrics
from agentcollapse.rollout.sequences import Sequences, build_sequences, collate, gather_logprobs

TRAIN_SEED_BASE = 1_000_000  # training maps; held-out validation maps use seeds below this
VALIDATION_SEED_BASE = 0


def resolve_algorithm(cfg: RunConfig) -> AlgorithmPreset:
    """The preset named by ``algorithm.name`` with every non-null field of the config laid over it."""
    try:
        preset = get_preset(cfg.algorithm.name)
    except ValueError as exc:
        raise UserError(f"unknown algorithm: {exc}") from None
    overrides = {
        k: getattr(cfg.algorithm, k)
        for k in preset.__dataclass_fields__
        if k != "name" and hasattr(cfg.algorithm, k) and getattr(cfg.algorithm, k) is not None
    }
    for key in ("kl_coef", "entropy_coef", "clip_low", "clip_high"):
        value = overrides.get(key)
        if value is not None and (not math.isfinite(value) or value < 0):
            raise UserError(f"algorithm.{key}={value} must be a finite number >= 0")
    try:
        return preset.__class__(**{**preset.__dict__, **overrides})
    except (ValueError, TypeError) as exc:
        raise UserError(f"bad algorithm settings: {exc}") from None


class ValueHead(torch.nn.Module):
    """PPO critic: a linear read-out of the policy's last hidden state."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)


class AgentRLModule(L.LightningModule):
    def __init__(self, cfg: RunConfig, policy: Policy) -> None:
        super().__init__()
        self.cfg = cfg
        self.policy = policy
        self.model = policy.model
        self.algo = resolve_algorithm(cfg)
        if cfg.rollout.group_size < 2 and self.algo.advantage in ("grpo", "dr_grpo"):
            raise UserError(
                f"algorithm={self.algo.name} normalises rewards within a group: set rollout.group_size>=2 "
                f"(got {cfg.rollout.group_size})"
            )
        hidden = int(getattr(self.model.config, "hidden_size"))
        self.value_head = ValueHead(hidden) if self.algo.use_critic else None
        self.model.train()  # from_pretrained leaves eval mode; rollouts switch to eval themselves
        self.automatic_optimization = False
        self.iteration = 0  # RL iterations done (the env-seed cursor); saved in checkpoints
        self.empty_steps = 0  # consecutive iterations whose filtered batch was empty
        self.nonfinite_steps = 0  # consecutive iterations whose loss was NaN/inf
        self.nonfinite_total = 0
        self.stop_reason = ""
        self.recorder: Any = None  # a RunRecorder, set by the run-record callback

    # -- Lightning plumbing -------------------------------------------------------------------
    def configure_optimizers(self):
        params = [p for p in self.model.parameters() if p.requires_grad]
        groups = [{"params": params, "lr": self.cfg.algorithm.lr}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "lr": self.cfg.algorithm.critic_lr})
        return torch.optim.AdamW(groups, weight_decay=0.0)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        import random

        # Only trainable tensors: the frozen base is rebuilt from the cache, so checkpoints stay small.
        trainable = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}
        np_state = np.random.get_state()
        checkpoint["agentcollapse"] = {
            "iteration": self.iteration,
            "empty_steps": self.empty_steps,
            "nonfinite_steps": self.nonfinite_steps,
            "nonfinite_total": self.nonfinite_total,
            # Plain types and tensors only, so torch.load(weights_only=True) can read the checkpoint.
            "rng": {
                "torch": torch.get_rng_state(),
                "numpy": {
                    "name": str(np_state[0]), "keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                    "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4]),
                },
                "python": random.getstate(),
            },
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        import random

        state = checkpoint.get("agentcollapse")
        if state is None:
            raise UserError("checkpoint has no agentcollapse state; it was not written by this project")
        self.iteration = int(state["iteration"])
        self.empty_steps = int(state["empty_steps"])
        self.nonfinite_steps = int(state["nonfinite_steps"])
        self.nonfinite_total = int(state["nonfinite_total"])
        rng = state["rng"]
        torch.set_rng_state(rng["torch"])
        np_state = rng["numpy"]
        if isinstance(np_state, dict):
            keys = np_state["keys"].numpy().astype(np.uint32)
            np.random.set_state((np_state["name"], keys, np_state["pos"], np_state["has_gauss"], np_state["cached_gaussian"]))
        else:  # an older checkpoint that pickled numpy's state tuple as is
            np.random.set_state(np_state)
        if "python" in rng:
            version, internal, gauss = rng["python"]
            random.setstate((version, tuple(internal), gauss))
        # Frozen weights are not in the checkpoint; fill them from the live model so strict loading passes.
        own = self.state_dict()
        checkpoint["state_dict"] = {**own, **checkpoint["state_dict"]}

    # -- one RL iteration ---------------------------------------------------------------------
    def train_env_seeds(self, iteration: int) -> list[int]:
        p = self.cfg.rollout.num_prompts
        rank, world = self.global_rank, max(1, self.trainer.world_size if self._trainer else 1)
        base = TRAIN_SEED_BASE + self.cfg.seed * 10_000_000 + (iteration * world + rank) * p
        return list(range(base, base + p))

    def make_env(self):
        return envs.make(self.cfg.env.name, **dict(self.cfg.env.kwargs))

    def training_step(self, batch: Any, batch_idx: int) -> None:
        if self.iteration >= self.cfg.trainer.max_steps:
            self.trainer.should_stop = True
            return
        step = self.iteration + 1
        if step == 1 and self.cfg.trainer.val_every > 0:
            self.log_metrics(0, self.evaluate())  # the warm-start policy, before any update
        started = time.perf_counter()
        metrics: dict[str, float] = {}
        rollout, perf = collect_rollouts(
            self.policy,
            self.make_env,
            self.train_env_seeds(self.iteration),
            self.cfg.rollout.group_size,
            self.cfg.rollout.temperature,
            self.cfg.rollout.max_new_tokens,
            sample_seed=(self.cfg.seed * 1_000_003 + self.iteration) * 101 + self.global_rank,
            generation_batch_size=self.cfg.rollout.generation_batch_size,
        )
        metrics.update(perf)
        metrics.update(rollout_metrics(rollout))
        for callback in self.trainer.callbacks:  # diagnostics see the full batch, before filtering
            if hasattr(callback, "on_rollout"):
                metrics.update(callback.on_rollout(self, rollout, step) or {})
        kept_groups, traj_mask, scale, filter_metrics = self.apply_filter(rollout)
        metrics.update(filter_metrics)
        if len(kept_groups) == 0:
            self.empty_steps += 1
            metrics["rollout/empty_after_filter"] = 1.0
            if self.empty_steps >= self.cfg.filter.max_empty_steps:
                self.request_stop(f"filter kept no group for {self.empty_steps} consecutive steps (filter={self.cfg.filter.name})")
        else:
            self.empty_steps = 0
            metrics["rollout/empty_after_filter"] = 0.0
            metrics.update(self.update(rollout, kept_groups, traj_mask, scale))
        metrics["perf/step_time_s"] = time.perf_counter() - started
        self.iteration = step
        if self.cfg.trainer.val_every > 0 and (step % self.cfg.trainer.val_every == 0 or step == self.cfg.trainer.max_steps):
            metrics.update(self.evaluate())
        self.log_metrics(step, metrics)
        self.log("success", metrics["rollout/success_rate"], prog_bar=True, logger=False)
        if step >= self.cfg.trainer.max_steps:
            self.trainer.should_stop = True

    def request_stop(self, reason: str) -> None:
        self.stop_reason = reason
        self.trainer.should_stop = True

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        metrics = {k: float(v) for k, v in metrics.items()}
        if self.recorder is not None and self.global_rank == 0:
            self.recorder.log(step, metrics)
        for logger in self.trainer.loggers:
            logger.log_metrics(metrics, step=step)

    # -- filtering ------------------------------------------------------------------------------
    def apply_filter(self, rollout: RolloutBatch) -> tuple[np.ndarray, np.ndarray | None, float, dict[str, float]]:
        f = self.cfg.filter
        returns = rollout.returns()
        all_groups = np.arange(rollout.num_prompts)
        if f.name == "none":
            return all_groups, None, 1.0, {"filter/kept_count": float(len(all_groups)), "filter/kept_ratio": 1.0}
        if f.trajectory_k > 0:
            mask = trajectory_filter(returns, f.trajectory_k)
            return all_groups, mask, 1.0, {"filter/kept_ratio": float(mask.mean()), "filter/kept_count": float(mask.sum())}
        values = returns
        if f.metric in ("entropy", "entropy_variance", "length"):
            values = self.trajectory_feature(rollout, f.metric)
        scores = group_scores(values, f.metric)
        value = tuple(f.value) if isinstance(f.value, (list, tuple)) else f.value
        kept = select_groups(scores, f.strategy, value, f.include_zero, f.top_p_mode, f.selection_eps)
        if f.metric in ("reward_variance", "reward_std") and np.all(scores <= 1e-12):
            kept = kept[:0]  # METHOD.md 5: no group carries task signal, so skip rather than regularise only
        rv = group_scores(returns, "reward_variance")
        out = {
            "filter/kept_count": float(len(kept)),
            "filter/kept_ratio": float(len(kept) / max(1, len(scores))),
            "filter/zero_count": float(np.sum(scores <= 1e-12)),
            "filter/all_rv_mean": float(rv.mean()),
            "filter/chosen_rv_mean": float(rv[kept].mean()) if len(kept) else 0.0,
            "filter/all_success_mean": float(rollout.successes().mean()),
            "filter/chosen_success_mean": float(rollout.successes()[kept].mean()) if len(kept) else 0.0,
        }
        scale = loss_scale(len(kept), len(scores), f.loss_scale) if len(kept) else 1.0
        return kept, None, scale, out

    def trajectory_feature(self, rollout: RolloutBatch, metric: str) -> np.ndarray:
        if metric == "length":
            values = [t.response_length for t in rollout.trajectories]
        else:  # sequence-mean token entropy of the policy on its own samples
            values = self.trajectory_entropies(rollout)
        return np.asarray(values, dtype=np.float64).reshape(rollout.num_prompts, rollout.group_size)

    @torch.no_grad()
    def trajectory_entropies(self, rollout: RolloutBatch) -> list[float]:
        seqs = build_sequences(rollout)
        totals = np.zeros(len(rollout.trajectories))
        counts = np.zeros(len(rollout.trajectories))
        for idx in self.micro_batches(seqs):
            mb = collate(seqs, idx, self.pad_id, self.device)
            logits = self.model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"]).logits
            ent = entropy_from_logits(logits[:, :-1]) * mb["response_mask"]
            for row, i in enumerate(idx):
                totals[seqs.traj_index[i]] += float(ent[row].sum())
                counts[seqs.traj_index[i]] += float(mb["response_mask"][row].sum())
        return list(totals / np.maximum(counts, 1))

    # -- the update -----------------------------------------------------------------------------
    @property
    def pad_id(self) -> int:
        tok = self.policy.tokenizer
        return int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)

    def micro_batches(self, seqs: Sequences) -> list[list[int]]:
        """Micro-batches of similar length (little padding), in a fixed order."""
        order = sorted(range(len(seqs.input_ids)), key=lambda i: len(seqs.input_ids[i]))
        size = self.cfg.algorithm.micro_batch_size
        return [order[i : i + size] for i in range(0, len(order), size)]

    @staticmethod
    def micro_batch_weight(mode: str, mb_tokens: float, total_tokens: float, mb_seqs: int, total_seqs: int) -> float:
        """Weight of a micro-batch's aggregated loss so the sum over micro-batches equals the loss of
        the whole batch aggregated in one piece (``seq-mean-token-sum-norm`` aggregates a *sum* over
        sequences, divided by the constant length, so it is averaged over all sequences here)."""
        if mode == "token-mean":
            return mb_tokens / total_tokens
        if mode == "seq-mean-token-sum-norm":
            return 1.0 / total_seqs
        return mb_seqs / total_seqs

    def forward_sequences(self, mb: dict[str, torch.Tensor], with_values: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        out = self.model(
            input_ids=mb["input_ids"], attention_mask=mb["attention_mask"], output_hidden_states=with_values
        )
        values = self.value_head(out.hidden_states[-1][:, :-1]) if with_values and self.value_head is not None else None
        return out.logits, gather_logprobs(out.logits, mb["input_ids"]), values

    def update(self, rollout: RolloutBatch, kept_groups: np.ndarray, traj_mask: np.ndarray | None, scale: float) -> dict[str, float]:
        algo = self.algo
        t0 = time.perf_counter()
        batch = rollout.select_groups(kept_groups)
        returns = torch.as_tensor(batch.returns(), dtype=torch.float32, device=self.device)
        seqs = build_sequences(batch)
        if traj_mask is not None:  # trajectory-level filter: drop unkept trajectories' sequences
            flat = traj_mask[kept_groups].reshape(-1)
            keep = [i for i, t in enumerate(seqs.traj_index) if flat[t]]
            seqs = Sequences(*[[getattr(seqs, f)[i] for i in keep] for f in ("input_ids", "loss_mask", "traj_index", "is_last")])
        n = len(seqs.input_ids)
        micro = [(idx, collate(seqs, idx, self.pad_id, self.device)) for idx in self.micro_batches(seqs)]
        # Scoring pass (no grad): behaviour log-probs, reference log-probs (adapter off), old values.
        # With one epoch the update runs on the behaviour policy itself, so its own detached
        # log-probs are the old ones and that forward is skipped.
        on_policy = self.cfg.algorithm.ppo_epochs == 1
        old_logp: list[torch.Tensor | None] = []
        ref_logp, old_values = [], []
        with torch.no_grad():
            for _, mb in micro:
                if on_policy and not algo.use_critic:
                    old_logp.append(None)
                    old_values.append(None)
                else:
                    _, logp, values = self.forward_sequences(mb, with_values=algo.use_critic)
                    old_logp.append(None if on_policy else logp)
                    old_values.append(values)
                if algo.kl_coef > 0:
                    with self.model.disable_adapter():
                        ref_logp.append(self.forward_sequences(mb, with_values=False)[1])
        t_scored = time.perf_counter()
        # Advantages: group-relative per trajectory (credited to every response token), or GAE (PPO).
        advantages: list[torch.Tensor] = []
        value_targets: list[torch.Tensor] = []
        if algo.advantage in ("grpo", "dr_grpo"):
            traj_adv = compute_group_advantages(algo.advantage, returns).reshape(-1)
            for idx, mb in micro:
                per_seq = traj_adv[[seqs.traj_index[i] for i in idx]]
                advantages.append(per_seq[:, None] * mb["response_mask"])
        else:
            flat_returns = returns.reshape(-1)
            for k, (idx, mb) in enumerate(micro):
                mask = mb["response_mask"]
                rewards = torch.zeros_like(mask)
                for row, i in enumerate(idx):
                    if seqs.is_last[i] and mask[row].any():  # the return is credited at the last token
                        rewards[row, int(torch.nonzero(mask[row]).max())] = float(flat_returns[seqs.traj_index[i]])
                adv, ret = gae_advantages(rewards, old_values[k], mask, algo.gamma, algo.lam)
                advantages.append(adv)
                value_targets.append(ret)
            advantages = whiten_across(advantages, [mb["response_mask"] for _, mb in micro])
        total_tokens = float(sum(sum(m) for m in seqs.loss_mask)) or 1.0
        stats: dict[str, list[float]] = {k: [] for k in ("pg_loss", "kl", "entropy", "clipfrac", "approx_kl", "grad_norm", "value_loss")}
        opt = self.optimizers()
        skipped = False
        for _ in range(self.cfg.algorithm.ppo_epochs):
            opt.zero_grad(set_to_none=True)
            nonfinite = False
            for k, (idx, mb) in enumerate(micro):
                mask = mb["response_mask"]
                logits, logp, values = self.forward_sequences(mb, with_values=algo.use_critic)
                old = logp.detach() if old_logp[k] is None else old_logp[k]
                pl = policy_loss(
                    logp, old, advantages[k], mask, algo.clip_low, algo.clip_high, algo.clip_ratio_c,
                    algo.dual_clip, algo.loss_agg_mode, norm_length=self.cfg.rollout.max_new_tokens,
                )
                entropy = entropy_from_logits(logits[:, :-1])
                ent = aggregate_loss(entropy, mask, algo.loss_agg_mode, norm_length=self.cfg.rollout.max_new_tokens)
                loss = pl.loss - algo.entropy_coef * ent
                if algo.kl_coef > 0:
                    kl = aggregate_loss(kl_penalty(logp, ref_logp[k], algo.kl_estimator), mask, algo.loss_agg_mode, norm_length=self.cfg.rollout.max_new_tokens)
                    loss = loss + algo.kl_coef * kl
                    stats["kl"].append(float(kl.detach()))
                if values is not None:
                    vl, _ = value_loss(values, value_targets[k], old_values[k], mask)
                    loss = loss + vl
                    stats["value_loss"].append(float(vl.detach()))
                weight = self.micro_batch_weight(algo.loss_agg_mode, float(mask.sum()), total_tokens, len(idx), n)
                loss = loss * weight * scale
                if not torch.isfinite(loss):
                    nonfinite = True
                    break
                self.manual_backward(loss)
                stats["pg_loss"].append(float(pl.loss.detach()))
                stats["entropy"].append(float(masked_mean(entropy.detach(), mask)))
                stats["clipfrac"].append(float(pl.clipfrac))
                stats["approx_kl"].append(float(pl.approx_kl))
            if nonfinite:
                opt.zero_grad(set_to_none=True)
                skipped = True
                break
            params = [p for g in opt.param_groups for p in g["params"]]
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.algorithm.max_grad_norm)
            if not torch.isfinite(grad_norm):
                opt.zero_grad(set_to_none=True)
                skipped = True
                break
            stats["grad_norm"].append(float(grad_norm))
            opt.step()
        if skipped:
            self.nonfinite_steps += 1
            self.nonfinite_total += 1
            if self.nonfinite_steps >= self.cfg.algorithm.max_nonfinite_steps:
                self.request_stop(f"loss was NaN/inf for {self.nonfinite_steps} consecutive steps; lower algorithm.lr or check rewards")
        else:
            self.nonfinite_steps = 0
        out = {f"actor/{k}": float(np.mean(v)) for k, v in stats.items() if v and k != "value_loss"}
        if stats["value_loss"]:
            out["critic/value_loss"] = float(np.mean(stats["value_loss"]))
        out["actor/nonfinite_loss_count"] = float(self.nonfinite_total)
        out["actor/loss_scale"] = float(scale)
        out["actor/num_sequences"] = float(n)
        out["perf/scoring_time_s"] = t_scored - t0
        out["perf/update_time_s"] = time.perf_counter() - t_scored
        return out

    # -- validation -----------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        t0 = time.perf_counter()
        seeds = list(range(VALIDATION_SEED_BASE, VALIDATION_SEED_BASE + self.cfg.trainer.val_episodes))
        out: dict[str, float] = {}
        for temp in self.cfg.trainer.val_temperatures:
            batch, _ = collect_rollouts(
                self.policy, self.make_env, seeds, 1, temp, self.cfg.rollout.max_new_tokens,
                sample_seed=12345 + self.cfg.seed, generation_batch_size=self.cfg.rollout.generation_batch_size,
            )
            out[validation_metric_name(temp)] = float(batch.successes().mean())
            if temp == 0.5:
                out["val/format_valid_rate"] = rollout_metrics(batch)["rollout/format_valid_rate"]
        out["perf/val_time_s"] = time.perf_counter() - t0
        return out


def validation_metric_name(temperature: float) -> str:
    if temperature == 0.5:
        return "val/success_rate"  # the paper's evaluation temperature
    if temperature == 0:
        return "val/success_rate_greedy"
    return f"val/success_rate_t{temperature:g}"


def whiten_across(values: list[torch.Tensor], masks: list[torch.Tensor]) -> list[torch.Tensor]:
    """Whiten token advantages with the mean/std of every valid token of the batch (PPO practice)."""
    flat = torch.cat([v[m > 0] for v, m in zip(values, masks)])
    if flat.numel() < 2:
        return values
    mean, std = flat.mean(), flat.std().clamp_min(1e-8)
    return [(v - mean) / std * m for v, m in zip(values, masks)]
