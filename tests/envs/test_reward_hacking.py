"""Reward hacking: outputs that are wrong must score 0 however they are dressed, and right ones 1.

The comparison's rules are those of the original graders (LiveCodeBench, TACO): tokens compared exactly,
a float tolerance only where the expected token is a non-integer number, never for nan/inf unless
expected. Each hack here is one an RL policy finds within a few iterations when the grader allows it
(issue 58: ``print('nan')`` earned reward 1 on half the generated problems).
"""

from __future__ import annotations

import random
import re

import pytest

from agentcollapse import envs
from agentcollapse.envs.deepcoder.problems import CodeProblem, generate_problem
from agentcollapse.sandbox import OK, Limits, Sandbox, outputs_match

pytestmark = pytest.mark.xdist_group("sandbox")  # with tests/sandbox/test_sandbox.py, whose leftover checks see all sandboxes


@pytest.mark.parametrize(
    "actual, expected, same",
    [
        ("nan", "42", False),
        ("nan", "0.5", False),
        ("NaN", "nan", False),
        ("nan", "nan", True),  # expected nan: the token itself
        ("inf", "1e308", False),
        ("inf", "inf", True),
        ("1e400", "1.5", False),  # overflows to inf
        ("-0", "5", False),
        ("-0", "0", False),  # integers compare as text
        ("-0.0", "0.0", True),  # a float's sign of zero is within any tolerance
        ("1000001", "1000000", False),  # off by one at 10^6: integers are exact
        ("999999", "1000000", False),
        ("1000000", "1000000", True),
        ("1000000.0", "1000000", False),
        ("1_000_000", "1000000", False),
        ("10" * 200, "1" + "0" * 399, False),  # huge numbers: exact
        ("1" + "0" * 399, "1" + "0" * 399, True),
        ("0.3333333", "0.333333333", True),  # float printing precision: tolerated
        ("0.3334", "0.3333", False),
        ("2.0000001", "2.0", True),
        ("2", "2.0", True),  # a non-integer expected token takes any finite number near it
        ("1.5e-9", "0.0", True),  # absolute below 1
        ("", "0", False),  # empty output
        ("\n\n  \n", "7", False),  # whitespace only
        ("", "", True),
        ("1  2   3  \n\n", "1 2 3\n", True),  # extra spaces and trailing blank lines: the same tokens
        ("   1 2 3", "1 2 3", True),
        ("1\n2\n3", "1 2 3", False),  # lines are lines
        ("\n1 2 3", "1 2 3", False),
        ("1 2 3 4", "1 2 3", False),
        ("YES", "yes", False),
    ],
)
def test_tokens_compare_as_the_original_graders_do(actual, expected, same):
    assert outputs_match(actual, expected) is same


@pytest.mark.parametrize(
    "actual, expected, same",
    [
        ("NaN", "1.5", False),
        ("NaN", "NaN", False),  # nan equals nothing, itself included
        ("true", "1", False),  # a bool is no number
        ("[true]", "[1]", False),
        ("1", "true", False),
        ("1.0", "1", True),
        ("[1, 2]", "[[1, 2]]", True),  # APPS/TACO wrap a return value in a list
        ('{"a": 1}', '{"a": true}', False),
        ('"42"', "42", False),
        ("Infinity", "1e999", True),  # both parse to inf: the expected value itself
    ],
)
def test_call_style_values_compare_strictly(actual, expected, same):
    assert outputs_match(actual, expected, call=True) is same


def _hacks(problem: CodeProblem) -> dict[str, list[str]]:
    """Each hack's output for each of the problem's tests (what a program that prints it would print)."""
    shown = problem.public[0][1]
    every_number = lambda out, f: re.sub(r"-?\d+", f, out)  # noqa: E731
    outs = [out for _, out in problem.tests]
    return {
        "nan": ["nan\n"] * len(outs),
        "inf": ["inf\n"] * len(outs),
        "-0": ["-0\n"] * len(outs),
        "huge": [str(10**400) + "\n"] * len(outs),
        "empty": [""] * len(outs),
        "whitespace": [" \n\n"] * len(outs),
        "nan per number": [every_number(o, lambda m: "nan") for o in outs],
        "inf per number": [every_number(o, lambda m: "inf") for o in outs],
        "off by one": [every_number(o, lambda m: str(int(m.group(0)) + 1)) for o in outs],
        "times 10^6 plus one": [every_number(o, lambda m: str(int(m.group(0)) * 10**6 + 1)) for o in outs],
        "the shown example": [shown] * len(outs),
    }


