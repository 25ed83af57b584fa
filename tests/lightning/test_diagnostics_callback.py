"""CollapseDiagnostics on the tiny policy: which metrics appear at which step, checkpointed EMA/RNG
state, no side effects on the module, and empty reasoning."""

import copy
import io
import math
import pickle

import numpy as np
import pytest
import torch

from agentcollapse import envs
from agentcollapse.diagnostics import BATCH_KEYS, sampler_prefixes
from agentcollapse.diagnostics.proxy import PROXY_KEYS
from agentcollapse.lightning.diagnostics import CollapseDiagnostics
from agentcollapse.lightning.module import AgentRLModule
from agentcollapse.models.context import (
    assistant_message,
    encode,
    first_user_message,
    format_response,
    next_user_message,
    render_context,
)
from agentcollapse.rollout.batch import RolloutBatch, Trajectory, Turn
from agentcollapse.rollout.runner import collect_rollouts
from agentcollapse.seeds import TRAIN_SEED_BASE

SAMPLERS = sampler_prefixes()
EMA_KEYS = ("marginal_std_ema", "marginal_std_seq_ema", "mi_zscore_ema", "mi_zscore_ema_seq")
RV_KEYS = {"collapse/rv_std_over_mean", "collapse/zero_rv_group_frac"}
P, G, TURNS = 3, 4, 2
# Words the tiny tokenizer knows, so every reasoning trace re-tokenises to real, non-empty ids.
WORDS = ("the", "goal", "is", "up", "so", "go", "left", "hole", "wall", "ice", "Right", "Down")


def _proxy_keys() -> set[str]:
    keys = {f"{s}/{k}" for s in SAMPLERS for k in (*PROXY_KEYS, *EMA_KEYS, "valid_thinking_rate", "state_grounding")}
    keys |= {f"{s}/copied_token_frac" for s in SAMPLERS if s.endswith("_nocopy_sample")}
    return keys | {"collapse/valid_thinking_rate", "perf/collapse_time_s"} | set(BATCH_KEYS)


def _think(p: int, g: int, turn: int, salt: int) -> str:
    rng = np.random.default_rng([p, g, turn, salt])
    return " ".join(WORDS[int(i)] for i in rng.integers(len(WORDS), size=3 + (p + g + turn) % 4))


def _hand_batch(policy, cfg, rewards, salt: int = 0, empty: bool = False) -> RolloutBatch:
    """P x G trajectories of TURNS turns each, with real FrozenLake contexts rendered by the real
    tokenizer (X ends with ``<think>``) and chosen reasoning text / episode returns."""
    tok = policy.tokenizer
    trajs = []
    for p in range(P):
        for g in range(G):
            env = envs.make(cfg.env.name, **dict(cfg.env.kwargs))
            obs = env.reset(TRAIN_SEED_BASE + p)
            messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": first_user_message(obs)}]
            traj = Trajectory(group=p, env_seed=TRAIN_SEED_BASE + p)
            for k in range(TURNS):
                think = "   " if empty else _think(p, g, k, salt)
                text = format_response(think.strip(), "Right")
                reward = float(rewards[p][g]) if k == TURNS - 1 else 0.0
                traj.turns.append(
                    Turn(
                        context_ids=encode(tok, render_context(tok, messages)),
                        response_ids=encode(tok, text),
                        response_text=text,
                        think=think,
                        answer="Right",
                        format_valid=True,
                        action_is_valid=True,
                        reward=reward,
                    )
                )
                messages = messages + [
                    {"role": "assistant", "content": assistant_message(text)},
                    {"role": "user", "content": next_user_message(k + 2, reward, obs)},
                ]
            trajs.append(traj)
    return RolloutBatch(trajectories=trajs, num_prompts=P, group_size=G)


REWARDS = [[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.5, 0.0]]


@pytest.fixture()
def setup(make_cfg, tiny_policy):
    cfg = make_cfg()
    return cfg, AgentRLModule(cfg, tiny_policy)


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _without_time(metrics):
    return {k: v for k, v in metrics.items() if k != "perf/collapse_time_s"}


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert (math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k], k


