"""``hydra/sweeper=agentcollapse``: a Hydra sweeper whose sweep is an Optuna study on disk.

Select it in a sweep file (``sweeps/grid.yaml``)::

    defaults:
      - config
      - override hydra/sweeper: agentcollapse
      - _self_
    hydra:
      sweeper:
        sampler: grid          # grid | tpe | random
        params:
          algorithm.kl_coef: 0.0,0.01
          seed: 0,1

The work is in :mod:`agentcollapse.sweep` (this module only holds the config and the launcher), so it
is tested like the rest of the package; the sweeper's settings and their help are
:class:`agentcollapse.sweep.settings.SweepSettings`. ``study.db`` and ``trials.csv`` land in ``hydra.sweep.dir``
beside one run directory per trial; running the same command on the same ``hydra.sweep.dir`` resumes.
"""

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from agentcollapse.sweep.pruner_settings import PrunerSettings
from agentcollapse.sweep.settings import SweepSettings

PrunerConf = PrunerSettings  # hydra.sweeper.pruner: its settings, names and defaults are the package's


@dataclass
class AgentCollapseSweeperConf(SweepSettings):
    """``hydra.sweeper``: every field of :class:`~agentcollapse.sweep.settings.SweepSettings` (each with its
    help there), the pruner's settings and the search space."""

    _target_: str = "hydra_plugins.agentcollapse_sweeper.sweeper.AgentCollapseSweeper"
    pruner: PrunerConf = field(default_factory=PrunerConf)  # hydra.sweeper.pruner.name=collapse hydra.sweeper.pruner.threshold=0.1 ...
    params: Optional[dict[str, str]] = None  # the search space: key: choices or interval(...), as Hydra's sweepers


ConfigStore.instance().store(group="hydra/sweeper", name="agentcollapse", node=AgentCollapseSweeperConf, provider="agentcollapse")


class AgentCollapseSweeper(Sweeper):
    def __init__(self, params: Optional[dict[str, str]] = None, pruner: Any = None, **settings: Any) -> None:
        super().__init__()
        self.params = dict(params or {})
        pruner = OmegaConf.to_container(pruner, resolve=True) if isinstance(pruner, DictConfig) else pruner
        self.settings = {**settings, "pruner": dict(pruner or {"name": "none"})}
        self.hydra_context: Any = None
        self.config: Optional[DictConfig] = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        import sys

        from agentcollapse.errors import UserError
        from agentcollapse.sweep.runner import run_sweep

        try:
            return run_sweep(self.hydra_context, self.config, self.launcher, self.params, SweepSettings(**self.settings), list(arguments))
        except UserError as exc:
            print("error: " + " ".join(str(exc).split()), file=sys.stderr)
            sys.exit(2)
