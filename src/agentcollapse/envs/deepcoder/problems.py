"""Problems for ``env=deepcoder``: a generated family shipped in the package, and a loader for real
problem files (``env.data_path``).

A problem is a statement, its tests (input, expected output) and, for the generated family, a reference
solution. Two styles, as in DeepCoder's data:

- **stdin/stdout**: the program reads the test input from stdin and prints the answer;
- **function call**: the program defines a function; each test's input is a JSON list of arguments,
  its expected output the JSON of the return value.

The generated family (``generate_problem(rng, difficulty, style)``) is deterministic from the seed:
functions over lists of integers, strings and integers, with randomised tests. Difficulty 1: one
operation on a short list or string (sum, max, sorted, reversed, ...); 2: adds operations with a
condition or a second input (count of values above k, gcd, digit sums, ...); 3: adds two-step tasks
(second largest distinct, sum of the even positions, longest run, ...). Reference solutions are
written one statement per line with no indentation and no string literals, so they survive the tiny
policy's word-level tokenizer (which drops indentation and spaces inside quotes).

Real files (``load_problems(path)``): JSON Lines, one problem per line, in the shapes DeepCoder's data
comes in (see README.md, "DeepCoder"):

- statement: the first of ``problem``, ``question``, ``prompt``, ``description``, ``question_content``;
- tests, the first present of
  - ``tests``: a list (or a JSON string of one) of ``{"input", "output"}`` objects (``testtype``
    ``"functional"`` for calls), or an ``{"inputs": [...], "outputs": [...]}`` object;
  - ``input_output`` (TACO / APPS): ``{"inputs": [...], "outputs": [...], "fn_name"?}``, object or JSON string;
  - ``verification_info`` (PrimeIntellect): ``{"test_cases": [{"input", "output", "type"}]}``;
  - ``public_test_cases`` + ``private_test_cases`` (LiveCodeBench): lists of
    ``{"input", "output", "testtype"}`` as JSON (the compressed private-test encoding is not read);
- function name (call style): ``fn_name``, ``func_name``, or ``metadata.func_name``; a
  ``class Solution`` method of that name works too (LeetCode style).
A call test's input is the arguments as a JSON list (TACO), or one JSON value per line
(LiveCodeBench). ``solutions`` (TACO: a list of programs), when present, gives the reference the
warm start's demonstrations answer with. A line that is not such a problem is an error naming the line number.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcollapse.envs.splits import HELDOUT_SHARE, split_by_hash
from agentcollapse.errors import UserError

STYLES = ("stdio", "call", "mixed")
DIFFICULTIES = (1, 2, 3)


@dataclass(frozen=True)
class CodeProblem:
    statement: str  # what the policy reads (examples included)
    tests: tuple[tuple[str, str], ...]  # hidden tests (input, expected output); never sent to a program's process with the output
    public: tuple[tuple[str, str], ...]  # the examples shown in the statement (also among the tests)
    call: str | None = None  # the function to call (call style), or None (stdin/stdout)
    reference: str | None = None  # a reference solution (generated problems)
    kind: str = ""  # the generated task's name, or "file"
    facts: dict[str, Any] = field(default_factory=dict)  # what reasoning can state and grounding check
    source: str = "generated"


# -- the generated family ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Task:
    name: str
    level: int
    kind: str  # "list" | "string" | "ints"
    text: str  # what to compute, for the statement
    plan: str  # the method, for the reasoning
    solve: Callable[..., Any]  # the reference, in Python, on the arguments
    body: str  # the reference's expression over the function's parameters
    params: tuple[str, ...]


def _second_largest(xs: list[int]) -> int:
    values = sorted(set(xs))
    return values[-2] if len(values) > 1 else values[-1]


def _longest_run(xs: list[int]) -> int:
    best = run = 1
    for a, b in zip(xs, xs[1:]):
        run = run + 1 if a == b else 1
        best = max(best, run)
    return best


_TASKS: tuple[_Task, ...] = (
    _Task("sum", 1, "list", "the sum of the numbers", "add all the numbers", sum, "sum(xs)", ("xs",)),
    _Task("max", 1, "list", "the largest number", "take the maximum", max, "max(xs)", ("xs",)),
    _Task("min", 1, "list", "the smallest number", "take the minimum", min, "min(xs)", ("xs",)),
    _Task("sorted", 1, "list", "the numbers in increasing order", "sort the numbers", sorted, "sorted(xs)", ("xs",)),
    _Task("reversed", 1, "list", "the numbers in reverse order", "reverse the list", lambda xs: xs[::-1], "xs[::-1]", ("xs",)),
    _Task("length", 1, "string", "the length of the string", "count the characters", len, "len(s)", ("s",)),
    _Task("upper", 1, "string", "the string in capital letters", "convert it to upper case", str.upper, "s.upper()", ("s",)),
    _Task("reverse_string", 1, "string", "the string reversed", "read it backwards", lambda s: s[::-1], "s[::-1]", ("s",)),
    _Task("distinct", 2, "list", "how many different numbers there are", "count the distinct values", lambda xs: len(set(xs)), "len(set(xs))", ("xs",)),
    _Task("range", 2, "list", "the largest number minus the smallest", "subtract the minimum from the maximum", lambda xs: max(xs) - min(xs), "max(xs) - min(xs)", ("xs",)),
    _Task(
        "count_even", 2, "list", "how many numbers are even", "count the values divisible by 2",
        lambda xs: sum(1 for x in xs if x % 2 == 0), "sum(1 for x in xs if x % 2 == 0)", ("xs",),
    ),
    _Task("gcd", 2, "ints", "the greatest common divisor of a and b", "use math.gcd", math.gcd, "math.gcd(a, b)", ("a", "b")),
    _Task(
        "digit_sum", 2, "ints", "the sum of the digits of a times b", "multiply and add the digits",
        lambda a, b: sum(int(d) for d in str(a * b)), "sum(int(d) for d in str(a * b))", ("a", "b"),
    ),
    _Task("palindrome", 2, "string", "1 if the string reads the same backwards, else 0", "compare it with its reverse", lambda s: int(s == s[::-1]), "int(s == s[::-1])", ("s",)),
    _Task("second_largest", 3, "list", "the second largest distinct number (the largest if all are equal)", "sort the distinct values", _second_largest, "sorted(set(xs))[-2] if len(set(xs)) > 1 else xs[0]", ("xs",)),
    _Task("even_positions", 3, "list", "the sum of the numbers at positions 0, 2, 4, ...", "add every second number", lambda xs: sum(xs[::2]), "sum(xs[::2])", ("xs",)),
    _Task("squares_of_odds", 3, "list", "the squares of the odd numbers, in order", "square the odd values", lambda xs: [x * x for x in xs if x % 2 == 1], "[x * x for x in xs if x % 2 == 1]", ("xs",)),
    _Task("longest_run", 3, "list", "the length of the longest run of equal neighbours", "walk the list keeping the current run", _longest_run,
          "max(len(list(g)) for _, g in itertools.groupby(xs))", ("xs",)),
)  # fmt: skip
_IMPORTS = {"gcd": "math", "longest_run": "itertools"}
# Sizes and value ranges per difficulty: (min length, max length, max value).
_SIZES = {1: (3, 6, 20), 2: (3, 8, 30), 3: (4, 8, 9)}
_LETTERS = "abcde"


def tasks_for(difficulty: int) -> list[_Task]:
    return [t for t in _TASKS if t.level <= difficulty]


def _random_args(task: _Task, rng: random.Random, difficulty: int) -> tuple[Any, ...]:
    lo, hi, top = _SIZES[difficulty]
    if task.kind == "list":
        return ([rng.randint(0, top) for _ in range(rng.randint(lo, hi))],)
    if task.kind == "string":
        n = rng.randint(lo, hi)
        if task.name == "palindrome" and rng.random() < 0.5:
            half = "".join(rng.choice(_LETTERS) for _ in range((n + 1) // 2))
            return (half + half[::-1][n % 2 :],)
        return ("".join(rng.choice(_LETTERS) for _ in range(n)),)
    return (rng.randint(1, 6 * top), rng.randint(1, 6 * top))


def _stdin(task: _Task, args: tuple[Any, ...]) -> str:
    if task.kind == "list":
        return f"{len(args[0])}\n{' '.join(map(str, args[0]))}\n"
    if task.kind == "string":
        return f"{args[0]}\n"
    return f"{args[0]} {args[1]}\n"


def _stdout(value: Any) -> str:
    return (" ".join(map(str, value)) if isinstance(value, list) else str(value)) + "\n"


_INPUT_FORMAT = {
    "list": "The first line holds n , the second line n integers separated by spaces .",
    "string": "One line holds a string of lowercase letters .",
    "ints": "One line holds two integers a and b .",
}
_READ = {
    "list": "n = int(input())\nxs = list(map(int, input().split()))",
    "string": "s = input().strip()",
    "ints": "a, b = map(int, input().split())",
}


def reference_program(task: _Task, call: bool) -> str:
    """The reference solution, one statement per line and no indentation."""
    head = f"import {_IMPORTS[task.name]}\n" if task.name in _IMPORTS else ""
    if call:
        return f"{head}def solve({', '.join(task.params)}): return {task.body}"
    out = f"print(*{task.body})" if task.name in ("sorted", "reversed", "squares_of_odds") else f"print({task.body})"
    return f"{head}{_READ[task.kind]}\n{out}"


def generate_problem(rng: random.Random, difficulty: int = 1, style: str = "mixed", num_tests: int = 5) -> CodeProblem:
    """One problem of the generated family: a task of this difficulty, ``num_tests`` random tests, the first shown."""
    if difficulty not in DIFFICULTIES:
        raise UserError(f"env.kwargs.difficulty={difficulty!r} must be 1, 2 or 3")
    if style not in STYLES:
        raise UserError(f"env.kwargs.style={style!r} must be one of {', '.join(STYLES)}")
    task = rng.choice(tasks_for(difficulty))
    call = style == "call" or (style == "mixed" and rng.random() < 0.5)
    arg_sets = [_random_args(task, rng, difficulty) for _ in range(num_tests)]
    if call:
        tests = tuple((json.dumps(list(args)), json.dumps(task.solve(*args))) for args in arg_sets)
        params = ", ".join(task.params)
        example_in = ", ".join(json.dumps(a) for a in arg_sets[0])
        statement = (
            f"Write a Python function solve ( {params} ) that returns {task.text} .\n"
            f"Example : solve ( {example_in} ) returns {tests[0][1]} ."
        )
        fmt = f"The function takes {params} ."
    else:
        tests = tuple((_stdin(task, args), _stdout(task.solve(*args))) for args in arg_sets)
        statement = (
            f"Write a Python program that reads the input and prints {task.text} .\n"
            f"{_INPUT_FORMAT[task.kind]}\nExample input :\n{tests[0][0].rstrip()}\nExample output :\n{tests[0][1].rstrip()}"
        )
        fmt = _INPUT_FORMAT[task.kind]
    args0 = arg_sets[0]
    facts = {
        "task": task.name,
        "plan": task.plan,
        "format": fmt,
        "example_size": len(args0[0]) if task.kind in ("list", "string") else None,
        "example_output": tests[0][1].strip(),
        "kind": task.kind,
    }
    return CodeProblem(
        statement=statement,
        tests=tests,
        public=tests[:1],
        call="solve" if call else None,
        reference=reference_program(task, call),
        kind=task.name,
        facts=facts,
    )


# -- real problem files ----------------------------------------------------------------------------

_STATEMENT_KEYS = ("problem", "question", "prompt", "description", "question_content")


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(map(str, value))
    return json.dumps(value)


def _call_input(value: Any) -> str:
    """A call test's arguments as a JSON list: a list already (TACO), or one JSON value per line (LiveCodeBench)."""
    value = _maybe_json(value)
    if isinstance(value, list):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps([json.loads(line) for line in value.splitlines() if line.strip()])
    return json.dumps([value])


