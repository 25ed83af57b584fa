"""``CollapseGRPOTrainer`` with the real TRL (``requirements-trl.lock``, installed by ``make venv``) on the
test-size tiny policy and on SmolLM2-135M, single-turn Countdown: the metrics a run logs, the proxy
against our own ``CollapseDiagnostics`` on the same batch and weights, the filter's gradient against an
update on the kept groups alone, and the settings it refuses."""

from __future__ import annotations

import json
import math
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import trl  # make venv installs it (requirements-trl.lock): a missing TRL fails here rather than skipping
from datasets import Dataset
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from transformers import AutoModelForCausalLM
from trl import GRPOConfig

from agentcollapse.config import DiagnosticsConfig, FilterConfig
from agentcollapse.diagnostics import PROXY_KEYS, sampler_prefix, sampler_prefixes
from agentcollapse.envs.parsing import parse_response
from agentcollapse.errors import UserError
from agentcollapse.integrations.trl import CollapseGRPOTrainer, check_trl_version, kept_rows, rollout_batch
from agentcollapse.lightning.diagnostics import CollapseDiagnostics
from agentcollapse.lightning.hooks import Selection
from agentcollapse.models.context import encode
from agentcollapse.models.policy import Policy, resolve_model_dir
from agentcollapse.models.tiny import load_tokenizer
from agentcollapse.rollout.batch import RolloutBatch, Trajectory, Turn
from benchmarks.bench_trl import make_countdown_reward, prompts_for

P, G = 3, 4  # prompts and completions per prompt of each generation batch
LORA = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")


def varied_reward(completion_ids, **_):
    """A reward that varies within and across groups (the untrained tiny policy scores -0.1 everywhere on
    Countdown, which leaves the filter nothing to choose): the completion's token ids summed, mod 5."""
    return [float(sum(ids) % 5) for ids in completion_ids]


@pytest.fixture()
def tiny(make_cfg):
    """(config, model directory, tokenizer as TRL gets it) of the test-size tiny policy on Countdown."""
    cfg = make_cfg("env=countdown")
    path = resolve_model_dir(cfg.model, cfg.env, cfg.cache_dir)
    tokenizer = load_tokenizer(path)
    tokenizer.padding_side = "left"
    return cfg, path, tokenizer


def make_trainer(
    cfg,
    path,
    tokenizer,
    tmp_path,
    reward=None,
    steps=2,
    cls=CollapseGRPOTrainer,
    bf16=True,
    completion=12,
    save_strategy="no",
    save_steps=500,
    **collapse,
):
    texts, env_seeds = prompts_for(cfg, tokenizer, steps, P)
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        max_steps=steps,
        logging_steps=1,
        report_to="none",
        save_strategy=save_strategy,
        save_steps=save_steps,
        disable_tqdm=True,
        seed=0,
        use_cpu=True,
        num_generations=G,
        per_device_train_batch_size=P * G,
        gradient_accumulation_steps=1,
        max_completion_length=completion,
        bf16=bf16,  # TRL's default (mixed precision on CPU too): the proxy must still score in float32
        beta=0.001,
        shuffle_dataset=False,
    )
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return cls(
        model=model,
        reward_funcs=[reward or make_countdown_reward(cfg, tokenizer)],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": texts, "env_seed": env_seeds}),
        processing_class=tokenizer,
        peft_config=LORA,
        **collapse,
    )


def expected_keys() -> set[str]:
    keys = {"collapse/rv_std_over_mean", "collapse/zero_rv_group_frac", "collapse/valid_thinking_rate", "perf/collapse_time_s"}
    skipped = {sampler_prefix(name) for name in DiagnosticsConfig().skip_samplers}  # trajectory_nocopy, as in a run
    for prefix in set(sampler_prefixes()) - skipped:
        keys |= {f"{prefix}/{k}" for k in PROXY_KEYS} | {f"{prefix}/mi_zscore_ema", f"{prefix}/valid_thinking_rate"}
    return keys


