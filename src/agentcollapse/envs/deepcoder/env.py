"""DeepCoder: write a Python program; hidden tests run it in a sandbox; reward 1 when all pass.

The observation is the problem statement with its example(s). The answer (inside ``<answer>``) is
Python code, either plain or in a fenced block (```python ... ``` or ``` ... ```) inside the answer:
the first fenced block when there is one, else the whole answer. A program that does not compile as
written is tried once more with every line's leading whitespace removed (a word-level tokenizer, like
the tiny policy's, drops indentation and puts a space after each newline); one that still does not
compile, an empty answer, or one over ``MAX_CODE_CHARS`` executes no valid action (reward 0 plus the
format penalty, with ``info["reason"]``).

Reward 1 when every hidden test passes (DeepCoder's sparse outcome reward), else 0;
``partial_credit=True`` gives the share of passing tests instead (off by default). Success = all pass.
Single turn by default, as in the paper; ``max_turns > 1`` is the multi-turn agent variant: a failed
program gets the first failing example's input, expected and actual output (or the error) and tries
again, until it passes or the turns run out.

Programs run in ``agentcollapse.sandbox`` (``sandbox="strict"`` refuses to start without every layer,
``"best_effort"`` says once what is missing); the expected outputs stay in this process and outputs
are compared here. Problems: the generated family (``problems.generate_problem``) or, with
``data_path``, real problems (``problems.load_problems``): a JSON Lines file, of which a tenth
is held out (``split_problems``), or a directory holding ``train.jsonl`` and ``test.jsonl``. Held-out
(evaluation) seeds draw (``envs.splits``) from the held-out problems; training
and warm-start seeds from the rest, so an evaluation never asks a problem the policy trained on.
"""

from __future__ import annotations

import functools
import os
import random
import re
import threading
from concurrent.futures import Future
from typing import Any, ClassVar

from agentcollapse.config.env_kwargs import DeepCoderKwargs
from agentcollapse.envs import register
from agentcollapse.envs.base import SingleAnswerEnv
from agentcollapse.envs.deepcoder.problems import (
    _INPUT_FORMAT,
    _TASKS,
    DIFFICULTIES,
    STYLES,
    CodeProblem,
    generate_problem,
    load_problems,
    reference_program,
    split_problems,
    tasks_for,
)
from agentcollapse.envs.splits import is_held_out_seed
from agentcollapse.errors import UserError
from agentcollapse.sandbox import MODES, OK, Check, Limits, Sandbox, SandboxUnavailable, TestRun, outputs_match

MAX_CODE_CHARS = 20_000
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_OUTPUT_CLAIM = re.compile(r"example (?:output|answer|result) is (.+?) \.", re.IGNORECASE)
_SIZE_CLAIM = re.compile(r"example has (\d+) (?:numbers|letters|characters|values)", re.IGNORECASE)
_SANDBOXES: dict[tuple[Any, ...], Sandbox] = {}
_SANDBOX_LOCK = threading.Lock()


def extract_code(answer: str) -> str:
    """The program inside an answer: the first fenced block's body, else the whole answer, stripped."""
    if not isinstance(answer, str):
        return ""
    fenced = _FENCE.search(answer)
    return (fenced.group(1) if fenced else answer).strip()


def compilable(code: str) -> tuple[str | None, str | None]:
    """(the program to run, None) or (None, why it does not compile). Compiled here, never run here."""
    first_error = None
    for candidate in (code, "\n".join(line.lstrip() for line in code.splitlines())):
        try:
            compile(candidate, "solution.py", "exec")
            return candidate, None
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            first_error = first_error or f"{type(exc).__name__}: {getattr(exc, 'msg', exc)}"
    return None, f"the program does not compile ({first_error})"


