import random

import pytest

from agentcollapse import envs
from agentcollapse.envs.sokoban.env import SokobanEnv, bfs_solve, reverse_distances
from agentcollapse.errors import UserError

CORRIDOR = """
# # # # # # #
# P X _ O _ #
# # # # # # #
"""


def _step_all(env, actions):
    total = 0.0
    for i in range(0, len(actions), env.max_actions_per_turn):
        _, reward, done, info = env.step(" || ".join(actions[i : i + env.max_actions_per_turn]))
        total += reward
        if done:
            break
    return total, done, info


@pytest.fixture(scope="module")
def levels():
    env = envs.make("sokoban", dim_room=[6, 6], num_boxes=1, max_steps=10)
    out = []
    for seed in range(500):
        obs = env.reset(seed)
        out.append((seed, obs, env.render_grid(), env.room, env.player, env.boxes))
    return out


def test_500_levels_solvable_within_budget_and_distinct(levels):
    grids = [grid for _, _, grid, *_ in levels]
    assert len(set(grids)) == 500
    lengths = []
    for _, _, grid, room, player, boxes in levels:
        assert not boxes <= room.targets, "a generated level must not start solved"
        plan = bfs_solve(room, player, boxes, max_depth=10)
        assert plan is not None and 1 <= len(plan) <= 10, grid
        lengths.append(len(plan))
        rows = grid.split("\n")
        assert len(rows) == 6 and all(len(r.split(" ")) == 6 for r in rows)
        assert grid.count("P") + grid.count("S") == 1 and grid.count("X") == 1 and grid.count("O") + grid.count("S") == 1
        assert rows[0] == rows[-1] == "# # # # # #"
    # Difficulties are spread, not all one-push levels.
    assert len(set(lengths)) >= 6 and max(lengths) >= 8


def test_reset_is_deterministic_and_seed_dependent():
    a, b = envs.make("sokoban"), envs.make("sokoban")
    assert a.reset(7) == b.reset(7)
    assert a.reset(7) != a.reset(8)


def test_observation_has_grid_coordinates_and_budget():
    env = SokobanEnv.from_layout(CORRIDOR)
    obs = env.observation()
    assert obs.startswith("# # # # # # #\n# P X _ O _ #\n# # # # # # #\n")
    assert "You are at ( 1 , 1 ) ." in obs and "Box at ( 1 , 2 ) ." in obs and "Target at ( 1 , 4 ) ." in obs
    assert "right box" in obs and "up wall" in obs
    assert "Actions left : 10 ." in obs


def test_render_symbols_box_on_target_and_player_on_target():
    env = SokobanEnv.from_layout("# # # # #\n# P √ _ #\n# _ X O #\n# # # # #")
    assert env.render_grid() == "# # # # #\n# P √ _ #\n# _ X O #\n# # # # #"
    assert env.box_positions == [(1, 2), (2, 2)] and env.target_positions == [(1, 2), (2, 3)]
    assert "Boxes at ( 1 , 2 ) , ( 2 , 2 ) ." in env.observation()
    env = SokobanEnv.from_layout("#####\n#SX_#\n#####")  # spaces are optional
    assert env.render_grid() == "# # # # #\n# S X _ #\n# # # # #" and env.position == (1, 1)
    env.step("Right")  # the player leaves the target: it shows as O again
    assert env.render_grid() == "# # # # #\n# O P X #\n# # # # #"


def test_rewards_push_onto_target_and_solve():
    env = SokobanEnv.from_layout(CORRIDOR)
    _, r, done, info = env.step("Right")  # box (1,2) -> (1,3): plain push
    assert r == pytest.approx(-0.1) and not done and info["action_is_valid"]
    _, r, done, info = env.step("right")  # box onto the target: +1 box, +10 solved, -0.1 step
    assert r == pytest.approx(-0.1 + 1.0 + 10.0)
    assert done and info["success"] and env.success
    assert env.render_grid().split("\n")[1] == "# _ _ P √ _ #"


def test_reward_push_off_target():
    env = SokobanEnv.from_layout("# # # # # #\n# P √ _ _ #\n# # # # # #")
    _, r, done, info = env.step("Right")  # pushes the box off its target
    assert r == pytest.approx(-0.1 - 1.0) and not done and not info["success"]
    _, r, done, _ = env.step("Left || Left")  # walk back: plain steps
    assert r == pytest.approx(-0.2) and env.position == (1, 1)


def test_blocked_moves_cost_a_step_and_change_nothing():
    # Box against a wall.
    env = SokobanEnv.from_layout("# # # # #\n# O P X #\n# # # # #")
    before = env.render_grid()
    _, r, _, info = env.step("Right")
    assert env.render_grid() == before and r == pytest.approx(-0.1) and info["action_is_valid"]
    # Walking into a wall.
    _, r, _, _ = env.step("Up")
    assert env.render_grid() == before and r == pytest.approx(-0.1)
    assert env.actions_taken == 2
    # Box against another box.
    env = SokobanEnv.from_layout("# # # # # # #\n# P X X O O #\n# # # # # # #")
    before = env.render_grid()
    _, r, _, _ = env.step("Right")
    assert env.render_grid() == before and r == pytest.approx(-0.1)


