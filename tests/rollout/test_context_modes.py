"""rollout.context=full|window|single_turn: which past turns each context shows, where a trajectory's
training sequences begin, and that the rollout, the update's sequences and the MI proxy's X hold the
same tokens in every mode."""

import dataclasses

import numpy as np
import pytest

from agentcollapse import envs
from agentcollapse.diagnostics.samplers import first_turn_sample, trajectory_sample
from agentcollapse.errors import UserError
from agentcollapse.models.context import encode, first_context_ids, history_start, segment_context_ids
from agentcollapse.rollout.runner import collect_rollouts
from agentcollapse.rollout.sequences import build_sequences

MODES = [("full", 0), ("window", 1), ("window", 2), ("single_turn", 0)]


def _roll(policy, mode, k, temperature=1.0, env="frozenlake"):
    return collect_rollouts(policy, lambda: envs.make(env), [11, 12], 3, temperature, 12, sample_seed=3, context=mode, context_turns=k)[0]


def test_history_start_per_mode():
    assert [history_start(t, "full") for t in range(5)] == [0, 0, 0, 0, 0]
    assert [history_start(t, "window", 2) for t in range(5)] == [0, 0, 0, 1, 2]
    assert [history_start(t, "single_turn") for t in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="turns >= 1"):
        history_start(3, "window", 0)
    with pytest.raises(ValueError, match="unknown context mode"):
        history_start(0, "last")


def test_a_segment_with_no_past_turn_is_the_first_context(tiny_policy):
    tok = tiny_policy.tokenizer
    ids, messages = first_context_ids(tok, "the system", "a map")
    assert segment_context_ids(tok, "the system", [], messages[-1]["content"]) == ids


@pytest.mark.parametrize(("mode", "k"), MODES)
def test_sequences_hold_exactly_the_rollouts_contexts_and_responses(tiny_policy, mode, k):
    batch = _roll(tiny_policy, mode, k)
    tok = tiny_policy.tokenizer
    assert max(len(t.turns) for t in batch.trajectories) > 2  # windows move within these trajectories
    seqs = build_sequences(batch)
    rows = {}
    for i, t in enumerate(seqs.traj_index):
        rows.setdefault(t, []).append(i)
    for index, traj in enumerate(batch.trajectories):
        n = len(traj.turns)
        # where each segment begins: the first turn and every turn whose first shown past turn moved
        starts = [t for t in range(n) if t == 0 or history_start(t, mode, k) != history_start(t - 1, mode, k)]
        assert [t for t in range(1, n) if traj.turns[t].window_start] == starts[1:]
        assert len(rows[index]) == len(starts)
        assert [seqs.is_last[i] for i in rows[index]] == [False] * (len(starts) - 1) + [True]
        for s, (begin, end) in enumerate(zip(starts, [*starts[1:], n])):
            ids, mask = seqs.input_ids[rows[index][s]], seqs.loss_mask[rows[index][s]]
            covered = []
            for turn in traj.turns[begin:end]:
                # the update reads this turn's context and then its response, as the rollout did
                c, r = len(turn.context_ids), len(turn.response_ids)
                assert ids[:c] == turn.context_ids and ids[c : c + r] == turn.response_ids
                covered += range(c, c + r)
            # the loss mask covers exactly this segment's responses
            assert [p for p, m in enumerate(mask) if m] == covered
        for t, turn in enumerate(traj.turns):
            shown = traj.turns[history_start(t, mode, k) : t]
            text = tok.decode(turn.context_ids)
            assert text.count("Turn ") == len(shown) + 1  # the past turns shown, then the current one
            obs_ids = encode(tok, turn.observation)
            assert turn.context_ids[-len(obs_ids) - 3 : -3] == obs_ids  # then <|end|> <|assistant|> <think>
            if turn.window_start:  # re-rendered once from the text of the turns it shows
                past = [(p.observation, p.response_text) for p in shown]
                assert turn.context_ids == segment_context_ids(tok, envs.make("frozenlake").system_prompt, past, turn.observation)
    if mode == "full":
        assert len(seqs.input_ids) == len(batch.trajectories)
    if mode == "single_turn":
        assert len(seqs.input_ids) == sum(len(t.turns) for t in batch.trajectories)


