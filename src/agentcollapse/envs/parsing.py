"""The shared response format: ``<think> Z </think><answer> A </answer>``.

Generation starts right after a literal ``<think>`` appended to the context (docs/method.md section 1),
so a response may or may not repeat the opening tag; both parse the same way.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from fractions import Fraction

ACTION_SEPARATOR = "||"
_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class ParsedResponse:
    think: str  # reasoning text Z, stripped; "" when missing
    answer: str  # text inside <answer>, stripped; "" when missing
    format_valid: bool  # both blocks present, think before answer, nothing but whitespace between


def parse_response(text: str) -> ParsedResponse:
    """Split a model response into reasoning and answer; never raises."""
    if not isinstance(text, str):
        text = str(text)
    think_match = _THINK.search(text)
    think = think_match.group(1).strip() if think_match else ""
    rest = text[think_match.end() :] if think_match else text
    answer_match = _ANSWER.search(rest)
    answer = answer_match.group(1).strip() if answer_match else ""
    format_valid = bool(think_match and answer_match and "<think>" not in think and rest[: answer_match.start()].strip() == "")
    return ParsedResponse(think=think, answer=answer, format_valid=format_valid)


def split_actions(answer: str, max_actions: int) -> list[str]:
    """Action words of an answer, at most ``max_actions`` (extra ones are ignored, as in RAGEN)."""
    parts = [p.strip() for p in answer.split(ACTION_SEPARATOR)]
    return [p for p in parts if p][:max_actions]


_EQUATION = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)(?: / (\d+))?")
_OPERATIONS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def arithmetic_claims(think: str) -> list[bool]:
    """Whether each ``a op b = c`` (or ``= p / q``) stated in reasoning is correct arithmetic.

    The checkable part of single-answer reasoning: a model can keep the format of worked steps while
    the numbers stop being right, which grounding should see. Division by zero is a false claim."""
    claims: list[bool] = []
    for a, op, b, num, den in _EQUATION.findall(think):
        if (op == "/" and int(b) == 0) or (den and int(den) == 0):
            claims.append(False)
            continue
        stated = Fraction(int(num), int(den) if den else 1)
        claims.append(_OPERATIONS[op](Fraction(int(a)), Fraction(int(b))) == stated)
    return claims
