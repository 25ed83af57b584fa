"""``agentcollapse train [overrides]``: one run, or a Hydra multirun sweep with ``-m``.

The CLI only parses, calls the layers below and prints errors: composing the config is
``agentcollapse.config``'s job; checking its names, the run and its record ``agentcollapse.run``'s. A bad
key, value or number fails in about a second with one line that names the fix (a bad name in about
two: the registries import torch, not transformers, peft or Lightning), before anything is written; ``--help`` and ``--cfg job`` import no torch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig

from agentcollapse.config import CONF_DIR
from agentcollapse.config.compose import compose, register_configs
from agentcollapse.errors import UserError

__all__ = ["main", "preflight"]


def main(argv: list[str] | None = None) -> None:
    """Hydra entry point; a UserError prints one line and exits 2, with no traceback.

    SIGTERM/SIGINT exit with 128 + the signal number after the run is recorded as ``interrupted``.
    In a multirun a failed trial is recorded and the sweep goes on; a DDP trainer is refused (each rank
    would run the whole sweep).
    """
    import hydra

    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        from agentcollapse.cli.help import train_help

        print(train_help())
        return
    register_configs()
    try:
        refuse_multirun_ddp(argv)
        argv = preflight(argv)
    except UserError as exc:
        print_error(exc)
        sys.exit(2)

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
    def _task(cfg: DictConfig) -> dict:
        """One run; returns its summary (a sweeper reads the trial's outcome from it)."""
        from agentcollapse.run import Interrupted, train

        multirun = _in_multirun()
        if multirun:
            _refuse_ddp_trial(cfg)
        try:
            summary = train(cfg)
        except Interrupted as exc:
            print(f"{exc}; the run is recorded as interrupted (see summary.json)", file=sys.stderr)
            sys.exit(128 + exc.signum)  # a sweep stops too
        except UserError as exc:
            print_error(exc)
            if multirun:
                return {"status": "failed", "reason": str(exc)}  # a sweep records the failed trial and goes on
            sys.exit(2)
        except Exception as exc:
            if not multirun:
                raise
            print(f"error: trial failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
        return summary

    # Lightning's DDP relaunches every other rank as `python <sys.argv[0]> <sys.argv[1:]>`: point it at
    # this module (runnable as a script), whose arguments are the train command's own.
    sys.argv = [str(Path(__file__).resolve()), *argv]
    if os.environ.get("LOCAL_RANK", "0") != "0":
        # A relaunched rank shares rank 0's run dir: Hydra would leave a train_ddp_process_<k>.log in
        # it, next to the one record. Its log lines go to the console only.
        sys.argv.append("hydra/job_logging=stdout")
    _task()


def print_error(exc: BaseException) -> None:
    print("error: " + " ".join(str(exc).split()), file=sys.stderr)  # always one line


def preflight(argv: list[str]) -> list[str]:
    """Compose and check a plain single run (no flags, no hydra.* overrides) before Hydra starts it.

    With an explicit ``run_dir=...`` it also checks the directory and returns argv plus
    ``hydra.run.dir=<the same>``, so Hydra's own files land in the run dir instead of a stray
    ``runs/<env>/<algorithm>/<time>`` directory.
    """
    if any(a.startswith("-") or a.lstrip("+~").startswith("hydra") for a in argv):
        return argv  # multirun, --cfg, other config dirs: Hydra's own handling
    cfg = compose(argv)  # keys, types and numbers: the config layer's, in about a second (no torch yet)
    from agentcollapse.run.checks import check

    checked = check(cfg)  # names: imports torch, not transformers or Lightning, so a bad name fails in ~2 s
    from agentcollapse.run import preflight as run_preflight

    explicit = [a.split("=", 1)[1] for a in argv if a.startswith("run_dir=")]
    run_preflight(checked, claim_run_dir=bool(explicit))
    return [*argv, f"hydra.run.dir={explicit[-1]}"] if explicit else argv


def refuse_multirun_ddp(argv: list[str]) -> None:
    """``-m`` with a DDP trainer on the command line: every rank would run the whole sweep (the sweeper
    checks the composed trial configs too, and each trial checks itself under any sweeper)."""
    if not any(a in ("-m", "--multirun") for a in argv):
        return
    from agentcollapse.sweep.runner import MULTI_PROCESS_STRATEGIES, check_single_process

    for a in argv:
        key, _, value = a.lstrip("+~").partition("=")
        choices = value.split(",")
        if key == "trainer":
            for multi in (c for c in choices if c in MULTI_PROCESS_STRATEGIES):
                check_single_process(multi, None, f" ({a})")
        if key == "trainer.strategy" and any(v.startswith(MULTI_PROCESS_STRATEGIES) for v in choices):
            check_single_process(value, None, f" ({a})")


def _refuse_ddp_trial(cfg: DictConfig) -> None:
    from agentcollapse.sweep.runner import check_single_process

    try:
        check_single_process(cfg.trainer.strategy, cfg.trainer.devices)
    except UserError as exc:
        print_error(exc)
        sys.exit(2)  # stops the sweep: every trial would do the same


def _in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig

    try:
        return HydraConfig.get().mode.name == "MULTIRUN"
    except ValueError:
        return False


if __name__ == "__main__":
    main()