@pytest.mark.parametrize(("mode", "k"), MODES)
def test_each_turn_records_the_context_the_policy_read(tiny_policy, mode, k):
    # The prompts the model was actually run on (each decoding call's first forward, left padding
    # dropped; no KV cache carried between turns, so that forward holds the whole context) are,
    # as a multiset, the contexts the turns record.
    tiny_policy.fold_lora_for_decoding = False  # decode with tiny_policy.model, where the hook sits
    tiny_policy.reuse_kv_across_turns = False
    read = []

    def record(module, args, kwargs):
        if kwargs.get("input_ids") is not None and kwargs["input_ids"].shape[1] > 1:  # a prompt, not one new token
            for ids, attn in zip(kwargs["input_ids"].tolist(), kwargs["attention_mask"].tolist()):
                read.append(tuple(t for t, a in zip(ids, attn) if a))

    hook = tiny_policy.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        batch = _roll(tiny_policy, mode, k)
    finally:
        hook.remove()
    recorded = [tuple(turn.context_ids) for traj in batch.trajectories for turn in traj.turns]
    assert sorted(read) == sorted(recorded)


@pytest.mark.parametrize(("mode", "k"), MODES)
def test_the_proxys_x_is_the_context_the_update_trains_on(tiny_policy, mode, k):
    batch = _roll(tiny_policy, mode, k)
    # The test policy's short warm start writes no well-formed reasoning, which the samplers skip:
    # every turn's response text stands in for its reasoning so that each turn can be drawn.
    for traj in batch.trajectories:
        traj.turns = [dataclasses.replace(t, think=t.response_text) for t in traj.turns]
    seqs = build_sequences(batch)
    encode_think = lambda text: encode(tiny_policy.tokenizer, text)  # noqa: E731
    # every (context, response) the update trains on, as the prompt of a response in a sequence
    trained = set()
    for ids, mask in zip(seqs.input_ids, seqs.loss_mask):
        for p in range(1, len(mask)):
            if mask[p] and not mask[p - 1]:
                trained.add(tuple(ids[:p]))
    sample = trajectory_sample(batch, encode_think, np.random.default_rng(0))
    assert sample.contexts and all(tuple(x) in trained for x in sample.contexts)
    first = first_turn_sample(batch, encode_think)
    assert all(tuple(x) in trained for x in first.contexts)
    # the contexts of later turns are those of the mode: a window shows fewer past turns
    later = [turn for traj in batch.trajectories for turn in traj.turns[1:]]
    assert {tuple(t.context_ids) for t in later} <= trained


def test_full_is_one_token_in_token_out_sequence_per_trajectory_on_sokoban(tiny_policy):
    # The default mode as before: every context extends the last one, nothing is re-rendered.
    default = collect_rollouts(tiny_policy, lambda: envs.make("sokoban"), [11, 12], 3, 1.0, 12, sample_seed=3)[0]
    full = _roll(tiny_policy, "full", 0, env="sokoban")
    assert [[(t.context_ids, t.response_ids) for t in a.turns] for a in default.trajectories] == [
        [(t.context_ids, t.response_ids) for t in a.turns] for a in full.trajectories
    ]
    assert not any(t.window_start for traj in full.trajectories for t in traj.turns)
    for traj in full.trajectories:
        for prev, nxt in zip(traj.turns, traj.turns[1:]):
            assert nxt.context_ids[: len(prev.context_ids) + len(prev.response_ids)] == prev.context_ids + prev.response_ids


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["rollout.context=window"], "rollout.context=window needs rollout.context_turns=k >= 1"),
        (["rollout.context=window", "rollout.context_turns=0"], "rollout.context=window needs rollout.context_turns=k >= 1"),
        (["rollout.context=last_turn"], "unknown rollout.context 'last_turn'"),
        (["rollout.context_turns=-1"], "rollout.context_turns=-1 must be an integer >= 0"),
        (["rollout.context=single_turn", "algorithm=ppo"], "rollout.context=single_turn splits a trajectory"),
    ],
)
def test_bad_context_settings_are_one_line_errors(make_cfg, overrides, message):
    from agentcollapse.run.checks import validate

    with pytest.raises(UserError, match=message) as info:
        validate(make_cfg(*overrides))
    assert "\n" not in str(info.value)


def test_context_settings_that_validate(make_cfg):
    from agentcollapse.run.checks import validate

    accepted = {"window": ["rollout.context=window", "rollout.context_turns=2"], "single_turn": ["rollout.context=single_turn"], "full": []}
    for mode, overrides in accepted.items():
        cfg = make_cfg(*overrides)
        assert validate(cfg) is None and cfg.rollout.context == mode  # no UserError, and the mode is the one asked for