def test_real_rollout_metrics_present_at_steps_1_and_5_only(make_cfg, tiny_policy):
    module = AgentRLModule(make_cfg("env.kwargs.max_turns=2"), tiny_policy)  # 2 turns: cheaper, still multi-turn
    seeds = list(range(TRAIN_SEED_BASE, TRAIN_SEED_BASE + P))
    batch, _ = collect_rollouts(module.policy, module.make_env, seeds, G, 1.0, 6, sample_seed=0)
    assert len(batch.trajectories) == P * G

    # as generated (the barely trained model mostly leaves the reasoning empty): no crash
    out = CollapseDiagnostics().on_rollout(module, batch, 1).metrics
    assert 0.0 <= out["collapse/valid_thinking_rate"] <= 1.0
    assert RV_KEYS <= set(out) and "perf/collapse_time_s" in out

    # every turn given a non-empty reasoning text (contexts and generated tokens stay the real ones)
    for i, traj in enumerate(batch.trajectories):
        for k, turn in enumerate(traj.turns):
            turn.think = _think(traj.group, i, k, 0)
    cb = CollapseDiagnostics(compute_freq=5, batch_size=5)  # 12 traces -> ragged scoring batches
    for step, due in ((1, True), (2, False), (5, True)):
        out = cb.on_rollout(module, batch, step).metrics
        if not due:
            assert set(out) == RV_KEYS
            continue
        assert set(out) == RV_KEYS | _proxy_keys(), set(out) ^ (RV_KEYS | _proxy_keys())
        assert out["collapse/valid_thinking_rate"] == 1.0
        assert out["perf/collapse_time_s"] > 0
        for s in SAMPLERS:
            assert out[f"{s}/num_traces"] == P * G
            assert out[f"{s}/mi_upper_bound"] == pytest.approx(math.log(P if "first_turn" in s else P * G))
            for k in (*PROXY_KEYS, *EMA_KEYS):
                assert math.isfinite(out[f"{s}/{k}"]), (s, k)
        assert out["collapse_first_turn_sample/num_contexts"] == P
        assert out["collapse_first_turn_sample/retrieval_chance_level"] == pytest.approx(1 / P)
    assert cb.emas["collapse_first_turn_sample"].sigma.count == 2  # updated on computed steps only


def test_rv_stats_values(setup, tiny_policy):
    cfg, module = setup
    out = CollapseDiagnostics().on_rollout(module, _hand_batch(tiny_policy, cfg, REWARDS), 2).metrics
    rv = np.var(np.asarray(REWARDS), axis=1, ddof=1)
    assert out["collapse/zero_rv_group_frac"] == pytest.approx(1 / 3)
    assert out["collapse/rv_std_over_mean"] == pytest.approx(rv.std() / rv.mean())


def test_ema_and_rng_state_round_trip(setup, tiny_policy):
    cfg, module = setup
    first = _hand_batch(tiny_policy, cfg, REWARDS, salt=1)
    second = _hand_batch(tiny_policy, cfg, REWARDS, salt=2)
    cb = CollapseDiagnostics(compute_freq=5, seed=3)
    out1 = cb.on_rollout(module, first, 1).metrics
    state = cb.state_dict()
    # Lightning pickles callback state into the checkpoint
    buf = io.BytesIO()
    torch.save(copy.deepcopy(state), buf)
    buf.seek(0)
    loaded_state = torch.load(buf, weights_only=False)
    assert pickle.loads(pickle.dumps(state)) == state

    expected = cb.on_rollout(module, second, 5).metrics
    reloaded = CollapseDiagnostics(compute_freq=5, seed=99)
    reloaded.load_state_dict(loaded_state)
    got = reloaded.on_rollout(module, second, 5).metrics
    _same(_without_time(expected), _without_time(got))
    assert reloaded.state_dict()["emas"] == cb.state_dict()["emas"]
    assert reloaded.rng.bit_generator.state == cb.rng.bit_generator.state

    # the state matters: step 5's EMA blends in step 1's sigma
    for s in SAMPLERS:
        sigma1, sigma5 = out1[f"{s}/marginal_std"], got[f"{s}/marginal_std"]
        assert sigma1 != pytest.approx(sigma5)
        assert got[f"{s}/marginal_std_ema"] == pytest.approx(0.9 * sigma1 + 0.1 * sigma5)


def test_weights_and_train_mode_unchanged(setup, tiny_policy):
    cfg, module = setup
    module.train()
    module.model.base_model.model.model.layers[0].eval()  # mixed flags must come back exactly
    flags = [m.training for m in module.modules()]
    before = _snapshot(module)
    grads_enabled = torch.is_grad_enabled()
    out = CollapseDiagnostics().on_rollout(module, _hand_batch(tiny_policy, cfg, REWARDS), 1).metrics
    assert "collapse_trajectory_sample/mi_estimate" in out
    assert [m.training for m in module.modules()] == flags
    after = _snapshot(module)
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert all(p.grad is None for p in module.parameters())
    assert torch.is_grad_enabled() == grads_enabled


def test_empty_reasoning_gives_zero_valid_rate(setup, tiny_policy):
    cfg, module = setup
    cb = CollapseDiagnostics()
    before = copy.deepcopy(cb.state_dict()["emas"])
    out = cb.on_rollout(module, _hand_batch(tiny_policy, cfg, REWARDS, empty=True), 1).metrics
    assert out["collapse/valid_thinking_rate"] == 0.0
    for s in SAMPLERS:
        assert out[f"{s}/valid_thinking_rate"] == 0.0
        assert f"{s}/mi_estimate" not in out
    assert RV_KEYS <= set(out) and "perf/collapse_time_s" in out
    assert cb.state_dict()["emas"] == before  # nothing scored, the EMAs are untouched
