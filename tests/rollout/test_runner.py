import pytest

from agentcollapse import envs
from agentcollapse.rollout.runner import collect_rollouts, rollout_metrics
from agentcollapse.rollout.sequences import build_sequences


def _roll(policy, batch_size, seed=3, temperature=1.0):
    return collect_rollouts(
        policy,
        lambda: envs.make("frozenlake"),
        [11, 12],
        group_size=3,
        temperature=temperature,
        max_new_tokens=12,
        sample_seed=seed,
        generation_batch_size=batch_size,
    )[0]


def test_batched_rollout_equals_unbatched(tiny_policy):
    batched, single = _roll(tiny_policy, 64), _roll(tiny_policy, 1)
    assert [len(t.turns) for t in batched.trajectories] == [len(t.turns) for t in single.trajectories]
    for a, b in zip(batched.trajectories, single.trajectories):
        assert [t.response_ids for t in a.turns] == [t.response_ids for t in b.turns]
        assert a.episode_return == b.episode_return


def test_sampling_seed_matters_and_groups_share_the_map(tiny_policy):
    a, b = _roll(tiny_policy, 64, seed=1), _roll(tiny_policy, 64, seed=2)
    assert [t.turns[0].response_ids for t in a.trajectories] != [t.turns[0].response_ids for t in b.trajectories]
    first = [t.turns[0].context_ids for t in a.trajectories]
    assert first[0] == first[1] == first[2] and first[0] != first[3]  # G=3 rollouts share a prompt


def test_turn_spans_and_multi_turn_context(tiny_policy):
    batch = _roll(tiny_policy, 64)
    think_id = tiny_policy.tokenizer.convert_tokens_to_ids("<think>")
    for traj in batch.trajectories:
        assert 1 <= len(traj.turns) <= 5
        for prev, nxt in zip(traj.turns, traj.turns[1:]):
            assert prev.context_ids[-1] == think_id
            # the next context holds the previous context and response verbatim
            assert nxt.context_ids[: len(prev.context_ids) + len(prev.response_ids)] == prev.context_ids + prev.response_ids
        for k, turn in enumerate(traj.turns):
            # the observation read at that turn (copy detection): its user message, X's last one
            assert f"Turn {k + 1} .\n" in turn.observation
            obs_ids = tiny_policy.tokenizer(turn.observation, add_special_tokens=False)["input_ids"]
            assert turn.context_ids[-len(obs_ids) - 3 : -3] == obs_ids  # then <|end|> <|assistant|> <think>
    seqs = build_sequences(batch)
    assert len(seqs.input_ids) == len(batch.trajectories)  # word-level tokens: one sequence per trajectory
    for mask, t in zip(seqs.loss_mask, seqs.traj_index):
        assert sum(mask) == sum(len(turn.response_ids) for turn in batch.trajectories[t].turns)


def test_invalid_responses_get_format_penalty_not_a_crash(tiny_policy):
    batch = _roll(tiny_policy, 64)
    for traj in batch.trajectories:
        for turn in traj.turns:
            if not turn.action_is_valid:
                assert turn.reward <= -0.1 + 1e-9 or turn.reward >= 0.9
    metrics = rollout_metrics(batch)
    for key in (
        "rollout/success_rate",
        "rollout/format_valid_rate",
        "rollout/in_group_reward_std_mean",
        "rollout/zero_variance_group_frac",
        "rollout/response_length",
        "rollout/return_mean",
    ):
        assert key in metrics and metrics[key] == metrics[key]


def test_greedy_is_deterministic(tiny_policy):
    a, b = _roll(tiny_policy, 64, seed=1, temperature=0.0), _roll(tiny_policy, 64, seed=2, temperature=0.0)
    assert [t.turns[0].response_ids for t in a.trajectories] == [t.turns[0].response_ids for t in b.trajectories]


def test_mixed_temperatures_in_one_batch_equal_separate_rollouts(tiny_policy):
    # Validation decodes every temperature in one batch: each row must sample exactly as it would in a
    # rollout of its own temperature, with the same per-trajectory stream (greedy rows draw no noise).
    mixed = collect_rollouts(tiny_policy, lambda: envs.make("frozenlake"), [11, 12, 11, 12], 1, [1.0, 1.0, 0.0, 0.0], 12, sample_seed=5)[0]
    hot = collect_rollouts(tiny_policy, lambda: envs.make("frozenlake"), [11, 12], 1, 1.0, 12, sample_seed=5)[0]
    greedy = collect_rollouts(tiny_policy, lambda: envs.make("frozenlake"), [11, 12], 1, 0.0, 12, sample_seed=5)[0]
    rows = [[t.response_ids for t in traj.turns] for traj in mixed.trajectories]
    assert rows[:2] == [[t.response_ids for t in traj.turns] for traj in hot.trajectories]
    assert rows[2:] == [[t.response_ids for t in traj.turns] for traj in greedy.trajectories]


