"""``train(cfg) -> summary``: the one entry point to a run, shared by the CLI, the sweeper, the
benchmarks and the tests.

Every run writes a record (config.yaml, metrics.csv, summary.json) to its directory. Config errors raise
UserError before the directory is touched. Once it is claimed, every way out is recorded in
summary.json first: ``finished``, ``failed`` (with the reason) or ``interrupted`` (SIGTERM/SIGINT, raised
as :class:`Interrupted`; ``resume=true run_dir=<dir>`` continues from the last checkpoint and reproduces
an uninterrupted run's metrics exactly, since per-iteration seeds come from ``seed`` and the iteration
counter, and checkpoints carry the RNG states and the callbacks' state).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from agentcollapse.config import RunConfig
from agentcollapse.config.compose import to_yaml
from agentcollapse.errors import UserError
from agentcollapse.models.cache import checked_cache_dir
from agentcollapse.models.policy import built_weights_sha256, check_causal_lm_dir
from agentcollapse.records import RunRecorder, read_summary
from agentcollapse.run import allocator, cpu
from agentcollapse.run import trainer as run_trainer
from agentcollapse.run.checks import load_run_config
from agentcollapse.run.directory import checkpoint_iteration, last_checkpoint, prepare_run_dir
from agentcollapse.run.interrupts import handling_interrupts, ignore_interrupts

__all__ = ["Interrupted", "preflight", "train"]

log = logging.getLogger("agentcollapse")


class Interrupted(BaseException):
    """SIGTERM/SIGINT during a run: recorded as ``interrupted``, resumable from the last checkpoint.

    A BaseException, as KeyboardInterrupt is: raised from the signal handler wherever the main thread
    is, it must pass through library code's ``except Exception`` (a logging handler's, for one)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        self.signum = int(signum)
        super().__init__(f"interrupted by {signal.Signals(self.signum).name}")


