"""Countdown: combine the given numbers with + - * / to reach the target (docs/method.md section 7).

Single turn, single answer: the whole text inside ``<answer>`` is one arithmetic expression.
``reset(seed)`` draws ``min_numbers..max_numbers`` numbers (default 3; TinyZero's 3-4 with
``max_numbers=4``) from 1..``max_number``
(default 10) and builds the target by combining them, in a random order with random operations,
into one value: integer intermediate results only, target in 1..``max_target`` (default 100). So the
target is always reachable using each number exactly once.

Reward: 1 when the expression uses exactly the given numbers (as a multiset) and equals the target,
0.1 when it uses them but is wrong (division by zero included), 0 when it parses but uses other
numbers. An expression that does not parse executes no valid action: reward 0 plus the format
penalty, with ``info["reason"]``.

Expressions are parsed, evaluated exactly and solved in ``expressions.py`` (a small
recursive-descent parser; nothing is ever ``eval``-ed), where the puzzles are drawn too.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from fractions import Fraction
from typing import ClassVar

from agentcollapse.config.env_kwargs import CountdownKwargs
from agentcollapse.envs import register
from agentcollapse.envs.base import SingleAnswerEnv
from agentcollapse.envs.countdown.expressions import (
    MAX_EXPRESSION_CHARS,
    MAX_LITERAL_DIGITS,
    MAX_NESTING,
    CountdownParseError,
    Node,
    ParsedExpr,
    computation_steps,
    draw_puzzle,
    evaluate,
    format_tree,
    integer_steps,
    parse_expression,
    solve,
    value_of,
)
from agentcollapse.envs.parsing import arithmetic_claims
from agentcollapse.errors import UserError

SUCCESS_REWARD = 1.0
USES_NUMBERS_REWARD = 0.1

_TARGET_CLAIM = re.compile(r"(?:target|need|reach) (\d+)")

# the expression language's names stay importable from here (their old home)
__all__ = [
    "MAX_EXPRESSION_CHARS",
    "MAX_LITERAL_DIGITS",
    "MAX_NESTING",
    "SUCCESS_REWARD",
    "USES_NUMBERS_REWARD",
    "CountdownEnv",
    "CountdownParseError",
    "Node",
    "ParsedExpr",
    "computation_steps",
    "evaluate",
    "format_tree",
    "parse_expression",
    "solve",
]


def _fmt_value(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator} / {value.denominator}"


_D = CountdownKwargs()  # the constructor's defaults: their one source (conf/env/countdown.yaml composes the same)


@register("countdown")
class CountdownEnv(SingleAnswerEnv):
    name = "countdown"
    max_actions_per_turn = 1
    templates: ClassVar[tuple[str, ...]] = (
        "I should combine the numbers carefully to reach the target .",
        "Let me try some operations and pick a good expression .",
        "I will use every number once and check the result .",
    )

    def __init__(
        self,
        min_numbers: int = _D.min_numbers,
        max_numbers: int = _D.max_numbers,
        max_number: int = _D.max_number,
        max_target: int = _D.max_target,
    ) -> None:
        super().__init__()
        if not 2 <= min_numbers <= max_numbers <= 5:
            raise UserError(f"env.kwargs min_numbers={min_numbers}, max_numbers={max_numbers} must satisfy 2 <= min <= max <= 5")
        if max_number < 2 or max_target < 1:
            raise UserError(f"env.kwargs max_number={max_number} must be >= 2 and max_target={max_target} >= 1")
        self.min_numbers, self.max_numbers = int(min_numbers), int(max_numbers)
        self.max_number, self.max_target = int(max_number), int(max_target)
        self.numbers: list[int] = []
        self.target = 0

    # -- generation -----------------------------------------------------------------------
    def _reset(self, seed: int) -> None:
        rng = random.Random(seed)
        self.numbers, self.target = draw_puzzle(rng, self.min_numbers, self.max_numbers, self.max_number, self.max_target)

    # -- one answer -----------------------------------------------------------------------
    def score(self, text: str) -> tuple[float, bool, str | None]:
        """(reward, parsed, reason) of an answer, without stepping the env."""
        try:
            parsed = parse_expression(text.strip())
        except CountdownParseError as exc:
            return 0.0, False, exc.reason
        uses_numbers = Counter(parsed.numbers) == Counter(self.numbers)
        try:
            value = evaluate(parsed)
        except CountdownParseError as exc:
            return (USES_NUMBERS_REWARD if uses_numbers else 0.0), True, exc.reason
        if not uses_numbers:
            return 0.0, True, f"the expression must use exactly the numbers {self.numbers}, each once"
        if value == self.target:
            return SUCCESS_REWARD, True, None
        return USES_NUMBERS_REWARD, True, f"the expression equals {_fmt_value(value)}, not {self.target}"

    def judge(self, text: str) -> tuple[float, bool, bool, str | None]:
        reward, parsed, reason = self.score(text)
        return reward, parsed, reward == SUCCESS_REWARD, reason

    # -- text -----------------------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        return (
            "You are playing Countdown . Combine all the given numbers , each exactly once , with + - * / "
            "and parentheses to reach the target . "
            "Answer with <think> your reasoning </think> <answer> an expression </answer> , "
            "for example <answer> ( 3 + 5 ) * 2 </answer> ."
        )

    def render_grid(self) -> str:
        return f"Numbers : {' , '.join(map(str, self.numbers))} . Target : {self.target} ."

    def observation(self) -> str:
        return f"{self.render_grid()}\nUse each number exactly once ."

    def demonstration(self, rng: random.Random, suboptimal_prob: float = 0.0) -> tuple[str, str]:
        """Reasoning that restates the numbers and target, then computes the chosen expression one
        operation at a time (so the arithmetic is in the text, checkable, and learnable token by
        token). With ``suboptimal_prob`` the expression is a random one that misses the target; its
        computation is still shown truthfully."""
        if rng.random() < suboptimal_prob:
            tree = self._wrong_tree(rng)
        else:
            tree = solve(self.numbers, self.target, rng)
            if tree is None:  # cannot happen for generated targets
                tree = self._wrong_tree(rng)
        nums = " , ".join(map(str, self.numbers))
        opening = rng.choice(
            (
                f"I need {self.target} from {nums} .",
                f"Numbers {nums} , target {self.target} .",
                f"With {nums} I want to reach {self.target} .",
            )
        )
        answer = format_tree(tree)
        try:  # steps of the written answer (its parse may regroup, e.g. a + ( b + c ) is a + b + c)
            steps = computation_steps(parse_expression(answer).tree)
            work = " ".join(f"{_fmt_value(a)} {op} {_fmt_value(b)} = {_fmt_value(r)} ." for a, op, b, r in steps)
            value = _fmt_value(value_of(tree))
        except CountdownParseError:
            work, value = "", "undefined"
        verdict = "That is the target ." if value == str(self.target) else f"That gives {value} ."
        return " ".join(part for part in (opening, work, verdict) if part), answer

    def grounding(self, think: str) -> float | None:
        """Share of true claims: each ``a op b = c`` is correct arithmetic, and a stated target
        (``target N`` / ``need N`` / ``reach N``) is the real one."""
        claims = arithmetic_claims(think)
        claims += [int(t) == self.target for t in _TARGET_CLAIM.findall(think)]
        return sum(claims) / len(claims) if claims else None

    def _random_tree(self, rng: random.Random) -> Node:
        pool: list[Node] = list(self.numbers)
        rng.shuffle(pool)
        while len(pool) > 1:
            a, b = pool.pop(), pool.pop()
            pool.insert(rng.randrange(len(pool) + 1), (rng.choice("+-*/"), a, b))
        return pool[0]

    def _wrong_tree(self, rng: random.Random) -> Node:
        """An expression using every number once whose value is not the target (integer steps
        preferred, so its shown computation stays plain arithmetic)."""
        fallback = None
        for _ in range(200):
            tree = self._random_tree(rng)
            try:
                if value_of(tree) == self.target:
                    continue
            except CountdownParseError:
                continue
            if integer_steps(tree):
                return tree
            fallback = fallback or tree
        return fallback if fallback is not None else self._random_tree(rng)
