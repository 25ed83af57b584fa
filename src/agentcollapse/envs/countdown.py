"""Countdown: combine the given numbers with + - * / to reach the target (docs/method.md section 7).

Single turn, single answer: the whole text inside ``<answer>`` is one arithmetic expression.
``reset(seed)`` draws ``min_numbers..max_numbers`` numbers (default 3-4) from 1..``max_number``
(default 10) and builds the target by combining them, in a random order with random operations,
into one value: integer intermediate results only, target in 1..``max_target`` (default 100). So the
target is always reachable using each number exactly once.

Reward: 1 when the expression uses exactly the given numbers (as a multiset) and equals the target,
0.1 when it uses them but is wrong (division by zero included), 0 when it parses but uses other
numbers. An expression that does not parse executes no valid action: reward 0 plus the format
penalty, with ``info["reason"]``.

Expressions are parsed by a small tokenizer and recursive-descent parser over non-negative integers,
``+ - * /`` and parentheses, and evaluated exactly with ``fractions.Fraction``; nothing is ever
``eval``-ed. Rejected: any other character (letters, ``=``, ``.``), ``**``, ``//``, unary signs,
unbalanced or empty parentheses, input over 100 characters, nesting deeper than 10.
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, Union

from agentcollapse.envs import register
from agentcollapse.envs.base import SingleAnswerEnv
from agentcollapse.envs.parsing import arithmetic_claims
from agentcollapse.errors import UserError

MAX_EXPRESSION_CHARS = 100
MAX_NESTING = 10
MAX_LITERAL_DIGITS = 6

SUCCESS_REWARD = 1.0
USES_NUMBERS_REWARD = 0.1

# A parsed expression tree: an int leaf or (op, left, right).
Node = Union[int, tuple[str, "Node", "Node"]]  # noqa: UP007 (a runtime alias: "Node" is a forward reference)
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_TOKEN = re.compile(r"\s*(?:([0-9]+)|([-+*/()]))")
_TARGET_CLAIM = re.compile(r"(?:target|need|reach) (\d+)")


class CountdownParseError(ValueError):
    """The expression is not allowed or cannot be evaluated; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class ParsedExpr:
    tree: Node
    numbers: tuple[int, ...]  # the literals, left to right

    def __str__(self) -> str:
        return format_tree(self.tree)


def _tokenize(text: str) -> list[str]:
    if not isinstance(text, str):
        raise CountdownParseError(f"expression must be text, got {type(text).__name__}")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CountdownParseError(f"expression is too long ({len(text)} characters, at most {MAX_EXPRESSION_CHARS})")
    if not text.strip():
        raise CountdownParseError("empty expression")
    if "**" in text:
        raise CountdownParseError("the power operator ** is not allowed; use + - * / only")
    if "//" in text:
        raise CountdownParseError("floor division // is not allowed; use / for division")
    tokens: list[str] = []
    pos, depth = 0, 0
    stripped_end = len(text.rstrip())
    while pos < stripped_end:
        match = _TOKEN.match(text, pos)
        if match is None:
            bad = text[pos:].lstrip()[0]
            if bad.isalpha() or bad == "_":
                raise CountdownParseError(f"letters and names are not allowed (found {bad!r}); use numbers and + - * / ( )")
            raise CountdownParseError(f"unexpected character {bad!r}; only numbers, + - * / and parentheses are allowed")
        token = match.group(1) or match.group(2)
        if match.group(1) and len(token) > MAX_LITERAL_DIGITS:
            raise CountdownParseError(f"number {token[:8]}... has more than {MAX_LITERAL_DIGITS} digits")
        if token == "(":
            depth += 1
            if depth > MAX_NESTING:
                raise CountdownParseError(f"parentheses nested too deeply (more than {MAX_NESTING} levels)")
        elif token == ")":
            depth -= 1
            if depth < 0:
                raise CountdownParseError("unbalanced parentheses: ')' without a matching '('")
        tokens.append(token)
        pos = match.end()
    if depth != 0:
        raise CountdownParseError("unbalanced parentheses: '(' without a matching ')'")
    return tokens


