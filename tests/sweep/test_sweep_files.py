"""Every sweep file under sweeps/ composes and its search space parses; the default grid is the one the
README sizes: >= 24 runs, a true no-filter arm, >= 2 seeds per cell, ranked after the first update."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import hydra_plugins.agentcollapse_sweeper.sweeper  # noqa: F401  (registers hydra/sweeper=agentcollapse)
from agentcollapse.config import CONF_DIR
from agentcollapse.config.compose import register_configs
from agentcollapse.sweep.settings import SweepSettings
from agentcollapse.sweep.space import parse_space

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"


def _compose(name: str):
    register_configs()
    with initialize_config_dir(config_dir=str(SWEEPS), version_base="1.3"):
        return compose(name, overrides=[f"hydra.searchpath=[file://{CONF_DIR}]"], return_hydra_config=True)


@pytest.mark.parametrize("name", sorted(p.stem for p in SWEEPS.glob("*.yaml")))
def test_every_sweep_file_composes(name):
    cfg = _compose(name)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("AgentCollapseSweeper")
    settings = {k: v for k, v in sweeper.items() if k not in ("_target_", "params", "pruner")}
    SweepSettings(**settings, pruner=dict(sweeper.pruner)).validate()
    space = parse_space(dict(sweeper.params), [])
    if sweeper.sampler == "grid":
        assert space.grid()


def test_the_default_grid():
    cfg = _compose("grid")
    grid = parse_space(dict(cfg.hydra.sweeper.params), []).grid()
    assert len(grid) >= 24
    assert {p["filter"] for p in grid} >= {"none"}  # filter=none: every group trains
    cells = Counter(tuple(sorted((k, v) for k, v in p.items() if k != "seed")) for p in grid)
    assert min(cells.values()) >= 2
    assert cfg.hydra.sweeper.summary_key == "final" and cfg.hydra.sweeper.objective == "val/success_rate_t1"
    assert cfg.trainer.val_every > 0 and cfg.trainer.devices == 1


@pytest.mark.parametrize("env", ["frozenlake", "sokoban", "countdown", "math"])
@pytest.mark.parametrize("name", sorted(p.stem for p in SWEEPS.glob("*.yaml")))
def test_every_sweep_file_composes_with_every_env(name, env, tmp_path):
    # The first and last trial of a grid (the fixed overrides alone for a search) make a valid run
    # config on every env; the slip study is FrozenLake's knob and is refused elsewhere, clearly.
    from agentcollapse.errors import UserError
    from agentcollapse.run.checks import compose_run

    cfg = _compose(name)
    space = parse_space(dict(cfg.hydra.sweeper.params), [])
    points = space.grid() if cfg.hydra.sweeper.sampler == "grid" else [{}]
    for point in (points[0], points[-1]):
        base = [f"hydra.searchpath=[file://{SWEEPS}]", f"env={env}", f"cache_dir={tmp_path}"]  # sweeps/filter/ arms
        overrides = [*base, *(space.overrides(point) if point else space.fixed)]
        if "env.kwargs.slip" in point and env != "frozenlake":
            with pytest.raises(UserError, match="slip"):
                compose_run(overrides)
            continue
        compose_run(overrides)