def test_solving_with_two_boxes_needs_every_box():
    env = SokobanEnv.from_layout("# # # # # #\n# P X O _ #\n# _ X _ _ #\n# _ O _ _ #\n# # # # # #")
    _, r, done, _ = env.step("Right")  # first box onto its target, second box still off
    assert r == pytest.approx(-0.1 + 1.0) and not done
    plan = env.solve()
    assert plan is not None
    total, done, info = _step_all(env, plan)
    assert done and info["success"]


def test_invalid_words_count_and_format_penalty():
    env = SokobanEnv.from_layout(CORRIDOR)
    _, r, done, info = env.step("jump || fly")
    assert r == pytest.approx(-0.1) and not info["action_is_valid"] and info["n_invalid_actions"] == 2
    assert env.actions_taken == 0 and env.position == (1, 1)
    _, r, _, info = env.step("UP || jump")  # case-insensitive; one valid move into the wall
    assert info["n_valid_actions"] == 1 and info["n_invalid_actions"] == 1 and not info["action_is_valid"]
    assert r == pytest.approx(-0.1)


def test_action_budget_and_turn_limit():
    env = SokobanEnv.from_layout(CORRIDOR, max_steps=3)
    _, _, done, _ = env.step("Left || Left")
    assert not done
    _, _, done, info = env.step("Left || Left")  # only one action of the budget is left
    assert env.actions_taken == 3 and info["n_valid_actions"] == 1 and done and not info["success"]
    env = SokobanEnv.from_layout(CORRIDOR, max_turns=2)
    env.step("Up")
    _, _, done, _ = env.step("Up")
    assert done and env.actions_taken == 2
    with pytest.raises(RuntimeError):
        env.step("Up")


@pytest.mark.parametrize("seed", range(0, 60, 3))
def test_planner_solution_solves_level_in_env(seed):
    env = envs.make("sokoban")
    env.reset(seed)
    plan = env.solve()
    assert plan and len(plan) <= env.max_steps
    total, done, info = _step_all(env, plan)
    assert done and info["success"]
    # One box that starts off its target and ends on it: every step -0.1, pushes on/off cancel, +1, +10.
    assert total == pytest.approx(-0.1 * len(plan) + 1.0 + 10.0)


def test_reverse_distances_match_forward_bfs():
    env = envs.make("sokoban")
    for seed in range(20):
        env.reset(seed)
        dist = reverse_distances(env.room, 10)
        assert dist[(env.player, env.boxes)] == len(bfs_solve(env.room, env.player, env.boxes, 10))


def test_demonstration_follows_planner_and_mentions_state():
    env = envs.make("sokoban")
    rng = random.Random(0)
    reasonings = set()
    for seed in range(30):
        env.reset(seed)
        plan = env.solve()
        reasoning, answer = env.demonstration(rng, suboptimal_prob=0.0)
        reasonings.add(reasoning.split(" ( ")[0])
        assert answer == " || ".join(plan[:2])
        row, col = env.position
        assert f"( {row} , {col} )" in reasoning
        _, (tr, tc) = env.box_positions[0], env.target_positions[0]
        assert f"( {tr} , {tc} )" in reasoning
        assert len([w for w in reasoning.split() if w.isalnum()]) <= 30
        assert env.grounding(reasoning) == 1.0
    assert len(reasonings) >= 2  # varied wording


def test_grounding_checks_player_box_and_target_claims():
    env = SokobanEnv.from_layout("# # # # #\n# X _ O #\n# _ P _ #\n# # # # #")
    assert env.grounding("Player ( 2 , 2 ) , box ( 1 , 1 ) , target ( 1 , 3 ) .") == 1.0
    assert env.grounding("I am at ( 1 , 1 ) , box at ( 1 , 1 ) , target at ( 2 , 2 ) .") == pytest.approx(1 / 3)
    assert env.grounding("I will push the box toward the target .") is None


def test_demonstration_suboptimal_replaces_first_action():
    env = envs.make("sokoban")
    env.reset(3)
    plan = env.solve()
    _, answer = env.demonstration(random.Random(1), suboptimal_prob=1.0)
    first = answer.split(" || ")[0]
    assert first in {"Up", "Down", "Left", "Right"} and first != plan[0]


def test_demonstration_stuck_box_still_gives_an_action():
    env = SokobanEnv.from_layout("# # # # #\n# X _ O #\n# _ P _ #\n# # # # #")
    assert env.solve() is None
    reasoning, answer = env.demonstration(random.Random(0))
    assert answer in {"Up", "Down", "Left", "Right"} and "( 1 , 1 )" in reasoning


def test_bad_settings_are_user_errors():
    with pytest.raises(UserError):
        envs.make("sokoban", dim_room=[2, 2])
    with pytest.raises(UserError):
        envs.make("sokoban", num_boxes=0)
    with pytest.raises(UserError):
        SokobanEnv.from_layout("# # #\n# P #\n# # #")
