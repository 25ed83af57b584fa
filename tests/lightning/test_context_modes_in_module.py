"""rollout.context in the module: its rollouts use the mode, and the update trains on one sequence
per context segment, each row the tokens the rollout read and sampled, with its trajectory's advantage."""

import math

import numpy as np
import pytest
import torch

from agentcollapse.algorithms import compute_group_advantages
from agentcollapse.lightning import AgentRLModule, Selection
from agentcollapse.lightning import update as phases
from agentcollapse.rollout.sequences import build_sequences
from tests.helpers import attach_to_trainer
from tests.helpers import snapshot as _snapshot


@pytest.mark.parametrize("context", [["rollout.context=window", "rollout.context_turns=1"], ["rollout.context=single_turn"]])
def test_update_trains_each_segment_with_its_trajectorys_advantage(make_cfg, tiny_policy, context):
    module = attach_to_trainer(AgentRLModule(make_cfg(*context, "algorithm.kl_coef=0.0", "algorithm.micro_batch_size=5"), tiny_policy))
    batch, _ = module.collect(0)
    assert any(t.window_start for traj in batch.trajectories for t in traj.turns)  # the module rolled out in the mode
    # The test policy's short warm start fails every map alike: returns are set by hand so groups vary.
    for i, traj in enumerate(batch.trajectories):
        traj.turns[-1].reward += float(i % 3)
    kept = np.arange(batch.num_prompts)
    plan = phases.plan_update(module, batch, Selection(kept, None, 1.0))
    seqs = build_sequences(batch)
    assert plan.seqs.input_ids == seqs.input_ids and len(seqs.input_ids) > len(batch.trajectories)
    phases.score(module, plan)
    phases.assign_advantages(module, plan)
    traj_adv = compute_group_advantages(module.algo.advantage, plan.returns).reshape(-1)
    for mb in plan.micro:
        start = int(mb.tensors["logits_from"])
        for row, i in enumerate(mb.members):
            ids = seqs.input_ids[i]
            assert mb.tensors["input_ids"][row, : len(ids)].tolist() == ids  # the rollout's tokens
            mask = mb.tensors["response_mask"][row]
            assert mask.tolist()[: len(ids) - 1 - start] == [float(m) for m in seqs.loss_mask[i][1 + start :]]
            assert torch.allclose(mb.advantages[row], traj_adv[seqs.traj_index[i]] * mask)
    before = _snapshot(module.model)
    metrics = module.update(batch, Selection(kept, None, 1.0))
    assert math.isfinite(metrics["actor/grad_norm"]) and metrics["actor/grad_norm"] > 0
    after = _snapshot(module.model)
    assert any(not torch.equal(before[n], after[n]) for n in before if "lora_" in n)
