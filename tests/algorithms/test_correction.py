"""The rollout correction (truncated importance sampling for an engine whose log-probs are not the
trainer's), checked against the formulas written out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from agentcollapse.algorithms import policy_loss, rollout_correction_weights
from agentcollapse.rollout.batch import RolloutBatch, Trajectory, Turn
from agentcollapse.rollout.sequences import build_sequences, collate

OLD = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-1.0, -1.0, -1.0, 0.0]])
SAMPLE = torch.tensor([[-2.0, -2.0, -0.4, 0.0], [-1.1, -0.9, -1.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]])


def test_token_tis_caps_each_tokens_ratio():
    weights, stats = rollout_correction_weights(OLD, SAMPLE, MASK, "token_tis", cap=2.0)
    ratio = torch.exp(OLD - SAMPLE) * MASK
    assert torch.allclose(weights, ratio.clamp(max=2.0) * MASK)
    assert weights[0, 0] == 2.0  # e^1 = 2.72 capped
    assert stats.corrected_frac == pytest.approx(1 / 6)
    assert stats.logp_abs_diff == pytest.approx((1 + 0 + 0.1 + 0.1 + 0.1 + 0) / 6, abs=1e-6)
    assert stats.ratio_mean == pytest.approx(float(ratio.sum() / 6), abs=1e-6)
    assert stats.tokens == stats.corrected_of == 6  # what the means are over, to combine micro-batches


def test_sequence_mask_drops_sequences_whose_geometric_ratio_leaves_the_band():
    weights, stats = rollout_correction_weights(OLD, SAMPLE, MASK, "sequence_mask", cap=1.3)
    # row 0: exp((1 + 0 - 0.1) / 3) = 1.35 > 1.3, dropped; row 1: exp(0) = 1, kept in full
    assert math.exp(0.9 / 3) > 1.3
    assert weights[0].sum() == 0 and torch.equal(weights[1], MASK[1])
    assert stats.corrected_frac == 0.5
    assert stats.tokens == 6 and stats.corrected_of == 2  # a share of the sequences


def test_none_measures_without_weighting_and_bad_settings_are_refused():
    weights, stats = rollout_correction_weights(OLD, OLD, MASK, "none", cap=2.0)
    assert weights is None and stats.logp_abs_diff == 0 and stats.ratio_mean == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown rollout correction"):
        rollout_correction_weights(OLD, SAMPLE, MASK, "tis", cap=2.0)
    with pytest.raises(ValueError, match="cap must be > 1"):
        rollout_correction_weights(OLD, SAMPLE, MASK, "token_tis", cap=1.0)


def test_token_weights_scale_the_policy_loss_per_token():
    logp = OLD.clone().requires_grad_(True)
    adv = torch.tensor([1.0, -1.0])
    w, _ = rollout_correction_weights(OLD, SAMPLE, MASK, "token_tis", cap=2.0)
    plain = policy_loss(logp, OLD, adv, MASK, agg_mode="token-mean")
    weighted = policy_loss(logp, OLD, adv, MASK, agg_mode="token-mean", token_weights=w)
    # on-policy the ratio is 1: each token's loss is -A, weighted by w
    expected = float((-adv[:, None] * w * MASK).sum() / MASK.sum())
    assert float(plain.loss) == pytest.approx(float((-adv[:, None] * MASK).sum() / MASK.sum()))
    assert float(weighted.loss) == pytest.approx(expected)


def test_engine_logprobs_line_up_with_the_trainers_targets():
    """A two-turn trajectory's engine log-probs land on its response tokens, in collate's alignment."""
    turns = [
        Turn(context_ids=[1, 2], response_ids=[3, 4], response_text="", think="", answer="", format_valid=True,
             action_is_valid=True, reward=0.0, sample_logprobs=[-0.3, -0.4]),
        Turn(context_ids=[1, 2, 3, 4, 5], response_ids=[6], response_text="", think="", answer="", format_valid=True,
             action_is_valid=True, reward=1.0, sample_logprobs=[-0.6]),
    ]  # fmt: skip
    batch = RolloutBatch([Trajectory(group=0, env_seed=0, turns=turns)], num_prompts=1, group_size=1)
    seqs = build_sequences(batch)
    assert seqs.sample_logp == [[0.0, 0.0, -0.3, -0.4, 0.0, -0.6]]
    mb = collate(seqs, [0], pad_id=0)
    # targets are input_ids[1:] from logits_from on: tokens 3, 4, 5, 6 (5 is the observation)
    assert mb["response_mask"].tolist() == [[1.0, 1.0, 0.0, 1.0]]
    assert mb["sample_logp"].tolist() == [[pytest.approx(-0.3), pytest.approx(-0.4), 0.0, pytest.approx(-0.6)]]
