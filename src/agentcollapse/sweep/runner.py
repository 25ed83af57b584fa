"""The sweeper's loop: ask the study for trials, launch them with Hydra's launcher, tell the outcomes.

Called by the Hydra plugin (``hydra_plugins.agentcollapse_sweeper``), which only holds the config and
the launcher. Each trial is an ordinary run whose record lands in ``<sweep dir>/<trial number>/``;
``trials.csv`` and a progress line are updated after every trial, and the sweep's own ``multirun.yaml``
sits beside them as under Hydra's basic sweeper.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from agentcollapse.errors import UserError
from agentcollapse.run.interrupts import handling_interrupts, ignore_interrupts
from agentcollapse.sweep.outcome import Outcome
from agentcollapse.sweep.settings import SweepSettings
from agentcollapse.sweep.space import SearchSpace, parse_space
from agentcollapse.sweep.storage import without_password
from agentcollapse.sweep.study import SweepStudy

__all__ = ["check_single_process", "run_sweep"]

TRIAL_CALLBACK = "sweep_trial"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


MULTI_PROCESS_STRATEGIES = ("ddp", "fsdp")  # and Lightning's names that start with them (ddp_spawn, ...)


def check_single_process(strategy: Any, devices: Any, where: str = "") -> None:
    """A sweep launches its trials as one process each: a DDP or FSDP trial would start ranks that each
    run the whole sweep. Refuse it before anything runs."""
    if str(strategy).startswith(MULTI_PROCESS_STRATEGIES) or (isinstance(devices, int) and devices > 1):
        raise UserError(
            f"a multirun sweep cannot train with trainer.strategy={strategy} trainer.devices={devices}{where}: every rank "
            "would run the whole sweep. Sweep with trainer.devices=1 (the default trainer), or run each multi-process job "
            "as its own `agentcollapse train trainer=ddp ...` (or trainer=fsdp)"
        )


def _refuse_ddp(hydra_context: Any, config: Any, space: SearchSpace) -> None:
    loader = hydra_context.config_loader
    cases = [list(space.fixed)]
    for axis in space.axes:
        if axis.discrete and axis.key.lstrip("+~").startswith("trainer"):
            cases += [[*space.fixed, f"{axis.key}={choice}"] for choice in axis.choices]
    for overrides in cases:
        try:
            cfg = loader.load_sweep_config(config, overrides)
        except Exception as exc:  # composition errors surface, one line, when the trial runs
            if any(name in " ".join(overrides) for name in MULTI_PROCESS_STRATEGIES):
                raise UserError(f"cannot compose the sweep's trial config: {' '.join(str(exc).split())[:300]}") from None
            continue
        check_single_process(
            OmegaConf.select(cfg, "trainer.strategy"), OmegaConf.select(cfg, "trainer.devices"), f" ({' '.join(overrides)})"
        )


def _trial_overrides(study: SweepStudy, space: SearchSpace, trial: Any, params: dict[str, str]) -> list[str]:
    # The shared step-0 evaluation goes first, so that a `trainer.shared_eval_dir=null` on the command line wins.
    shared = f"trainer.shared_eval_dir='{(study.sweep_dir / 'shared_eval').resolve()}'"
    out = [shared, *space.overrides(params), f"hydra.sweep.subdir={study.run_subdir(trial)}"]
    if study.run_subdir(trial) != str(trial.number):
        out.append("resume=true")  # it continues an interrupted trial from that run's last checkpoint
    if study.settings.pruner.get("name", "none") != "none":
        out += [  # the trial's config is saved: the URL without its password, which the trial takes from the environment
            f"sweep.storage='{without_password(study.storage_url)}'",
            f"sweep.study_name={study.settings.study_name}",
            f"sweep.trial={trial.number}",
            f"+callbacks.{TRIAL_CALLBACK}={{_target_:agentcollapse.sweep.pruning.TrialReporter}}",
        ]
    return out


def _stop_the_sweep(signum: int, frame: Any) -> None:
    """SIGINT/SIGTERM in the sweep's own code (between trials) stop it as they stop a trial: a SystemExit
    the loop records, where Python's defaults would leave a traceback (SIGINT) or no record at all
    (SIGTERM). A trial's run installs its own handlers and restores this one."""
    raise SystemExit(128 + signum)