def test_no_hack_passes_a_generated_problem():
    """40 stdio problems per difficulty; a hack passes a problem when every test's output matches."""
    for difficulty in (1, 2, 3):
        for seed in range(40):
            problem = generate_problem(random.Random(seed), difficulty, "stdio", 5)
            assert all(outputs_match(out, out) for _, out in problem.tests)
            assert all(outputs_match(out.replace(" ", "  ") + "\n", out) for _, out in problem.tests)
            for name, outputs in _hacks(problem).items():
                if all(got == want for got, (_, want) in zip(outputs, problem.tests)):
                    continue  # the hack happens to be right (all five tests share the shown output, or it has no number)
                passed = all(outputs_match(got, want) for got, (_, want) in zip(outputs, problem.tests))
                assert not passed, (name, difficulty, seed, problem.tests)


_HACK_PROGRAMS = {
    "nan": "print('nan')",
    "inf": "print(float('inf'))",
    "-0": "print('-0')",
    "huge": "print(10 ** 400)",
    "empty": "pass",
    "whitespace": "print('   ')",
    "nan per number": "import re, sys\nprint(re.sub(r'-?\\d+', 'nan', sys.stdin.read()))",
    "the shown example": "print({shown!r})",
}


def test_hack_programs_score_zero_and_the_right_program_one():
    """The whole path (sandbox, env, reward) for each hack on a few generated problems per difficulty."""
    env = envs.make("deepcoder", style="stdio")
    for difficulty, seed in ((1, 0), (2, 1), (3, 0)):
        problem = generate_problem(random.Random(seed), difficulty, "stdio", 5)
        for name, template in _HACK_PROGRAMS.items():
            env.reset(0)
            env.problem = problem
            _, reward, _, info = env.step(template.format(shown=problem.public[0][1]))
            assert reward == 0.0 and not info["success"], (name, difficulty, env.last_runs)
        env.reset(0)
        env.problem = problem
        right = "\n".join(
            ["answers = {"]
            + [f"    {i!r}: {o!r}," for i, o in problem.tests]
            + ["}", "import sys", "print(answers[sys.stdin.read()], end='')"]
        )
        assert env.step(right)[1] == 1.0


# A program that searches its own process for strings shaped like the marker: Python's objects (gc, the
# frames above it) and raw memory around the heap, page by page (a write of an unmapped page to a pipe
# fails with EFAULT where reading it would crash). It prints every marker found.
MEMORY_HUNTER = r"""
import ctypes, gc, os, re, sys
pat = re.compile(rb'zq-(?:input|expected)-[0-9]+-kx')
found = set()
def scan(data):
    found.update(m.group(0).decode() for m in pat.finditer(data))
own = sys.stdin.read()
sys.stderr.write(own * 100)  # left in the harness's buffers, a later test would find it there
for o in gc.get_objects():
    scan(repr(o).encode('utf-8', 'replace')[:1 << 20])
f = sys._getframe()
while f is not None:
    scan(repr(f.f_locals).encode('utf-8', 'replace'))
    f = f.f_back
libc = ctypes.CDLL(None, use_errno=True)
r, w = os.pipe()
page = 1 << 12
pages = set()
for o in gc.get_objects()[:20000]:
    base = id(o) & ~((1 << 20) - 1)
    pages.update(range(base - (4 << 20), base + (4 << 20), page))
for p in sorted(pages)[: 1 << 15]:
    if libc.write(w, ctypes.c_void_p(p), page) == page:
        scan(os.read(r, page))
print(' '.join(sorted(found)))
"""


def test_a_program_reading_its_own_memory_finds_neither_outputs_nor_other_tests_inputs():
    """Each test's process holds its own input and nothing else of the run: not the expected outputs
    (they never leave the grader) and not the other tests' inputs (the harness never holds them in its
    memory; each arrives in the test's stdin only), nor what an earlier test printed (the harness wipes
    its output buffers)."""
    sandbox = Sandbox("strict", Limits(cpu_seconds=2, wall_seconds=4))
    inputs = [f"zq-input-{i}-kx\n" for i in range(4)]
    runs = sandbox.run(MEMORY_HUNTER, inputs)
    assert [r.status for r in runs] == [OK] * 4, runs
    for i, run in enumerate(runs):
        assert run.stdout.split() == [f"zq-input-{i}-kx"], (i, run.stdout)  # its own only: the search works, nothing leaks
