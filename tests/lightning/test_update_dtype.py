"""``algorithm.update_dtype=bfloat16``: the update's forwards (behaviour, reference and trained log-probs)
run under bf16 autocast while weights, adapter and optimizer stay float32; the step it takes is the
float32 one up to bf16 rounding (gradients and logged statistics compared on one batch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentcollapse.lightning import AgentRLModule, Selection
from agentcollapse.rollout.runner import collect_rollouts
from tests.helpers import attach_to_trainer, snapshot


def test_a_bf16_update_takes_the_float32_step_up_to_rounding(make_cfg, tiny_policy):
    model = tiny_policy.model
    start = snapshot(model)
    torch.manual_seed(0)
    with torch.no_grad():  # the adapter off zero, so the KL to the reference (adapter off) is not 0
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    moved = snapshot(model)
    batch, grads, stats = None, {}, {}
    for dtype in ("float32", "bfloat16"):
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(moved[name])
        cfg = make_cfg("rollout.num_prompts=4", "algorithm.kl_coef=0.01", f"algorithm.update_dtype={dtype}")
        module = attach_to_trainer(AgentRLModule(cfg, tiny_policy))
        if batch is None:
            batch, _ = collect_rollouts(tiny_policy, module.make_env, module.train_env_seeds(0), 4, 1.0, 12, sample_seed=3)
            rng = np.random.default_rng(0)
            for traj in batch.trajectories:  # the tiny test policy's own returns never vary
                traj.turns[-1].reward = float(rng.integers(0, 3))
        stats[dtype] = module.update(batch, Selection(np.arange(4), None, 1.0))
        grads[dtype] = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])  # the step's (clipped) gradient
        assert all(p.dtype == torch.float32 for p in model.parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(start[name])
    full, half = grads["float32"], grads["bfloat16"]
    assert full.norm() > 0 and not torch.equal(full, half)  # bf16 really ran, and rounds differently
    assert float(torch.nn.functional.cosine_similarity(full, half, dim=0)) > 0.99
    for key in ("actor/entropy", "actor/grad_norm", "actor/kl"):
        assert stats["bfloat16"][key] == pytest.approx(stats["float32"][key], rel=0.1, abs=1e-4), key
