import json
import random
import time

import pytest

from agentcollapse import envs
from agentcollapse.config import EnvConfig
from agentcollapse.envs.deepcoder.env import compilable, extract_code
from agentcollapse.envs.deepcoder.problems import _TASKS, CodeProblem, generate_problem, load_problems, reference_program
from agentcollapse.errors import UserError
from agentcollapse.models.tokenizer import build_tokenizer
from agentcollapse.sandbox import Sandbox
from agentcollapse.seeds import TRAIN_SEED_BASE

pytestmark = pytest.mark.xdist_group("sandbox")  # with tests/sandbox/test_sandbox.py, whose leftover checks see all sandboxes


def _sum_env(**kw):
    env = envs.make("deepcoder", **kw)
    env.reset(0)
    tests = (("1 2\n", "3\n"), ("5 7\n", "12\n"), ("0 0\n", "0\n"))
    env.problem = CodeProblem("Print a + b .", tests, tests[:1], kind="file", source="test")
    return env


SUM = "a, b = map(int, input().split())\nprint(a + b)"


@pytest.mark.parametrize(
    "answer, code",
    [
        ("print(1)", "print(1)"),
        ("```python\nprint(1)\n```", "print(1)"),
        ("Here it is:\n```py\nx = 1\nprint(x)\n```\nand more", "x = 1\nprint(x)"),
        ("```\nprint(2)\n```", "print(2)"),
        ("```python\nprint(1)\n```\n```python\nprint(2)\n```", "print(1)"),
        ("  \n ", ""),
        ("", ""),
    ],
)
def test_code_is_extracted_plain_or_fenced(answer, code):
    assert extract_code(answer) == code


def test_fenced_and_plain_answers_both_pass():
    for answer in (SUM, f"```python\n{SUM}\n```", f"Sure :\n```\n{SUM}\n```"):
        _, reward, done, info = _sum_env().step(answer)
        assert reward == 1.0 and done and info["success"] and info["action_is_valid"]


def test_lost_indentation_is_tolerated_but_bad_code_is_invalid():
    program, why = compilable("n = int ( input ()) \n print ( n )")
    assert why is None and program == "n = int ( input ()) \nprint ( n )"
    program, why = compilable("def f(:\n  pass")
    assert program is None and "SyntaxError" in why
    for answer in ("", "print(", "x" * 20_001):
        env = _sum_env()
        _, reward, done, info = env.step(answer)
        assert reward == pytest.approx(env.format_penalty) and done and not info["action_is_valid"] and info["reason"]


def test_wrong_program_scores_zero_and_partial_credit_is_optional():
    wrong = "a, b = map(int, input().split())\nprint(a + b if a else 99)"  # passes 2 of 3
    _, reward, _, info = _sum_env().step(wrong)
    assert reward == 0.0 and info["action_is_valid"] and not info["success"] and "2 of 3" in info["reason"]
    _, reward, _, info = _sum_env(partial_credit=True).step(wrong)
    assert reward == pytest.approx(2 / 3) and not info["success"]


def test_a_wrong_output_stops_the_remaining_tests():
    import time

    env = _sum_env()
    program = "import time\na, b = map(int, input().split())\nif a == 0:\n    time.sleep(10)\nprint(a + b if a != 5 else 0)"
    started = time.monotonic()
    _, reward, _, info = env.step(program)
    assert reward == 0.0 and [r.status for r in env.last_runs] == ["ok", "ok", "skipped"]
    assert time.monotonic() - started < 3 and "1 of 3" in info["reason"]
    partial = _sum_env(partial_credit=True, wall_seconds=1.0)
    _, reward, _, _ = partial.step(program)  # partial credit runs them all
    assert reward == pytest.approx(1 / 3) and [r.status for r in partial.last_runs] == ["ok", "ok", "timeout"]


def test_multi_turn_shows_the_first_failing_example_and_retries():
    env = _sum_env(max_turns=2)
    obs, reward, done, _ = env.step("print(4)")
    assert reward == 0.0 and not done
    assert "Input :\n1 2" in obs and "Expected :\n3" in obs and "Got :\n4" in obs and "Try again" in obs
    obs, reward, done, info = env.step(SUM)
    assert reward == 1.0 and done and info["success"] and env.turn == 2
    env = _sum_env(max_turns=2)
    env.step("a, b = map(int, input().split())\nprint(a + b if a != 5 else 0)")  # passes the example only
    assert "passes the examples but fails a hidden test" in env.observation()
    env.step("print(")
    assert env.done and not env.success


