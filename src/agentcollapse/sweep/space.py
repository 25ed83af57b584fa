"""The search space of a sweep, read from Hydra's sweep overrides.

``hydra.sweeper.params`` and the command line use Hydra's own syntax, so a sweep file reads the same
under any sweeper:

* ``a=1,2,3``, ``a=choice(x,y)``, ``a=range(0,3)``: a discrete axis (the grid takes every value; a
  sampler draws one of them);
* ``a=interval(0,1)``, ``a=tag(log,interval(1e-4,1e-1))``, ``a=tag(int,interval(1,8))``: a continuous
  axis (samplers only; a grid cannot enumerate it);
* anything else (``a=5``): the same value for every trial.

Every discrete value is kept as its override string, so ``filter=none,rv_top_p`` and
``algorithm.kl_coef=0.0,0.01`` enumerate and resume alike.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from agentcollapse.errors import UserError

__all__ = ["Axis", "SearchSpace", "parse_space"]


@dataclass(frozen=True)
class Axis:
    """One swept key: ``choices`` (override strings) or a float/int interval."""

    key: str
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False

    @property
    def discrete(self) -> bool:
        return bool(self.choices)

    def suggest(self, trial: Any) -> str:
        """The trial's value as an override string (an enqueued trial gets its fixed value back)."""
        if self.discrete:
            return str(trial.suggest_categorical(self.key, list(self.choices)))
        if self.integer:
            return str(trial.suggest_int(self.key, int(self.low), int(self.high), log=self.log))
        return repr(float(trial.suggest_float(self.key, float(self.low), float(self.high), log=self.log)))


@dataclass(frozen=True)
class SearchSpace:
    axes: tuple[Axis, ...]
    fixed: tuple[str, ...]  # overrides every trial gets

    @property
    def keys(self) -> list[str]:
        return [a.key for a in self.axes]

    def grid(self) -> list[dict[str, str]]:
        """Every combination of the discrete axes, in the order Hydra's basic sweeper runs them."""
        continuous = [a.key for a in self.axes if not a.discrete]
        if continuous:
            raise UserError(
                f"hydra.sweeper.sampler=grid cannot enumerate the continuous axes {', '.join(continuous)}; "
                "give them values (a=1,2) or use sampler=tpe or random"
            )
        return [dict(zip(self.keys, combo)) for combo in itertools.product(*(a.choices for a in self.axes))]

    def overrides(self, params: dict[str, str]) -> list[str]:
        """The trial's overrides: the fixed ones, then one per axis."""
        return [*self.fixed, *(f"{key}={params[key]}" for key in self.keys)]


def parse_space(params: dict[str, Any] | None, arguments: list[str], config_loader: Any = None) -> SearchSpace:
    """The space of ``hydra.sweeper.params`` plus the command line's overrides (the command line wins)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    texts = [f"{k}={v}" for k, v in (params or {}).items()] + list(arguments)
    try:
        parsed = OverridesParser.create(config_loader=config_loader).parse_overrides(texts)
    except HydraException as exc:
        raise UserError(f"invalid sweep override: {' '.join(str(exc).split())}") from None
    by_key: dict[str, Axis | str] = {}  # insertion order; a later override of a key replaces it in place
    for override in parsed:
        key = override.get_key_element()
        if not override.is_sweep_override():
            by_key[key] = f"{key}={override.get_value_element_as_str()}"
        elif override.is_discrete_sweep():
            choices = tuple(override.sweep_string_iterator())
            if not choices:
                raise UserError(f"sweep axis {key} has no values")
            by_key[key] = Axis(key, choices=choices)
        elif override.is_interval_sweep():
            sweep = override.value()
            tags = set(sweep.tags)
            unknown = tags - {"log", "int"}
            if unknown:
                raise UserError(f"sweep axis {key}: unknown tag(s) {', '.join(sorted(unknown))}; use log and/or int")
            if not sweep.start < sweep.end:
                raise UserError(f"sweep axis {key}: interval({sweep.start}, {sweep.end}) is empty")
            by_key[key] = Axis(key, low=float(sweep.start), high=float(sweep.end), log="log" in tags, integer="int" in tags)
        else:
            raise UserError(f"sweep axis {key}: unsupported sweep {override.get_value_element_as_str()}")
    axes = tuple(v for v in by_key.values() if isinstance(v, Axis))
    fixed = tuple(v for v in by_key.values() if isinstance(v, str))
    return SearchSpace(axes=axes, fixed=fixed)
