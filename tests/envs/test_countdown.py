import random
from collections import Counter
from fractions import Fraction

import pytest

from agentcollapse import envs
from agentcollapse.envs.countdown.env import (
    CountdownEnv,
    CountdownParseError,
    computation_steps,
    evaluate,
    format_tree,
    parse_expression,
    solve,
)
from agentcollapse.errors import UserError


def _reason(text):
    with pytest.raises(CountdownParseError) as info:
        evaluate(parse_expression(text))
    return info.value.reason


@pytest.mark.parametrize(
    "text, expected",
    [
        ("__import__('os')", "letters"),
        ("2**10", "**"),
        ("1//2", "//"),
        ("3 + x", "letters"),
        ("abs(3)", "letters"),
        ("(1 + 2", "unbalanced"),
        ("1 + 2)", "unbalanced"),
        (")1 + 2(", "unbalanced"),
        ("", "empty"),
        ("   ", "empty"),
        ("1 + " * 30 + "1", "too long"),
        ("(" * 11 + "1" + ")" * 11, "nested too deeply"),
        ("-3 + 4", "unary"),
        ("3 * -4", "unary"),
        ("()", "empty parentheses"),
        ("1 2", "unexpected '2'"),
        ("1 +", "ends where a number"),
        ("3.5 + 1", "unexpected character '.'"),
        ("1 + 2 = 3", "unexpected character '='"),
        ("3 / (2 - 2)", "division by zero"),
    ],
)
def test_parser_rejects_with_clear_reason(text, expected):
    assert expected in _reason(text)


def test_parser_and_exact_evaluation():
    parsed = parse_expression(" ( 3 + 5 ) * 2 - 7 / 2 ")
    assert parsed.numbers == (3, 5, 2, 7, 2)
    assert evaluate(parsed) == Fraction(25, 2)
    assert evaluate("2 * 3 + 4") == 10 and evaluate("2 * (3 + 4)") == 14  # precedence
    assert evaluate("8 - 3 - 2") == 3 and evaluate("8 / 4 / 2") == 1  # left associative
    assert evaluate("(" * 10 + "1" + ")" * 10) == 1  # nesting at the limit is fine
    assert str(parse_expression("(8 - (3 - 2)) * (1 + 1)")) == "( 8 - ( 3 - 2 ) ) * ( 1 + 1 )"


def test_format_tree_round_trips():
    rng = random.Random(0)
    env = envs.make("countdown")
    for seed in range(50):
        env.reset(seed)
        tree = env._random_tree(rng)
        text = format_tree(tree)
        try:
            value = evaluate(parse_expression(text))
        except CountdownParseError:
            continue
        assert value == evaluate(text) and Counter(parse_expression(text).numbers) == Counter(env.numbers)


def _fixed(numbers, target):
    env = envs.make("countdown")
    env.reset(0)
    env.numbers, env.target = list(numbers), target
    return env


def test_reward_correct_expression():
    env = _fixed([3, 5, 2], 16)
    obs, reward, done, info = env.step("(3 + 5) * 2")
    assert reward == 1.0 and done and info["success"] and info["action_is_valid"] and "reason" not in info


def test_reward_uses_numbers_but_wrong():
    env = _fixed([3, 5, 2], 16)
    _, reward, done, info = env.step("3 + 5 + 2")
    assert reward == pytest.approx(0.1) and done and not info["success"] and info["action_is_valid"]
    assert "equals 10" in info["reason"]


def test_reward_wrong_numbers_is_zero_without_penalty():
    env = _fixed([3, 5, 2], 16)
    _, reward, _, info = env.step("8 * 2")  # right value, but not the given numbers
    assert reward == 0.0 and not info["success"] and info["action_is_valid"] and "exactly the numbers" in info["reason"]
    env = _fixed([3, 5, 2], 16)
    _, reward, _, _ = env.step("(3 + 5) * 2 * 1")  # an extra number
    assert reward == 0.0
    env = _fixed([2, 2, 4], 1)
    _, reward, _, _ = env.step("2 * 4 / 2 / 4")  # multiset: 2 twice, 4 once
    assert reward == 0.0


def test_invalid_expression_gets_format_penalty():
    for text in ("", "3 + five", "2**3", "(3 + 5"):
        env = _fixed([3, 5, 2], 16)
        _, reward, done, info = env.step(text)
        assert reward == pytest.approx(env.format_penalty) and done
        assert not info["action_is_valid"] and not info["success"] and info["reason"]