def test_generated_problems_are_deterministic_and_follow_the_settings():
    for difficulty in (1, 2, 3):
        a = generate_problem(random.Random(5), difficulty, "mixed", 5)
        assert a == generate_problem(random.Random(5), difficulty, "mixed", 5)
        kinds = {generate_problem(random.Random(s), difficulty).kind for s in range(300)}
        assert kinds == {t.name for t in _TASKS if t.level <= difficulty}
    for style, call in (("stdio", None), ("call", "solve")):
        problems = [generate_problem(random.Random(s), 2, style, 7) for s in range(20)]
        assert all(p.call == call and len(p.tests) == 7 and p.public == p.tests[:1] for p in problems)
        assert all(p.tests[0][0].strip() in p.statement or call for p in problems)
    with pytest.raises(UserError, match="difficulty"):
        generate_problem(random.Random(0), 4)


def test_every_reference_passes_its_tests_even_through_the_tiny_tokenizer():
    problems = [generate_problem(random.Random(s), d, style) for d in (1, 2, 3) for style in ("stdio", "call") for s in range(5)]
    references = [reference_program(t, call) for t in _TASKS for call in (False, True)]
    tokenizer = build_tokenizer(references)
    jobs, decoded = [], []
    for p in problems:
        text = tokenizer.decode(tokenizer.encode(p.reference, add_special_tokens=False))
        program, why = compilable(text)
        assert why is None, (p.reference, text)
        decoded.append(program)
        jobs.append((program, [i for i, _ in p.tests], p.call))
    sandbox = Sandbox("strict", workers=2)
    try:
        for p, runs in zip(problems, sandbox.run_many(jobs)):
            env = envs.make("deepcoder")
            env.reset(0)
            env.problem = p
            assert env.score(runs)[2], (p.kind, p.call, runs)
    finally:
        sandbox.close()


def test_pregrading_a_batch_in_parallel_gives_the_same_rewards():
    from agentcollapse.envs.deepcoder.env import DeepCoderEnv

    answers = [SUM, "print(3)", "print(", "", "while True: pass", f"```python\n{SUM}\n```"]

    def batch():
        out = []
        for _ in answers:
            env = _sum_env(cpu_seconds=1.0, wall_seconds=1.5)
            out.append(env)
        return out

    sequential = [env.step(text)[1:3] for env, text in zip(batch(), answers)]
    envs_ = batch()
    DeepCoderEnv.pregrade(envs_, answers)
    assert [env._pending is not None for env in envs_] == [True, True, False, False, True, True]
    assert [env.step(text)[1:3] for env, text in zip(envs_, answers)] == sequential
    assert [r for r, _ in sequential] == [1.0, 0.0, envs_[2].format_penalty, envs_[3].format_penalty, 0.0, 1.0]


def test_submit_returns_at_once_and_the_next_step_waits_for_its_run():
    slow = "import time\ntime.sleep(0.4)\n" + SUM  # 3 tests: ~1.2 s in the sandbox
    env = _sum_env()
    started = time.monotonic()
    env.submit(slow)
    assert time.monotonic() - started < 0.3 and env._pending is not None  # queued, not run here
    _, reward, done, info = env.step(slow)
    assert (reward, done, info["success"]) == (1.0, True, True) and env._pending is None
    other = _sum_env()
    other.submit(SUM)
    assert other.step("print(0)")[1] == 0.0  # another text than the submitted one runs itself
    fresh = _sum_env()
    fresh.submit(SUM)
    fresh.reset(1)  # a new episode forgets the last one's run
    assert fresh._pending is None


