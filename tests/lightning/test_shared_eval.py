"""The shared step-0 evaluation: which runs share it, and that what it skips would have been identical."""

import torch

from agentcollapse.lightning import AgentRLModule
from agentcollapse.lightning.shared_eval import SharedEvaluations, step0_key
from tests.helpers import attach_to_trainer

EVAL = ("trainer.val_episodes=3", "trainer.val_temperatures=[0.5,1.0]")


def test_runs_that_differ_only_in_what_trains_share_the_key(make_cfg, tiny_policy):
    base = step0_key(make_cfg(*EVAL), tiny_policy.model)
    for training_only in (
        "algorithm=ppo",
        "filter=rv_top_p",
        "algorithm.kl_coef=0.1",
        "rollout.group_size=8",
        "trainer.max_steps=9",
        "rollout.min_new_tokens=4",  # training rollouts only
    ):
        assert step0_key(make_cfg(*EVAL, training_only), tiny_policy.model) == base, training_only
    for evaluated in ("seed=1", "trainer.val_episodes=4", "trainer.val_temperatures=[0.5]", "rollout.max_new_tokens=9"):
        assert step0_key(make_cfg(*EVAL, evaluated), tiny_policy.model) != base, evaluated


def test_the_key_follows_the_weights(make_cfg, tiny_policy):
    cfg = make_cfg(*EVAL)
    before = step0_key(cfg, tiny_policy.model)
    param = next(p for n, p in tiny_policy.model.named_parameters() if "lora_B" in n)
    with torch.no_grad():
        param.add_(1e-3)
    try:
        assert step0_key(cfg, tiny_policy.model) != before
    finally:
        with torch.no_grad():
            param.sub_(1e-3)


def test_what_the_key_ignores_does_not_change_the_evaluation(make_cfg, tiny_policy):
    # GRPO without a filter and PPO (a critic) with one evaluate the warm start to the same numbers.
    grpo = attach_to_trainer(AgentRLModule(make_cfg(*EVAL), tiny_policy)).evaluate()
    ppo = attach_to_trainer(AgentRLModule(make_cfg(*EVAL, "algorithm=ppo", "filter=rv_top_p"), tiny_policy)).evaluate()
    drop = {"perf/val_time_s"}
    assert {k: v for k, v in grpo.items() if k not in drop} == {k: v for k, v in ppo.items() if k not in drop}


def test_a_half_written_result_is_evaluated_again(tmp_path):
    shared = SharedEvaluations(tmp_path)
    (tmp_path / "k.json").write_text('{"metrics": {"val/success_rate": 0.')
    assert shared.load("k") is None and shared.load("absent") is None
    shared.store("k", {"val/success_rate": 0.25})
    assert shared.load("k") == {"val/success_rate": 0.25}
    assert [p.name for p in tmp_path.iterdir()] == ["k.json"]
