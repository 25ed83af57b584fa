"""collapse_metrics / reward_variance_stats: every registered sampler on a hand-made batch, scored by
a tiny random Llama through a word-level tokenizer (no Lightning)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from transformers import LlamaForCausalLM

from agentcollapse.diagnostics import (
    BATCH_KEYS,
    PROXY_KEYS,
    RV_STAT_KEYS,
    ProxyEMAState,
    SamplerOptions,
    collapse_metrics,
    reward_variance_stats,
    sampler_names,
    sampler_prefix,
)
from agentcollapse.rollout.batch import RolloutBatch, Trajectory, Turn
from tests.helpers import small_llama

EMA_KEYS = ("marginal_std_ema", "marginal_std_seq_ema", "mi_zscore_ema", "mi_zscore_ema_seq")
P, G, TURNS = 3, 4, 2


class WordTokenizer:
    """``tok(text, add_special_tokens=False)["input_ids"]``: one id per whitespace-separated word."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [self.vocab.setdefault(w, 3 + len(self.vocab) % 40) for w in text.split()]}


def _model() -> LlamaForCausalLM:
    return small_llama(50, layers=1, heads=2)


def _batch(rewards, blank=()) -> RolloutBatch:
    """P x G trajectories of TURNS turns; ``blank`` lists (p, g, turn) whose reasoning is empty."""
    trajs = []
    for p in range(P):
        for g in range(G):
            turns = []
            for t in range(TURNS):
                think = "" if (p, g, t) in blank else f"w{p} w{g} w{t} w{(p * g + t) % 5}"
                turns.append(
                    Turn(
                        context_ids=[1, 2 + p] + [9] * t,
                        response_ids=[1],
                        response_text="",
                        think=think,
                        answer="Up",
                        format_valid=True,
                        action_is_valid=True,
                        reward=float(rewards[p][g]) if t == TURNS - 1 else 0.0,
                    )
                )
            trajs.append(Trajectory(group=p, env_seed=p, turns=turns))
    return RolloutBatch(trajectories=trajs, num_prompts=P, group_size=G)


REWARDS = [[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.5, 0.0]]


def _run(batch, emas=None, rng_seed=0, model=None, **kw):
    emas = {} if emas is None else emas
    model = _model() if model is None else model
    return collapse_metrics(model, WordTokenizer(), batch, emas, np.random.default_rng(rng_seed), 8, **kw), emas


def test_every_sampler_and_the_batch_keys():
    out, emas = _run(_batch(REWARDS), trajectory_samples=8)
    expected = set(BATCH_KEYS)
    for name in sampler_names():
        prefix = sampler_prefix(name)
        expected |= {f"{prefix}/{k}" for k in (*PROXY_KEYS, *EMA_KEYS, "valid_thinking_rate", "state_grounding")}
        expected |= {f"{prefix}/copied_token_frac"} if name.endswith("_nocopy") else set()
        assert emas[prefix].sigma.count == 1
    assert set(out) == expected
    assert out["collapse_first_turn_sample/num_contexts"] == P
    assert out["collapse_trajectory_sample/num_traces"] == 8
    assert out["collapse/valid_thinking_rate"] == 1.0
    assert out["collapse/first_turn_num_total"] == P * G and out["collapse/first_turn_valid_rate"] == 1.0
    for k in PROXY_KEYS:
        assert math.isfinite(out[f"collapse_first_turn_sample/{k}"]), k


def test_valid_thinking_rate_counts_all_turns():
    # 3 of the 24 turns blank, 2 of them first turns: all-turn rate 21/24, first-turn 10/12
    out, _ = _run(_batch(REWARDS, blank={(0, 0, 0), (1, 2, 0), (2, 3, 1)}))
    assert out["collapse/valid_thinking_rate"] == pytest.approx(21 / 24)
    assert out["collapse/first_turn_num_total"] == 12 and out["collapse/first_turn_num_valid"] == 10
    assert out["collapse/first_turn_valid_rate"] == pytest.approx(10 / 12)
    assert out["collapse_first_turn_sample/valid_thinking_rate"] == pytest.approx(10 / 12)


def test_sampler_options():
    out, _ = _run(_batch(REWARDS), first_turn_samples=5, trajectory_samples=20, trajectory_replace=True)
    assert out["collapse_first_turn_sample/num_traces"] == 5
    assert out["collapse/first_turn_num_valid"] == 12  # counted before the cap
    assert out["collapse_trajectory_sample/num_traces"] == 20  # with replacement: more than P * G / 2
    # options keyed by sampler name override the shorthands
    out2, _ = _run(_batch(REWARDS), first_turn_samples=5, options={"first_turn": SamplerOptions(num_samples=3)})
    assert out2["collapse_first_turn_sample/num_traces"] == 3


def test_all_blank_reasoning_scores_nothing():
    blank = {(p, g, t) for p in range(P) for g in range(G) for t in range(TURNS)}
    emas = {sampler_prefix("first_turn"): ProxyEMAState()}
    out, emas = _run(_batch(REWARDS, blank=blank), emas=emas)
    assert out["collapse/valid_thinking_rate"] == 0.0 and out["collapse/first_turn_valid_rate"] == 0.0
    assert f"{sampler_prefix('first_turn')}/mi_estimate" not in out
    assert emas[sampler_prefix("first_turn")].sigma.count == 0


def test_reward_variance_stats():
    out = reward_variance_stats(_batch(REWARDS))
    assert set(out) == set(RV_STAT_KEYS)
    rv = np.var(np.asarray(REWARDS), axis=1, ddof=1)
    assert out["collapse/zero_rv_group_frac"] == pytest.approx(1 / 3)
    assert out["collapse/rv_std_over_mean"] == pytest.approx(rv.std() / rv.mean())
    one = RolloutBatch(trajectories=_batch(REWARDS).trajectories[:P], num_prompts=P, group_size=1)
    assert reward_variance_stats(one) == {}


def test_samplers_share_their_pairs_forwards():
    # first_turn_nocopy draws first_turn's pairs: it reweights them without a forward of its own, and
    # its metrics are what it gives scored alone
    batch = _batch(REWARDS)
    model = _model()
    calls = [0]
    model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))

    def run(skip):
        calls[0] = 0
        out = collapse_metrics(model, WordTokenizer(), batch, {}, np.random.default_rng(0), 8, skip=skip)
        return out, calls[0]

    both, n_both = run(("trajectory", "trajectory_nocopy"))
    plain, n_plain = run(("trajectory", "trajectory_nocopy", "first_turn_nocopy"))
    alone, _ = run(("trajectory", "trajectory_nocopy", "first_turn"))
    assert n_both == n_plain > 0
    prefix = sampler_prefix("first_turn_nocopy")
    for k in PROXY_KEYS:
        a, b = both[f"{prefix}/{k}"], alone[f"{prefix}/{k}"]
        assert (math.isnan(a) and math.isnan(b)) or abs(a - b) < 1e-5, k


def test_the_proxy_split_across_ranks_logs_the_one_process_metrics():
    from tests.helpers import thread_ranks

    batch, model = _batch(REWARDS), _model()  # built here: threads seeding torch's one global RNG race
    one, _ = _run(batch, trajectory_samples=8, model=model)
    for got in thread_ranks(2, lambda share: _run(batch, trajectory_samples=8, share=share, model=model)[0]):
        assert set(got) == set(one)
        for k, v in one.items():  # the same samples and the same scores up to float rounding
            assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-6, nan_ok=True), k
