"""Comparing a program's output with the expected one, in the grader, as the original graders
(LiveCodeBench, TACO) judge it. The expected outputs never leave the grader: the child gets inputs only."""

from __future__ import annotations

import json
import math
import re
from typing import Any

# A number as graders print one: digits with an optional sign, point and exponent. Python's float()
# also takes 'nan', 'inf', 'infinity' and '1_000', which no expected output means as a number.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_REL_TOL = 1e-6  # for non-integer expected numbers only (as LiveCodeBench/TACO: printing precision varies)


def _tokens_match(got: str, want: str) -> bool:
    """One token: equal strings; or, where the expected token is a non-integer number (a point or an
    exponent), a finite number within 1e-6 of it (relative, absolute below 1). Integers, words, nan
    and inf are compared exactly: a tolerance there lets ``1000001`` pass for ``1000000`` and ``nan``
    for anything (every comparison with nan is false, so ``abs(nan - y) > tol`` never rejects)."""
    if got == want:
        return True
    if not (_NUMBER.fullmatch(want) and _NUMBER.fullmatch(got)) or not any(c in want for c in ".eE"):
        return False
    x, y = float(got), float(want)
    return math.isfinite(x) and math.isfinite(y) and abs(x - y) <= _REL_TOL * max(1.0, abs(y))


def _same_json(got: Any, want: Any) -> bool:
    """JSON values equal, with a bool never standing in for a number (``True == 1`` in Python) and a
    float never equal unless it is (``nan`` is equal to nothing)."""
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(_same_json(a, b) for a, b in zip(got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(_same_json(got[k], want[k]) for k in want)
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        return got == want
    return type(got) is type(want) and got == want


def outputs_match(actual: str, expected: str, call: bool = False) -> bool:
    """Whether an output is the expected one, as the original graders (LiveCodeBench, TACO) judge it.
    stdin/stdout: the same lines (trailing spaces and trailing blank lines ignored), each the same
    whitespace-separated tokens, compared exactly except non-integer expected numbers (``_tokens_match``).
    A call: the JSON values are equal (``_same_json``)."""
    if call:  # APPS/TACO store a return value r as r or as [r]
        try:
            got, want = json.loads(actual), json.loads(expected)
        except ValueError:
            return False
        return _same_json(got, want) or (isinstance(want, list) and len(want) == 1 and _same_json(got, want[0]))
    a = [line.split() for line in actual.rstrip().splitlines()]
    e = [line.split() for line in expected.rstrip().splitlines()]
    return len(a) == len(e) and all(len(la) == len(le) and all(map(_tokens_match, la, le)) for la, le in zip(a, e))
