import random

import numpy as np
import pytest
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake

from agentcollapse import envs
from agentcollapse.envs.frozenlake.env import ACTION_NAMES, generate_map, shortest_path
from agentcollapse.errors import UserError


@pytest.mark.parametrize("slip", [0.0, 0.2, 0.5])
@pytest.mark.parametrize("seed", [0, 1, 7, 123])
def test_transitions_equal_gymnasium(seed, slip):
    env = envs.make("frozenlake", slip=slip, max_actions=10**6, max_turns=10**6)
    env.reset(seed)
    gym = GymFrozenLake(desc=env.desc, is_slippery=slip > 0, success_rate=1.0 - slip)
    state, _ = gym.reset(seed=seed)
    rng = random.Random(seed)
    for _ in range(40):
        if env.done:
            break
        action = rng.randrange(4)
        _, reward, done, info = env.step(ACTION_NAMES[action])
        state, gym_reward, terminated, _, _ = gym.step(action)
        assert divmod(int(state), 4) == env.position
        assert reward == pytest.approx(float(gym_reward))
        assert info["success"] == (env.desc[env.position[0]][env.position[1]] == "G")
        if terminated:
            assert done


def test_every_map_is_solvable_with_distinct_start_and_goal():
    rng = np.random.default_rng(0)
    for _ in range(500):
        desc = generate_map(4, 0.9, rng)
        flat = "".join(desc)
        assert flat.count("S") == 1 and flat.count("G") == 1
        start = divmod(flat.index("S"), 4)
        assert shortest_path(desc, start) is not None


def test_map_depends_on_seed_only():
    a, b = envs.make("frozenlake"), envs.make("frozenlake")
    assert a.reset(5) == b.reset(5)
    assert a.reset(5) != a.reset(6) or a.desc != envs.make("frozenlake").desc


def test_slip_frequencies_match_configuration():
    slip, trials = 0.2, 4000
    counts = {"intended": 0, "perpendicular": 0}
    env = envs.make("frozenlake", slip=slip, frozen_prob=1.0, max_actions=10**6, max_turns=10**6)
    for seed in range(trials):
        env.reset(seed)
        row, col = env.position
        if not (0 < row < 3 and 0 < col < 3):
            continue  # interior cells only: every direction is a real move
        env.step("Right")
        dr, dc = env.position[0] - row, env.position[1] - col
        counts["intended" if (dr, dc) == (0, 1) else "perpendicular"] += 1
    total = sum(counts.values())
    assert total > 500
    assert counts["intended"] / total == pytest.approx(1 - slip, abs=0.05)


def test_observation_has_grid_coordinates_and_neighbours():
    env = envs.make("frozenlake")
    obs = env.reset(3)
    assert env.render_grid() in obs
    row, col = env.position
    assert f"You are at ( {row} , {col} )" in obs
    assert "Around you :" in obs
    assert env.render_grid().count("P") == 1


def test_reaching_goal_succeeds_and_hole_fails():
    env = envs.make("frozenlake")
    env.reset(11)
    for action in env.plan():
        _, reward, done, info = env.step(ACTION_NAMES[action])
    assert done and info["success"] and reward == 1.0
    assert "√" in env.render_grid()


def test_invalid_action_costs_format_penalty_and_keeps_state():
    env = envs.make("frozenlake")
    env.reset(2)
    before = env.position
    _, reward, done, info = env.step("Jump")
    assert reward == pytest.approx(-0.1)
    assert not info["action_is_valid"] and env.position == before and not done


def test_two_actions_per_turn_and_budgets():
    env = envs.make("frozenlake", frozen_prob=1.0)
    env.reset(4)
    _, _, _, info = env.step("Left || Up || Right")
    assert info["n_valid_actions"] == 2  # a third action is ignored
    for _ in range(4):
        if env.done:
            break
        env.step("Left")
    assert env.done  # five turns at most


def test_demonstration_reasoning_names_the_state():
    env = envs.make("frozenlake")
    env.reset(9)
    think, answer = env.demonstration(random.Random(0), suboptimal_prob=0.0)
    row, col = env.position
    assert f"( {row} , {col} )" in think or "of me at" in think
    first = answer.split("||")[0].strip()
    assert first == ACTION_NAMES[env.plan()[0]]


def test_bad_settings_are_user_errors():
    with pytest.raises(UserError, match="slip"):
        envs.make("frozenlake", slip=1.5)
    with pytest.raises(UserError, match="frozenlake"):
        envs.make("no_such_env")


def test_grounding_scores_true_and_false_state_claims():
    env = envs.make("frozenlake")
    env.reset(9)
    think, _ = env.demonstration(random.Random(1), suboptimal_prob=0.0)
    assert env.grounding(think) == 1.0  # the planner only says true things
    row, col = env.position
    wrong = f"I am at ( {(row + 1) % 4} , {(col + 1) % 4} ) ."
    assert env.grounding(wrong) == 0.0
    assert env.grounding(env.templates[0]) is None  # a template makes no claim about the state
    for seed in range(100):  # every demonstration is fully grounded, whatever its wording
        env.reset(seed)
        assert env.grounding(env.demonstration(random.Random(seed))[0]) == 1.0