def _call_output(value: Any) -> str:
    return json.dumps(_maybe_json(value))


def _tests_of(obj: dict[str, Any], fn_name: str | None) -> tuple[list[tuple[str, str]], list[tuple[str, str]], str | None]:
    """(all tests, public tests, fn name) of one record."""

    def pairs(items: list[Any], call: str | None) -> list[tuple[str, str]]:
        out = []
        for item in items:
            if not isinstance(item, dict) or "input" not in item or "output" not in item:
                raise ValueError("a test must be an object with 'input' and 'output'")
            if call is not None:
                out.append((_call_input(item["input"]), _call_output(item["output"])))
            else:
                out.append((_as_text(item["input"]), _as_text(item["output"])))
        return out

    def functional(items: list[Any]) -> bool:
        return any(
            isinstance(t, dict) and str(t.get("testtype", t.get("type", ""))).lower() in ("functional", "function_call") for t in items
        )

    def io_object(io: dict[str, Any]) -> tuple[list[tuple[str, str]], str | None]:
        inputs, outputs = io.get("inputs"), io.get("outputs")
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise ValueError("'inputs' and 'outputs' must be lists of the same length")
        call = io.get("fn_name") or fn_name
        if call:
            return [(_call_input(i), _call_output(o)) for i, o in zip(inputs, outputs)], call
        return [(_as_text(i), _as_text(o)) for i, o in zip(inputs, outputs)], None

    if "tests" in obj:
        tests = _maybe_json(obj["tests"])
        if isinstance(tests, dict):
            found, call = io_object(tests)
            return found, found[:1], call
        if isinstance(tests, list):
            call = fn_name if (fn_name or functional(tests)) else None
            if call is None and functional(tests):
                raise ValueError("functional tests need a function name (fn_name or metadata.func_name)")
            found = pairs(tests, call)
            return found, found[:1], call
        raise ValueError("'tests' must be a list of {input, output} or an {inputs, outputs} object")
    if "input_output" in obj:
        io = _maybe_json(obj["input_output"])
        if not isinstance(io, dict):
            raise ValueError("'input_output' must be an {inputs, outputs} object")
        found, call = io_object(io)
        return found, found[:1], call
    if "verification_info" in obj:
        info = _maybe_json(obj["verification_info"])
        cases = info.get("test_cases") if isinstance(info, dict) else None
        if not isinstance(cases, list):
            raise ValueError("'verification_info' must hold a 'test_cases' list")
        call = fn_name if functional(cases) else None
        found = pairs(cases, call)
        return found, found[:1], call
    if "public_test_cases" in obj:
        public_raw = _maybe_json(obj["public_test_cases"])
        private_raw = _maybe_json(obj.get("private_test_cases", []))
        if not isinstance(public_raw, list):
            raise ValueError("'public_test_cases' must be a JSON list")
        if not isinstance(private_raw, list):
            private_raw = []  # LiveCodeBench's compressed encoding: not read, the public tests stand alone
        call = fn_name if functional(public_raw + private_raw) else None
        public = pairs(public_raw, call)
        return public + pairs(private_raw, call), public, call
    raise ValueError("no tests: expected one of 'tests', 'input_output', 'verification_info', 'public_test_cases'")


