"""Every use of Optuna beyond its public API, in one place: an Optuna upgrade that moves one breaks here.

* Heartbeats: Optuna records them only inside ``Study.optimize``; a sweep asks and tells by itself, so it
  records them through the study's storage (``Study._storage``, ``Trial._trial_id``).
* A trial's own process (the pruner's reporter) attaches to its trial by number: ``optuna.trial.Trial``
  built from the study and the trial's id.
* An enqueued trial's values before it runs: ``FrozenTrial.system_attrs["fixed_params"]``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["attach_trial", "enqueued_params", "heartbeat", "quiet_optuna", "record_heartbeat"]


def quiet_optuna() -> None:
    """Optuna at WARNING, and without the warnings about heartbeats outside ``Study.optimize`` (experimental
    there, and "supposed to be used with Study.optimize"): we record them ourselves around ask/tell, on purpose."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def record_heartbeat(study: Any, trial: Any) -> None:
    """One heartbeat for ``trial``: from now on, a vanished worker's trial goes stale (never raises)."""
    with contextlib.suppress(Exception):
        study._storage.record_heartbeat(trial._trial_id)


@contextlib.contextmanager
def heartbeat(study: Any, trials: list[Any], every_s: float) -> Iterator[None]:
    """A heartbeat for each of ``trials`` every ``every_s`` seconds while the block runs."""
    stop = threading.Event()

    def beat() -> None:
        while True:
            for trial in trials:
                record_heartbeat(study, trial)
            if stop.wait(every_s):
                return

    thread = threading.Thread(target=beat, name="sweep-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def attach_trial(study: Any, number: int) -> Any:
    """The running trial ``number`` of ``study`` (asked for by another process), to report to and ask
    whether to prune."""
    import optuna

    storage = study._storage
    trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name), number)
    return optuna.trial.Trial(study, trial_id)


def enqueued_params(trial: Any) -> dict[str, Any]:
    """The values a waiting (enqueued) trial will run with; ``{}`` for any other."""
    return dict(trial.system_attrs.get("fixed_params", {}))