# -- the adapter, on hand-made token ids ----------------------------------------------------------------------
def test_rollout_batch_scores_reasoning_or_the_whole_completion(tiny):
    _, _, tok = tiny
    prompt = encode(tok, "Numbers : 1 2 3")
    completions = ["1 + 2 = 3 </think><answer> 3 </answer>", "<think> 2 + 1 = 3 </think><answer> 3 </answer>", "2 + 1", "3 <answer> 3"]
    ids = [encode(tok, c) + [tok.eos_token_id] for c in completions]
    batch = rollout_batch([prompt] * 4, ids, [1.0, 0.0, 0.5, -1.0], group_size=2, tokenizer=tok, observations=["Numbers : 1 2 3"] * 4)
    turns = [t.turns[0] for t in batch.trajectories]
    assert (batch.num_prompts, batch.group_size) == (2, 2) and [t.group for t in batch.trajectories] == [0, 0, 1, 1]
    assert [t.think for t in turns] == ["1 + 2 = 3", "2 + 1 = 3", "2 + 1", "3 <answer> 3"]  # by reasoning, or whole
    assert turns[0].context_ids == prompt and turns[1].context_ids == prompt + encode(tok, "<think>")  # where ours puts it
    assert turns[0].format_valid and turns[0].answer == "3" and not turns[2].format_valid
    assert batch.returns().tolist() == [[1.0, 0.0], [0.5, -1.0]] and batch.successes().tolist() == [[1.0, 0.0], [1.0, 0.0]]
    assert turns[0].response_ids == ids[0] and tok.eos_token not in turns[0].response_text
    with pytest.raises(UserError, match="groups of 3"):
        rollout_batch([prompt] * 4, ids, [0.0] * 4, group_size=3, tokenizer=tok)


def test_kept_rows_follow_groups_and_trajectory_masks():
    assert kept_rows(Selection(np.array([1])), 3, 2).tolist() == [False, False, True, True, False, False]
    mask = np.array([[True, False], [True, True], [False, True]])
    assert kept_rows(Selection(np.array([0, 2]), mask), 3, 2).tolist() == [True, False, False, False, False, True]


