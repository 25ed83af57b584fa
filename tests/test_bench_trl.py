"""``make bench-trl``'s smollm2 entry: equal work on both sides, both proxy cadences, each phase against the limit."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.bench_trl import EVERY5, SMOLLM2, fair_lines, fair_summary, forward_probe_s, grpo_config_fields, sides


def size(**kw) -> argparse.Namespace:
    base = dict(
        prompts=4, group=8, max_new_tokens=64, smollm2_tokens="budget", smollm2_dtype="bfloat16", steps=6, model_name=SMOLLM2, trl_arg=[]
    )
    return argparse.Namespace(**{**base, **kw})


def test_trl_runs_smollm2_at_our_dtype_and_to_the_budget_and_the_tiny_heads_as_before():
    fields = grpo_config_fields(size())
    assert fields["bf16"] is True and fields["generation_kwargs"] == {"min_new_tokens": 64}
    free = grpo_config_fields(size(smollm2_tokens="free", smollm2_dtype="float32"))
    assert free["bf16"] is False and "generation_kwargs" not in free
    tiny = grpo_config_fields(size(model_name="natural", prompts=8, group=16, max_new_tokens=40))
    assert tiny["bf16"] is False and "generation_kwargs" not in tiny
    assert sides(SMOLLM2) == ("ours", EVERY5, "trl") and sides("natural") == ("ours", "trl")


SIZES = {"hidden": 4, "intermediate": 8, "kv": 2, "layers": 3, "vocab": 10}
RATES = {f"bfloat16:{k}": 1.0 for k in ("q, o", "k, v", "gate, up", "down", "head")}  # 1 GFLOP/s everywhere


def test_the_probe_time_of_a_forward_counts_every_layer_product_and_the_head_on_the_completions():
    probe = {"rates": RATES, "sizes": SIZES}
    per_layer = 2 * (2 * 4 * 4 + 2 * 4 * 2 + 2 * 4 * 8 + 8 * 4)  # q,o + k,v + gate,up + down, 2 FLOPs a multiply-add
    expected = (100 * 3 * per_layer + 40 * 2 * 4 * 10) / 1e9
    assert forward_probe_s(probe, "bfloat16", body_positions=100, head_positions=40) == pytest.approx(expected)


def test_the_summary_means_each_side_and_reads_every_phase_against_the_limit():
    def run(step: float, length: float, **phases: float) -> dict:
        # 6 iterations; the first (a warm-up) is left out of every mean
        return {"step": [99.0] + [step] * 5, "completion_length": [1.0] + [length] * 5, **{k: [99.0] + [v] * 5 for k, v in phases.items()}}

    ours = run(10.0, 64.0, rollout=2.0, scoring=2.0, update=4.0, proxy=2.0)
    every5 = {**run(8.0, 64.0, rollout=2.0, scoring=2.0, update=4.0, proxy=0.0)}
    every5["step"][5], every5["proxy"][5] = 10.0, 2.0  # step 5 carries the proxy: one in five
    trl = {**run(20.0, 64.0, rollout=6.0, rewards_and_advantages=4.0, update=10.0), "prompt_length": [50.0] * 6}
    res = {"ours": [ours], EVERY5: [every5], "trl": [trl], "probe": {"rates": RATES, "sizes": SIZES}}
    f = fair_summary(res, size())
    assert f["mean_s"][EVERY5]["step"] == pytest.approx(8.4) and f["mean_s"][EVERY5]["proxy"] == pytest.approx(0.4)
    assert f["ratio_every5_over_trl"] == pytest.approx(0.42) and f["goal_0_5_met"]
    assert f["ratio_every_step_over_trl"] == pytest.approx(0.5)
    assert f["equal_tokens"] and f["prompt_length"] == 50.0
    tokens = 4 * 8 * 64
    one = forward_probe_s(res["probe"], "bfloat16", 4 * 50 + tokens, tokens)
    assert f["phases"]["trl"]["update"] == pytest.approx(
        {"s": 10.0, "tokens_per_s": tokens / 10, "probe_s": 2 * one, "fraction_of_limit": 2 * one / 10}
    )
    assert f["phases"]["ours"]["scoring"]["fraction_of_limit"] == pytest.approx(one / 2)
    assert f["phases"]["ours"]["proxy"]["fraction_of_limit"] is None  # its work is not a forward over the batch
    text = "\n".join(fair_lines({"fair": f}))
    assert "**0.42**" in text and "| TRL | update | 10.00 |" in text

    shorter = {**ours, "completion_length": [1.0] + [50.0] * 5}  # one side stopped early: not equal work
    assert not fair_summary({**res, "ours": [shorter]}, size())["equal_tokens"]