def test_demonstrations_are_grounded_and_the_env_solves_with_them():
    env = envs.make("deepcoder", difficulty=3)
    rng = random.Random(0)
    for seed in range(6):
        env.reset(seed)
        think, answer = env.demonstration(rng)
        assert env.grounding(think) == 1.0
        facts = env.problem.facts
        assert f"example {'output' if 'output' in think else 'answer'} is {facts['example_output']}" in think
        assert env.step(answer)[1] == 1.0
        env.reset(seed)
        wrong = think.replace(f"is {facts['example_output']} .", "is 12345 .")
        assert env.grounding(wrong) < 1.0
        assert env.grounding(env.template_reasoning(rng)) is None
    env.reset(0)
    # word-level spacing does not matter: the tiny policy writes " edaaabd " for "edaaabd"
    out = env.problem.facts["example_output"]
    assert env.grounding(f"The example output is {' '.join(out)} .") == 1.0


def test_suboptimal_demonstrations_answer_wrongly_sometimes():
    env = envs.make("deepcoder", difficulty=2)
    rng = random.Random(1)
    differs = 0
    for seed in range(40):
        env.reset(seed)
        differs += env.demonstration(rng, suboptimal_prob=1.0)[1] != env.problem.reference
    assert differs >= 30


def _write(path, records):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


RECORDS = [
    # generic: a list of {input, output}
    {"problem": "Read a and b, print a + b.", "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "4 4\n", "output": "8\n"}]},
    # TACO / APPS: input_output as a JSON string, call style with fn_name; outputs wrapped in a list
    {
        "question": "Return the sum of xs.",
        "input_output": json.dumps({"inputs": [[[1, 2, 3]], [[5]]], "outputs": [[6], [5]], "fn_name": "total"}),
        "solutions": json.dumps(["def total(xs):\n    return sum(xs)"]),
    },
    # PrimeIntellect: verification_info.test_cases
    {
        "prompt": "Print the input reversed.",
        "verification_info": json.dumps(
            {"language": "python", "test_cases": [{"input": "abc\n", "output": "cba\n", "type": "stdin_stdout"}]}
        ),
    },
    # LiveCodeBench: public/private test cases, functional, LeetCode class, one JSON value per input line
    {
        "question_content": "Return a * b.",
        "public_test_cases": json.dumps([{"input": "2\n3", "output": "6", "testtype": "functional"}]),
        "private_test_cases": json.dumps([{"input": "4\n5", "output": "20", "testtype": "functional"}]),
        "metadata": json.dumps({"func_name": "mul"}),
    },
    "",
]
SOLUTIONS = [
    SUM,
    "def total(xs):\n    return sum(xs)",
    "print(input()[::-1])",
    "class Solution:\n    def mul(self, a, b):\n        return a * b",
]


def test_real_problem_files_load_and_grade(tmp_path):
    path = _write(tmp_path / "problems.jsonl", RECORDS)
    problems = load_problems(path)
    assert [p.call for p in problems] == [None, "total", None, "mul"]
    assert problems[1].reference == SOLUTIONS[1] and problems[0].reference is None
    assert [len(p.tests) for p in problems] == [2, 2, 1, 2] and len(problems[3].public) == 1
    assert problems[2].source == "problems.jsonl:3"
    env = envs.from_config(EnvConfig(name="deepcoder", data_path=str(path)))
    for problem, solution in zip(problems, SOLUTIONS):
        env.reset(0)
        env.problem = problem
        assert problem.statement in env.observation()
        assert env.step(solution)[1] == 1.0, problem
        env.reset(0)
        env.problem = problem
        assert env.step("print(0)")[1] == 0.0
    # a tenth (here one problem) held out: evaluation seeds ask only it, training seeds only the others
    assert len(env.heldout_problems) == 1 and len(env.problems) == 3
    assert {_asked(env, seed) for seed in range(40)} == {p.statement for p in env.heldout_problems}
    assert {_asked(env, TRAIN_SEED_BASE + seed) for seed in range(40)} == {p.statement for p in env.problems}
    again = envs.from_config(EnvConfig(name="deepcoder", data_path=str(path)))
    assert again.problems is env.problems  # read once per process (a batch builds many envs)
    _write(path, RECORDS[:1])
    assert len(envs.from_config(EnvConfig(name="deepcoder", data_path=str(path))).problems) == 1  # a changed file is read again
    env.reset(0)
    env.problem = problems[0]
    with pytest.raises(UserError, match="no reference solution"):
        env.demonstration(random.Random(0))


def _asked(env, seed):
    env.reset(seed)
    return env.problem.statement


def _numbered(n):
    return [json.dumps({"problem": f"Print {i} .", "tests": [{"input": "", "output": f"{i}\n"}]}) for i in range(n)]


def test_a_single_file_holds_out_a_tenth_whatever_its_order(tmp_path):
    lines = _numbered(30)
    first = envs.make("deepcoder", data_path=str(_write(tmp_path / "a.jsonl", lines)))
    shuffled = envs.make("deepcoder", data_path=str(_write(tmp_path / "b.jsonl", lines[::-1])))
    held = {p.statement for p in first.heldout_problems}
    assert len(held) == 3 and held == {p.statement for p in shuffled.heldout_problems}
    assert not held & {p.statement for p in first.problems} and len(first.problems) == 27
    assert {_asked(first, seed) for seed in range(100)} <= held
    assert {_asked(first, TRAIN_SEED_BASE + seed) for seed in range(100)}.isdisjoint(held)
    one = envs.make("deepcoder", data_path=str(_write(tmp_path / "one.jsonl", lines[:1])))
    assert one.problems == one.heldout_problems  # nothing to hold out apart


def test_a_directory_brings_its_own_train_and_test_files(tmp_path):
    lines = _numbered(6)
    _write(tmp_path / "train.jsonl", lines[:4])
    _write(tmp_path / "test.jsonl", lines[4:])
    env = envs.make("deepcoder", data_path=str(tmp_path))
    assert [p.statement for p in env.heldout_problems] == ["Print 4 .", "Print 5 ."] and len(env.problems) == 4
    assert {_asked(env, seed) for seed in range(30)} == {"Print 4 .", "Print 5 ."}
    assert {_asked(env, TRAIN_SEED_BASE + seed) for seed in range(60)} == {f"Print {i} ." for i in range(4)}
    (tmp_path / "test.jsonl").unlink()
    with pytest.raises(UserError, match="without test.jsonl") as err:
        envs.make("deepcoder", data_path=str(tmp_path))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{not json", "line 2"),
        (json.dumps({"tests": []}), "no problem text"),
        (json.dumps({"problem": "x"}), "no tests"),
        (json.dumps({"problem": "x", "tests": [{"input": "1"}]}), "'input' and 'output'"),
        (json.dumps({"problem": "x", "input_output": {"inputs": [1], "outputs": []}}), "same length"),
        (json.dumps([1, 2]), "JSON object"),
    ],
)
def test_a_bad_line_is_one_error_naming_it(tmp_path, bad, message):
    path = _write(tmp_path / "bad.jsonl", [RECORDS[0], bad])
    with pytest.raises(UserError, match=message) as err:
        load_problems(path)
    assert "bad.jsonl, line 2:" in str(err.value) and "\n" not in str(err.value)