def parse_record(obj: Any) -> CodeProblem:
    if not isinstance(obj, dict):
        raise ValueError("a line must be a JSON object")
    statement = next((obj[k] for k in _STATEMENT_KEYS if isinstance(obj.get(k), str) and obj[k].strip()), None)
    if statement is None:
        raise ValueError(f"no problem text: expected one of {', '.join(repr(k) for k in _STATEMENT_KEYS)}")
    metadata = _maybe_json(obj.get("metadata"))
    fn_name = obj.get("fn_name") or obj.get("func_name") or (metadata.get("func_name") if isinstance(metadata, dict) else None)
    tests, public, call = _tests_of(obj, fn_name if isinstance(fn_name, str) and fn_name else None)
    if not tests:
        raise ValueError("the problem has no tests")
    example_output = public[0][1].strip() if public else ""
    solutions = _maybe_json(obj.get("solutions"))
    reference = next((c for c in solutions if isinstance(c, str) and c.strip()), None) if isinstance(solutions, list) else None
    return CodeProblem(
        statement=statement.strip(),
        tests=tuple(tests),
        public=tuple(public),
        call=call,
        reference=reference,
        kind="file",
        facts={"example_output": example_output, "format": None, "example_size": None, "plan": None, "task": None, "kind": None},
        source="file",
    )


def load_problems(path: str | Path) -> list[CodeProblem]:
    """Every problem of a JSON Lines file (blank lines skipped); a bad line is one UserError naming it."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(
            f"env.data_path={str(path)!r} is not a file; point it at a JSON Lines problem file, or a directory with train.jsonl and test.jsonl (README.md, DeepCoder)"
        )
    problems = []
    with p.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                problem = parse_record(json.loads(line))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                raise UserError(
                    f"{p}, line {number}: not a DeepCoder problem ({exc}); see README.md, DeepCoder, for the accepted formats"
                ) from None
            problems.append(dataclasses.replace(problem, source=f"{p.name}:{number}"))
    if not problems:
        raise UserError(f"env.data_path={str(path)!r} holds no problems")
    return problems


def split_problems(problems: list[CodeProblem], share: float = HELDOUT_SHARE) -> tuple[list[CodeProblem], list[CodeProblem]]:
    """(training, held-out) problems of one file (``envs.splits.split_by_hash`` on the statements)."""
    return split_by_hash(problems, lambda p: p.statement, share)