def test_folded_and_adapter_decoding_agree_greedily(tiny_policy):
    folded = _roll(tiny_policy, 64, temperature=0.0)
    tiny_policy.fold_lora_for_decoding = False
    try:
        plain = _roll(tiny_policy, 64, temperature=0.0)
    finally:
        tiny_policy.fold_lora_for_decoding = True
    assert [[t.response_ids for t in a.turns] for a in folded.trajectories] == [
        [t.response_ids for t in a.turns] for a in plain.trajectories
    ]


def test_compacting_the_decoding_batch_changes_no_token(tiny_policy, monkeypatch):
    # Rows that stop leave the batch (and its KV cache); the others must sample exactly as before.
    import agentcollapse.rollout.generate as gen

    compacted = _roll(tiny_policy, 64)
    monkeypatch.setattr(gen, "COMPACT_AT", 10**9)  # never compact
    full = _roll(tiny_policy, 64)
    assert [[t.response_ids for t in a.turns] for a in compacted.trajectories] == [
        [t.response_ids for t in a.turns] for a in full.trajectories
    ]
    lengths = {len(t.response_ids) for a in full.trajectories for t in a.turns}
    assert len(lengths) > 1  # rows did stop at different steps, so compaction happened


def test_blocks_with_stream_offsets_equal_the_whole_batch(tiny_policy):
    # What DDP ranks do: each decodes a block of the groups on the streams the whole batch gives them.
    seeds, g = [11, 12, 13], 2

    def roll(env_seeds, offset=0):
        return collect_rollouts(tiny_policy, lambda: envs.make("frozenlake"), env_seeds, g, 1.0, 12, sample_seed=5, stream_offset=offset)[0]

    whole = roll(seeds)
    parts = [roll(seeds[:2]), roll(seeds[2:], offset=2 * g)]
    blocks = [t for p in parts for t in p.trajectories]
    assert [[t.response_ids for t in a.turns] for a in whole.trajectories] == [[t.response_ids for t in b.turns] for b in blocks]
    assert roll(seeds[2:]).trajectories[0].turns[0].response_ids != whole.trajectories[4].turns[0].response_ids  # offset matters


def test_reusing_the_kv_cache_across_turns_changes_no_token(tiny_policy):
    # Each turn encodes only what follows the trajectory's cached context + response; the tokens must
    # be those of re-encoding the whole context, greedy and sampled, batched and alone.
    import agentcollapse.rollout.generate as gen

    encoded: list[int] = []
    original = gen.left_pad

    def counting_left_pad(prompts, pad_id):
        encoded.append(sum(len(p) for p in prompts))
        return original(prompts, pad_id)

    def both(**kw):
        tiny_policy.reuse_kv_across_turns = False
        try:
            full = _roll(tiny_policy, **kw)
        finally:
            tiny_policy.reuse_kv_across_turns = True
        encoded.clear()
        return full, _roll(tiny_policy, **kw), sum(encoded)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gen, "left_pad", counting_left_pad)
        for kw in ({"batch_size": 64, "temperature": 0.0}, {"batch_size": 64}, {"batch_size": 1}):
            full, reused, tokens_encoded = both(**kw)
            assert [[t.response_ids for t in a.turns] for a in reused.trajectories] == [
                [t.response_ids for t in a.turns] for a in full.trajectories
            ], kw
    turns = [t for a in full.trajectories for t in a.turns]
    assert any(len(a.turns) > 1 for a in full.trajectories)  # later turns did reuse a cache
    assert tokens_encoded < sum(len(t.context_ids) for t in turns)


def test_each_decoded_turn_submits_its_answers_before_any_env_steps(tiny_policy):
    """``TextEnv.submit`` (DeepCoder's parallel grading) gets each env's answer, the text it is then
    stepped with, as soon as its turn is decoded: a whole turn's answers are submitted before the
    first env of that turn steps, and no env steps without its submit."""
    from agentcollapse.envs.frozenlake import FrozenLakeEnv

    events: list[tuple[str, int, str]] = []

    class Recording(FrozenLakeEnv):
        def submit(self, action_text: str) -> None:
            events.append(("submit", id(self), action_text))

        def step(self, action_text: str):
            events.append(("step", id(self), action_text))
            return super().step(action_text)

    batch, perf = collect_rollouts(
        tiny_policy, Recording, [11, 12], group_size=3, temperature=1.0, max_new_tokens=12, sample_seed=3, generation_batch_size=6
    )
    turns = sum(len(traj.turns) for traj in batch.trajectories)
    assert sum(kind == "submit" for kind, *_ in events) == sum(kind == "step" for kind, *_ in events) == turns
    # turn 1: all 6 trajectories' answers are submitted before the first env steps
    assert [kind for kind, *_ in events[:12]] == ["submit"] * 6 + ["step"] * 6
    assert [e[1:] for e in events[:6]] == [e[1:] for e in events[6:12]]
    last_submitted: dict[int, str] = {}
    for kind, env, text in events:  # every step with the text its env submitted last
        if kind == "submit":
            last_submitted[env] = text
        else:
            assert last_submitted.pop(env) == text
    assert 0.0 <= perf["perf/rollout_env_time_s"] <= perf["perf/rollout_time_s"]


