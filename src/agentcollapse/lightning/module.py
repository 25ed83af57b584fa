"""The RL LightningModule: rollout -> rollout hooks (diagnostics, filter) -> advantages -> clipped
policy update.

Manual optimisation: each ``training_step`` is one RL iteration. The math lives in
``agentcollapse.algorithms``; what watches and what chooses the trained groups are callbacks
(``lightning.hooks``); this module only orchestrates them. On several ranks (``trainer=ddp``) the
iteration computes what one process computes (``lightning.distributed``): a sharded rollout gathered
into the global batch, hooks on that batch, and an update whose micro-batches are split across ranks.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch

import lightning as L
from agentcollapse import envs, seeds
from agentcollapse.algorithms import (
    compute_group_advantages,
    entropy_from_logits,
    gae_advantages,
    micro_batch_weight,
    rl_objective,
    whiten_across,
)
from agentcollapse.config import RunConfig
from agentcollapse.config.resolve import algorithm_preset
from agentcollapse.errors import UserError
from agentcollapse.filtering import groups_with_signal
from agentcollapse.lightning import distributed
from agentcollapse.lightning.hooks import RolloutHook, Selection
from agentcollapse.lightning.shared_eval import SharedEvaluations, step0_key
from agentcollapse.models.policy import Policy
from agentcollapse.progress import peak_rss_mib
from agentcollapse.rollout.batch import RolloutBatch
from agentcollapse.rollout.runner import collect_rollouts, rollout_metrics
from agentcollapse.rollout.sequences import Sequences, build_sequences, collate, gather_logprobs

log = logging.getLogger("agentcollapse")


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
        self.algo = algorithm_preset(cfg.algorithm)  # the config was validated (group sizes, coefficients) before
        hidden = int(self.model.config.hidden_size)
        self.value_head = ValueHead(hidden) if self.algo.use_critic else None
        self.model.train()  # from_pretrained leaves eval mode; rollouts switch to eval themselves
        self.automatic_optimization = False
        self.iteration = 0  # RL iterations done (the env-seed cursor); saved in checkpoints
        self.nonfinite_steps = 0  # consecutive iterations whose loss was NaN/inf
        self.nonfinite_total = 0
        self.stop_reason = ""
        self.recorder: Any = None  # a RunRecorder, set by the run-record callback
        self.last_metrics: dict[str, float] = {}  # the latest iteration's metrics (progress lines read them)

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
            "nonfinite_steps": self.nonfinite_steps,
            "nonfinite_total": self.nonfinite_total,
            # Plain types and tensors only, so torch.load(weights_only=True) can read the checkpoint.
            "rng": {
                "torch": torch.get_rng_state(),
                "numpy": {
                    "name": str(np_state[0]),
                    "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                    "pos": int(np_state[2]),
                    "has_gauss": int(np_state[3]),
                    "cached_gaussian": float(np_state[4]),
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

    def on_train_start(self) -> None:
        rank, size = distributed.world()
        if size > 1:  # each rank says what it decodes: the one sign in a log that every rank is there
            start, stop = distributed.shard_bounds(self.cfg.rollout.num_prompts, rank, size)
            log.info("rank %d/%d rolls out groups %d..%d of the global P=%d", rank, size, start, stop - 1, self.cfg.rollout.num_prompts)

    # -- one RL iteration ---------------------------------------------------------------------
    def train_env_seeds(self, iteration: int, attempt: int = 0) -> list[int]:
        """The global P maps of ``iteration``, the same on every rank."""
        return seeds.train_env_seeds(self.cfg.seed, iteration, self.cfg.rollout.num_prompts, attempt=attempt)

    def collect(self, iteration: int, attempt: int = 0) -> tuple[RolloutBatch, dict[str, float]]:
        """The training rollout of ``iteration`` (``attempt`` > 0: an extra one of dynamic sampling)."""
        r = self.cfg.rollout
        sample_seed = seeds.rollout_sample_seed(self.cfg.seed, iteration, attempt=attempt)
        return self.sharded_rollout(self.train_env_seeds(iteration, attempt), r.group_size, r.temperature, sample_seed)

    def sharded_rollout(
        self, env_seeds: list[int], group_size: int, temperature: float | list[float], sample_seed: int
    ) -> tuple[RolloutBatch, dict[str, float]]:
        """The rollout of ``env_seeds`` as one process would draw it: each rank decodes its block of
        groups on the streams the whole batch gives them, then every rank receives the whole batch."""
        rank, size = distributed.world()
        start, stop = distributed.shard_bounds(len(env_seeds), rank, size)
        local, perf = collect_rollouts(
            self.policy,
            self.make_env,
            env_seeds[start:stop],
            group_size,
            temperature if isinstance(temperature, (int, float)) else temperature[start:stop],
            self.cfg.rollout.max_new_tokens,
            sample_seed=sample_seed,
            generation_batch_size=self.cfg.rollout.generation_batch_size,
            stream_offset=start * group_size,
        )
        if size == 1:
            return local, perf
        parts = distributed.gather_objects((local, perf))
        # The slowest rank bounds the phase; throughput is every rank's tokens over that time.
        elapsed = max(p["perf/rollout_time_s"] for _, p in parts)
        tokens = sum(p["perf/rollout_tokens_per_s"] * p["perf/rollout_time_s"] for _, p in parts)
        perf = {"perf/rollout_time_s": elapsed, "perf/rollout_tokens_per_s": tokens / max(elapsed, 1e-9)}
        return RolloutBatch.concat([b for b, _ in parts]), perf

    def dynamic_sample(self, rollout: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        """DAPO's dynamic sampling: keep the groups whose rewards vary and roll out more prompts until P
        such groups are found or ``algorithm.max_resample_rounds`` extra batches were drawn; the first P
        found train. Groups without variance carry no task gradient. When no group varies at all, the
        original batch trains (its advantages are zero; only the regularisers act)."""
        started = time.perf_counter()
        target = self.cfg.rollout.num_prompts
        pool = [rollout.select_groups(groups_with_signal(rollout.returns()))]
        found, rounds = pool[0].num_prompts, 0
        while found < target and rounds < self.cfg.algorithm.max_resample_rounds:
            rounds += 1
            extra, _ = self.collect(self.iteration, attempt=rounds)
            pool.append(extra.select_groups(groups_with_signal(extra.returns())))
            found += pool[-1].num_prompts
        metrics = {
            "rollout/dynamic_sampling_rounds": float(rounds),
            "rollout/dynamic_sampling_groups": float(min(found, target)),
            "perf/dynamic_sampling_time_s": time.perf_counter() - started,
        }
        if found == 0:
            return rollout, metrics
        return RolloutBatch.concat(pool).select_groups(range(min(found, target))), metrics

    def make_env(self):
        return envs.from_config(self.cfg.env)

    def rollout_hooks(self) -> list[RolloutHook]:
        return [c for c in self.trainer.callbacks if isinstance(c, RolloutHook)]

    def run_hooks(self, rollout: RolloutBatch, step: int) -> tuple[Selection, dict[str, float]]:
        """Every rollout hook on the full batch; the one filter's selection, or every group."""
        metrics: dict[str, float] = {}
        selection, chooser = None, None
        for hook in self.rollout_hooks():
            result = hook.on_rollout(self, rollout, step)
            metrics.update(result.metrics)
            if result.selection is not None:
                if selection is not None:
                    raise UserError(
                        f"two callbacks choose the trained groups ({type(chooser).__name__}, {type(hook).__name__}); keep one filter in callbacks"
                    )
                selection, chooser = result.selection, hook
        return selection or Selection.everything(rollout.num_prompts), metrics

    def training_step(self, batch: Any, batch_idx: int) -> None:
        if self.iteration >= self.cfg.trainer.max_steps:
            self.trainer.should_stop = True
            return
        step = self.iteration + 1
        if step == 1 and self.cfg.trainer.val_every > 0:
            self.log_metrics(0, self.evaluate_warm_start())  # the warm-start policy, before any update
        started = time.perf_counter()
        metrics: dict[str, float] = {}
        rollout, perf = self.collect(self.iteration)
        metrics.update(perf)
        metrics["perf/peak_rss_after_rollout_mib"] = peak_rss_mib()
        metrics.update(rollout_metrics(rollout))  # of the first rollout: an unselected sample of the policy
        if self.algo.dynamic_sampling:
            rollout, sampled = self.dynamic_sample(rollout)
            metrics.update(sampled)
        selection, hook_metrics = self.run_hooks(rollout, step)
        # Every rank ran the hooks on the same batch; rank 0's choice is taken so that a last-bit
        # difference in a score (GPU kernels) cannot make ranks train different groups.
        selection = distributed.broadcast_object(selection)
        metrics.update(hook_metrics)
        metrics["perf/peak_rss_after_hooks_mib"] = peak_rss_mib()
        metrics["rollout/empty_after_filter"] = float(selection.is_empty)
        if not selection.is_empty:
            metrics.update(self.update(rollout, selection))
            metrics["perf/peak_rss_after_update_mib"] = peak_rss_mib()
        metrics["perf/step_time_s"] = time.perf_counter() - started
        if self.device.type == "cuda":  # what `make gpu-check` reports per phase; this rank's peak
            metrics["perf/gpu_peak_memory_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        self.iteration = step
        if self.cfg.trainer.val_every > 0 and (step % self.cfg.trainer.val_every == 0 or step == self.cfg.trainer.max_steps):
            metrics.update(self.evaluate())
        self.log_metrics(step, metrics)
        self.last_metrics = metrics
        self.log("success", metrics["rollout/success_rate"], prog_bar=True, logger=False)
        if step >= self.cfg.trainer.max_steps:
            self.trainer.should_stop = True
        # Lightning does not agree on should_stop across ranks: one rank leaving the loop alone
        # would leave the others waiting in the next collective.
        if distributed.world()[1] > 1:
            votes = distributed.gather_objects((bool(self.trainer.should_stop), self.stop_reason))
            self.trainer.should_stop = any(stop for stop, _ in votes)
            self.stop_reason = next((reason for _, reason in votes if reason), "")

    def request_stop(self, reason: str) -> None:
        self.stop_reason = reason
        self.trainer.should_stop = True

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        metrics = {k: float(v) for k, v in metrics.items()}
        if self.recorder is not None and self.global_rank == 0:
            self.recorder.log(step, metrics)
        for logger in self.trainer.loggers:
            logger.log_metrics(metrics, step=step)

    # -- what filters read ---------------------------------------------------------------------
    @torch.no_grad()
    def trajectory_entropies(self, rollout: RolloutBatch) -> list[float]:
        """Sequence-mean token entropy of the policy on each trajectory's own response tokens."""
        seqs = build_sequences(rollout)
        totals = np.zeros(len(rollout.trajectories))
        counts = np.zeros(len(rollout.trajectories))
        for idx in self.micro_batches(seqs):
            mb = collate(seqs, idx, self.pad_id, self.device)
            logits = self.forward_sequences(mb, with_values=False)[0]
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

    def micro_batches(self, seqs: Sequences, members: list[int] | None = None) -> list[list[int]]:
        """Micro-batches of similar length (little padding), in a fixed order, over ``members``
        (sequence indices; all of them by default)."""
        pool = range(len(seqs.input_ids)) if members is None else members
        order = sorted(pool, key=lambda i: len(seqs.input_ids[i]))
        size = self.cfg.algorithm.micro_batch_size
        return [order[i : i + size] for i in range(0, len(order), size)]

    def mini_batches(self, seqs: Sequences) -> list[list[int]]:
        """The sequence indices of each optimizer step: whole trajectories in batch order,
        ``algorithm.mini_batch_size`` of them per step (verl's ppo_mini_batch_size), or every sequence
        in one step when it is 0. A filter that keeps fewer groups then also takes fewer steps, as in
        the authors' code."""
        size = self.cfg.algorithm.mini_batch_size
        if not size:
            return [list(range(len(seqs.input_ids)))]
        step_of = {t: k // size for k, t in enumerate(sorted(set(seqs.traj_index)))}
        steps: list[list[int]] = [[] for _ in range(max(step_of.values(), default=-1) + 1)]
        for i, t in enumerate(seqs.traj_index):
            steps[step_of[t]].append(i)
        return steps

    def forward_sequences(self, mb: dict[str, torch.Tensor], with_values: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        # Sequences are right-padded (collate), so causality alone keeps every real token from seeing
        # padding: no attention mask is passed, and SDPA takes its causal kernel, which skips the
        # masked half of the score matrix (measured: ~10-15% of the update at FrozenLake's ~600 tokens).
        # Logits only from the batch's first target position on (collate's logits_from): every
        # returned tensor is aligned with mb["response_mask"].
        start = int(mb["logits_from"])
        keep = {"logits_to_keep": mb["input_ids"].shape[1] - start} if start else {}
        out = self.model(input_ids=mb["input_ids"], output_hidden_states=with_values, **keep)
        values = self.value_head(out.hidden_states[-1][:, start:-1]) if with_values and self.value_head is not None else None
        return out.logits, gather_logprobs(out.logits, mb["input_ids"], start), values

    def update(self, rollout: RolloutBatch, selection: Selection) -> dict[str, float]:
        """Optimizer steps on the selected groups of ``rollout``: per PPO epoch one per mini-batch
        (:meth:`mini_batches`; one on the whole batch by default)."""
        algo = self.algo
        t0 = time.perf_counter()
        kept_groups, traj_mask, scale = selection.groups, selection.trajectory_mask, selection.loss_scale
        batch = rollout.select_groups(kept_groups)
        returns = torch.as_tensor(batch.returns(), dtype=torch.float32, device=self.device)
        seqs = build_sequences(batch)
        if traj_mask is not None:  # trajectory-level filter: drop unkept trajectories' sequences
            flat = traj_mask[kept_groups].reshape(-1)
            keep = [i for i, t in enumerate(seqs.traj_index) if flat[t]]
            seqs = Sequences(*[[getattr(seqs, f)[i] for i in keep] for f in ("input_ids", "loss_mask", "traj_index", "is_last")])
        n = len(seqs.input_ids)  # global: every rank holds the whole kept batch, so weights are global
        # This rank's share of the micro-batches (all of them with one process): the gradient summed
        # over ranks is the one process's sum over every micro-batch.
        rank, size = distributed.world()
        minis = self.mini_batches(seqs)
        # micro[k]: (sequence indices, tensors) of this rank's k-th micro-batch; step_of[k] its
        # mini-batch, key_of[k] its index among every rank's micro-batches (the one-process order).
        micro: list[tuple[list[int], dict[str, torch.Tensor]]] = []
        step_of: list[int] = []
        key_of: list[int] = []
        offset = 0
        for m, members in enumerate(minis):
            all_micro = self.micro_batches(seqs, members)
            for k in distributed.rank_share(len(all_micro), rank, size):
                micro.append((all_micro[k], collate(seqs, all_micro[k], self.pad_id, self.device)))
                step_of.append(m)
                key_of.append(offset + k)
            offset += len(all_micro)
        # Scoring pass (no grad): behaviour log-probs, reference log-probs (adapter off), old values.
        # With one epoch of one step the update runs on the behaviour policy itself, so its own
        # detached log-probs are the old ones and that forward is skipped.
        on_policy = self.cfg.algorithm.ppo_epochs == 1 and len(minis) == 1
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
        if not algo.use_critic:
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
            # PPO practice, over every rank's tokens
            reduce = None if size == 1 else (lambda t: distributed.sum_across(t.to(self.device)))
            advantages = whiten_across(advantages, [mb["response_mask"] for _, mb in micro], reduce=reduce)
        # Each micro-batch's loss weight within its mini-batch; a mini-batch of fewer trajectories
        # than mini_batch_size counts for its share of one, as verl's gradient accumulation does.
        per_step = self.cfg.algorithm.mini_batch_size
        weights = []
        for members in minis:
            tokens = float(sum(sum(seqs.loss_mask[i]) for i in members)) or 1.0
            share = len({seqs.traj_index[i] for i in members}) / per_step if per_step else 1.0
            weights.append((tokens, len(members), share))
        # Per micro-batch statistics keyed by (epoch, global micro-batch index): gathered from every
        # rank and put back in the one-process order, their means are the one process's.
        stats: dict[str, list[tuple[int, int, float]]] = {
            k: [] for k in ("pg_loss", "kl", "entropy", "clipfrac", "lower_clipfrac", "approx_kl", "value_loss")
        }
        grad_norms: list[float] = []
        opt = self.optimizers()
        params = [p for g in opt.param_groups for p in g["params"]]
        skipped = False
        for epoch, step in ((e, m) for e in range(self.cfg.algorithm.ppo_epochs) for m in range(len(minis))):
            opt.zero_grad(set_to_none=True)
            nonfinite = False
            step_tokens, step_seqs, step_share = weights[step]
            # Lightning's DDP reducer would all-reduce at every backward and wait for ranks that run
            # fewer micro-batches (or none): gradients are summed once below instead.
            with distributed.without_reducer(self.trainer.strategy.model):
                for k, (idx, mb) in enumerate(micro):
                    if step_of[k] != step:
                        continue
                    key = (epoch, key_of[k])
                    mask = mb["response_mask"]
                    logits, logp, values = self.forward_sequences(mb, with_values=algo.use_critic)
                    old = logp.detach() if old_logp[k] is None else old_logp[k]
                    weight = step_share * micro_batch_weight(algo.loss_agg_mode, float(mask.sum()), step_tokens, len(idx), step_seqs)
                    terms = rl_objective(
                        algo,
                        logits,
                        logp,
                        old,
                        advantages[k],
                        mask,
                        self.cfg.rollout.max_new_tokens,
                        weight=weight,
                        ref_logp=ref_logp[k] if algo.kl_coef > 0 else None,
                        values=values,
                        value_targets=value_targets[k] if values is not None else None,
                        old_values=old_values[k] if values is not None else None,
                    )
                    if terms.kl is not None:
                        stats["kl"].append((*key, float(terms.kl)))
                    if terms.value_loss is not None:
                        stats["value_loss"].append((*key, float(terms.value_loss)))
                    loss = terms.total * scale
                    if not torch.isfinite(loss):
                        nonfinite = True
                        break
                    self.manual_backward(loss)
                    stats["pg_loss"].append((*key, float(terms.policy.loss.detach())))
                    stats["entropy"].append((*key, float(terms.entropy)))
                    stats["clipfrac"].append((*key, float(terms.policy.clipfrac)))
                    stats["lower_clipfrac"].append((*key, float(terms.policy.lower_clipfrac)))
                    stats["approx_kl"].append((*key, float(terms.policy.approx_kl)))
            if distributed.any_rank(nonfinite):
                opt.zero_grad(set_to_none=True)
                skipped = True
                break
            distributed.all_reduce_grads(params)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.algorithm.max_grad_norm)
            if not torch.isfinite(grad_norm):
                opt.zero_grad(set_to_none=True)
                skipped = True
                break
            grad_norms.append(float(grad_norm))
            opt.step()
        if skipped:
            self.nonfinite_steps += 1
            self.nonfinite_total += 1
            if self.nonfinite_steps >= self.cfg.algorithm.max_nonfinite_steps:
                self.request_stop(f"loss was NaN/inf for {self.nonfinite_steps} consecutive steps; lower algorithm.lr or check rewards")
        else:
            self.nonfinite_steps = 0
        parts = distributed.gather_objects(stats)
        merged = {k: [v for _, _, v in sorted(e for part in parts for e in part[k])] for k in stats}
        merged["grad_norm"] = grad_norms
        out = {f"actor/{k}": float(np.mean(v)) for k, v in merged.items() if v and k != "value_loss"}
        if merged["value_loss"]:
            out["critic/value_loss"] = float(np.mean(merged["value_loss"]))
        out["actor/nonfinite_loss_count"] = float(self.nonfinite_total)
        out["actor/loss_scale"] = float(scale)
        out["actor/num_sequences"] = float(n)
        out["actor/optimizer_steps"] = float(len(grad_norms))
        out["perf/update_tokens"] = float(sum(mb["input_ids"].numel() for _, mb in micro))
        out["perf/scoring_time_s"] = t_scored - t0
        out["perf/update_time_s"] = time.perf_counter() - t_scored
        return out

    # -- validation -----------------------------------------------------------------------------
    def evaluate_warm_start(self) -> dict[str, float]:
        """Step 0's evaluation, read from ``trainer.shared_eval_dir`` when a run of the same policy, seed
        and evaluation settings stored it there (``lightning.shared_eval``), else run (and stored)."""
        if not self.cfg.trainer.shared_eval_dir:
            return self.evaluate()
        shared = SharedEvaluations(self.cfg.trainer.shared_eval_dir)
        rank, _ = distributed.world()
        key = step0_key(self.cfg, self.model) if rank == 0 else ""  # only rank 0 reads and writes; hashing the weights is not free
        found = distributed.broadcast_object(shared.load(key) if rank == 0 else None)  # every rank takes one path
        if found is not None:
            return {**found, "perf/val_time_s": 0.0, "perf/val_shared": 1.0}
        out = self.evaluate()
        if rank == 0:
            shared.store(key, {k: v for k, v in out.items() if not k.startswith("perf/")})
        return {**out, "perf/val_shared": 0.0}

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        t0 = time.perf_counter()
        held_out = seeds.validation_env_seeds(self.cfg.trainer.val_episodes)
        temps = list(self.cfg.trainer.val_temperatures)
        n = len(held_out)
        # Every temperature in one rollout: one decode loop instead of one per temperature.
        batch, _ = self.sharded_rollout(
            held_out * len(temps), 1, [t for t in temps for _ in held_out], seeds.validation_sample_seed(self.cfg.seed)
        )
        out: dict[str, float] = {}
        for k, temp in enumerate(temps):
            part = batch.select_groups(range(k * n, (k + 1) * n))
            out[validation_metric_name(temp)] = float(part.successes().mean())
            if temp == 0.5:
                out["val/format_valid_rate"] = rollout_metrics(part)["rollout/format_valid_rate"]
        out["perf/val_time_s"] = time.perf_counter() - t0
        return out


def validation_metric_name(temperature: float) -> str:
    if temperature == 0.5:
        return "val/success_rate"  # the paper's evaluation temperature
    if temperature == 0:
        return "val/success_rate_greedy"
    return f"val/success_rate_t{temperature:g}"