def test_bad_settings_and_paths_are_one_line(tmp_path):
    for kwargs, message in (
        ({"difficulty": 4}, "difficulty"),
        ({"style": "repl"}, "style"),
        ({"sandbox": "none"}, "sandbox"),
        ({"max_turns": 0}, "max_turns"),
        ({"num_tests": 0}, "num_tests"),
        ({"cpu_seconds": -1}, "cpu_seconds"),
        ({"workers": 0}, "workers"),
        ({"data_path": str(tmp_path / "missing.jsonl")}, "not a file"),
        ({"colour": "red"}, "bad settings"),
    ):
        with pytest.raises(UserError, match=message):
            envs.make("deepcoder", **kwargs)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UserError, match="no problems"):
        envs.make("deepcoder", data_path=str(tmp_path / "empty.jsonl"))


def test_random_answers_never_raise():
    rng = random.Random(0)
    pieces = [
        "print(",
        ")",
        "```python\n",
        "```",
        "\n",
        "    ",
        "input()",
        "1",
        "x",
        "\x00",
        "\ud800",
        "漢",
        "def solve(xs):",
        " return ",
        "import os",
    ]
    for _ in range(60):
        env = envs.make("deepcoder", difficulty=2)
        env.reset(rng.randrange(1000))
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        obs, reward, done, info = env.step(text)
        assert isinstance(obs, str) and done and reward in (0.0, env.format_penalty)
        assert (reward == env.format_penalty) == (not info["action_is_valid"])
