"""Bad input through the real entry point (``agentcollapse train ...``).

Each case must exit with status 2 and print exactly one line, ``error: ...``, that names the fix, with no
Python traceback, and must not create the run directory (nor a stray Hydra ``runs/`` dir in the working
directory). None of these cases reaches training: the checks run before the model is built.

The config cases call the entry point's ``main`` in this process (a subprocess costs ~12 s of imports
each on 2 busy cores, 5 minutes for the table); one of them also runs as the installed console script,
so the process boundary (exit status, stderr) is checked too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY_OVERRIDES

REPO = Path(__file__).resolve().parents[2]


def agentcollapse() -> list[str]:
    script = Path(sys.executable).with_name("agentcollapse")
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentcollapse.cli.main"]


def run_cli(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([*agentcollapse(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def train_args(tmp_path: Path, cache_dir: str, *extra: str) -> list[str]:
    return ["train", *TINY_OVERRIDES, f"cache_dir={cache_dir}", f"run_dir={tmp_path / 'run'}", "trainer.num_threads=1", *extra]


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out, out
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture()
def not_a_causal_lm(tmp_path) -> Path:
    path = tmp_path / "bert"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    return path


@pytest.fixture()
def regular_file(tmp_path) -> Path:
    path = tmp_path / "a_file"
    path.write_text("not a directory")
    return path


# (overrides, fragments the one-line message must contain)
CASES = {
    "unknown env (group)": (["env=no_such_env"], ["unknown env 'no_such_env'", "frozenlake", "sokoban", "env=<name>"]),
    "unknown env (name)": (["env.name=no_such_env"], ["unknown env 'no_such_env'", "frozenlake"]),
    "unknown algorithm (group)": (["algorithm=bogus"], ["unknown algorithm 'bogus'", "grpo", "ppo", "algorithm=<name>"]),
    "unknown algorithm (name)": (["algorithm.name=bogus"], ["unknown algorithm 'bogus'", "dr_grpo"]),
    "unknown filter (group)": (["filter=bogus"], ["unknown filter 'bogus'", "rv_top_p", "filter=<name>"]),
    "unknown filter (name)": (["filter.name=bogus"], ["unknown filter 'bogus'", "rv_top_p"]),
    "unknown filter metric": (["filter=rv_top_p", "filter.metric=bogus"], ["unknown filter.metric 'bogus'", "reward_variance"]),
    "unknown filter strategy": (["filter=rv_top_p", "filter.strategy=bogus"], ["unknown filter.strategy 'bogus'", "top_p", "within_group"]),
    "unknown model (group)": (["model=bogus"], ["unknown model 'bogus'", "tiny", "model=<name>"]),
    "unknown model (name)": (["model.name=bogus"], ["unknown model 'bogus'", "tiny", "model.path=<dir>"]),
    "model=hf without a path": (["model=hf"], ["model=hf needs model.path="]),
    "model.path missing": (["model.path=/no/such/model"], ["model.path=/no/such/model does not exist"]),
    "qwen preset without its weights": (
        ["model=qwen2.5-3b", "model.path=/no/such/qwen"],
        ["hf download Qwen/Qwen2.5-3B-Instruct --local-dir /no/such/qwen", "model.path=/no/such/qwen"],
    ),
    "qwen preset with no path at all (an offline node)": (
        ["model=qwen2.5-3b", "model.path=null"],
        ["needs its weights in a local directory", "nothing downloads at run time", "on a machine with network", "model.path=/models/"],
    ),
    "G=1 with GRPO": (["rollout.group_size=1"], ["algorithm=grpo", "rollout.group_size>=2", "got 1"]),
    "G=1 with a variance filter": (
        ["rollout.group_size=1", "algorithm=ppo", "filter=rv_top_p"],
        ["filter=rv_top_p", "reward_std", "group_size>=2"],  # rv_* presets rank by the within-group std
    ),
    "negative kl_coef": (["algorithm.kl_coef=-1"], ["algorithm.kl_coef=-1.0 must be a finite number >= 0"]),
    "NaN kl_coef": (["algorithm.kl_coef=nan"], ["algorithm.kl_coef=nan must be a finite number >= 0"]),
    "negative entropy_coef": (["algorithm.entropy_coef=-0.5"], ["algorithm.entropy_coef=-0.5 must be"]),
    "NaN learning rate": (["algorithm.lr=nan"], ["algorithm.lr=nan must be a finite number >= 0"]),
    "filter value out of range": (["filter=rv_top_p", "filter.value=2.0"], ["filter=rv_top_p", "(0, 1]"]),
    "zero max_steps": (["trainer.max_steps=0"], ["trainer.max_steps=0 must be an integer >= 1"]),
    "zero warm-start token budget": (["model.warm_start.batch_tokens=0"], ["model.warm_start.batch_tokens=0 must be an integer >= 1"]),
    "unknown rollout engine": (["rollout.engine=sglang"], ["unknown rollout.engine 'sglang'", "hf", "vllm"]),
    "more vllm engines than CPU cores": (
        ["rollout.engine=vllm", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=4096"],
        ["trainer.devices=4096 ranks with rollout.engine=vllm on", "a core of its own", "rollout.engine=hf"],
    ),
    "vllm KV caches that leave the trainers no memory": (
        ["rollout.engine=vllm", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "rollout.vllm.kv_cache_gib=100000"],
        ["2 vLLM engines x rollout.vllm.kv_cache_gib=100000", "lower rollout.vllm.kv_cache_gib"],
    ),
    "a tiny head size vLLM's CPU attention lacks": (
        ["rollout.engine=vllm", "model.hidden_size=64", "model.num_heads=4"],
        ["model=tiny (model.hidden_size=64 / model.num_heads=4)", "head size 16", "32", "model.num_heads", "rollout.engine=hf"],
    ),
    "negative staleness bound": (["rollout.max_staleness=-1"], ["rollout.max_staleness=-1 must be an integer >= 0"]),
    "a response floor above its budget": (
        ["rollout.max_new_tokens=8", "rollout.min_new_tokens=9"],
        ["rollout.min_new_tokens=9 is above rollout.max_new_tokens=8", "at most the budget"],
    ),
    "async rollouts without an engine to overlap": (
        ["rollout.max_staleness=1"],
        ["rollout.max_staleness=1", "rollout.engine=hf", "nothing can overlap", "set rollout.engine=vllm"],
    ),
    "async rollouts under dynamic sampling": (
        ["rollout.engine=vllm", "rollout.max_staleness=2", "algorithm=dapo"],
        ["algorithm=dapo's dynamic sampling", "algorithm.dynamic_sampling=false", "rollout.max_staleness=0"],
    ),
    "MI proxy through an engine that is off": (["diagnostics.proxy_engine=vllm"], ["diagnostics.proxy_engine=vllm", "rollout.engine=vllm"]),
    "unknown MI proxy dtype": (["diagnostics.proxy_dtype=fp8"], ["unknown diagnostics.proxy_dtype 'fp8'", "bfloat16"]),
    "unknown rollout correction": (["algorithm.rollout_correction=is"], ["unknown algorithm.rollout_correction 'is'", "token_tis"]),
    "rollout correction cap not above 1": (["algorithm.rollout_correction_cap=1"], ["algorithm.rollout_correction_cap=1.0 must be > 1"]),
    "unknown key": (["trainer.max_stepz=3"], ["unknown config key 'trainer.max_stepz'", "max_steps", "--cfg job"]),
    "unknown key appended with +": (["+trainer.max_stepz=3"], ["unknown config key 'trainer.max_stepz'", "max_steps"]),
    "unknown top-level key": (["max_steps=3"], ["unknown config key 'max_steps'", "trainer"]),
    "value of the wrong type": (["seed=abc"], ["invalid override 'seed=abc'", "Integer"]),
    "unparsable override": (["foo"], ["foo", "key=value"]),
}


def run_in_process(args: list[str], cwd: Path, capsys, monkeypatch) -> subprocess.CompletedProcess:
    """``agentcollapse <args>`` through the entry point's ``main`` in this process, as a CompletedProcess."""
    from agentcollapse.cli.main import main

    monkeypatch.chdir(cwd)
    capsys.readouterr()
    code = 0
    try:
        main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_override_is_one_clear_line(case, tmp_path, cache_dir, capsys, monkeypatch):
    overrides, fragments = CASES[case]
    proc = run_in_process(train_args(tmp_path, cache_dir, *overrides), tmp_path, capsys, monkeypatch)
    assert_one_line_error(proc, *fragments)
    assert not (tmp_path / "run").exists()  # a config error never claims the run dir
    assert not (tmp_path / "runs").exists()  # nor leaves a Hydra output dir behind