class _Parser:
    """expr := term (('+'|'-') term)* ; term := factor (('*'|'/') factor)* ; factor := INT | '(' expr ')'."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.pos = tokens, 0
        self.numbers: list[int] = []

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def parse(self) -> Node:
        tree = self.expr()
        if self.peek() is not None:
            raise CountdownParseError(f"unexpected {self.peek()!r} after a complete expression")
        return tree

    def expr(self) -> Node:
        node = self.term()
        while self.peek() in ("+", "-"):
            op = self.tokens[self.pos]
            self.pos += 1
            node = (op, node, self.term())
        return node

    def term(self) -> Node:
        node = self.factor()
        while self.peek() in ("*", "/"):
            op = self.tokens[self.pos]
            self.pos += 1
            node = (op, node, self.factor())
        return node

    def factor(self) -> Node:
        token = self.peek()
        if token is None:
            raise CountdownParseError("the expression ends where a number was expected")
        self.pos += 1
        if token.isdigit():
            value = int(token)
            self.numbers.append(value)
            return value
        if token == "(":
            if self.peek() == ")":
                raise CountdownParseError("empty parentheses ()")
            node = self.expr()
            self.pos += 1  # the matching ')' (balance was checked while tokenizing)
            return node
        if token in ("+", "-"):
            raise CountdownParseError(f"unary {token} is not allowed; every operator needs a number on both sides")
        raise CountdownParseError(f"expected a number or '(' but found {token!r}")


def parse_expression(text: str) -> ParsedExpr:
    """Parse a Countdown expression or raise ``CountdownParseError`` with the reason."""
    parser = _Parser(_tokenize(text))
    tree = parser.parse()
    return ParsedExpr(tree=tree, numbers=tuple(parser.numbers))


def evaluate(expr: ParsedExpr | str) -> Fraction:
    """Exact value of an expression; division by zero raises ``CountdownParseError``."""
    tree = parse_expression(expr).tree if isinstance(expr, str) else expr.tree
    return _eval(tree)


def _eval(node: Node) -> Fraction:
    if isinstance(node, int):
        return Fraction(node)
    op, left, right = node
    a, b = _eval(left), _eval(right)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        raise CountdownParseError("division by zero")
    return a / b


def format_tree(node: Node) -> str:
    """Space-separated infix text with only the parentheses precedence needs."""
    if isinstance(node, int):
        return str(node)
    op, left, right = node
    left_text, right_text = format_tree(left), format_tree(right)
    if not isinstance(left, int) and _PRECEDENCE[left[0]] < _PRECEDENCE[op]:
        left_text = f"( {left_text} )"
    if not isinstance(right, int) and (
        _PRECEDENCE[right[0]] < _PRECEDENCE[op] or (_PRECEDENCE[right[0]] == _PRECEDENCE[op] and op in "-/")
    ):
        right_text = f"( {right_text} )"
    return f"{left_text} {op} {right_text}"


def solve(numbers: list[int] | tuple[int, ...], target: int, rng: random.Random | None = None) -> Node | None:
    """An expression tree using every number once whose value is ``target``, or None.

    Brute force over pairs to combine and operations; integer intermediate results are tried first
    (the nicer solutions), then any exact fractions. ``rng`` shuffles the search order for variety.
    """
    items = [(Fraction(n), n) for n in numbers]
    if rng is not None:
        rng.shuffle(items)
    for integers_only in (True, False):
        found = _search(items, Fraction(target), integers_only, rng)
        if found is not None:
            return found
    return None


def _search(items: list[tuple[Fraction, Node]], target: Fraction, integers_only: bool, rng: random.Random | None) -> Node | None:
    if len(items) == 1:
        return items[0][1] if items[0][0] == target else None
    pairs = list(itertools.combinations(range(len(items)), 2))
    if rng is not None:
        rng.shuffle(pairs)
    for i, j in pairs:
        (a, ta), (b, tb) = items[i], items[j]
        rest = [items[k] for k in range(len(items)) if k not in (i, j)]
        options = [(a + b, ("+", ta, tb)), (a * b, ("*", ta, tb)), (a - b, ("-", ta, tb)), (b - a, ("-", tb, ta))]
        if b != 0:
            options.append((a / b, ("/", ta, tb)))
        if a != 0:
            options.append((b / a, ("/", tb, ta)))
        for value, tree in options:
            if integers_only and (value.denominator != 1 or value < 0):
                continue
            found = _search(rest + [(value, tree)], target, integers_only, rng)
            if found is not None:
                return found
    return None


def computation_steps(node: Node) -> list[tuple[Fraction, str, Fraction, Fraction]]:
    """The operations of a tree in the order a person computes them (left subtree, right subtree,
    then the node) as (left value, op, right value, result); division by zero raises."""
    if isinstance(node, int):
        return []
    op, left, right = node
    steps = computation_steps(left) + computation_steps(right)
    steps.append((_eval(left), op, _eval(right), _eval(node)))
    return steps


def _integer_steps(node: Node) -> bool:
    """Every intermediate result is a non-negative integer (the arithmetic a small model can learn)."""
    try:
        return all(r.denominator == 1 and r >= 0 for _, _, _, r in computation_steps(node))
    except CountdownParseError:
        return False


def _fmt_value(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator} / {value.denominator}"


@register("countdown")
class CountdownEnv(SingleAnswerEnv):
    name = "countdown"
    max_actions_per_turn = 1
    templates: ClassVar[tuple[str, ...]] = (
        "I should combine the numbers carefully to reach the target .",
        "Let me try some operations and pick a good expression .",
        "I will use every number once and check the result .",
    )

    def __init__(self, min_numbers: int = 3, max_numbers: int = 4, max_number: int = 10, max_target: int = 100) -> None:
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
        while True:
            numbers = [rng.randint(1, self.max_number) for _ in range(rng.randint(self.min_numbers, self.max_numbers))]
            pool = list(numbers)
            while len(pool) > 1:
                a, b = pool.pop(rng.randrange(len(pool))), pool.pop(rng.randrange(len(pool)))
                options = [a + b, a * b, abs(a - b)]
                if a % b == 0:
                    options.append(a // b)
                if b % a == 0:
                    options.append(b // a)
                options = [v for v in options if v > 0] or [a + b]
                pool.append(rng.choice(options))
            if 1 <= pool[0] <= self.max_target:
                self.numbers, self.target = numbers, pool[0]
                return

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
            value = _fmt_value(_eval(tree))
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
                if _eval(tree) == self.target:
                    continue
            except CountdownParseError:
                continue
            if _integer_steps(tree):
                return tree
            fallback = fallback or tree
        return fallback if fallback is not None else self._random_tree(rng)
