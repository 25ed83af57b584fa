"""Train one run (or a Hydra multirun sweep): ``agentcollapse train env=frozenlake algorithm=grpo``.

Every run writes a record (config.yaml, metrics.csv, summary.json) to its directory. A failure inside a
run is written to its summary as ``failed`` with the reason, so a sweep records it and goes on.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentcollapse.config import RunConfig, register_configs
from agentcollapse.errors import UserError
from agentcollapse.records import RunRecorder, read_summary

log = logging.getLogger("agentcollapse")
CONF_DIR = str(Path(__file__).resolve().parents[3] / "conf")


class Interrupted(Exception):
    """SIGTERM/SIGINT during a run: recorded as ``interrupted``, resumable from the last checkpoint."""


def to_run_config(cfg: DictConfig | RunConfig) -> RunConfig:
    if isinstance(cfg, RunConfig):
        return cfg
    try:
        obj = OmegaConf.to_object(cfg)
    except Exception as exc:  # omegaconf raises several types for missing/invalid values
        raise UserError(f"invalid config: {str(exc).splitlines()[0]}") from None
    if not isinstance(obj, RunConfig):
        raise UserError("config does not follow the run schema (compose it from conf/config.yaml)")
    return obj


def prepare_run_dir(cfg: RunConfig) -> tuple[Path, Path | None]:
    """The run directory and the checkpoint to resume from (None for a fresh run)."""
    run_dir = Path(cfg.run_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    if cfg.resume:
        if not last.exists():
            raise UserError(f"resume=true but {last} does not exist; start a fresh run (resume=false) or point run_dir at a run with a checkpoint")
        return run_dir, last
    if (run_dir / "summary.json").exists() or (run_dir / "metrics.csv").exists():
        raise UserError(f"{run_dir} already holds a run; pass resume=true to continue it or choose another run_dir")
    return run_dir, None


def run_training(cfg_in: DictConfig | RunConfig) -> dict[str, Any]:
    """Build everything from the config, train, and return the run's summary dict."""
    import lightning as L
    import torch

    cfg = to_run_config(cfg_in)
    run_dir, ckpt = prepare_run_dir(cfg)
    torch.set_num_threads(cfg.trainer.num_threads)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    recorder = RunRecorder.resume(run_dir, up_to_step=_checkpoint_iteration(ckpt)) if ckpt else RunRecorder(run_dir)
    config_yaml = OmegaConf.to_yaml(OmegaConf.structured(cfg))
    recorder.write_config(config_yaml)
    recorder.write_summary("running")
    previous_handler = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        module, trainer = build_trainer(cfg, recorder, run_dir)
        trainer.fit(module, train_dataloaders=_iterations(cfg.trainer.max_steps), ckpt_path=str(ckpt) if ckpt else None)
        reason = module.stop_reason or f"reached trainer.max_steps={cfg.trainer.max_steps}"
        recorder.write_summary("finished", reason=reason, iteration=module.iteration)
    except (KeyboardInterrupt, Interrupted):
        recorder.write_summary("interrupted", reason="interrupted (SIGINT/SIGTERM); resume with resume=true")
        raise
    except UserError as exc:
        recorder.write_summary("failed", reason=str(exc))
        raise
    except Exception as exc:
        recorder.write_summary("failed", reason=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=8))
        raise
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        _close_wandb()
    return read_summary(run_dir) or {}


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(f"signal {signum}")


def _checkpoint_iteration(ckpt: Path) -> int:
    import torch

    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        return int(state["agentcollapse"]["iteration"])
    except Exception as exc:
        raise UserError(f"checkpoint {ckpt} is corrupt or not ours ({type(exc).__name__}); delete it or start a fresh run_dir") from None


def _iterations(n: int):
    from torch.utils.data import DataLoader

    # One item per RL iteration; the module derives env seeds from its own saved iteration counter.
    return DataLoader(list(range(max(1, n))), batch_size=None, shuffle=False)


def build_trainer(cfg: RunConfig, recorder: RunRecorder, run_dir: Path):
    import lightning as L

    from agentcollapse.lightning.callbacks import IterationCheckpoint, RunRecordCallback
    from agentcollapse.lightning.module import AgentRLModule
    from agentcollapse.models.policy import load_policy

    policy = load_policy(cfg.model, cfg.env, cfg.cache_dir, seed=cfg.seed)
    module = AgentRLModule(cfg, policy)
    loggers = []
    if cfg.logger.wandb.enabled and cfg.logger.wandb.mode != "disabled":
        loggers.append(_wandb_logger(cfg, run_dir))
    callbacks = [RunRecordCallback(recorder), IterationCheckpoint(run_dir / "checkpoints", cfg.trainer.checkpoint_every)]
    callbacks += _diagnostic_callbacks(cfg)
    trainer = L.Trainer(
        accelerator=cfg.trainer.accelerator,
        devices=cfg.trainer.devices,
        strategy=cfg.trainer.strategy,
        max_epochs=1,
        logger=loggers or False,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=cfg.trainer.progress_bar,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        default_root_dir=str(run_dir),
    )
    return module, trainer


def _diagnostic_callbacks(cfg: RunConfig) -> list[Any]:
    callbacks: list[Any] = []
    if cfg.diagnostics.enabled:
        from agentcollapse.lightning.diagnostics import CollapseDiagnostics

        callbacks.append(
            CollapseDiagnostics(compute_freq=cfg.diagnostics.compute_freq, batch_size=cfg.diagnostics.score_batch_size, seed=cfg.seed)
        )
    return callbacks


def _wandb_logger(cfg: RunConfig, run_dir: Path):
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ["WANDB_MODE"] = cfg.logger.wandb.mode  # offline by default: never a login prompt
    from lightning.pytorch.loggers import WandbLogger

    return WandbLogger(
        project=cfg.logger.wandb.project,
        save_dir=str(run_dir),
        name=run_dir.name,
        mode=cfg.logger.wandb.mode,
        config=OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True),
    )


def _close_wandb() -> None:
    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.finish(quiet=True)


def main(argv: list[str] | None = None) -> None:
    """Hydra entry point; a UserError prints one line and exits 2, with no traceback."""
    import hydra

    register_configs()

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
    def _task(cfg: DictConfig) -> float:
        try:
            summary = run_training(cfg)
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            if _in_multirun():
                return float("nan")  # a sweep records the failed trial and goes on
            sys.exit(2)
        except Exception as exc:
            if not _in_multirun():
                raise
            print(f"error: trial failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return float("nan")
        peak = summary.get("peak", {})
        return float(peak.get("val/success_rate", peak.get("rollout/success_rate", float("nan"))))

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    _task()


def _in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig

    try:
        return HydraConfig.get().mode.name == "MULTIRUN"
    except ValueError:
        return False


if __name__ == "__main__":
    main()