def test_division_by_zero_counts_as_wrong():
    env = _fixed([2, 2, 3], 5)
    _, reward, _, info = env.step("3 / (2 - 2)")
    assert reward == pytest.approx(0.1) and info["reason"] == "division by zero" and info["action_is_valid"]


def test_single_turn_and_answer_with_separator_is_not_split():
    env = _fixed([3, 5, 2], 16)
    _, reward, done, info = env.step("(3 + 5) * 2 || 3 + 5 + 2")
    assert done and reward == pytest.approx(env.format_penalty) and "unexpected character '|'" in info["reason"]
    with pytest.raises(RuntimeError):
        env.step("(3 + 5) * 2")


def test_generated_targets_are_reachable_over_200_seeds():
    env = envs.make("countdown", max_numbers=4)  # TinyZero's 3-4 numbers (the default is 3)
    counts = Counter()
    for seed in range(200):
        obs = env.reset(seed)
        assert 3 <= len(env.numbers) <= 4 and all(1 <= n <= 10 for n in env.numbers)
        assert 1 <= env.target <= 100
        assert f"Target : {env.target} ." in obs and f"Numbers : {' , '.join(map(str, env.numbers))} ." in obs
        tree = solve(env.numbers, env.target)
        assert tree is not None
        text = format_tree(tree)
        assert evaluate(text) == env.target and Counter(parse_expression(text).numbers) == Counter(env.numbers)
        counts[len(env.numbers)] += 1
    assert counts[3] > 20 and counts[4] > 20


def test_solver_reports_unreachable():
    assert solve([1, 1, 1], 100) is None
    assert evaluate(format_tree(solve([4, 7], 28))) == 28


def test_demonstration_is_correct_and_shows_every_step():
    env = envs.make("countdown")
    rng = random.Random(0)
    openings = set()
    for seed in range(40):
        env.reset(seed)
        reasoning, answer = env.demonstration(rng)
        assert env.score(answer)[0] == 1.0
        assert str(env.target) in reasoning and reasoning.endswith("That is the target .")
        assert all(str(n) in reasoning for n in env.numbers)
        # one "a op b = c" per operation of the answer, all true, the last one reaching the target
        steps = computation_steps(parse_expression(answer).tree)
        assert len(steps) == len(env.numbers) - 1
        for a, op, b, r in steps:
            assert f"{a} {op} {b} = {r} ." in reasoning
        assert steps[-1][3] == env.target
        assert env.grounding(reasoning) == 1.0
        openings.add(reasoning.split()[0])
    assert len(openings) >= 2


def test_suboptimal_demonstration_uses_numbers_misses_and_says_so():
    env = envs.make("countdown")
    rng = random.Random(1)
    for seed in range(20):
        env.reset(seed)
        reasoning, answer = env.demonstration(rng, suboptimal_prob=1.0)
        assert env.score(answer)[0] == pytest.approx(0.1), answer
        value = evaluate(answer)
        assert reasoning.endswith(f"That gives {value} .")  # integer steps, shown truthfully
        assert env.grounding(reasoning) == 1.0


def test_grounding_counts_true_arithmetic_and_the_real_target():
    env = envs.make("countdown")
    env.reset(0)
    wrong_target = env.target + 1
    assert env.grounding(f"I need {env.target} . 3 + 4 = 7 .") == 1.0
    assert env.grounding(f"I need {wrong_target} . 3 + 4 = 7 .") == 0.5
    assert env.grounding("3 + 4 = 8 . 6 / 4 = 3 / 2 .") == 0.5
    assert env.grounding("I should combine the numbers carefully .") is None


def test_bad_settings_are_user_errors():
    with pytest.raises(UserError):
        envs.make("countdown", min_numbers=4, max_numbers=3)
    with pytest.raises(UserError):
        envs.make("countdown", max_numbers=9)
    assert isinstance(envs.make("countdown", min_numbers=2, max_numbers=2), CountdownEnv)


def test_the_default_gives_three_numbers():
    env = envs.make("countdown")
    lengths = set()
    for seed in range(20):
        env.reset(seed)
        lengths.add(len(env.numbers))
    assert lengths == {3}