def test_a_bad_override_through_the_console_script(tmp_path, cache_dir):
    overrides, fragments = CASES["unknown key appended with +"]
    proc = run_cli(train_args(tmp_path, cache_dir, *overrides), cwd=tmp_path)
    assert_one_line_error(proc, *fragments)
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()


def test_model_path_that_is_not_a_causal_lm(tmp_path, cache_dir, not_a_causal_lm, capsys, monkeypatch):
    proc = run_in_process(train_args(tmp_path, cache_dir, f"model.path={not_a_causal_lm}"), tmp_path, capsys, monkeypatch)
    assert_one_line_error(proc, "is a BertModel, not a causal LM", "ForCausalLM")
    assert not (tmp_path / "run").exists()


def test_cache_dir_that_is_not_writable(tmp_path, regular_file, capsys, monkeypatch):
    proc = run_in_process(train_args(tmp_path, str(regular_file / "cache")), tmp_path, capsys, monkeypatch)
    assert_one_line_error(proc, f"cache directory {regular_file / 'cache'} is not writable", "cache_dir=", "AGENTCOLLAPSE_CACHE")


def test_run_dir_that_is_not_writable(tmp_path, cache_dir, regular_file, capsys, monkeypatch):
    proc = run_in_process([*train_args(tmp_path, cache_dir), f"run_dir={regular_file / 'run'}"], tmp_path, capsys, monkeypatch)
    assert_one_line_error(proc, "is not writable", "choose another run_dir")


