"""Every option of every config group and every experiment composes into a valid run config
(lightning-hydra-template's ``test_configs``), and composed configs are resolved and documented."""

from __future__ import annotations

import dataclasses
import json
import shutil
import typing
from pathlib import Path

import pytest

from agentcollapse.config import RunConfig, field_help, group_options
from agentcollapse.config.compose import to_yaml
from agentcollapse.config.conf_files import CONF_DIR
from agentcollapse.errors import UserError
from agentcollapse.run.checks import compose_run as compose

GROUPS = ("env", "model", "algorithm", "filter", "callbacks", "trainer", "logger", "experiment")


def _fake_causal_lm(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    return str(tmp_path)


# env=custom is the user's own env: the example stands in for it, as a config.json does for a hub model
CUSTOM_TARGET = f"env.target={Path(__file__).parents[2] / 'examples' / 'guess_number.py'}:GuessNumber"


def _env_extra(env: str) -> list[str]:
    return [CUSTOM_TARGET] if env == "custom" else []


def _cases():
    return [(group, option) for group in GROUPS for option in group_options(group)]


def test_every_group_has_options():
    for group in GROUPS:
        assert group_options(group), f"conf/{group}/ is empty"


@pytest.mark.parametrize("group, option", _cases(), ids=[f"{g}={o}" for g, o in _cases()])
def test_every_option_composes(group, option, tmp_path, cache_dir):
    # hf and the hub presets (qwen*, llama*) need weights on disk: a config.json stands in for them
    extra = [f"model.path={_fake_causal_lm(tmp_path)}"] if group == "model" and option not in ("tiny", "smollm2-135m") else []
    extra += _env_extra(option) if group == "env" else []
    cfg = compose([f"{group}={option}", f"cache_dir={cache_dir}", *extra])
    assert isinstance(cfg, RunConfig)
    if group == "filter":
        assert cfg.filter.name == option
    if group == "callbacks":
        assert cfg.callbacks and all("_target_" in spec for spec in cfg.callbacks.values())


HUB_PRESETS = ("qwen2.5-0.5b", "qwen2.5-3b", "qwen2.5-7b", "llama3.2-3b")


@pytest.mark.parametrize("preset", HUB_PRESETS)
def test_hub_preset_without_weights_names_the_download_command(preset, tmp_path, cache_dir):
    assert preset in group_options("model")
    from agentcollapse.run import preflight

    missing = tmp_path / "no_weights"
    with pytest.raises(UserError) as err:  # the model directory is a disk check: the run's preflight, before anything heavy
        preflight(compose([f"model={preset}", f"model.path={missing}", f"cache_dir={cache_dir}"]), claim_run_dir=False)
    cfg = compose([f"model={preset}", f"model.path={_fake_causal_lm(tmp_path)}", f"cache_dir={cache_dir}"])
    line = str(err.value)
    assert "\n" not in line and f"hf download {cfg.model.hub_id} --local-dir {missing}" in line
    assert line.endswith(f"model.path={missing}")
    assert cfg.model.dtype == "bfloat16" and {"q_proj", "k_proj", "v_proj", "o_proj"} <= set(cfg.model.lora.target_modules)


@pytest.mark.parametrize("env", group_options("env"))
@pytest.mark.parametrize("filter_name", group_options("filter"))
def test_every_filter_composes_with_every_env(env, filter_name, cache_dir):
    cfg = compose([f"env={env}", f"filter={filter_name}", f"cache_dir={cache_dir}", *_env_extra(env)])
    assert cfg.env.name == env and cfg.filter.name == filter_name


def test_stored_config_holds_resolved_preset_values(cache_dir):
    cfg = compose(["algorithm=dapo", f"cache_dir={cache_dir}"])
    assert (cfg.algorithm.kl_coef, cfg.algorithm.clip_high, cfg.algorithm.loss_agg_mode) == (0.0, 0.28, "token-mean")
    text = to_yaml(cfg)
    assert "null" not in text.split("algorithm:")[1].split("filter:")[0]  # no preset field left unresolved
    assert "kl_coef: 0.0" in text


def test_an_override_beats_the_preset(cache_dir):
    assert compose(["algorithm=dapo", "algorithm.kl_coef=0.05", f"cache_dir={cache_dir}"]).algorithm.kl_coef == 0.05


def test_the_experiments_are_the_papers_main_settings(cache_dir):
    for env in ("frozenlake", "sokoban"):
        cfg = compose([f"experiment=paper_{env}", f"cache_dir={cache_dir}"])
        assert cfg.env.name == env and cfg.algorithm.name == "ppo" and cfg.filter.name == "rv_top_p"
        assert (cfg.rollout.num_prompts, cfg.rollout.group_size, cfg.filter.value) == (8, 16, 0.9)
        assert cfg.trainer.max_steps == 400 and cfg.trainer.val_temperatures == [0.5]


def _schemas(schema: type, seen: set) -> None:
    seen.add(schema)
    for hint in typing.get_type_hints(schema).values():
        if dataclasses.is_dataclass(hint) and hint not in seen:
            _schemas(hint, seen)


def test_every_config_field_has_a_one_line_help():
    seen: set = set()
    _schemas(RunConfig, seen)
    for schema in seen:
        for name, _, text in field_help(schema):
            assert text and "\n" not in text, f"{schema.__name__}.{name} has no one-line help"


def test_train_help_prints_every_group_and_field(capsys):
    from agentcollapse.cli.train import main

    main(["--help"])
    out = capsys.readouterr().out
    for key in ("filter.selection_eps", "rollout.group_size", "model.warm_start.steps", "diagnostics.compute_freq"):
        assert key in out
    assert "rv_top_p" in out and "with_grad_buckets" in out and "paper_sokoban" in out


@pytest.mark.slow
def test_a_plain_install_ships_conf_and_composes_every_config(tmp_path):
    # conf/ is one copy at the top of the repository; a non-editable `pip install .` carries it inside the
    # package (pyproject's force-include), where the installed package finds it and composes from it.
    import os
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    from agentcollapse.config import CONF_DIR

    root = Path(__file__).resolve().parents[2]
    assert Path(CONF_DIR) == root / "conf"  # this checkout (editable install) reads the top-level conf/
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(root)], check=True
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n for n in names if n.endswith(".yaml")}
    expected = {f"agentcollapse/conf/{p.relative_to(CONF_DIR)}" for p in Path(CONF_DIR).rglob("*.yaml")}
    assert expected and expected <= shipped, sorted(expected - shipped)
    assert "hydra_plugins/agentcollapse_sweeper/sweeper.py" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # the wheel's files as a non-editable install lays them out
    shutil.copy(Path(__file__).parents[2] / "examples" / "guess_number.py", tmp_path / "my_env.py")
    check = (  # PYTHONPATH comes before the editable install's src/ on sys.path
        "import agentcollapse; from pathlib import Path;"
        "from agentcollapse.config import CONF_DIR, group_options; from agentcollapse.run.checks import compose_run as compose;"
        "assert Path(CONF_DIR) == Path(agentcollapse.__file__).parent / 'conf', CONF_DIR;"
        # env=custom names the user's class (the example, copied where the command runs), which composing imports
        "[compose([f'{g}={o}', 'cache_dir=/tmp/unused', *(['env.target=my_env.py:GuessNumber'] if o == 'custom' else [])])"
        " for g in ('env', 'algorithm', 'filter', 'trainer', 'callbacks') for o in group_options(g)];"
        "print('composed', CONF_DIR)"
    )
    out = subprocess.run(
        [sys.executable, "-c", check], env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0 and f"composed {site / 'agentcollapse' / 'conf'}" in out.stdout, out.stderr[-2000:]


def test_skip_samplers_defaults_and_names_are_checked(cache_dir):
    from agentcollapse.errors import UserError

    assert compose([f"cache_dir={cache_dir}"]).diagnostics.skip_samplers == ["trajectory_nocopy"]
    assert compose(["diagnostics.skip_samplers=[]", f"cache_dir={cache_dir}"]).diagnostics.skip_samplers == []
    with pytest.raises(UserError, match="unknown diagnostics.skip_samplers.. 'turn'; valid: first_turn, trajectory, first_turn_nocopy"):
        compose(["diagnostics.skip_samplers=[turn]", f"cache_dir={cache_dir}"])


def test_fsdp_composes_and_strategies_that_cannot_work_are_one_line(cache_dir):
    cfg = compose(["trainer=fsdp", f"cache_dir={cache_dir}"])
    assert (cfg.trainer.strategy, cfg.trainer.devices, cfg.trainer.fsdp_param_dtype) == ("fsdp", 2, "auto")
    for name in ("fsdp_cpu_offload", "deepspeed", "ddp_spawn"):  # Lightning's FSDP1, DeepSpeed, spawned ranks
        with pytest.raises(UserError, match=rf"trainer.strategy='{name}' is not supported: use auto, ddp or fsdp \(FSDP2"):
            compose([f"trainer.strategy={name}", f"cache_dir={cache_dir}"])
    with pytest.raises(UserError, match="unknown trainer.fsdp_param_dtype 'fp8'; valid: auto, bfloat16, float32, none"):
        compose(["trainer=fsdp", "trainer.fsdp_param_dtype=fp8", f"cache_dir={cache_dir}"])


@pytest.mark.parametrize("env", ("countdown", "math"))
def test_env_warm_start_specialises_the_tiny_policy_only(env, cache_dir):
    """conf/warm_start/tiny_<env>.yaml is the tiny policy's; SmolLM2 on the same env keeps its own
    warm start (it once took the tiny file's 60,000 episodes: hours of fine-tuning at its size)."""
    from omegaconf import OmegaConf

    spec = OmegaConf.load(f"{CONF_DIR}/warm_start/tiny_{env}.yaml")
    tiny = compose([f"env={env}", f"cache_dir={cache_dir}"]).model.warm_start
    assert all(getattr(tiny, k) == v for k, v in spec.items())
    own = compose(["model=smollm2-135m", "env=frozenlake", f"cache_dir={cache_dir}"]).model.warm_start
    assert compose(["model=smollm2-135m", f"env={env}", f"cache_dir={cache_dir}"]).model.warm_start == own
    assert compose(["model=tiny", "env=frozenlake", f"cache_dir={cache_dir}"]).model.warm_start != tiny


@pytest.mark.parametrize("env", ("webshop", "searchqa"))
def test_smollm2_warm_start_on_long_episodes_takes_fewer_episodes_a_step(env, cache_dir):
    """conf/warm_start/smollm2-135m_<env>.yaml overrides only its keys: the model file's warm start (enabled,
    48 steps, its rate, loss on responses) stays, with fewer of the long episodes in a step (and, on SearchQA,
    a fifth of the turns random instead of half: its headroom lever)."""
    from omegaconf import OmegaConf

    spec = OmegaConf.load(f"{CONF_DIR}/warm_start/smollm2-135m_{env}.yaml")
    own = compose(["model=smollm2-135m", "env=frozenlake", f"cache_dir={cache_dir}"]).model.warm_start
    ws = compose(["model=smollm2-135m", f"env={env}", f"cache_dir={cache_dir}"]).model.warm_start
    assert set(spec) == ({"batch_size", "suboptimal_prob"} if env == "searchqa" else {"batch_size"})
    assert ws.batch_size == spec.batch_size < own.batch_size
    assert {**vars(ws), **{k: getattr(own, k) for k in spec}} == vars(own)
    if env == "searchqa":
        assert ws.suboptimal_prob == 0.2 < own.suboptimal_prob
    assert compose(["model=tiny", f"env={env}", f"cache_dir={cache_dir}"]).model.warm_start.batch_size != spec.batch_size
