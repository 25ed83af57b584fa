"""Template-collapse diagnostics inside TRL: ``CollapseGRPOTrainer``, a ``trl.GRPOTrainer`` that also logs
the MI proxy family, conditional entropy and the reward-variance statistics, and optionally applies
the RV filter and stops on our collapse rule. ``pip install 'agentcollapse[trl]'`` (trl 1.16).

    from agentcollapse.integrations.trl import CollapseGRPOTrainer

    trainer = CollapseGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
                                  collapse_filter="rv_top_p", collapse_early_stop=True)
    trainer.train()

It takes every argument ``GRPOTrainer`` takes, plus:

* ``collapse_diagnostics``: a :class:`agentcollapse.config.DiagnosticsConfig` (default: ours, the proxy
  at the first generation batch and every ``compute_freq=5`` after; ``score_batch_size``,
  ``trajectory_samples``, ``skip_samplers``, ``proxy_dtype`` and the early-stop rule's settings as in a run).
* ``collapse_filter``: ``"none"`` (default), a preset of ``conf/filter`` (``"rv_top_p"``: the paper's
  filter as the authors' code scores it) or a :class:`agentcollapse.config.FilterConfig`;
  ``collapse_rho`` sets its ``value`` (rho for ``rv_top_p``).
* ``collapse_early_stop``: ``True`` stops training on :class:`CollapseRule` (from ``collapse_diagnostics``),
  or pass a rule.

What it does with each generation batch TRL makes in training (``_generate_and_score_completions``),
after TRL has scored it:

* :func:`rollout_batch` turns it into our single-turn :class:`RolloutBatch`: one group per prompt
  (TRL repeats each prompt ``num_generations`` times in a row), the prompt's token ids as the context,
  the completion as the response, TRL's reward (the weighted sum over its reward functions) as the
  return. A completion with ``</think>`` is scored by its reasoning (the text before it), as our
  rollouts are; one without (most TRL prompts ask for no tags) is scored whole.
* :class:`agentcollapse.lightning.CollapseDiagnostics` computes the metrics on it, cross-scoring every
  reasoning under every prompt of the batch with the trainer's model, adapter on, in eval mode. The
  names are ours (``collapse_<sampler>_sample/<metric>``, ``collapse/rv_std_over_mean``, ...:
  docs/metrics.md), logged through TRL's logger (averaged over ``logging_steps`` as TRL's own are).
* With a filter, :class:`agentcollapse.lightning.SNRFilter` picks the groups; the dropped ones get a zero
  completion mask and advantage, and the token count TRL normalises by is recounted, so they add
  nothing to the loss or its gradient. With TRL's default ``loss_type="dapo"`` (and ``cispo``,
  ``vespo``) the update is then the update on the kept groups alone; the per-sequence loss types
  (``grpo``, ``sapo``, ``luspo``, ``dr_grpo``, and ``bnpo`` over several micro-batches) still count
  the dropped rows in their per-micro-batch mean, scaling the update by the kept share. A batch with
  nothing kept still runs TRL's optimizer step (zero gradient; Adam's momentum still moves).
* The last batch it measured is ``trainer.collapse_last_batch`` (for a notebook); the EMAs, the
  sampler's generator and the early-stop history go into each checkpoint (``collapse_state.json``).

TRL has no success flag: a completion counts as a success when its reward is positive (only the
filter's ``*_success_mean`` metrics read it). Settings it cannot measure stop at start-up with one
line: another TRL minor version, several processes (TRL deals a prompt's group across processes),
tools, ``environment_factory`` or ``rollout_func`` (the completion would hold text the policy did not
write), a filter scored by the policy's entropy, a filter's ``loss_scale``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from agentcollapse.config import DiagnosticsConfig, FilterConfig
from agentcollapse.config.compose import compose
from agentcollapse.diagnostics.early_warning import CollapseRule
from agentcollapse.envs.parsing import parse_response
from agentcollapse.errors import UserError
from agentcollapse.filtering import required_feature
from agentcollapse.lightning.diagnostics import CollapseDiagnostics
from agentcollapse.lightning.hooks import Selection
from agentcollapse.lightning.snr_filter import SNRFilter
from agentcollapse.models.context import encode
from agentcollapse.rollout.batch import RolloutBatch, Trajectory, Turn

try:
    import trl
    from transformers import TrainerCallback
    from trl import GRPOTrainer
except ImportError as exc:  # the extra is not installed
    raise ImportError("agentcollapse.integrations.trl needs TRL: pip install 'agentcollapse[trl]' (trl 1.16)") from exc

__all__ = ["SUPPORTED_TRL", "CollapseGRPOTrainer", "check_trl_version", "kept_rows", "rollout_batch"]

SUPPORTED_TRL = ("1.16",)  # the minor versions whose GRPOTrainer internals this subclass is written and tested against
STATE_FILE = "collapse_state.json"  # beside TRL's own entropy_ctrl_state.json in each checkpoint
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
log = logging.getLogger(__name__)


def check_trl_version(version: str) -> None:
    """One line when ``version`` is not a TRL this integration was tested against."""
    if ".".join(version.split(".")[:2]) not in SUPPORTED_TRL:
        tested = ", ".join(f"{v}.x" for v in SUPPORTED_TRL)
        raise UserError(
            f"agentcollapse.integrations.trl supports trl {tested}, found trl {version}: "
            "pip install 'agentcollapse[trl]' installs the tested one"
        )


def completion_text(tokenizer: Any, ids: Sequence[int]) -> str:
    """The completion's text without EOS and padding (special tokens such as ``</think>`` kept)."""
    text = tokenizer.decode(list(ids), skip_special_tokens=False)
    for tok in {tokenizer.eos_token, tokenizer.pad_token} - {None, ""}:
        text = text.replace(tok, "")
    return text.strip()


