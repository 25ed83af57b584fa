"""The search space comes from Hydra's own sweep syntax; a grid enumerates it in the basic sweeper's order."""

import pytest

from agentcollapse.errors import UserError
from agentcollapse.sweep.space import parse_space


def test_discrete_axes_make_a_grid_and_fixed_overrides_reach_every_trial():
    space = parse_space({"filter": "none,rv_top_p", "seed": "range(0,2)"}, ["env=frozenlake", "algorithm.kl_coef=0.0,0.01"])
    assert space.keys == ["filter", "seed", "algorithm.kl_coef"]
    assert space.fixed == ("env=frozenlake",)
    grid = space.grid()
    assert len(grid) == 8 and grid[0] == {"filter": "none", "seed": "0", "algorithm.kl_coef": "0.0"}
    assert space.overrides(grid[-1]) == ["env=frozenlake", "filter=rv_top_p", "seed=1", "algorithm.kl_coef=0.01"]


def test_the_command_line_replaces_a_swept_key():
    space = parse_space({"seed": "0,1,2"}, ["seed=5"])
    assert space.keys == [] and space.fixed == ("seed=5",)
    assert space.grid() == [{}]


def test_intervals_are_for_samplers_only():
    space = parse_space({"algorithm.kl_coef": "tag(log,interval(1e-4,1e-1))", "rollout.group_size": "tag(int,interval(2,8))"}, [])
    kl, g = space.axes
    assert (kl.log, kl.integer, g.integer) == (True, False, True)
    with pytest.raises(UserError, match="cannot enumerate the continuous axes"):
        space.grid()


def test_bad_sweep_syntax_is_one_line():
    with pytest.raises(UserError, match="invalid sweep override"):
        parse_space({"seed": "choice(0,"}, [])
    with pytest.raises(UserError, match="unknown tag"):
        parse_space({"x": "tag(exp,interval(0,1))"}, [])
