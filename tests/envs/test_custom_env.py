"""Your own environment from a file outside the package (env=custom env.target=...): the example trains
through the CLI as a new user would run it, and every way a target can be wrong is one line saying so."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from agentcollapse import envs
from agentcollapse.config import EnvConfig
from agentcollapse.errors import UserError
from tests.cli.test_train_cli import agentcollapse, cli_env
from tests.conftest import TINY_OVERRIDES

EXAMPLE = Path(__file__).parents[2] / "examples" / "guess_number.py"


def test_the_example_env_loads_from_its_file_and_its_planner_solves_every_seed():
    cls = envs.load_target(f"{EXAMPLE}:GuessNumber")
    env = cls(high=16, max_turns=5)
    rng = random.Random(0)
    for seed in range(100):
        env.reset(seed)
        while not env.done:
            think, answer = env.demonstration(rng)
            assert env.grounding(think) == 1.0
            env.step(answer)
        assert env.success  # halving 1..16 needs at most 5 guesses
    assert envs.load_target(f"{EXAMPLE}:GuessNumber") is cls  # loaded once per process


def test_a_relative_file_target_is_made_absolute_where_the_command_ran(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = EnvConfig(name="custom", target="my_env.py:MyEnv")
    assert cfg.target == f"{tmp_path}/my_env.py:MyEnv"
    assert EnvConfig(name="custom", target="my_pkg.my_env:MyEnv").target == "my_pkg.my_env:MyEnv"  # a module stays a module


def _file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "my_env.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


@pytest.mark.parametrize(
    ("body", "cls", "message"),
    [
        (None, "MyEnv", "no file"),
        ("x = 1\n", "MyEnv", "defines no 'MyEnv' (its TextEnv classes: none)"),
        ("class MyEnv:\n    pass\n", "MyEnv", "MyEnv is not a subclass of agentcollapse.envs.TextEnv"),
        (
            "from agentcollapse.envs import TextEnv\nclass MyEnv(TextEnv):\n    name = 'mine'\n",
            "MyEnv",
            "MyEnv leaves TextEnv's _reset, demonstration, observation, render_grid, system_prompt to write",
        ),
        ("import math\n\nraise ValueError('no map file')\n", "MyEnv", "raised ValueError: no map file at "),
    ],
)
def test_a_wrong_target_is_one_line_naming_it(tmp_path, body, cls, message):
    path = _file(tmp_path, body) if body is not None else str(tmp_path / "missing.py")
    with pytest.raises(UserError, match="env.target=") as err:
        envs.load_target(f"{path}:{cls}")
    assert message in str(err.value) and "\n" not in str(err.value)
    if "raised" in message:
        assert str(err.value).endswith("my_env.py:3")  # the line of the user's file that raised


def test_a_module_target_that_does_not_import_says_how_to_fix_it():
    with pytest.raises(UserError, match="no module 'my_pkg' to import; put its folder on PYTHONPATH, or name the file"):
        envs.load_target("my_pkg.my_env:MyEnv")


def test_custom_needs_a_target_and_a_target_needs_custom():
    with pytest.raises(UserError, match="env=custom needs env.target="):
        EnvConfig(name="custom").validate()
    with pytest.raises(UserError, match="use it with env=custom, not env=frozenlake"):
        EnvConfig(name="frozenlake", target=f"{EXAMPLE}:GuessNumber").validate()
    with pytest.raises(UserError, match="must name a class"):
        EnvConfig(name="custom", target="examples/guess_number.py").validate()


def test_the_build_s_cache_key_follows_the_env_s_source(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / "a.py")
    shutil.copy(EXAMPLE, tmp_path / "b.py")
    (tmp_path / "b.py").write_text((tmp_path / "b.py").read_text().replace("Make your first guess", "Guess"))
    a, b = (envs.episode_identity(EnvConfig(name="custom", target=f"{tmp_path}/{f}:GuessNumber")) for f in ("a.py", "b.py"))
    assert a["source"] != b["source"] and a["kwargs"] == b["kwargs"] == {}
    assert envs.episode_identity(EnvConfig(name="frozenlake", kwargs={"slip": 0.0})) == {"name": "frozenlake", "kwargs": {"slip": 0.0}}


@pytest.mark.slow
def test_a_new_user_trains_their_own_env_from_a_file_for_two_iterations(tmp_path, cache_dir):
    shutil.copy(EXAMPLE, tmp_path / "my_env.py")  # a file of the user's, in the folder they run from
    run_dir = tmp_path / "run"
    cmd = [
        *agentcollapse(),
        "train",
        *TINY_OVERRIDES,
        "env=custom",
        "env.target=my_env.py:GuessNumber",
        "+env.kwargs.high=8",
        "trainer.max_steps=2",
        "trainer.val_every=2",
        "trainer.val_episodes=4",
        "trainer.num_threads=1",
        "diagnostics.compute_freq=1",
        f"cache_dir={cache_dir}",
        f"run_dir={run_dir}",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["last_step"] == 2
    logged = pd.read_csv(run_dir / "metrics.csv")
    rollout = logged[logged["rollout/success_rate"].notna()]
    # the proxy ran each step (the suite's 8-step warm start seldom writes the format, so its MI may stay unset)
    assert list(rollout["step"]) == [1, 2] and logged["collapse/valid_thinking_rate"].notna().sum() == 2
    assert logged["val/success_rate"].notna().sum() == 2  # steps 0 and 2
    assert f"{tmp_path}/my_env.py:GuessNumber" in (run_dir / "config.yaml").read_text()  # absolute in the record


def test_a_custom_run_without_a_target_stops_with_the_fix(tmp_path):
    proc = subprocess.run(
        [*agentcollapse(), "train", "env=custom", f"run_dir={tmp_path / 'run'}"], env=cli_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != 0
    assert "env=custom needs env.target=" in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