def write_old_run(run_dir: Path, checkpoint: bytes | None = None) -> dict[str, bytes]:
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.csv").write_text("step,rollout/success_rate\n1,0.5\n")
    (run_dir / "summary.json").write_text(json.dumps({"status": "interrupted", "reason": "test", "final": {}, "peak": {}}))
    if checkpoint is not None:
        (run_dir / "checkpoints").mkdir()
        (run_dir / "checkpoints" / "last.ckpt").write_bytes(checkpoint)
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def files_of(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def test_existing_run_dir_without_resume_is_refused_and_left_alone(tmp_path, cache_dir, capsys, monkeypatch):
    before = write_old_run(tmp_path / "run")
    proc = run_in_process(train_args(tmp_path, cache_dir), tmp_path, capsys, monkeypatch)
    assert_one_line_error(proc, "already holds a run", "resume=true", "choose another run_dir")
    assert files_of(tmp_path / "run") == before  # nothing overwritten, nothing added


def test_resume_without_a_checkpoint(tmp_path, cache_dir, capsys, monkeypatch):
    before = write_old_run(tmp_path / "run")
    proc = run_in_process(train_args(tmp_path, cache_dir, "resume=true"), tmp_path, capsys, monkeypatch)
    assert_one_line_error(proc, "resume=true but", "last.ckpt does not exist")
    assert files_of(tmp_path / "run") == before


def test_corrupt_checkpoint_on_resume(tmp_path, cache_dir, capsys, monkeypatch):
    before = write_old_run(tmp_path / "run", checkpoint=os.urandom(4096))
    proc = run_in_process(train_args(tmp_path, cache_dir, "resume=true"), tmp_path, capsys, monkeypatch)
    assert_one_line_error(proc, "is corrupt or not ours", "start a fresh run_dir")
    assert files_of(tmp_path / "run") == before  # the old record is kept as it was


def test_a_one_file_checkpoint_is_not_resumed_by_fsdp(tmp_path, cache_dir, capsys, monkeypatch):
    import io

    import torch

    one_file = io.BytesIO()
    torch.save({"agentcollapse": {"iteration": 1}}, one_file)  # what a one-process run (or an export) writes
    before = write_old_run(tmp_path / "run", checkpoint=one_file.getvalue())
    proc = run_in_process(train_args(tmp_path, cache_dir, "trainer=fsdp", "resume=true"), tmp_path, capsys, monkeypatch)
    assert_one_line_error(proc, "is a one-file checkpoint, which trainer=fsdp cannot resume", "trainer=ddp")
    assert files_of(tmp_path / "run") == before


def test_make_train_with_an_unknown_env(tmp_path):
    """``make train ENV=no_such_env``: non-zero, no traceback, and frozenlake among the valid envs."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    stale = subprocess.run(["make", "-q", ".venv/.installed"], cwd=REPO, capture_output=True)
    if stale.returncode != 0:
        pytest.skip("the venv stamp is stale: `make train` would reinstall the environment first")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["make", "train", "ENV=no_such_env"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Traceback" not in out, out
    assert "frozenlake" in out and "no_such_env" in out, out
    assert not (REPO / "runs" / "no_such_env").exists()