def _outcome(study: SweepStudy, trial: Any, result: Any) -> Outcome:
    run_dir = study.run_dir(trial)
    hydra_cfg = getattr(result, "hydra_cfg", None)
    if hydra_cfg is not None:
        run_dir = Path(str(OmegaConf.select(hydra_cfg, "hydra.runtime.output_dir") or run_dir))
    error = ""
    status = getattr(getattr(result, "status", None), "name", "COMPLETED")
    if status == "FAILED":
        exc = getattr(result, "_return_value", None)
        error = f"{type(exc).__name__}: {exc}" if exc is not None else "the task failed"
    else:
        value = getattr(result, "_return_value", None)
        if isinstance(value, dict) and value.get("status") == "failed" and value.get("reason"):
            error = str(value["reason"])  # a config error in the trial leaves no record; the task says why
    outcome = Outcome.from_run(run_dir, study.settings, error=error)
    if outcome.status == "finished" and study.pruned(trial.number):
        outcome.status = "pruned"
    return outcome


def run_sweep(
    hydra_context: Any, config: Any, launcher: Any, params: dict[str, Any] | None, settings: SweepSettings, arguments: list[str]
) -> list[Any]:
    """Run (or resume) the sweep in ``hydra.sweep.dir``; return the launcher's results."""
    settings.validate()  # before anything is written: multirun.yaml would keep a storage URL's password
    space = parse_space(params, arguments, hydra_context.config_loader)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    _refuse_ddp(hydra_context, config, space)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")
    # Hydra's launcher logs every job's full override list; the start line above names its axes instead
    logging.getLogger("hydra._internal.core_plugins.basic_launcher").setLevel(logging.WARNING)
    study = SweepStudy(settings, sweep_dir, space).open()
    study.report.write_csv()
    _say(study.report.start_line())
    returns: list[Any] = []
    with handling_interrupts(_stop_the_sweep):
        while True:
            batch: list[tuple[Any, dict[str, str]]] = []
            told: set[int] = set()
            try:
                batch = study.ask_batch(settings.batch_size)
                if not batch:
                    break
                overrides = [_trial_overrides(study, space, trial, params) for trial, params in batch]
                for trial, params in batch:
                    axes = " ".join(f"{k}={v}" for k, v in params.items()) or "(no axes)"
                    again = (
                        f", continuing {study.run_dir(trial)} from its last checkpoint"
                        if study.run_subdir(trial) != str(trial.number)
                        else ""
                    )
                    _say(f"[sweep {study.worker}] trial {trial.number} starts: {axes}{again}")
                with study.heartbeat([trial for trial, _ in batch]):
                    results = launcher.launch(overrides, initial_job_idx=batch[0][0].number)
                for (trial, _), result in zip(batch, results):
                    outcome = _outcome(study, trial, result)
                    study.tell(trial, outcome)
                    told.add(trial.number)
                    _say(study.report.progress_line(trial, outcome))
                study.report.write_csv()
            except BaseException as exc:  # Ctrl+C / SIGTERM in a trial or between them (SystemExit), or the launcher broke
                interrupted = isinstance(exc, (KeyboardInterrupt, SystemExit))
                ignore_interrupts()  # restored on the way out (handling_interrupts)
                for trial, _ in batch:
                    if trial.number in told:
                        continue
                    outcome = Outcome.from_run(study.run_dir(trial), settings, error=f"{type(exc).__name__}: {exc}")
                    if interrupted and outcome.status in ("failed", "interrupted"):
                        outcome.status = "interrupted"  # runs again when the sweep resumes
                    study.tell(trial, outcome)
                    _say(study.report.progress_line(trial, outcome))
                study.report.write_csv()
                if interrupted:
                    _say(f"[sweep {study.worker}] interrupted; resume with the same command and hydra.sweep.dir={sweep_dir}")
                raise
            returns.append(results)
    study.report.write_csv()
    _say(study.report.end_line())
    counts = study.report.counts()
    if counts["finished"] + counts["pruned"] == 0 and counts["failed"] > 0:
        raise UserError(f"every trial failed (reasons in {sweep_dir / 'trials.csv'})")
    return returns
