"""The RL module on the tiny model: real Lightning Trainer, real LoRA, real rollouts."""

import math

import numpy as np
import pytest
import torch

from agentcollapse.algorithms.presets import algorithm_preset
from agentcollapse.errors import UserError
from agentcollapse.lightning import AgentRLModule, Selection
from tests.helpers import attach_to_trainer
from tests.helpers import hand_batch as _hand_batch
from tests.helpers import snapshot as _snapshot


def _module(make_cfg, tiny_policy, *overrides):
    return attach_to_trainer(AgentRLModule(make_cfg(*overrides), tiny_policy))


def test_one_training_step_changes_lora_and_leaves_base_bit_identical(make_cfg, tiny_policy):
    module = _module(make_cfg, tiny_policy, "algorithm.kl_coef=0.0", "algorithm.entropy_coef=0.0")
    before = _snapshot(module.model)
    batch = _hand_batch(tiny_policy, [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    metrics = module.update(batch, Selection(np.arange(2), None, 1.0))
    after = _snapshot(module.model)
    lora = [n for n in before if "lora_" in n]
    base = [n for n in before if "lora_" not in n]
    assert lora and base
    assert any(not torch.equal(before[n], after[n]) for n in lora)
    assert all(torch.equal(before[n], after[n]) for n in base)
    assert math.isfinite(metrics["actor/grad_norm"]) and metrics["actor/grad_norm"] > 0


def test_equal_rewards_give_zero_policy_gradient_and_no_nan(make_cfg, tiny_policy):
    module = _module(make_cfg, tiny_policy, "algorithm.kl_coef=0.0", "algorithm.entropy_coef=0.0")
    before = _snapshot(module.model)
    batch = _hand_batch(tiny_policy, [[1.0] * 4, [0.0] * 4])
    metrics = module.update(batch, Selection(np.arange(2), None, 1.0))
    assert metrics["actor/pg_loss"] == 0.0
    assert metrics["actor/grad_norm"] == 0.0
    assert module.nonfinite_steps == 0
    after = _snapshot(module.model)
    assert all(torch.equal(before[n], after[n]) for n in before)  # Adam with zero grads moves nothing


@pytest.mark.parametrize("algorithm", ["grpo", "dr_grpo", "dapo", "ppo"])
def test_every_algorithm_updates_finitely(make_cfg, tiny_policy, algorithm):
    module = _module(make_cfg, tiny_policy, f"algorithm={algorithm}")
    batch = _hand_batch(tiny_policy, [[1.0, 0.0, -0.1, 1.0], [0.0, 0.5, 1.0, 0.0]])
    metrics = module.update(batch, Selection(np.arange(2), None, 1.0))
    for key in ("actor/pg_loss", "actor/entropy", "actor/clipfrac", "actor/grad_norm"):
        assert math.isfinite(metrics[key]), key
    assert metrics["actor/entropy"] > 0
    if algorithm == "ppo":
        assert math.isfinite(metrics["critic/value_loss"])


def test_nan_loss_skips_the_step_and_stops_after_n(make_cfg, tiny_policy):
    module = _module(make_cfg, tiny_policy, "algorithm.max_nonfinite_steps=2")
    module.trainer.should_stop = False
    before = _snapshot(module.model)
    batch = _hand_batch(tiny_policy, [[float("nan"), 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    module.update(batch, Selection(np.arange(2), None, 1.0))
    assert module.nonfinite_steps == 1 and not module.trainer.should_stop
    module.update(batch, Selection(np.arange(2), None, 1.0))
    assert module.trainer.should_stop and "NaN" in module.stop_reason
    after = _snapshot(module.model)
    assert all(torch.equal(before[n], after[n]) for n in before)


def test_group_size_one_with_grpo_is_a_user_error(make_cfg, tiny_policy):
    with pytest.raises(UserError, match="group_size>=2"):
        AgentRLModule(make_cfg("rollout.group_size=1"), tiny_policy)


@pytest.mark.parametrize(
    "override, message",
    [
        ("algorithm.kl_coef=-1.0", "kl_coef"),
        ("algorithm.entropy_coef=nan", "entropy_coef"),
    ],
)
def test_bad_coefficients_are_user_errors(make_cfg, override, message):
    with pytest.raises(UserError, match=message):
        algorithm_preset(make_cfg(override).algorithm)


def test_unknown_algorithm_lists_valid_ones(make_cfg):
    cfg = make_cfg()
    cfg.algorithm.name = "reinforce++"
    with pytest.raises(UserError, match="grpo"):
        algorithm_preset(cfg.algorithm)


def test_presets_are_overridable_field_by_field(make_cfg):
    algo = algorithm_preset(make_cfg("algorithm=dapo", "algorithm.kl_coef=0.01").algorithm)
    assert (algo.clip_low, algo.clip_high, algo.kl_coef) == (0.2, 0.28, 0.01)


def test_token_stats_start_at_the_first_target_and_match_the_full_forward(make_cfg, tiny_policy):
    from agentcollapse.algorithms import entropy_from_logits
    from agentcollapse.rollout.sequences import build_sequences, collate

    module = _module(make_cfg, tiny_policy, "algorithm=ppo")
    seqs = build_sequences(_hand_batch(tiny_policy, [[1.0, 0.0], [0.0, 1.0]]))
    mb = collate(seqs, list(range(len(seqs.input_ids))), module.pad_id)
    start = int(mb["logits_from"])
    first_response = seqs.loss_mask[0].index(1)
    assert start == first_response - 1 > 0  # the logits at position t predict token t + 1
    with torch.no_grad():
        entropy, logp, values = module.forward_sequences(mb, with_values=True)
        full = module.model(input_ids=mb["input_ids"], output_hidden_states=True)
    ids, mask = mb["input_ids"], mb["response_mask"]
    full_logp = torch.log_softmax(full.logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert mask.shape == entropy.shape == logp.shape == values.shape == (len(ids), ids.shape[1] - 1 - start)
    # the response tokens' values are the full forward's; off them, 0 (no loss reads them)
    torch.testing.assert_close(logp, full_logp[:, start:] * mask)
    torch.testing.assert_close(entropy, entropy_from_logits(full.logits[:, start:-1]) * mask)
    torch.testing.assert_close(values, module.value_head(full.hidden_states[-1][:, :-1])[:, start:])
    assert mb["response_mask"][:, 0].all()  # nothing a target was cut


def test_mini_batches_take_one_step_per_mini_batch_and_fewer_when_filtered(make_cfg, tiny_policy):
    rewards = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]]  # 2 groups x 4 trajectories
    start = _snapshot(tiny_policy.model)

    def update(mini_batch_size, groups):  # from the same weights and value-head init every time
        with torch.no_grad():
            for name, p in tiny_policy.model.named_parameters():
                p.copy_(start[name])
        torch.manual_seed(0)
        module = _module(make_cfg, tiny_policy, "algorithm=ppo", f"algorithm.mini_batch_size={mini_batch_size}")
        metrics = module.update(_hand_batch(tiny_policy, rewards), Selection(np.arange(groups), None, 1.0))
        return metrics, _snapshot(module.model)

    (whole, after_whole), (as_one, after_one), (split, after_split) = update(0, 2), update(8, 2), update(3, 2)
    assert whole["actor/optimizer_steps"] == as_one["actor/optimizer_steps"] == 1
    assert split["actor/optimizer_steps"] == 3  # 8 trajectories: 3 + 3 + 2
    lora = [n for n in start if "lora_" in n]
    # one mini-batch of the whole batch is the default update, bit for bit; three steps go elsewhere
    assert any(not torch.equal(start[n], after_whole[n]) for n in lora)
    assert all(torch.equal(after_whole[n], after_one[n]) for n in lora)
    assert any(not torch.equal(after_whole[n], after_split[n]) for n in lora)
    kept_one_group, _ = update(3, 1)  # a filter that keeps fewer trajectories takes fewer steps
    assert kept_one_group["actor/optimizer_steps"] == 2 and math.isfinite(kept_one_group["actor/grad_norm"])


def test_negative_mini_batch_size_is_a_user_error(make_cfg):
    with pytest.raises(UserError, match="mini_batch_size"):
        make_cfg("algorithm.mini_batch_size=-1").algorithm.validate()


def test_reference_pass_runs_each_prompt_once_and_equals_whole_sequence_forwards(make_cfg, tiny_policy):
    # Real multi-turn FrozenLake rollouts, LoRA moved off zero (so switching the adapter off matters),
    # several optimizer steps and odd batch sizes: the reference log-probs that score() computes with
    # each group's prompt run once equal a forward over every whole sequence with the adapter off.
    from agentcollapse.lightning import update as phases
    from agentcollapse.rollout.runner import collect_rollouts

    module = _module(
        make_cfg,
        tiny_policy,
        "rollout.num_prompts=3",
        "algorithm.kl_coef=0.01",
        "algorithm.mini_batch_size=4",
        "algorithm.micro_batch_size=3",
        "algorithm.reference_batch_size=5",
    )
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in module.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    batch, _ = collect_rollouts(tiny_policy, module.make_env, module.train_env_seeds(0), 4, 1.0, 12, sample_seed=3)
    assert max(len(t.turns) for t in batch.trajectories) > 1
    plan = phases.plan_update(module, batch, Selection(np.arange(3), None, 1.0))
    assert len(plan.steps) > 1
    phases.score(module, plan)
    for mb in plan.micro:
        mask = mb.tensors["response_mask"]
        with torch.no_grad():
            with module.model.disable_adapter():
                whole = module.forward_sequences(mb.tensors, with_values=False)[1]
            policy = module.forward_sequences(mb.tensors, with_values=False)[1]
        assert mb.ref_logp.shape == mask.shape
        assert torch.allclose(mb.ref_logp * mask, whole * mask, atol=1e-5)
        assert (mb.ref_logp * mask != 0).any()
        assert not torch.allclose(policy * mask, whole * mask, atol=1e-3)  # the adapter really was off


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_update_running_each_prompt_once_equals_the_whole_sequence_update(make_cfg, tiny_policy, monkeypatch, algorithm):
    # The same real multi-turn batch trained from the same weights, with each micro-batch's shared
    # prompt run once (micro-batches of one group) and with whole sequences: the same LoRA weights,
    # value head (PPO) and statistics after the update, up to float rounding.
    from agentcollapse.lightning import module as module_file
    from agentcollapse.rollout.runner import collect_rollouts

    overrides = (f"algorithm={algorithm}", "rollout.num_prompts=3", "algorithm.kl_coef=0.01", "algorithm.micro_batch_size=3")
    start = _snapshot(tiny_policy.model)
    batch = None
    calls = []
    real_forward = module_file.shared_prefix_forward
    monkeypatch.setattr(module_file, "shared_prefix_forward", lambda *a, **kw: (calls.append(1), real_forward(*a, **kw))[1])
    results = {}
    for shared in (True, False):
        with torch.no_grad():
            for name, p in tiny_policy.model.named_parameters():
                p.copy_(start[name])
        monkeypatch.setattr(AgentRLModule, "prompts_shared", lambda self, shared=shared: shared)
        torch.manual_seed(0)
        module = _module(make_cfg, tiny_policy, *overrides)
        if batch is None:
            batch, _ = collect_rollouts(tiny_policy, module.make_env, module.train_env_seeds(0), 4, 1.0, 12, sample_seed=3)
            assert max(len(t.turns) for t in batch.trajectories) > 1
        calls.clear()
        metrics = module.update(batch, Selection(np.arange(3), None, 1.0))
        assert (len(calls) > 0) == shared
        weights = _snapshot(module.model)
        if module.value_head is not None:
            weights.update({f"value_head.{n}": p.detach().clone() for n, p in module.value_head.named_parameters()})
        results[shared] = (metrics, weights)
    (m_shared, w_shared), (m_whole, w_whole) = results[True], results[False]
    assert m_shared["perf/update_tokens"] < m_whole["perf/update_tokens"]  # the prompts really ran once
    changed = [n for n in w_whole if not torch.equal(w_whole[n], start.get(n, w_whole[n]))]
    assert any("lora_" in n for n in changed)
    for name, w in w_whole.items():
        assert torch.allclose(w_shared[name], w, atol=1e-6), name
    for key in ("actor/pg_loss", "actor/kl", "actor/entropy", "actor/grad_norm") + (("critic/value_loss",) if algorithm == "ppo" else ()):
        assert m_shared[key] == pytest.approx(m_whole[key], rel=1e-4, abs=1e-7), key
