"""Collapse-aware pruning and early stopping, driven by the collapse simulator's MI-proxy readings: a
run whose traces drift into a template is stopped / pruned, one that keeps reading its input is not."""

from __future__ import annotations

import optuna
import pytest

from agentcollapse.diagnostics import get_scorer, run_simulation
from agentcollapse.diagnostics.early_warning import CollapseRule
from agentcollapse.errors import UserError
from agentcollapse.lightning import CollapseEarlyStopping
from agentcollapse.sweep.pruning import COLLAPSE_HISTORY, CollapseAwarePruner, build_pruner

METRIC = "collapse_first_turn_sample/retrieval_above_chance"


@pytest.fixture(scope="module")
def readings():
    """(step, retrieval above chance) for a run drifting into template collapse and one that does not."""
    scorer = get_scorer(1.0)  # the simulator's tiny scoring model (a few seconds)
    drifting = [0.0, 0.5, 1.0, 1.0, 1.0]  # template weight per proxy step
    out = {}
    for name, weights in (("collapsing", drifting), ("healthy", [0.0] * len(drifting))):
        out[name] = [(1 + 5 * i, run_simulation(w, 1.0, seed=i, scorer=scorer)["retrieval_above_chance"]) for i, w in enumerate(weights)]
    return out


class _Module:
    def __init__(self):
        self.iteration, self.last_metrics, self.stop = 0, {}, ""

    def request_stop(self, reason):
        self.stop = reason


def _drive(callback, series):
    module = _Module()
    for step, value in series:
        module.iteration, module.last_metrics = step, {METRIC: value}
        callback.on_train_batch_end(None, module, None, None, 0)
        if module.stop:
            return step, module.stop
    return None, ""


def test_early_stopping_stops_the_collapsing_run_only(readings):
    step, reason = _drive(CollapseEarlyStopping(CollapseRule(METRIC, threshold=0.1, patience=2)), readings["collapsing"])
    assert step == 16 and reason.startswith("collapse: ") and "CollapseEarlyStopping" in reason  # two template steps in a row
    assert _drive(CollapseEarlyStopping(CollapseRule(METRIC, threshold=0.1, patience=2)), readings["healthy"]) == (None, "")


def test_early_stopping_state_survives_a_checkpoint(readings):
    first = CollapseEarlyStopping(CollapseRule(METRIC, threshold=0.1, patience=2))
    _drive(first, readings["collapsing"][:3])
    resumed = CollapseEarlyStopping(CollapseRule(METRIC, threshold=0.1, patience=2))
    resumed.load_state_dict(first.state_dict())
    assert _drive(resumed, readings["collapsing"][3:])[0] == 16


def test_collapse_pruner_prunes_on_collapse_and_falls_back_to_the_median(readings):
    study = optuna.create_study(direction="maximize")
    pruner = CollapseAwarePruner(CollapseRule(METRIC, threshold=0.1, patience=2), wrapped=None)
    for name, expect in (("healthy", False), ("collapsing", True)):
        trial = study.ask()
        trial.set_user_attr(COLLAPSE_HISTORY, [list(r) for r in readings[name]])
        assert pruner.prune(study, study.trials[-1]) is expect
        study.tell(trial, 0.5)
    assert isinstance(build_pruner({"name": "collapse"}).wrapped, optuna.pruners.MedianPruner)
    assert build_pruner({"name": "collapse", "median": False}).wrapped is None


def test_pruner_settings_are_checked():
    with pytest.raises(UserError, match="unknown hydra.sweeper.pruner.name"):
        build_pruner({"name": "hyperband"})
    with pytest.raises(UserError, match="has no setting"):
        build_pruner({"name": "median", "treshold": 0.1})


def test_the_pruner_settings_have_one_owner():
    # the plugin's hydra.sweeper.pruner node, build_pruner's keys and its defaults are PrunerSettings
    from dataclasses import fields

    from agentcollapse.sweep.pruner_settings import PrunerSettings
    from agentcollapse.sweep.pruning import KEYS
    from hydra_plugins.agentcollapse_sweeper.sweeper import PrunerConf

    assert PrunerConf is PrunerSettings and KEYS == tuple(f.name for f in fields(PrunerSettings))
    defaults = PrunerSettings()
    median = build_pruner({"name": "median"})
    assert (median._n_startup_trials, median._n_warmup_steps) == (defaults.n_startup_trials, defaults.n_warmup_steps)