def _problems_of(path: str) -> list[CodeProblem]:
    """The file's problems, read once per process and version of the file (a batch builds many envs)."""
    try:
        stat = os.stat(path)
    except OSError:
        return load_problems(path)  # the loader says what is wrong
    return _load_cached(os.path.realpath(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _load_cached(path: str, mtime_ns: int, size: int) -> list[CodeProblem]:
    return load_problems(path)


TRAIN_FILE, TEST_FILE = "train.jsonl", "test.jsonl"


def problem_splits(data_path: str) -> tuple[list[CodeProblem], list[CodeProblem]]:
    """(training, held-out) real problems of ``env.data_path``: a directory's ``train.jsonl`` and
    ``test.jsonl``, or one file split by ``split_problems`` (read and split once per version of the file)."""
    root = os.path.expanduser(str(data_path))
    if os.path.isdir(root):
        missing = [name for name in (TRAIN_FILE, TEST_FILE) if not os.path.isfile(os.path.join(root, name))]
        if missing:
            raise UserError(
                f"env.data_path={data_path!r} is a directory without {' and '.join(missing)}; it needs {TRAIN_FILE} "
                f"(training problems) and {TEST_FILE} (held-out ones), or name one JSON Lines file (README.md, DeepCoder)"
            )
        return _problems_of(os.path.join(root, TRAIN_FILE)), _problems_of(os.path.join(root, TEST_FILE))
    problems = _problems_of(root)
    return _split_cached(id(problems), problems)


_SPLITS: dict[int, tuple[list[CodeProblem], tuple[list[CodeProblem], list[CodeProblem]]]] = {}


def _split_cached(key: int, problems: list[CodeProblem]) -> tuple[list[CodeProblem], list[CodeProblem]]:
    """``split_problems`` of a loaded file, once per loaded list (``_problems_of`` caches the lists)."""
    with _SANDBOX_LOCK:
        hit = _SPLITS.get(key)
        if hit is None or hit[0] is not problems:  # the id of a list since freed may come back
            if len(_SPLITS) >= 8:
                _SPLITS.clear()
            hit = _SPLITS[key] = (problems, split_problems(problems))
        return hit[1]


def shared_sandbox(mode: str, limits: Limits, workers: int) -> Sandbox:
    """One probed sandbox per setting and process (every env of a batch shares it and its workers)."""
    key = (mode, limits, workers)
    with _SANDBOX_LOCK:
        sandbox = _SANDBOXES.get(key)
        if sandbox is None:
            sandbox = Sandbox(mode, limits, workers)
            try:
                sandbox.probe()
            except SandboxUnavailable as exc:
                raise UserError(str(exc)) from None
            _SANDBOXES[key] = sandbox
    return sandbox


def _clip(text: str, n: int = 200) -> str:
    text = text.rstrip()
    return text if len(text) <= n else text[:n] + " ..."


_D = DeepCoderKwargs()  # the constructor's defaults: their one source (conf/env/deepcoder.yaml composes the same)


@register("deepcoder")
class DeepCoderEnv(SingleAnswerEnv):
    name = "deepcoder"
    max_actions_per_turn = 1
    runtime_kwargs: ClassVar[frozenset[str]] = frozenset({"workers"})  # programs graded at once: the same grades, sooner
    templates: ClassVar[tuple[str, ...]] = (
        "I should read the problem carefully and write a correct program .",
        "Let me think about the input and write the code .",
        "I will write a short Python program that solves it .",
    )

    def __init__(
        self,
        difficulty: int = _D.difficulty,
        style: str = _D.style,
        num_tests: int = _D.num_tests,
        max_turns: int = _D.max_turns,
        partial_credit: bool = _D.partial_credit,
        sandbox: str = _D.sandbox,
        cpu_seconds: float = _D.cpu_seconds,
        wall_seconds: float = _D.wall_seconds,
        memory_mb: int = _D.memory_mb,
        output_bytes: int = _D.output_bytes,
        workers: int = _D.workers,
        data_path: str | None = None,
    ) -> None:
        super().__init__()
        if difficulty not in DIFFICULTIES:
            raise UserError(f"env.kwargs.difficulty={difficulty!r} must be 1, 2 or 3")
        if style not in STYLES:
            raise UserError(f"env.kwargs.style={style!r} must be one of {', '.join(STYLES)}")
        if not isinstance(num_tests, int) or not 1 <= num_tests <= 50:
            raise UserError(f"env.kwargs.num_tests={num_tests!r} must be an integer in 1..50")
        if not isinstance(max_turns, int) or max_turns < 1:
            raise UserError(f"env.kwargs.max_turns={max_turns!r} must be a positive integer (1: single turn, as in the paper)")
        if sandbox not in MODES:
            raise UserError(f"env.kwargs.sandbox={sandbox!r} must be one of {', '.join(MODES)}")
        try:
            limits = Limits(cpu_seconds=cpu_seconds, wall_seconds=wall_seconds, memory_mb=memory_mb, output_bytes=output_bytes)
            limits.validate()
        except (TypeError, ValueError) as exc:
            raise UserError(f"env.kwargs: {exc}") from None
        if not isinstance(workers, int) or workers < 1:
            raise UserError(f"env.kwargs.workers={workers!r} must be a positive integer")
        self.difficulty, self.style, self.num_tests = int(difficulty), style, int(num_tests)
        self.max_turns = self.max_actions = int(max_turns)
        self.partial_credit = bool(partial_credit)
        # real problems: (training, held-out); None: the generated family
        self.problems: list[CodeProblem] | None = None
        self.heldout_problems: list[CodeProblem] | None = None
        if data_path is not None:
            self.problems, self.heldout_problems = problem_splits(data_path)
        self.sandbox = shared_sandbox(sandbox, limits, int(workers))
        self.problem: CodeProblem | None = None
        self.feedback: str | None = None
        self.last_runs: list[TestRun] = []
        self._pending: tuple[CodeProblem, str, Future[list[TestRun]]] | None = None  # submit()'s run

    def _reset(self, seed: int) -> None:
        rng = random.Random(seed)
        if self.problems is not None and self.heldout_problems is not None:
            pool = self.heldout_problems if is_held_out_seed(seed) else self.problems
            self.problem = pool[rng.randrange(len(pool))]
        else:
            self.problem = generate_problem(rng, self.difficulty, self.style, self.num_tests)
        self.feedback = None
        self.last_runs = []
        self._pending = None

    def _require_problem(self) -> CodeProblem:
        if self.problem is None:
            raise RuntimeError("deepcoder: call reset(seed) first")
        return self.problem

    # -- one answer -----------------------------------------------------------------------
    def _act(self, words: list[str]) -> tuple[float, int, int]:
        reward, valid, success, self._reason = self.judge(self._answer_text)
        self.actions_taken += 1
        self.success = success
        self.terminal = success or self.turn >= self.max_turns
        return reward, int(valid), int(not valid)

    def judge(self, text: str) -> tuple[float, bool, bool, str | None]:
        problem = self._require_problem()
        self.last_runs = []
        code = extract_code(text)
        if not code:
            return self._fail("empty answer: no program", valid=False)
        if len(code) > MAX_CODE_CHARS:
            return self._fail(f"the program is over {MAX_CODE_CHARS} characters", valid=False)
        program, why = compilable(code)
        if program is None:
            return self._fail(why or "the program does not compile", valid=False)
        if problem.source == "generated" and code == problem.reference:
            # The generated family's reference passes its tests by construction (tests/envs/test_deepcoder.py
            # runs every one); not running it again keeps the planner's demonstrations cheap.
            self.feedback = None
            return 1.0, True, True, None
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] is problem and pending[1] == program:
            return self.score(pending[2].result())  # submit() started it: wait for it
        runs = self.sandbox.run(program, [i for i, _ in problem.tests], problem.call, not self.partial_credit, self._check())
        return self.score(runs)

    def _check(self) -> Check:
        """Whether test i's run printed its expected output: called in this process as results arrive,
        so all-or-nothing grading stops a wrong program at its first wrong output."""
        problem = self._require_problem()
        call = problem.call is not None
        return lambda i, run: outputs_match(run.stdout, problem.tests[i][1], call)

    def _job(self, text: str) -> tuple[str, list[str], str | None] | None:
        """The sandbox job ``judge(text)`` would run, or None when it runs none."""
        problem = self._require_problem()
        code = extract_code(text)
        if not code or len(code) > MAX_CODE_CHARS or (problem.source == "generated" and code == problem.reference):
            return None
        program, _ = compilable(code)
        return None if program is None else (program, [i for i, _ in problem.tests], problem.call)

    def submit(self, action_text: str) -> None:
        """Queue the program in ``action_text`` on the sandbox's ``workers`` (shared by every env of the
        process) and return at once; the next ``step`` with the same text waits for that run instead of
        running the program itself. A rollout that submits a batch's answers before stepping its envs
        one by one waits for the slowest worker rather than for the sum of the runs. Answers that run
        nothing (empty, not compiling, the generated reference) queue nothing."""
        job = self._job(action_text if isinstance(action_text, str) else "")
        if job is None:
            self._pending = None
            return
        program, inputs, call = job
        future = self.sandbox.submit(program, inputs, call, not self.partial_credit, self._check())
        self._pending = (self._require_problem(), program, future)

    @staticmethod
    def pregrade(batch: list[DeepCoderEnv], answers: list[str]) -> None:
        """Grade a batch's answers in parallel and wait for them all (``submit`` each, then every run)."""
        for env, text in zip(batch, answers):
            env.submit(text)
        for env in batch:
            if env._pending is not None:
                env._pending[2].result()

    def score(self, runs: list[TestRun]) -> tuple[float, bool, bool, str | None]:
        """(reward, valid, success, reason) of a program's runs on this problem's tests, compared here."""
        problem = self._require_problem()
        self.last_runs = runs
        call = problem.call is not None
        passed = [r.status == OK and outputs_match(r.stdout, expected, call) for r, (_, expected) in zip(runs, problem.tests)]
        n_pass = sum(passed)
        if n_pass == len(problem.tests):
            self.feedback = None
            return 1.0, True, True, None
        reward = n_pass / len(problem.tests) if self.partial_credit else 0.0
        first = passed.index(False)
        self.feedback = self._feedback_text(runs, passed)
        return reward, True, False, f"{n_pass} of {len(problem.tests)} tests pass (first failure: test {first}, {runs[first].status})"

    def _fail(self, reason: str, valid: bool) -> tuple[float, bool, bool, str | None]:
        self.feedback = f"Your answer was not run : {reason} ."
        return 0.0, valid, False, reason

    def _feedback_text(self, runs: list[TestRun], passed: list[bool]) -> str:
        problem = self._require_problem()
        for k, (inp, expected) in enumerate(problem.public):
            if k < len(passed) and not passed[k]:
                run = runs[k]
                got = (
                    _clip(run.stdout)
                    if run.status == OK
                    else f"{run.status} {_clip(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else '')}"
                )
                return f"Your program failed an example .\nInput :\n{_clip(inp)}\nExpected :\n{_clip(expected)}\nGot :\n{got}"
        return "Your program passes the examples but fails a hidden test ."

    # -- text -----------------------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        return (
            "You solve programming problems in Python . Think about the input and the example , then write the program . "
            "Answer with <think> your reasoning </think> <answer> your Python program </answer> ; "
            "a ```python fenced block inside the answer works too . Only the standard library is available ."
        )

    def render_grid(self) -> str:
        return f"Problem : {self._require_problem().statement}"

    def observation(self) -> str:
        text = self.render_grid()
        if self.feedback is not None and not self.done:
            text += f"\n{self.feedback}\nTry again ."
        return text + "\nAnswer with a Python program ."

    def grounding(self, think: str) -> float | None:
        """Share of true claims about the problem: ``example output is X`` (the first example's
        output) and ``example has N numbers|letters`` (its size, generated problems)."""
        facts = self._require_problem().facts
        said = ["".join(c.split()) for c in _OUTPUT_CLAIM.findall(think)]  # spacing aside (word-level tokenizers add it)
        claims = [c == "".join(str(facts.get("example_output", "")).split()) for c in said]
        if facts.get("example_size") is not None:
            claims += [int(n) == facts["example_size"] for n in _SIZE_CLAIM.findall(think)]
        return sum(claims) / len(claims) if claims else None

    def vocabulary_texts(self) -> list[str]:
        """Every task's statement words and program, and the retry feedback (a word-level policy reads them
        on held-out problems and in the multi-turn variant even when no demonstration showed them)."""
        texts = [
            "Your answer was not run : the program does not compile . Your program failed an example .\nInput :\nExpected :\nGot :\n"
            "Your program passes the examples but fails a hidden test . Try again . ok error timeout output_limit skipped "
            "SyntaxError NameError TypeError ValueError IndexError KeyError ZeroDivisionError AttributeError RecursionError MemoryError",
        ]
        for task in _TASKS:
            texts += [task.text, task.plan, reference_program(task, False), reference_program(task, True), " ".join(task.params)]
        return texts + [text for text in _INPUT_FORMAT.values()]

    def demonstration(self, rng: random.Random, suboptimal_prob: float = 0.0) -> tuple[str, str]:
        problem = self._require_problem()
        if problem.reference is None:
            raise UserError(
                f"deepcoder: problem {problem.source} has no reference solution (a 'solutions' list); "
                "warm-start on the generated family (unset env.data_path) or on a file with solutions"
            )
        facts = problem.facts
        parts = []
        if facts.get("format"):
            parts.append(rng.choice((f"The input : {facts['format']}", f"Reading the input : {facts['format']}")))
        if facts.get("example_size") is not None:
            unit = "numbers" if facts.get("kind") == "list" else "letters"
            parts.append(
                rng.choice((f"The example has {facts['example_size']} {unit} .", f"So the example has {facts['example_size']} {unit} ."))
            )
        parts.append(
            rng.choice((f"The example output is {facts['example_output']} .", f"And the example answer is {facts['example_output']} ."))
        )
        if facts.get("plan"):
            parts.append(rng.choice((f"I need to {facts['plan']} .", f"The method : {facts['plan']} .")))
        answer = problem.reference
        if problem.kind in {t.name for t in tasks_for(3)} and rng.random() < suboptimal_prob:
            task = next(t for t in tasks_for(3) if t.name == problem.kind)
            others = [t for t in tasks_for(self.difficulty) if t.kind == task.kind and t.name != task.name]
            if others:  # a plausible program for another task: the reasoning stays true, the answer is wrong
                answer = reference_program(rng.choice(others), problem.call is not None)
        return " ".join(parts), answer