# -- a real run ---------------------------------------------------------------------------------------------------
def test_two_step_run_logs_every_metric_and_the_proxy_equals_ours(tiny, tmp_path):
    cfg, path, tok = tiny

    class Recording(CollapseGRPOTrainer):
        """Keeps the policy as it was when each generation batch was scored (before that step's update)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.snapshots, self.batches = [], []

        def _generate_and_score_completions(self, inputs):
            adapter = get_peft_model_state_dict(self.accelerator.unwrap_model(self.model))
            self.snapshots.append({k: v.detach().clone() for k, v in adapter.items()})
            out = super()._generate_and_score_completions(inputs)
            self.batches.append(self.collapse_last_batch)
            return out

    trainer = make_trainer(
        cfg, path, tok, tmp_path, reward=varied_reward, cls=Recording, collapse_diagnostics=DiagnosticsConfig(compute_freq=1)
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2
    for log in logs:
        missing = expected_keys() - set(log)
        assert not missing, sorted(missing)
    # step 1's logged proxy against our own callback on the same prompts, completions and weights: our batch is
    # built from the token ids as our rollout builds a turn (reasoning before </think>, else the whole text)
    trl_batch = trainer.batches[0]
    assert trl_batch.num_prompts == P and trl_batch.group_size == G
    decoder = Policy(model=None, tokenizer=tok)  # type: ignore[arg-type]
    trajectories = []
    for i, traj in enumerate(trl_batch.trajectories):
        turn = traj.turns[0]
        text = decoder.response_text(turn.response_ids)
        think = parse_response(text).think if "</think>" in text else text
        ours_turn = Turn(
            turn.context_ids, turn.response_ids, text, think, "", False, False, traj.episode_return, observation=turn.observation
        )
        trajectories.append(Trajectory(group=i // G, env_seed=i // G, turns=[ours_turn]))
    ours_batch = RolloutBatch(trajectories, P, G)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32), LORA)
    set_peft_model_state_dict(model, trainer.snapshots[0])  # the adapter as it was when TRL scored batch 1
    # the adapter model as TRL's is (our runs score with a folded-LoRA copy: the same up to float32 rounding, which
    # in sequence sums of ~80 nats moves these near-zero MI values by ~1e-4; tests/models checks the folding)
    policy = Policy(model=model, tokenizer=tok, fold_lora_for_decoding=False)
    skip = tuple(DiagnosticsConfig().skip_samplers)
    ours = CollapseDiagnostics(compute_freq=1, seed=0, skip_samplers=skip).on_rollout(SimpleNamespace(policy=policy), ours_batch, 1).metrics
    compared = 0
    for key, value in ours.items():
        if key.startswith("perf/"):
            continue
        logged = logs[0][key]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            assert logged is None or math.isnan(logged), key
            continue
        assert logged == pytest.approx(value, rel=1e-6, abs=1e-9), key
        compared += 1
    assert compared > 100
    assert logs[0]["collapse_first_turn_sample/num_contexts"] == P and logs[0]["collapse_trajectory_sample/num_traces"] == P * G


def test_filter_drops_groups_from_the_gradient(tiny, tmp_path):
    """With rv_top_p at rho 0.5 some groups with reward variance are dropped; the update's gradient equals the
    gradient on the kept rows alone (TRL's default dapo loss) and differs from the unfiltered one."""
    cfg, path, tok = tiny
    trainer = make_trainer(cfg, path, tok, tmp_path, reward=varied_reward, collapse_filter="rv_top_p", collapse_rho=0.5)
    trainer.model.train()
    inputs = next(iter(trainer.get_train_dataloader()))
    trainer.current_gradient_accumulation_steps = 1
    unfiltered_filter, trainer.collapse_filter = trainer.collapse_filter, None
    torch.manual_seed(0)
    plain = trainer._generate_and_score_completions(inputs)  # the same generation twice: same seed, same tokens
    trainer.collapse_filter = unfiltered_filter
    torch.manual_seed(0)
    filtered = trainer._generate_and_score_completions(inputs)
    assert torch.equal(plain["completion_ids"], filtered["completion_ids"])
    batch = trainer.collapse_last_batch
    rv = batch.returns().var(axis=1, ddof=1)
    keep = filtered["completion_mask"].sum(1) > 0
    kept_groups = sorted({i // G for i in torch.nonzero(keep).flatten().tolist()})
    dropped = [g for g in range(P) if g not in kept_groups]
    assert kept_groups and dropped and any(rv[g] > 0 for g in dropped), (rv, kept_groups)  # a dropped group had signal

    def grad(inputs):
        trainer.model.zero_grad()
        trainer.compute_loss(trainer.model, inputs).backward()
        return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])

    only_kept = {k: (v[keep] if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == keep.shape[0] else v) for k, v in plain.items()}
    only_kept["num_items_in_batch"] = plain["completion_mask"][keep].sum()
    g_filtered, g_kept, g_plain = grad(filtered), grad(only_kept), grad(plain)
    assert torch.allclose(g_filtered, g_kept, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(g_filtered, g_plain, rtol=1e-3, atol=1e-6)  # the dropped groups would have moved it
    assert filtered["num_items_in_batch"] == only_kept["num_items_in_batch"]


def test_early_stop_ends_training_on_the_rule(tiny, tmp_path):
    from agentcollapse.diagnostics.early_warning import CollapseRule

    cfg, path, tok = tiny
    rule = CollapseRule(metric="collapse_first_turn_sample/retrieval_above_chance", threshold=2.0, patience=1)  # always below
    trainer = make_trainer(
        cfg, path, tok, tmp_path, steps=3, collapse_diagnostics=DiagnosticsConfig(compute_freq=1), collapse_early_stop=rule
    )
    trainer.train()
    assert trainer.state.global_step == 1
    assert trainer.collapse_stop_reason.startswith("collapse: collapse_first_turn_sample/retrieval_above_chance below 2")


def test_checkpoint_keeps_the_proxy_state_and_resume_continues_it(tiny, tmp_path):
    """The EMAs, the sampler's generator and the iteration count go into each checkpoint; a run resumed from
    checkpoint 1 logs step 2's proxy as the uninterrupted run does."""
    cfg, path, tok = tiny
    every = {"collapse_diagnostics": DiagnosticsConfig(compute_freq=1), "reward": varied_reward}
    whole = make_trainer(cfg, path, tok, tmp_path / "whole", save_strategy="steps", save_steps=1, **every)
    whole.train()
    state = json.loads((tmp_path / "whole" / "trl" / "checkpoint-1" / "collapse_state.json").read_text())
    assert state["iteration"] == 1 and state["diagnostics"]["emas"]
    resumed = make_trainer(cfg, path, tok, tmp_path / "resumed", save_strategy="steps", save_steps=1, **every)
    resumed.train(resume_from_checkpoint=str(tmp_path / "whole" / "trl" / "checkpoint-1"))
    assert resumed.collapse_iteration == whole.collapse_iteration == 2
    step2 = [h for h in whole.state.log_history if h.get("step") == 2 and "loss" in h][0]
    again = [h for h in resumed.state.log_history if h.get("step") == 2 and "loss" in h][0]
    for key in ("collapse_first_turn_sample/mi_zscore_ema", "collapse_trajectory_sample/mi_estimate"):
        assert again[key] == pytest.approx(step2[key], rel=1e-5), key


# -- what it refuses --------------------------------------------------------------------------------------------------
def test_unsupported_settings_stop_with_one_line(tiny, tmp_path):
    cfg, path, tok = tiny
    with pytest.raises(UserError, match=r"supports trl 1\.16\.x, found trl 1\.17\.0"):
        check_trl_version("1.17.0")
    check_trl_version(trl.__version__)
    with pytest.raises(UserError, match="per-trajectory entropies"):
        make_trainer(cfg, path, tok, tmp_path, collapse_filter=FilterConfig(name="entropy", metric="entropy"))
    with pytest.raises(UserError, match="loss_scale='linear' is not supported"):
        make_trainer(cfg, path, tok, tmp_path, collapse_filter=FilterConfig(name="rv_top_p", value=0.9, loss_scale="linear"))
    with pytest.raises(UserError, match="unknown|not found|filter"):
        make_trainer(cfg, path, tok, tmp_path, collapse_filter="no_such_filter")

    def tool(x: int) -> int:
        """Doubles x.

        Args:
            x: a number
        """
        return 2 * x

    with pytest.raises(UserError, match="single-turn completions"):
        make_trainer(cfg, path, tok, tmp_path, tools=[tool])


@pytest.mark.slow
@pytest.mark.xdist_group("smollm2")  # the worker that converts SmolLM2 for tests/models/test_smollm2.py
def test_smollm2_run_logs_every_metric(make_cfg, cache_dir, tmp_path):
    """The real model, untuned, with its own BPE tokenizer and chat template: its completions carry no
    </think>, so each is scored whole; every metric is logged and documented. One step (the proxy runs
    at each, 30 s of SmolLM2 here): the tiny policy's two-step run checks what a second step adds."""
    from agentcollapse.models.smollm2 import smollm2_dir
    from tests.test_metrics_documented import _documented

    path = smollm2_dir(cache_dir)
    tok = load_tokenizer(path)
    tok.padding_side = "left"
    cfg = make_cfg("env=countdown")
    trainer = make_trainer(
        cfg,
        path,
        tok,
        tmp_path,
        reward=varied_reward,
        steps=1,
        bf16=False,
        completion=8,
        collapse_filter="rv_top_p",
        collapse_diagnostics=DiagnosticsConfig(compute_freq=1),
    )
    started = time.perf_counter()
    trainer.train()
    print(f"SmolLM2 TRL run: {time.perf_counter() - started:.1f} s")
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 1
    for log in logs:
        assert not expected_keys() - set(log), sorted(expected_keys() - set(log))
        assert "filter/kept_ratio" in log and "perf/filter_time_s" in log
        assert log["collapse_first_turn_sample/num_contexts"] == P and log["collapse_first_turn_sample/num_traces"] == P * G
        assert math.isfinite(log["collapse_first_turn_sample/mi_estimate"])
    ours = [k for k in logs[0] if k.startswith(("collapse", "filter/", "perf/"))]
    patterns, proxy_rows = _documented()
    undocumented = [k for k in ours if not k.startswith("collapse_") and not any(p.match(k) for p in patterns)]
    assert not undocumented, undocumented
