"""The RL LightningModule: rollout -> rollout hooks (diagnostics, filter) -> advantages -> clipped
policy update.

Manual optimisation: each ``training_step`` is one RL iteration. The math lives in
``agentcollapse.algorithms``; what watches and what chooses the trained groups are callbacks
(``lightning.hooks``); this module only orchestrates them. On several ranks (``trainer=ddp`` or
``trainer=fsdp``) the iteration computes what one process computes (``lightning.distributed``): a
sharded rollout gathered into the global batch, hooks on that batch, and an update whose micro-batches
are dealt evenly across ranks. Under FSDP everything but the update runs on weights gathered once for
the phase (``distributed.whole_weights``).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import lightning as L
from agentcollapse import envs, seeds
from agentcollapse.algorithms import response_token_stats
from agentcollapse.algorithms.presets import algorithm_preset
from agentcollapse.config import RunConfig
from agentcollapse.errors import UserError
from agentcollapse.filtering import decide, get_strategy, groups_with_signal, required_feature
from agentcollapse.lightning import distributed, evaluation
from agentcollapse.lightning import update as phases
from agentcollapse.lightning.hooks import RolloutHook, Selection
from agentcollapse.lightning.snr_filter import SNRFilter
from agentcollapse.models.continuations import shared_prefix_forward
from agentcollapse.models.hf import base_model, folded_lora_weights, pad_token_id
from agentcollapse.models.policy import Policy
from agentcollapse.models.value_head import ValueHead
from agentcollapse.progress import peak_rss_mib
from agentcollapse.rollout.batch import RolloutBatch
from agentcollapse.rollout.producer import RolloutProducer, behind
from agentcollapse.rollout.runner import collect_rollouts, rollout_metrics
from agentcollapse.rollout.sequences import build_sequences, collate
from agentcollapse.rollout.vllm_engine import VLLMEngine, cpu_core_share, engine_settings

log = logging.getLogger("agentcollapse")


@dataclass
class Refilled:
    """An iteration's batches under a producer's filter (``AgentRLModule.decode_refilled``)."""

    first: RolloutBatch  # its first batch of P groups, whole: what the hooks measure
    trained: RolloutBatch  # the kept groups, up to P, from as many batches as it took


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
        self.pending_signal = 0  # a SIGTERM/SIGINT to stop on at the end of this iteration (StopTogether; run.lifecycle)
        self.recorder: Any = None  # a RunRecorder, set by the run-record callback
        self.last_metrics: dict[str, float] = {}  # the latest iteration's metrics (progress lines read them)
        self.engine: VLLMEngine | None = None  # rollout.engine=vllm, started at fit start
        self.engine_stale = True  # the engine's weights are not the policy's: pushed before its next rollout
        # rollout.max_staleness > 0: the thread decoding the coming iterations (rollout.producer), started at
        # the first iteration; engine_held: this thread holds the producer's engine lock for a phase
        self.producer: RolloutProducer | None = None
        self.engine_held = False
        # algorithm.update_dtype: the dtype the sequence forwards autocast to (None: the weights' own)
        self.update_autocast = None if cfg.algorithm.update_dtype == "float32" else getattr(torch, cfg.algorithm.update_dtype)

    # -- Lightning plumbing -------------------------------------------------------------------
    def configure_model(self) -> None:
        """``trainer=fsdp`` (Lightning's ModelParallelStrategy): shard each decoder layer, the rest of
        the model and the value head over the data-parallel ranks (FSDP2). Other strategies: nothing."""
        mesh = self.device_mesh  # set by ModelParallelStrategy only
        if mesh is None or distributed.fsdp_modules(self):
            return
        device = self.trainer.strategy.root_device
        self.to(device)
        if self.policy.fold_lora_for_decoding:
            self.policy.decoding_model()  # the folded decoding copy is made from the whole weights, unsharded
        param_dtype = distributed.fsdp_param_dtype(self.cfg.trainer.fsdp_param_dtype, device)
        extra = [self.value_head] if self.value_head is not None else []
        distributed.shard_for_fsdp(self.model, extra, mesh["data_parallel"], param_dtype)

    def configure_optimizers(self):
        params = [p for p in self.model.parameters() if p.requires_grad]
        groups = [{"params": params, "lr": self.cfg.algorithm.lr}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "lr": self.cfg.algorithm.critic_lr})
        return torch.optim.AdamW(groups, weight_decay=0.0)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Only trainable tensors: the frozen base is rebuilt from the cache, so checkpoints stay small.
        # FSDP's sharded checkpoint keeps every tensor (each rank writes its shard): the strategy loads
        # it into the whole model, which needs every key.
        if not distributed.fsdp_modules(self):
            trainable = {n for n, p in self.named_parameters() if p.requires_grad}
            checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}
        checkpoint["agentcollapse"] = {
            "iteration": self.iteration,
            "nonfinite_steps": self.nonfinite_steps,
            "nonfinite_total": self.nonfinite_total,
            "rng": seeds.capture_rng_state(),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("agentcollapse")
        if state is None:
            raise UserError("checkpoint has no agentcollapse state; it was not written by this project")
        self.iteration = int(state["iteration"])
        self.nonfinite_steps = int(state["nonfinite_steps"])
        self.nonfinite_total = int(state["nonfinite_total"])
        seeds.restore_rng_state(state["rng"])
        if "state_dict" not in checkpoint:  # a sharded checkpoint: the strategy has loaded the weights
            return
        # Frozen weights are not in the checkpoint; fill them from the live model so strict loading passes.
        own = self.state_dict()
        checkpoint["state_dict"] = {**own, **checkpoint["state_dict"]}

    def on_fit_start(self) -> None:
        # Started before training, so an engine that cannot start stops the run with its one line.
        if self.cfg.rollout.engine == "vllm" and self.engine is None:
            started = time.perf_counter()
            _, size = distributed.world()
            cores = None  # one process: vLLM binds its own threads
            if size > 1 and not torch.cuda.is_available():  # an engine per rank, each on cores of its own
                cores = cpu_core_share(sorted(os.sched_getaffinity(0)), self.trainer.local_rank, self.trainer.num_devices)
            self.engine = VLLMEngine(self.policy.source_dir, engine_settings(self.cfg.rollout.vllm), seed=self.cfg.seed, cpu_cores=cores)
            log.info("vLLM engine started in %.1fs%s", time.perf_counter() - started, f" on cores {cores}" if cores else "")

    def teardown(self, stage: str) -> None:
        if self.producer is not None:  # first: it decodes on the engine
            self.release_engine()  # a phase that raised may still hold it
            self.producer.close()
            self.producer = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    def rollout_engine(self) -> VLLMEngine | None:
        """The vLLM engine serving the policy's current weights (None: rollouts decode with transformers).
        The LoRA-folded weights are pushed lazily, before the first rollout after a change (the start,
        a restored checkpoint, an optimizer step). With a producer decoding beside the trainer, the engine
        is this thread's until ``release_engine`` (the phase's end), and serves the current version meanwhile."""
        if self.engine is None:
            return None
        if self.producer is not None:
            if not self.engine_held:
                self.producer.lock.acquire()
                self.engine_held = True
            if self.producer.loaded != self.iteration:
                self.engine.load_weights(folded_lora_weights(self.model), dict(base_model(self.model).named_parameters()))
                self.producer.serves(self.iteration)
            return self.engine
        if self.engine_stale:
            self.engine.load_weights(folded_lora_weights(self.model), dict(base_model(self.model).named_parameters()))
            self.engine_stale = False
        return self.engine

    def release_engine(self) -> None:
        """Hand the engine back to the producer after a phase that used it (evaluation, the MI proxy)."""
        if self.engine_held:
            self.engine_held = False
            self.producer.lock.release()

    def engine_weights(self) -> list[tuple[str, torch.Tensor]]:
        """The policy's current weights as the engine loads them, copied (the producer loads them later,
        after more optimizer steps)."""
        return self.engine.weights_to_load(folded_lora_weights(self.model), dict(base_model(self.model).named_parameters()), copy=True)

    def start_producer(self) -> None:
        """``rollout.max_staleness`` > 0: decode the coming iterations beside the updates (``rollout.producer``),
        from the version this run starts at."""
        r = self.cfg.rollout

        refill = self.refill_filter()

        def decode(step: int) -> tuple[Any, dict[str, float]]:
            if refill is not None:
                return self.decode_refilled(step, refill)
            iteration = step - 1
            sample_seed = seeds.rollout_sample_seed(self.cfg.seed, iteration)
            return self.local_rollout(
                self.train_env_seeds(iteration), r.group_size, r.temperature, sample_seed, self.engine, r.min_new_tokens
            )

        with distributed.whole_weights(self):
            base_weights = self.engine_weights()
        self.producer = RolloutProducer(
            decode,
            lambda _version, weights: self.engine.load_prepared(weights),
            self.iteration,
            self.cfg.trainer.max_steps,
            r.max_staleness,
            base_weights,
        )
        log.info("rollouts overlap the update: each batch decoded up to %d version(s) behind the update that trains on it", r.max_staleness)
        if refill is not None:
            log.info("filter=%s scores groups as they arrive; each update waits for P=%d kept groups", self.cfg.filter.name, r.num_prompts)

    def refill_filter(self) -> SNRFilter | None:
        """Under ``rollout.max_staleness`` > 0, the filter that scores groups as they arrive, in the producer:
        one that keeps whole groups by a score of the rollout alone (reward variance, success, length), on one
        rank (it needs the whole batch's returns). None: the filter, if any, runs on the arrived batch as a
        synchronous run's does (a score that needs the trainer's model, trajectory-level or loss-scaled
        selections, several ranks)."""
        hook = next((c for c in self.trainer.callbacks if isinstance(c, SNRFilter)), None)
        f = self.cfg.filter
        if hook is None or f.name == "none" or distributed.world()[1] > 1:
            return None
        if (
            f.trajectory_k > 0
            or get_strategy(f.strategy).level != "group"
            or f.loss_scale != "none"
            or required_feature(f.metric) == "entropy"
        ):
            return None
        return hook

    def decode_refilled(self, step: int, hook: SNRFilter) -> tuple[Refilled, dict[str, float]]:
        """Iteration ``step``'s batches, on the producer's thread, until the filter has kept P groups (at most
        ``1 + algorithm.max_resample_rounds`` batches, as dynamic sampling draws them): each batch of P groups is
        filtered as a whole as it arrives, by the synchronous filter's own decision. Kept groups beyond P are not
        carried to the next update, where they would be one version past the bound."""
        r, iteration = self.cfg.rollout, step - 1
        kept: list[RolloutBatch] = []
        first: RolloutBatch | None = None
        found, batches, seconds, tokens, env_seconds = 0, 0, 0.0, 0.0, 0.0
        for attempt in range(1 + self.cfg.algorithm.max_resample_rounds):
            sample_seed = seeds.rollout_sample_seed(self.cfg.seed, iteration, attempt=attempt)
            batch, perf = self.local_rollout(
                self.train_env_seeds(iteration, attempt), r.group_size, r.temperature, sample_seed, self.engine, r.min_new_tokens
            )
            first = first or batch
            batches += 1
            seconds += perf["perf/rollout_time_s"]
            tokens += perf["perf/rollout_tokens_per_s"] * perf["perf/rollout_time_s"]
            env_seconds += perf["perf/rollout_env_time_s"]
            decision = decide(batch.returns(), batch.successes(), hook.features(self, batch), **hook.settings.filter_options())
            kept.append(batch.select_groups(decision.kept_groups))
            found += len(decision.kept_groups)
            if found >= r.num_prompts:
                break
        trained = RolloutBatch.concat(kept).select_groups(range(min(found, r.num_prompts)))
        perf = {
            "perf/rollout_time_s": seconds,
            "perf/rollout_tokens_per_s": tokens / max(seconds, 1e-9),
            "perf/rollout_env_time_s": env_seconds,
            "filter/refill_batches": float(batches),
            "filter/refill_kept_groups": float(trained.num_prompts),
            "filter/refill_dropped_groups": float(max(found - r.num_prompts, 0)),
        }
        return Refilled(first, trained), perf

    def next_rollout(self, step: int) -> tuple[RolloutBatch, dict[str, float], RolloutBatch | None]:
        """Iteration ``step``'s batch: decoded now (synchronous), or taken from the producer, with how far
        behind the update its weights are. The third value is the batch the producer's filter refilled (the
        groups that train; ``refill_filter``), else None; the first is then its first batch, whole, which the
        hooks (the MI proxy, the filter's statistics) measure as they would a synchronous iteration's."""
        if self.producer is None:
            return *self.collect(self.iteration), None
        waited = time.perf_counter()
        produced = self.producer.take(step)
        waited = time.perf_counter() - waited
        arrived, trained = (
            (produced.batch.first, produced.batch.trained) if isinstance(produced.batch, Refilled) else (produced.batch, None)
        )
        for traj in [*arrived.trajectories, *(trained.trajectories if trained is not None else [])]:
            traj.policy_version = produced.version
        rollout, perf = self.gathered(arrived, produced.perf)
        staleness = [behind(step, t.policy_version) for t in rollout.trajectories]
        perf.update(
            {
                "perf/rollout_wait_s": waited,  # the part of the rollout the update did not hide
                "rollout/staleness_mean": float(np.mean(staleness)),
                "rollout/staleness_max": float(max(staleness)),
            }
        )
        return rollout, perf, trained

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
        rollout, perf = self.sharded_rollout(
            self.train_env_seeds(iteration, attempt), r.group_size, r.temperature, sample_seed, r.min_new_tokens
        )
        for traj in rollout.trajectories:
            traj.policy_version = iteration
        return rollout, perf

    def sharded_rollout(
        self, env_seeds: list[int], group_size: int, temperature: float | list[float], sample_seed: int, min_new_tokens: int = 0
    ) -> tuple[RolloutBatch, dict[str, float]]:
        """The rollout of ``env_seeds`` as one process would draw it: each rank decodes its block of
        groups on the streams the whole batch gives them, then every rank receives the whole batch.
        ``min_new_tokens``: tokens a response runs before a stop may end it (training's ``rollout.min_new_tokens``)."""
        local, perf = self.local_rollout(env_seeds, group_size, temperature, sample_seed, self.rollout_engine(), min_new_tokens)
        return self.gathered(local, perf)

    def local_rollout(
        self,
        env_seeds: list[int],
        group_size: int,
        temperature: float | list[float],
        sample_seed: int,
        engine: VLLMEngine | None,
        min_new_tokens: int = 0,
    ) -> tuple[RolloutBatch, dict[str, float]]:
        """This rank's block of the groups of ``env_seeds``, decoded on ``engine`` (None: transformers); no
        collective, so the producer's thread may call it."""
        rank, size = distributed.world()
        start, stop = distributed.shard_bounds(len(env_seeds), rank, size)
        return collect_rollouts(
            self.policy,
            self.make_env,
            env_seeds[start:stop],
            group_size,
            temperature if isinstance(temperature, (int, float)) else temperature[start:stop],
            self.cfg.rollout.max_new_tokens,
            sample_seed=sample_seed,
            min_new_tokens=min_new_tokens,
            generation_batch_size=self.cfg.rollout.generation_batch_size,
            stream_offset=start * group_size,
            engine=engine,
            context=self.cfg.rollout.context,
            context_turns=self.cfg.rollout.context_turns,
        )

    def gathered(self, local: RolloutBatch, perf: dict[str, float]) -> tuple[RolloutBatch, dict[str, float]]:
        """Every rank's block of a rollout (``local_rollout``) as the whole batch, on every rank."""
        if distributed.world()[1] == 1:
            return local, perf
        parts = distributed.gather_objects((local, perf))
        # The slowest rank bounds the phase; throughput is every rank's tokens over that time.
        elapsed = max(p["perf/rollout_time_s"] for _, p in parts)
        tokens = sum(p["perf/rollout_tokens_per_s"] * p["perf/rollout_time_s"] for _, p in parts)
        perf = {
            "perf/rollout_time_s": elapsed,
            "perf/rollout_tokens_per_s": tokens / max(elapsed, 1e-9),
            "perf/rollout_env_time_s": max(p["perf/rollout_env_time_s"] for _, p in parts),
        }
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
        metrics: dict[str, float] = {}
        if self.cfg.rollout.max_staleness > 0 and self.producer is None:
            self.start_producer()
        with distributed.whole_weights(self):  # FSDP: decoding runs on weights gathered once
            if step == 1 and self.cfg.trainer.val_every > 0:
                self.log_metrics(0, self.evaluate_warm_start())  # the warm-start policy, before any update
                self.release_engine()
            started = time.perf_counter()
            rollout, perf, refilled = self.next_rollout(step)
            metrics.update(perf)
            metrics.update(self.peak_memory("rollout"))
            metrics.update(rollout_metrics(rollout))  # of the first rollout: an unselected sample of the policy
            if self.algo.dynamic_sampling:
                rollout, sampled = self.dynamic_sample(rollout)
                metrics.update(sampled)
            selection, hook_metrics = self.run_hooks(rollout, step)
            self.release_engine()
        # Every rank ran the hooks on the same batch; rank 0's choice is taken so that a last-bit
        # difference in a score (GPU kernels) cannot make ranks train different groups.
        selection = distributed.broadcast_object(selection)
        metrics.update(hook_metrics)
        if refilled is not None:  # the producer's filter chose these groups as they arrived
            rollout, selection = refilled, Selection.everything(refilled.num_prompts)
        metrics.update(self.peak_memory("hooks"))
        metrics["rollout/empty_after_filter"] = float(selection.is_empty)
        if not selection.is_empty:
            if self.engine is not None and self.producer is None:
                self.engine.to_sleep()  # CUDA: its memory goes to the update (a producer decodes during it)
            metrics.update(self.update(rollout, selection))
            metrics.update(self.peak_memory("update"))
        metrics["perf/step_time_s"] = time.perf_counter() - started
        self.iteration = step
        if self.producer is not None and self.producer.needs(step):
            with distributed.whole_weights(self):
                self.producer.publish(step, self.engine_weights())
        if self.cfg.trainer.val_every > 0 and (step % self.cfg.trainer.val_every == 0 or step == self.cfg.trainer.max_steps):
            with distributed.whole_weights(self):
                metrics.update(self.evaluate())
                self.release_engine()
        self.log_metrics(step, metrics)
        self.last_metrics = metrics
        self.log("success", metrics["rollout/success_rate"], prog_bar=True, logger=False)
        if step >= self.cfg.trainer.max_steps or self.pending_signal:
            self.trainer.should_stop = True
        # Lightning does not agree on should_stop across ranks: one rank leaving the loop alone
        # would leave the others waiting in the next collective.
        if distributed.world()[1] > 1:
            votes = distributed.gather_objects((bool(self.trainer.should_stop), self.stop_reason, self.pending_signal))
            self.pending_signal = max(signum for _, _, signum in votes)
            self.trainer.should_stop = self.pending_signal > 0 or any(stop for stop, _, _ in votes)
            self.stop_reason = next((reason for _, reason, _ in votes if reason), "")

    def peak_memory(self, phase: str) -> dict[str, float]:
        """This process's peak memory so far, read after ``phase``: resident (MiB) and on a GPU allocated
        (GiB, what `make gpu-check` reports per phase)."""
        out = {f"perf/peak_rss_after_{phase}_mib": peak_rss_mib()}
        if self.device.type == "cuda":
            out[f"perf/gpu_peak_memory_after_{phase}_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        return out

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
        for idx in phases.micro_batches(seqs, self.cfg.algorithm.micro_batch_size, share_prompts=self.prompts_shared()):
            mb = collate(seqs, idx, self.pad_id, self.device)
            ent = self.forward_sequences(mb, with_values=False)[0] * mb["response_mask"]
            for row, i in enumerate(idx):
                totals[seqs.traj_index[i]] += float(ent[row].sum())
                counts[seqs.traj_index[i]] += float(mb["response_mask"][row].sum())
        return list(totals / np.maximum(counts, 1))

    # -- the update -----------------------------------------------------------------------------
    @property
    def pad_id(self) -> int:
        return pad_token_id(self.policy.tokenizer)

    def forward_sequences(
        self, mb: dict[str, torch.Tensor], with_values: bool, with_entropy: bool = True
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
        """The policy's token entropies (``with_entropy``; a graph only when the loss has an entropy
        bonus), the targets' log-probs and the critic's values of the collated ``mb``, each [B, T]
        aligned with ``mb["response_mask"]``; entropies and log-probs are 0 off the response tokens."""
        # Sequences are right-padded (collate), so causality alone keeps every real token from seeing
        # padding: no attention mask is passed, and SDPA takes its causal kernel, which skips the
        # masked half of the score matrix (measured: ~10-15% of the update at FrozenLake's ~600 tokens).
        # Positions from the batch's first target on (collate's logits_from); the output head and the
        # softmax run on the response tokens only (response_token_stats), where a forward's logits
        # would cover every observation token too.
        # Rows that begin with the same tokens up to there (a group's prompt: micro_batches keeps a
        # group together when prompts_shared) run them once (shared_prefix_forward).
        # algorithm.update_dtype=bfloat16 autocasts the forward (and so its backward); log-probs and
        # entropies are still normalised in float32 over the logits.
        # Under FSDP the head's weight is a shard outside the model's forward, so the forward applies
        # it (to every position from logits_from on) and the response tokens are picked from its logits.
        ids, mask = mb["input_ids"], mb["response_mask"]
        start = int(mb["logits_from"])
        sharded = bool(distributed.fsdp_modules(self.model))
        with self.autocast():
            if self.shared_prefix_length(mb):
                out = shared_prefix_forward(self.model, ids, start, output_hidden_states=True, logits_to_keep=1)
                hidden = out.hidden_states[-1][:, :-1]  # its hidden states begin at position start
            else:
                keep = ids.shape[1] - start if sharded else 1
                out = self.model(input_ids=ids, output_hidden_states=with_values or not sharded, logits_to_keep=keep)
                hidden = out.hidden_states[-1][:, start:-1] if with_values or not sharded else None
            head, head_input = (lambda x: x, out.logits[:, :-1]) if sharded else (self.model.get_output_embeddings(), hidden)
            logp, entropy = response_token_stats(
                head, head_input, ids[:, start + 1 :], mask, entropy=with_entropy, entropy_grad=self.algo.entropy_coef > 0
            )
        values = self.value_head(hidden.float()) if with_values and self.value_head is not None else None
        return entropy, logp, values

    def autocast(self) -> torch.autocast:
        """The update's autocast region (``algorithm.update_dtype``; disabled for float32)."""
        return torch.autocast(self.device.type, dtype=self.update_autocast or torch.float32, enabled=self.update_autocast is not None)

    def shared_prefix_length(self, mb: dict[str, torch.Tensor]) -> int:
        """The leading tokens every row of the collated ``mb`` shares, which ``forward_sequences`` runs
        once (0: it runs the whole rows)."""
        ids, start = mb["input_ids"], int(mb["logits_from"])
        shared = start > 0 and len(ids) > 1 and self.prompts_shared() and bool((ids[:, :start] == ids[:1, :start]).all())
        return start if shared else 0

    def prompts_shared(self) -> bool:
        """Whether a micro-batch's rows run their shared prompt once (``shared_prefix_forward``): not
        under gradient checkpointing (transformers drops the cache there) nor FSDP (one forward per
        micro-batch is what its hooks were checked with). With LoRA dropout the shared prompt draws
        one dropout mask for its rows instead of one each: the same expected gradient."""
        return not getattr(base_model(self.model), "is_gradient_checkpointing", False) and not distributed.fsdp_modules(self.model)

    def update(self, rollout: RolloutBatch, selection: Selection) -> dict[str, float]:
        """Optimizer steps on the selected groups of ``rollout`` (the phases: ``lightning.update``)."""
        started = time.perf_counter()
        plan = phases.plan_update(self, rollout, selection)
        phases.score(self, plan)
        scored = time.perf_counter()
        phases.assign_advantages(self, plan)
        stats, grad_norms, skipped = phases.optimise(self, plan, selection.loss_scale)
        if skipped:
            self.nonfinite_steps += 1
            self.nonfinite_total += 1
            if self.nonfinite_steps >= self.cfg.algorithm.max_nonfinite_steps:
                self.request_stop(f"loss was NaN/inf for {self.nonfinite_steps} consecutive steps; lower algorithm.lr or check rewards")
        else:
            self.nonfinite_steps = 0
        self.engine_stale = self.engine_stale or bool(grad_norms)  # an optimizer step changed the weights
        out = phases.summarise(plan, stats, grad_norms, selection.loss_scale, self.nonfinite_total)
        out["perf/scoring_time_s"] = scored - started
        out["perf/update_time_s"] = time.perf_counter() - scored
        return out

    # -- validation (lightning.evaluation) ---------------------------------------------------------
    def evaluate_warm_start(self) -> dict[str, float]:
        return evaluation.evaluate_warm_start(self)

    def evaluate(self) -> dict[str, float]:
        return evaluation.evaluate(self)
