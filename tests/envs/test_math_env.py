import random
from fractions import Fraction

import pytest

from agentcollapse import envs
from agentcollapse.envs.math.env import MathProblem, normalize_answer
from agentcollapse.errors import UserError


@pytest.mark.parametrize(
    "text, value",
    [
        ("12", 12),
        (" 12 ", 12),
        ("1,000", 1000),
        ("$5", 5),
        ("$ 1,250.00", 1250),
        ("-$3", -3),
        ("5.0", 5),
        ("5.", 5),
        ("-3", -3),
        ("3.50", Fraction(7, 2)),
        ("7/2", Fraction(7, 2)),
        ("\\boxed{12}", 12),
    ],
)
def test_normalised_numbers(text, value):
    assert normalize_answer(text) == value


@pytest.mark.parametrize("text", ["", "twelve", "12 apples", "1/0", "1e3", "3..5", "...", "x = 3"])
def test_non_numbers(text):
    assert normalize_answer(text) is None


def _fixed(answer):
    env = envs.make("math")
    env.reset(0)
    env.problem = MathProblem("Tom has 7 apples and buys 5 more . How many apples does he have ?", answer, 7, ((7, "+", 5, answer),), 1)
    return env


@pytest.mark.parametrize("text", ["12", "12.0", " 12 ", "$12", "12.", "24/2"])
def test_reward_one_on_normalised_match(text):
    _, reward, done, info = _fixed(12).step(text)
    assert reward == 1.0 and done and info["success"] and info["action_is_valid"]


def test_wrong_number_is_zero_and_non_number_is_format_penalty():
    env = _fixed(12)
    _, reward, done, info = env.step("13")
    assert reward == 0.0 and done and not info["success"] and info["action_is_valid"]
    env = _fixed(1000)
    assert env.step("1,000")[1] == 1.0
    for text in ("", "twelve", "12 || 13"):
        env = _fixed(12)
        _, reward, done, info = env.step(text)
        assert reward == pytest.approx(env.format_penalty) and done
        assert not info["action_is_valid"] and info["reason"]


def test_difficulty_changes_problem_structure():
    for difficulty in (1, 2, 3):
        env = envs.make("math", difficulty=difficulty)
        questions, operands = set(), []
        for seed in range(100):
            obs = env.reset(seed)
            problem = env.problem
            assert problem.difficulty == difficulty and len(problem.steps) == difficulty
            assert obs.startswith(f"Question : {problem.question}")
            assert problem.question.count("?") == 1
            assert problem.question.count("Then ") == (difficulty if difficulty > 1 else 0)  # one sentence per step
            value = problem.start
            for left, op, right, result in problem.steps:  # the chain is consistent and integral
                assert left == value and result == {"+": left + right, "-": left - right, "*": left * right, "/": left / right}[op]
                assert result > 0 and result == int(result)
                value = result
            assert value == problem.answer
            questions.add(problem.question)
            operands += [problem.start] + [right for _, _, right, _ in problem.steps]
        assert len(questions) >= 90
        if difficulty == 1:
            assert max(operands) <= 100
        if difficulty == 3:
            assert max(operands) > 20  # larger numbers than level 1's 2-10 operands
    with pytest.raises(UserError):
        envs.make("math", difficulty=4)


def test_demonstration_answer_is_correct_and_shows_steps():
    rng = random.Random(0)
    for difficulty in (1, 2, 3):
        env = envs.make("math", difficulty=difficulty)
        for seed in range(20):
            env.reset(seed)
            reasoning, answer = env.demonstration(rng)
            for left, op, right, result in env.problem.steps:
                assert f"{left} {op} {right} = {result}" in reasoning
            assert len([w for w in reasoning.split() if w.isalnum()]) <= 30
            assert env.grounding(reasoning) == 1.0
            _, reward, _, info = env.step(answer)
            assert reward == 1.0 and info["success"]


def test_grounding_sees_wrong_arithmetic_and_a_wrong_start():
    env = envs.make("math", difficulty=2)
    env.reset(3)
    start = env.problem.start
    assert env.grounding(f"Start with {start} . 2 + 2 = 4 .") == 1.0
    assert env.grounding(f"Start with {start + 1} . 2 + 2 = 5 .") == 0.0
    assert env.grounding("Let me work through the numbers step by step .") is None


def test_suboptimal_demonstration_is_off_by_one():
    env = envs.make("math", difficulty=2)
    env.reset(5)
    _, answer = env.demonstration(random.Random(0), suboptimal_prob=1.0)
    assert abs(int(answer) - env.problem.answer) == 1
    assert env.step(answer)[1] == 0.0
