"""Countdown's arithmetic: parse, evaluate, print and solve expression trees, and draw puzzles
(``env.py`` plays them as a single-answer task).

Expressions are parsed by a small tokenizer and recursive-descent parser over non-negative integers,
``+ - * /`` and parentheses, and evaluated exactly with ``fractions.Fraction``; nothing is ever
``eval``-ed. Rejected: any other character (letters, ``=``, ``.``), ``**``, ``//``, unary signs,
unbalanced or empty parentheses, input over 100 characters, nesting deeper than 10.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Union

MAX_EXPRESSION_CHARS = 100
MAX_NESTING = 10
MAX_LITERAL_DIGITS = 6


# A parsed expression tree: an int leaf or (op, left, right).
Node = Union[int, tuple[str, "Node", "Node"]]  # noqa: UP007 (a runtime alias: "Node" is a forward reference)
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_TOKEN = re.compile(r"\s*(?:([0-9]+)|([-+*/()]))")


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
    return value_of(tree)


def value_of(node: Node) -> Fraction:
    """Exact value of a tree; division by zero raises ``CountdownParseError``."""
    if isinstance(node, int):
        return Fraction(node)
    op, left, right = node
    a, b = value_of(left), value_of(right)
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
    steps.append((value_of(left), op, value_of(right), value_of(node)))
    return steps


def integer_steps(node: Node) -> bool:
    """Every intermediate result is a non-negative integer (the arithmetic a small model can learn)."""
    try:
        return all(r.denominator == 1 and r >= 0 for _, _, _, r in computation_steps(node))
    except CountdownParseError:
        return False


def draw_puzzle(rng: random.Random, min_numbers: int, max_numbers: int, max_number: int, max_target: int) -> tuple[list[int], int]:
    """(numbers, target): ``min_numbers..max_numbers`` numbers from 1..``max_number``, combined in a
    random order with random operations (integer intermediate results only) into a target in
    1..``max_target``, so the target is reachable using each number exactly once. Redraws until the
    target fits."""
    while True:
        numbers = [rng.randint(1, max_number) for _ in range(rng.randint(min_numbers, max_numbers))]
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
        if 1 <= pool[0] <= max_target:
            return numbers, pool[0]


__all__ = [
    "MAX_EXPRESSION_CHARS",
    "MAX_LITERAL_DIGITS",
    "MAX_NESTING",
    "CountdownParseError",
    "Node",
    "ParsedExpr",
    "computation_steps",
    "draw_puzzle",
    "evaluate",
    "format_tree",
    "integer_steps",
    "parse_expression",
    "solve",
    "value_of",
]
