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
