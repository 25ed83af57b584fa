"""Arithmetic word problems, generated offline, standing in for MetaMathQA (docs/method.md section 7).

Single turn, single answer. ``difficulty`` sets the structure:
  1: one operation on small numbers (2-10), in one of a few one-sentence stories;
  2: a start amount and two operation sentences, numbers up to 20;
  3: a start amount and three operation sentences, numbers up to 50 (larger factors).
Every intermediate result is a positive integer (divisions are exact), so answers are integers.

Reward 1 when the answer equals the solution after normalisation (spaces, thousands commas, a leading
``$``, a trailing ``.`` and ``.0`` removed; ``\\boxed{...}`` unwrapped; fractions like ``7/2`` and
decimals compared exactly), else 0. An answer that is not a number executes no valid action: reward
0 plus the format penalty, with ``info["reason"]``.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

from agentcollapse.config.env_kwargs import MathKwargs
from agentcollapse.envs import register
from agentcollapse.envs.base import SingleAnswerEnv
from agentcollapse.envs.parsing import arithmetic_claims
from agentcollapse.errors import UserError

NAMES = (("Tom", "he"), ("Sam", "he"), ("Ana", "she"), ("Mia", "she"))
ITEMS = ("apples", "coins", "books", "marbles", "pencils")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d+)?|\.\d+)")
_FRACTION = re.compile(r"([+-]?\d+)/(\d+)")
_BOXED = re.compile(r"^\\boxed\{(.*)\}$")
_START_CLAIM = re.compile(r"(?:Start with|begin at|there are) (\d+)")
# Operand ranges and the cap on intermediate values per difficulty.
_LEVELS = {1: (2, 10, 100), 2: (2, 20, 400), 3: (2, 50, 2000)}


@dataclass(frozen=True)
class MathProblem:
    question: str
    answer: int
    start: int
    steps: tuple[tuple[int, str, int, int], ...]  # (left, op, right, result) per operation
    difficulty: int


def normalize_answer(text: str) -> Fraction | None:
    """The number an answer states, exactly, or None when it is not a plain number."""
    if not isinstance(text, str):
        return None
    s = text.strip()
    boxed = _BOXED.match(s)
    if boxed:
        s = boxed.group(1)
    s = s.replace(" ", "").replace(",", "")
    if s.startswith("$"):
        s = s[1:]
    elif s.startswith("-$") or s.startswith("+$"):
        s = s[0] + s[2:]
    s = s.rstrip(".")
    try:  # a number too long for int() (over sys.get_int_max_str_digits() digits) is not an answer either
        if _NUMBER.fullmatch(s):
            return Fraction(s)
        fraction = _FRACTION.fullmatch(s)
        if fraction and int(fraction.group(2)) != 0:
            return Fraction(int(fraction.group(1)), int(fraction.group(2)))
    except ValueError:
        return None
    return None


def _one_step_problem(rng: random.Random) -> MathProblem:
    lo, hi, _ = _LEVELS[1]
    name, pron = rng.choice(NAMES)
    item = rng.choice(ITEMS)
    op = rng.choice("+-*/")
    a, b = rng.randint(lo, hi), rng.randint(lo, hi)
    if op == "+":
        text = rng.choice(
            (
                f"{name} has {a} {item} and buys {b} more . How many {item} does {pron} have ?",
                f"{name} has {a} {item} . A friend gives {b} more . How many {item} does {name} have now ?",
            )
        )
        result = a + b
    elif op == "-":
        a, b = max(a, b) + 1, min(a, b)
        text = rng.choice(
            (
                f"{name} has {a} {item} and gives {b} away . How many {item} are left ?",
                f"{name} had {a} {item} and lost {b} . How many {item} does {pron} have now ?",
            )
        )
        result = a - b
    elif op == "*":
        text = f"{name} buys {a} bags with {b} {item} in each bag . How many {item} does {pron} buy ?"
        result = a * b
    else:
        a = a * b  # exact division
        text = f"{name} shares {a} {item} equally among {b} friends . How many {item} does each friend get ?"
        result = a // b
    return MathProblem(text, result, a, ((a, op, b, result),), 1)


def _chain_problem(rng: random.Random, difficulty: int) -> MathProblem:
    lo, hi, cap = _LEVELS[difficulty]
    name, pron = rng.choice(NAMES)
    item = rng.choice(ITEMS)
    value = start = rng.randint(lo + 3, hi)
    sentences = [f"{name} has {value} {item} ."]
    steps = []
    while len(steps) < difficulty:
        op = rng.choice("+-*/")
        if op == "+":
            b = rng.randint(lo, hi)
            sentence = rng.choice((f"Then {pron} buys {b} more .", f"Then {pron} finds {b} more ."))
        elif op == "-":
            if value <= lo:
                continue
            b = rng.randint(lo - 1, min(hi, value - 1))
            sentence = rng.choice((f"Then {pron} gives {b} away .", f"Then {pron} loses {b} ."))
        elif op == "*":
            b = rng.randint(2, 3 if difficulty < 3 else 5)
            if value * b > cap:
                continue
            sentence = f"Then the number of {item} becomes {b} times as many ."
        else:
            divisors = [d for d in range(2, 6) if value % d == 0]
            if not divisors:
                continue
            b = rng.choice(divisors)
            sentence = f"Then {pron} splits them into {b} equal groups and keeps one group ."
        result = {"+": value + b, "-": value - b, "*": value * b, "/": value // b}[op]
        steps.append((value, op, b, result))
        sentences.append(sentence)
        value = result
    sentences.append(f"How many {item} does {name} have now ?")
    return MathProblem(" ".join(sentences), value, start, tuple(steps), difficulty)


def generate_problem(rng: random.Random, difficulty: int) -> MathProblem:
    return _one_step_problem(rng) if difficulty == 1 else _chain_problem(rng, difficulty)


_D = MathKwargs()  # the constructor's defaults: their one source (conf/env/math.yaml composes the same)


@register("math")
class MathEnv(SingleAnswerEnv):
    name = "math"
    max_actions_per_turn = 1
    templates: ClassVar[tuple[str, ...]] = (
        "I should read the problem carefully and compute the answer .",
        "Let me work through the numbers step by step .",
        "I will calculate carefully and give the final number .",
    )

    def __init__(self, difficulty: int = _D.difficulty) -> None:
        super().__init__()
        if difficulty not in _LEVELS:
            raise UserError(f"env.kwargs.difficulty={difficulty!r} must be 1, 2 or 3")
        self.difficulty = int(difficulty)
        self.problem: MathProblem | None = None

    def _reset(self, seed: int) -> None:
        self.problem = generate_problem(random.Random(seed), self.difficulty)

    def _require_problem(self) -> MathProblem:
        if self.problem is None:
            raise RuntimeError("math: call reset(seed) first")
        return self.problem

    # -- one answer -----------------------------------------------------------------------
    def judge(self, text: str) -> tuple[float, bool, bool, str | None]:
        problem = self._require_problem()
        value = normalize_answer(text)
        if value is None:
            return 0.0, False, False, ("the answer is not a number" if text.strip() else "empty answer")
        if value != problem.answer:
            return 0.0, True, False, f"{text.strip()} is not the right answer"
        return 1.0, True, True, None

    # -- text -----------------------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        return (
            "You are solving math word problems . Work out the answer step by step . "
            "Answer with <think> your reasoning </think> <answer> a number </answer> , for example <answer> 12 </answer> ."
        )

    def render_grid(self) -> str:
        return f"Question : {self._require_problem().question}"

    def observation(self) -> str:
        return f"{self.render_grid()}\nGive the answer as a single number ."

    def grounding(self, think: str) -> float | None:
        """Share of true claims: each ``a op b = c`` is correct arithmetic, and a stated start
        amount (``Start with N`` / ``begin at N`` / ``there are N``) is the problem's."""
        problem = self._require_problem()
        claims = arithmetic_claims(think) + [int(n) == problem.start for n in _START_CLAIM.findall(think)]
        return sum(claims) / len(claims) if claims else None

    def demonstration(self, rng: random.Random, suboptimal_prob: float = 0.0) -> tuple[str, str]:
        problem = self._require_problem()
        calc = " , ".join(f"{a} {op} {b} = {r}" for a, op, b, r in problem.steps)
        reasoning = " ".join(
            (
                rng.choice((f"Start with {problem.start} .", f"We begin at {problem.start} .", f"First there are {problem.start} .")),
                rng.choice((f"{calc} .", f"Compute {calc} .", f"Step by step : {calc} .")),
                rng.choice((f"So the answer is {problem.answer} .", f"That gives {problem.answer} .")),
            )
        )
        answer = problem.answer
        if rng.random() < suboptimal_prob:
            answer = answer + rng.choice((-1, 1))
        return reasoning, str(answer)