def rollout_batch(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    rewards: Sequence[float],
    group_size: int,
    tokenizer: Any,
    observations: Sequence[str] | None = None,
) -> RolloutBatch:
    """TRL's generation batch as our single-turn :class:`RolloutBatch` (row i in group ``i // group_size``).

    ``prompt_ids``/``completion_ids``: each row's tokens without padding; ``rewards``: each row's
    return; ``observations``: the text each prompt showed (copy detection reads it; default "").
    The reasoning the proxy scores is the text before ``</think>`` (an opening ``<think>`` is then
    appended to the context, where our rollouts put it); a completion without ``</think>`` is scored whole.
    """
    n = len(completion_ids)
    if len(prompt_ids) != n or len(rewards) != n:
        raise ValueError(f"{len(prompt_ids)} prompts, {n} completions and {len(rewards)} rewards: one of each per row")
    if group_size < 1 or n % group_size:
        raise UserError(f"{n} completions do not split into groups of {group_size}: each prompt's group must be whole")
    observations = list(observations) if observations is not None else [""] * n
    open_ids = encode(tokenizer, THINK_OPEN)
    trajectories = []
    for i, (context, response, reward, observation) in enumerate(zip(prompt_ids, completion_ids, rewards, observations, strict=True)):
        text = completion_text(tokenizer, response)
        parsed = parse_response(text)
        if THINK_CLOSE in text:
            think = parsed.think
            opened = text.lstrip().startswith(THINK_OPEN)
            context = [*context, *open_ids] if opened else list(context)
        else:
            think = text
        turn = Turn(
            context_ids=[int(t) for t in context],
            response_ids=[int(t) for t in response],
            response_text=text,
            think=think,
            answer=parsed.answer,
            format_valid=parsed.format_valid,
            action_is_valid=parsed.format_valid,
            reward=float(reward),
            observation=observation,
        )
        group = i // group_size
        trajectories.append(Trajectory(group=group, env_seed=group, turns=[turn], success=float(reward) > 0))
    return RolloutBatch(trajectories=trajectories, num_prompts=n // group_size, group_size=group_size)


def kept_rows(selection: Selection, num_prompts: int, group_size: int) -> np.ndarray:
    """``[P * G]`` bool, group-major: the rows of the batch a filter's selection trains on."""
    keep = np.zeros((num_prompts, group_size), dtype=bool)
    keep[np.asarray(selection.groups, dtype=np.int64)] = True
    if selection.trajectory_mask is not None:
        keep &= np.asarray(selection.trajectory_mask, dtype=bool)
    return keep.reshape(-1)


def prompt_observation(prompt: Any) -> str:
    """What a TRL prompt showed: its text, or a conversation's last user message."""
    if isinstance(prompt, str):
        return prompt
    for message in reversed(list(prompt)):
        if message.get("role") == "user":
            content = message.get("content", "")
            return content if isinstance(content, str) else " ".join(c.get("text", "") for c in content if isinstance(c, dict))
    return ""


def filter_settings(choice: str | FilterConfig, rho: float | None) -> FilterConfig:
    """The filter a ``collapse_filter``/``collapse_rho`` pair names, checked for what TRL's batch supports."""
    if isinstance(choice, FilterConfig):
        settings = dataclasses.replace(choice, value=rho) if rho is not None else choice
    else:
        settings = compose([f"filter={choice}", *([f"filter.value={rho}"] if rho is not None else [])]).filter
    if settings.name != "none" and settings.trajectory_k == 0 and required_feature(settings.metric) == "entropy":
        raise UserError(
            f"collapse_filter scores groups by {settings.metric!r}, which needs the policy's per-trajectory entropies: "
            "the TRL integration does not compute them; use a reward or length metric"
        )
    if settings.name != "none" and settings.loss_scale != "none":
        raise UserError(
            f"collapse_filter's loss_scale={settings.loss_scale!r} is not supported with TRL: set it to 'none' "
            "(TRL's loss normalisation already follows the kept tokens)"
        )
    return settings


@contextmanager
def scoring_forward(model: torch.nn.Module) -> Iterator[None]:
    """The model's own forward for the duration, without the mixed-precision wrapper accelerate puts on it
    under TRL's ``bf16=True`` (its default): the proxy then scores at ``proxy_dtype`` (float32 by
    default), as in our runs, whatever precision TRL trains in."""
    wrapped, original = model.__dict__.get("forward"), model.__dict__.get("_original_forward")
    if wrapped is None or original is None:
        yield
        return
    model.forward = original
    try:
        yield
    finally:
        model.forward = wrapped


class _Source:
    """What our callbacks ask of a Lightning module, answered from the TRL trainer."""

    def __init__(self, trainer: CollapseGRPOTrainer) -> None:
        self.trainer = trainer
        self.policy = self  # CollapseDiagnostics reads module.policy.decoding_model() and .tokenizer

    @property
    def tokenizer(self) -> Any:
        return self.trainer._tokenizer

    def decoding_model(self) -> torch.nn.Module:
        return self.trainer.accelerator.unwrap_model(self.trainer.model)  # adapter on; cross_score sets eval mode

    def request_stop(self, reason: str) -> None:
        self.trainer.collapse_stop_reason = self.trainer.collapse_stop_reason or reason


class _StopOnCollapse(TrainerCallback):
    """Ends training after the step in which the rule (or the filter's empty-batch limit) fired."""

    def __init__(self, trainer: CollapseGRPOTrainer) -> None:
        self.trainer = trainer

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.trainer.collapse_stop_reason and not control.should_training_stop:
            log.warning("agentcollapse: %s", self.trainer.collapse_stop_reason)
            control.should_training_stop = True
        return control


class CollapseGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` with our collapse diagnostics, and optionally the RV filter and the collapse
    early stop (the module docstring says what each does)."""

    def __init__(
        self,
        *args: Any,
        collapse_diagnostics: DiagnosticsConfig | None = None,
        collapse_filter: str | FilterConfig = "none",
        collapse_rho: float | None = None,
        collapse_early_stop: bool | CollapseRule = False,
        **kwargs: Any,
    ) -> None:
        check_trl_version(trl.__version__)
        diagnostics = collapse_diagnostics if collapse_diagnostics is not None else DiagnosticsConfig()
        diagnostics.validate()
        if diagnostics.proxy_engine != "hf":
            raise UserError("collapse_diagnostics.proxy_engine must be 'hf' with TRL: the trainer's model cross-scores")
        settings = filter_settings(collapse_filter, collapse_rho)
        if any(kwargs.get(name) for name in ("tools", "environment_factory", "rollout_func")):
            raise UserError(
                "CollapseGRPOTrainer measures single-turn completions: tools, environment_factory and rollout_func put text "
                "the policy did not write into the completion; train those without it"
            )
        super().__init__(*args, **kwargs)
        if self.accelerator.num_processes > 1:
            raise UserError(
                f"CollapseGRPOTrainer runs on one process (found {self.accelerator.num_processes}): TRL deals a prompt's "
                "group across processes, and the proxy and the filter need each group whole"
            )
        self.collapse_watch = CollapseDiagnostics(
            compute_freq=diagnostics.compute_freq,
            batch_size=diagnostics.score_batch_size,
            seed=self.args.seed,
            trajectory_samples=diagnostics.trajectory_samples or None,
            first_turn_samples=diagnostics.first_turn_samples or None,
            trajectory_replace=diagnostics.trajectory_replace,
            skip_samplers=tuple(diagnostics.skip_samplers),
            proxy_dtype=diagnostics.proxy_dtype,
        )
        self.collapse_filter = SNRFilter(settings) if settings.name != "none" else None
        rule = collapse_early_stop if isinstance(collapse_early_stop, CollapseRule) else None
        self.collapse_rule = rule or (CollapseRule.from_config(diagnostics) if collapse_early_stop else None)
        self.collapse_iteration = 0  # generation batches measured (our "iteration")
        self.collapse_history: list[list[float]] = []  # (iteration, value) of the rule's metric
        self.collapse_stop_reason: str | None = None
        self.collapse_last_batch: RolloutBatch | None = None
        self._collapse_scored: tuple[list[Any], list[list[int]], torch.Tensor] | None = None
        self.add_callback(_StopOnCollapse(self))

    # -- TRL's hooks ------------------------------------------------------------------------------------
    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> torch.Tensor:
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.model.training:
            self._collapse_scored = (list(prompts), [list(c) for c in completion_ids_list], rewards_per_func)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training or self._collapse_scored is None:
            return output  # evaluation batches are TRL's alone
        prompts, completion_ids, rewards_per_func = self._collapse_scored
        self._collapse_scored = None
        self.collapse_iteration += 1
        # TRL's reward per completion (the one it logs): the weighted sum over its reward functions
        rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        prompt_ids = [ids[mask.bool()].tolist() for ids, mask in zip(output["prompt_ids"], output["prompt_mask"])]
        batch = rollout_batch(
            prompt_ids, completion_ids, rewards.tolist(), self.num_generations, self._tokenizer, [prompt_observation(p) for p in prompts]
        )
        self.collapse_last_batch = batch
        source = _Source(self)
        with scoring_forward(source.decoding_model()):
            metrics = dict(self.collapse_watch.on_rollout(source, batch, self.collapse_iteration).metrics)
        if self.collapse_filter is not None:
            started = time.perf_counter()
            result = self.collapse_filter.on_rollout(source, batch, self.collapse_iteration)
            metrics.update(result.metrics)
            output = self._train_on(output, kept_rows(result.selection, batch.num_prompts, batch.group_size))
            metrics["perf/filter_time_s"] = time.perf_counter() - started
        for name, value in metrics.items():
            self._metrics["train"][name].append(float(value))
        self._check_collapse(metrics)
        return output

    def _train_on(self, output: dict[str, Any], keep: np.ndarray) -> dict[str, Any]:
        """``output`` with the unkept rows out of the loss: zero completion mask and advantage, and the
        token count the loss normalises by recounted over the kept rows (one process: no gather)."""
        keep_t = torch.as_tensor(keep, device=output["completion_mask"].device)
        output = dict(output)
        output["completion_mask"] = output["completion_mask"] * keep_t.unsqueeze(1).to(output["completion_mask"].dtype)
        output["advantages"] = output["advantages"] * keep_t.to(output["advantages"].dtype)
        loss_mask = output["completion_mask"] if "tool_mask" not in output else output["completion_mask"] * output["tool_mask"]
        output["num_items_in_batch"] = loss_mask.sum()
        return output

    def _check_collapse(self, metrics: dict[str, float]) -> None:
        rule = self.collapse_rule
        if rule is None or rule.metric not in metrics:
            return
        self.collapse_history.append([self.collapse_iteration, float(metrics[rule.metric])])
        reason = rule.verdict(self.collapse_history)
        if reason:
            self.collapse_stop_reason = self.collapse_stop_reason or f"{reason}; stopped at generation batch {self.collapse_iteration}"

    # -- checkpoints: our state beside TRL's (as TRL keeps entropy_ctrl_state.json) -----------------------
    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            state = {
                "iteration": self.collapse_iteration,
                "history": self.collapse_history,
                "diagnostics": self.collapse_watch.state_dict(),
                "filter": self.collapse_filter.state_dict() if self.collapse_filter is not None else None,
            }
            with open(os.path.join(folder, STATE_FILE), "w") as f:
                json.dump(state, f)

    def _load_optimizer_and_scheduler(self, checkpoint: Any) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
        path = os.path.join(checkpoint, STATE_FILE) if checkpoint is not None else None
        if path is None or not os.path.exists(path):
            return
        with open(path) as f:
            state = json.load(f)
        self.collapse_iteration = int(state["iteration"])
        self.collapse_history = [[int(s), float(v)] for s, v in state["history"]]
        self.collapse_watch.load_state_dict(state["diagnostics"])
        if self.collapse_filter is not None and state.get("filter") is not None:
            self.collapse_filter.load_state_dict(state["filter"])