def test_slices_of_trajectories_are_played_to_their_end_one_after_the_other(tiny_policy, monkeypatch):
    # rollout.generation_batch_size bounds the KV caches held at once: trajectories 0-3 play every
    # turn before 4-5 start, and each draws the tokens it draws in one batch of all six.
    import agentcollapse.rollout.runner as runner

    calls: list[list[int]] = []
    original = runner.generate

    def recording_generate(model, prompts, generators, *args, **kwargs):
        calls.append([owner[id(g)] for g in generators])
        return original(model, prompts, generators, *args, **kwargs)

    owner: dict[int, int] = {}
    real_start = runner._start_trajectories

    def numbered_start(*args):
        trajectories, live = real_start(*args)
        owner.update({id(t.generator): t.index for t in live})
        return trajectories, live

    monkeypatch.setattr(runner, "_start_trajectories", numbered_start)
    monkeypatch.setattr(runner, "generate", recording_generate)
    sliced = _roll(tiny_policy, 4)
    first = [k for k, rows in enumerate(calls) if set(rows) <= {0, 1, 2, 3}]
    second = [k for k, rows in enumerate(calls) if set(rows) <= {4, 5}]
    assert calls[0] == [0, 1, 2, 3] and len(first) + len(second) == len(calls)
    assert max(first) < min(second) and calls[min(second)] == [4, 5]
    assert len(first) > 1  # the first slice played more than one turn before the second started
    whole = _roll(tiny_policy, 64)
    assert [[t.response_ids for t in a.turns] for a in sliced.trajectories] == [
        [t.response_ids for t in a.turns] for a in whole.trajectories
    ]


def test_min_new_tokens_holds_back_every_stop_until_that_many_tokens(tiny_policy):
    # rollout.min_new_tokens, as vLLM's min_tokens: a benchmark of equal work runs every response to the budget
    def roll(min_new_tokens):
        return collect_rollouts(
            tiny_policy, lambda: envs.make("frozenlake"), [11, 12], 3, 1.0, 12, sample_seed=3, min_new_tokens=min_new_tokens
        )[0]

    def responses(batch):
        return [t.response_ids for traj in batch.trajectories for t in traj.turns]

    stops = tiny_policy.stop_ids
    free = responses(roll(0))
    assert min(len(r) for r in free) < 12  # the policy does stop early on its own
    assert {len(r) for r in responses(roll(12))} == {12}
    held = responses(roll(6))
    assert min(len(r) for r in held) >= 6 and not any(set(r[:6]) & stops for r in held)
    assert any(len(r) < 12 and r[-1] in stops for r in held)  # after them a stop ends a response again


def test_the_decoder_frees_the_carried_caches_before_it_decodes(tiny_policy, monkeypatch):
    # Issue 64 item 4: a row's cache handed over from its last turn is stacked into the batch's cache and the
    # caller's list emptied, so the old copies do not live beside the batch cache (the same tokens as before).
    import weakref

    import torch

    import agentcollapse.rollout.generate as gen
    from agentcollapse.models.hf import pad_token_id

    decoder, pad = tiny_policy.decoding_model(), pad_token_id(tiny_policy.tokenizer)
    context = _roll(tiny_policy, 64).trajectories[0].turns[0].context_ids

    def decode(prompt, prefixes=None):
        gen_ = [torch.Generator().manual_seed(5)]
        return gen.generate(decoder, [prompt], gen_, 1.0, 8, tiny_policy.stop_ids, pad, prefixes=prefixes, keep_cache=True)

    first, caches = decode(context)
    follow = context + first[0] + context[-3:]  # the next turn's context begins with this one's tokens
    handed = [[(k[:, : len(context)], v[:, : len(context)]) for k, v in caches[0]]]
    old = weakref.ref(handed[0][0][0])
    freed_before_decoding = []
    stacked = gen.growing_cache
    monkeypatch.setattr(gen, "growing_cache", lambda *a, **kw: freed_before_decoding.append(old() is None) or stacked(*a, **kw))
    reused, _ = decode(follow, handed)
    assert handed == [] and freed_before_decoding == [True]
    assert reused == decode(follow)[0]  # as encoding the whole context