def launched_rank() -> int:
    """This process's global rank as the launcher set it (torchrun: RANK; Lightning's own relaunch:
    NODE_RANK and LOCAL_RANK), 0 for a plain single process."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    return int(os.environ.get("NODE_RANK", "0")) * 1000 + int(os.environ.get("LOCAL_RANK", "0"))


def preflight(cfg: RunConfig, claim_run_dir: bool = True) -> tuple[Path, Path | None] | None:
    """The checks that touch the disk, before anything heavy: the model directory (its tokenizer's chat
    template and EOS are checked where the policy loads it, ``models.policy.resolve_model_dir``, before
    any warm start) or the model cache, then (unless ``claim_run_dir`` is false) the run directory,
    returning it and the checkpoint to resume from."""
    if cfg.model.path:
        check_causal_lm_dir(cfg.model.path, cfg.model.hub_id)
    elif cfg.model.name != "hf":
        checked_cache_dir(cfg.cache_dir)
    if not claim_run_dir:
        return None
    run_dir, ckpt = prepare_run_dir(cfg.run_dir, cfg.resume)
    # FSDP writes and reads sharded checkpoints (a directory) holding every tensor; the others write one
    # file of trainable tensors. Neither loads the other's, so the kind must match the strategy.
    if ckpt is not None and ckpt.is_dir() != (cfg.trainer.strategy == "fsdp"):
        if ckpt.is_dir():
            raise UserError(
                f"{ckpt} is a sharded checkpoint (written by trainer=fsdp): resume with trainer=fsdp, or make it one file "
                f"first with `agentcollapse export-checkpoint {run_dir}`"
            )
        raise UserError(f"{ckpt} is a one-file checkpoint, which trainer=fsdp cannot resume: resume it in one process or with trainer=ddp")
    return run_dir, ckpt


def train(cfg_in: DictConfig | RunConfig) -> dict[str, Any]:
    """Build everything from the config, train, and return the run's summary dict."""
    cfg = load_run_config(cfg_in)
    cpu_flags = cpu.cpu_flags()
    if launched_rank() == 0:
        run_dir, ckpt = preflight(cfg)  # type: ignore[misc]
        if warning := cpu.slow_bf16_warning(cfg, cpu_flags):  # a warning, not an error: bf16 may be the setting under test
            log.warning(warning)
    else:  # a DDP rank Lightning relaunched: rank 0 owns the run directory and its record
        run_dir = Path(cfg.run_dir).expanduser()
        ckpt = last_checkpoint(run_dir) if cfg.resume else None

    import torch
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    import lightning as L
    from agentcollapse.run.quiet import silence_library_noise

    silence_library_noise()
    torch.set_num_threads(cfg.trainer.num_threads)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    recorder = RunRecorder.resume(run_dir, up_to_step=checkpoint_iteration(ckpt)) if ckpt else RunRecorder(run_dir)
    recorder.writes = launched_rank() == 0
    recorder.write_config(to_yaml(cfg))
    recorder.write_summary("running")
    module = None

    def raise_interrupted(signum: int, frame: Any) -> None:
        # Noted on the module too: raised inside a finalizer (``__del__``, a weakref callback) the
        # exception is swallowed, and the run must still stop, at the end of this iteration.
        if module is not None:
            module.pending_signal = signum
        raise Interrupted(signum)

    # Exits in reverse order: the handlers are restored, then wandb closes (a signal there goes to the
    # caller's handler, not to a run already recorded).
    with _wandb_closed_after(), handling_interrupts(raise_interrupted):
        try:
            module, trainer = run_trainer.build_trainer(cfg, recorder, run_dir)
            sha = built_weights_sha256(module.policy.source_dir)
            if sha is not None:
                recorder.facts["policy_weights_sha256"] = sha
            recorder.facts["allocator"] = allocator.in_use()  # the timings' context (run.allocator)
            recorder.facts["cpu"] = cpu.cpu_summary(cpu_flags)  # and the kernels' (a rebuilt warm start differs across CPUs)
            trainer.fit(module, train_dataloaders=run_trainer.iterations(cfg.trainer.max_steps), ckpt_path=str(ckpt) if ckpt else None)
            if module.pending_signal:  # stopped at the end of an iteration: several ranks together (StopTogether), or a swallowed raise
                raise Interrupted(module.pending_signal)
            reason = module.stop_reason or f"reached trainer.max_steps={cfg.trainer.max_steps}"
            recorder.write_summary("finished", reason=reason, iteration=module.iteration)
        except (KeyboardInterrupt, Interrupted, SIGTERMException) as exc:
            ignore_interrupts()  # until handling_interrupts restores the handlers before it
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
            iteration = module.iteration if module is not None else 0
            recorder.write_summary("interrupted", reason=_interrupted_reason(signum, iteration, run_dir), iteration=iteration)
            if isinstance(exc, Interrupted):
                raise
            raise Interrupted(signum) from exc
        except UserError as exc:
            recorder.write_summary("failed", reason=str(exc))
            raise
        except Exception as exc:
            recorder.write_summary("failed", reason=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=8))
            raise
        except BaseException as exc:  # SystemExit from a library, GeneratorExit, ...
            recorder.write_summary("failed", reason=f"{type(exc).__name__}: {exc}")
            raise
    return read_summary(run_dir) or {}


def _interrupted_reason(signum: int, iteration: int, run_dir: Path) -> str:
    try:
        resumable = f"resume from iteration {checkpoint_iteration(last_checkpoint(run_dir))} with resume=true run_dir={run_dir}"
    except UserError:
        resumable = "no checkpoint was written yet (trainer.checkpoint_every), so start again in a new run_dir"
    return f"interrupted by {signal.Signals(signum).name} after {iteration} iteration(s); {resumable}"


@contextmanager
def _wandb_closed_after() -> Iterator[None]:
    """A wandb run the block started (the logger's) is finished when the block ends, however it ends."""
    try:
        yield
    finally:
        if "wandb" in sys.modules:
            import wandb

            if wandb.run is not None:
                try:
                    wandb.finish()
                except Exception as exc:  # the run record is already written; a dashboard hiccup must not fail it
                    log.warning("wandb.finish failed: %s", exc)
