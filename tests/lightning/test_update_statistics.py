"""The update's logged statistics are the quantities their names say, over all of the update's tokens
(or sequences) as the loss aggregation weighs them, whatever the micro-batching (issue 46): real
multi-turn FrozenLake rollouts, returns and engine log-probs set by hand (the tiny test policy's own
returns never vary), a filter's choice of 3 of 4 groups, so that micro-batches differ in size and
sequences in length. The strategies (DDP, FSDP) against one process: tests/cli/test_distributed_cli.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentcollapse.lightning import AgentRLModule, Selection
from agentcollapse.rollout.runner import collect_rollouts
from tests.helpers import attach_to_trainer, snapshot

# 1, 2 and 8 sequences per micro-batch, and the whole step in one micro-batch (64 > the 12 kept)
SIZES = (1, 2, 8, 64)
SETTINGS = {
    "token-mean": ("algorithm=grpo",),
    "seq-mean-token-mean": ("algorithm=grpo", "algorithm.loss_agg_mode=seq-mean-token-mean"),
    "seq-mean-token-sum-norm": ("algorithm=dr_grpo",),
    # four optimizer steps (2 epochs x 2 mini-batches), a critic, sequence-level rollout correction
    "ppo-steps": ("algorithm=ppo", "algorithm.ppo_epochs=2", "algorithm.mini_batch_size=6", "algorithm.rollout_correction=sequence_mask"),
}


def _updates(make_cfg, policy, overrides: tuple[str, ...]) -> dict[int, dict[str, float]]:
    """The update's metrics for each micro-batch size, from the same weights and batch. Micro-batches
    are cut by length (not one group's prompt each, which would make 8 and 64 the same 3 groups)."""
    start = snapshot(policy.model)
    torch.manual_seed(0)
    with torch.no_grad():  # the adapter off zero, so the KL to the reference (adapter off) is not 0
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    moved = snapshot(policy.model)
    batch = None
    out = {}
    for size in SIZES:
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                p.copy_(moved[name])
        torch.manual_seed(0)
        cfg = make_cfg(*overrides, "rollout.num_prompts=4", "algorithm.kl_coef=0.01", f"algorithm.micro_batch_size={size}")
        module = attach_to_trainer(AgentRLModule(cfg, policy))
        if batch is None:
            batch, _ = collect_rollouts(policy, module.make_env, module.train_env_seeds(0), 4, 1.0, 12, sample_seed=3)
            rng = np.random.default_rng(0)
            for traj in batch.trajectories:
                traj.turns[-1].reward = float(rng.integers(0, 3))
                off = rng.choice([-1.5, 0.0, 0.0, 1.5])  # an engine's log-probs, some sequences far enough off to be corrected
                for turn in traj.turns:
                    turn.sample_logprobs = rng.normal(-7.0 + off, 1.0, len(turn.response_ids)).tolist()
            lengths = [sum(len(t.response_ids) for t in traj.turns) for traj in batch.trajectories]
            assert len(set(lengths)) > 2 and len(set(batch.returns().reshape(-1).tolist())) > 1
        out[size] = module.update(batch, Selection(np.array([0, 1, 3]), None, 1.0))
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            p.copy_(start[name])
    return out


@pytest.mark.parametrize("setting", SETTINGS)
def test_statistics_do_not_depend_on_the_micro_batch_size(make_cfg, tiny_policy, monkeypatch, setting):
    monkeypatch.setattr(AgentRLModule, "prompts_shared", lambda self: False)
    runs = _updates(make_cfg, tiny_policy, SETTINGS[setting])
    whole = runs[64]
    keys = [k for k in whole if k.startswith(("actor/", "critic/", "rollout/engine"))]
    for key in (
        "actor/pg_loss",
        "actor/kl",
        "actor/entropy",
        "actor/approx_kl",
        "rollout/engine_logp_abs_diff",
        "actor/rollout_corrected_frac",
    ):
        assert key in keys, key
    assert whole["actor/pg_loss"] != 0 and whole["actor/kl"] > 0 and 0 < whole["actor/rollout_corrected_frac"] < 1
    # float32 forwards of other shapes round differently: equal to ~1e-7 relative, not bit for bit
    for size in SIZES[:-1]:
        for key in keys:
            assert runs[size][key] == pytest.approx(whole[key], rel=1e-5, abs=1e-7), (size, key)
