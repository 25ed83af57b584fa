"""Build the Lightning pieces of a run from its config: the module, the callbacks (infrastructure plus
what ``callbacks=<preset>`` lists), the loggers and the Trainer."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from agentcollapse.config import RunConfig
from agentcollapse.errors import UserError
from agentcollapse.records import RunRecorder

__all__ = ["attach_to_trainer", "build_callbacks", "build_trainer", "iterations", "quiet_trainer_kwargs", "resolve_accelerator"]


def quiet_trainer_kwargs() -> dict[str, Any]:
    """Trainer settings every run and helper shares: no Lightning checkpoints, summaries or sanity steps
    (we keep our own record and checkpoint), and one log row per RL iteration."""
    return dict(
        max_epochs=1,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        log_every_n_steps=1,
        # one item per RL iteration on every rank: a DistributedSampler would split the iterations
        use_distributed_sampler=False,
    )


def iterations(n: int):
    """One DataLoader item per RL iteration; the module derives env seeds from its own saved counter."""
    from torch.utils.data import DataLoader

    return DataLoader(list(range(max(1, n))), batch_size=None, shuffle=False)


def _callback_class(name: str, target: str) -> type:
    module_name, _, attr = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError):
        raise UserError(
            f"callbacks.{name}: cannot import {target!r}; give a class path such as agentcollapse.lightning.SNRFilter"
        ) from None


def build_callbacks(cfg: RunConfig) -> list[Any]:
    """The watchers and interveners named in ``cfg.callbacks``, each built from the run's config."""
    out = []
    for name, spec in cfg.callbacks.items():
        if spec is None:
            continue
        cls = _callback_class(name, spec["_target_"])
        from_config = getattr(cls, "from_run_config", None)
        if from_config is None:
            raise UserError(f"callbacks.{name}: {spec['_target_']} has no from_run_config(cfg); see agentcollapse.lightning.hooks")
        out.append(from_config(cfg))
    return out


def resolve_accelerator(name: str) -> str:
    """The Lightning accelerator ``trainer.accelerator`` names: ``auto`` is ``gpu`` where CUDA sees a GPU
    and ``cpu`` otherwise (Lightning's own ``auto`` would also take Apple's MPS, which this code is not
    built for; the vLLM engine and FSDP's bf16 choice look at CUDA alone too). ``gpu``/``cuda`` without a
    CUDA GPU is one line here rather than Lightning's error after the policy has loaded."""
    import torch

    name = name.lower()
    if name == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    if name in ("gpu", "cuda") and not torch.cuda.is_available():
        raise UserError(
            f"trainer.accelerator={name} but torch sees no CUDA GPU (torch.cuda.is_available() is False; CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}): run it on a GPU machine, or use trainer.accelerator=auto"
        )
    return name


def build_trainer(cfg: RunConfig, recorder: RunRecorder, run_dir: Path):
    """(module, trainer) for a run whose record lives in ``run_dir``."""
    import lightning as L
    from agentcollapse.lightning import AgentRLModule, IterationCheckpoint, LineProgress, RunRecordCallback, StopTogether
    from agentcollapse.models.policy import load_policy

    accelerator = resolve_accelerator(cfg.trainer.accelerator)  # before the policy loads: a wrong device is one line
    policy = load_policy(cfg.model, cfg.env, cfg.cache_dir, seed=cfg.seed)
    policy.fold_lora_for_decoding = cfg.rollout.fold_lora
    policy.reuse_kv_across_turns = cfg.rollout.reuse_kv
    module = AgentRLModule(cfg, policy)
    loggers = [_wandb_logger(cfg, run_dir)] if cfg.logger.wandb.enabled and cfg.logger.wandb.mode != "disabled" else []
    callbacks = [RunRecordCallback(recorder), IterationCheckpoint(run_dir / "checkpoints", cfg.trainer.checkpoint_every), StopTogether()]
    callbacks += build_callbacks(cfg)
    live = cfg.trainer.progress_bar and LineProgress.is_terminal()
    if not live:
        callbacks.append(LineProgress(cfg.trainer.max_steps))
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=cfg.trainer.devices,
        num_nodes=cfg.trainer.num_nodes,
        strategy=_strategy(cfg),
        logger=loggers or False,
        callbacks=callbacks,
        enable_progress_bar=live,
        default_root_dir=str(run_dir),
        **quiet_trainer_kwargs(),
    )
    return module, trainer


def _strategy(cfg: RunConfig) -> Any:
    """Lightning's strategy for ``trainer.strategy``: ``fsdp`` is FSDP2 through ModelParallelStrategy,
    every rank a data-parallel shard (the module's ``configure_model`` shards it); sharded checkpoints."""
    if cfg.trainer.strategy != "fsdp":
        return cfg.trainer.strategy
    from lightning.pytorch.strategies import ModelParallelStrategy

    ranks = cfg.trainer.devices * cfg.trainer.num_nodes
    return ModelParallelStrategy(data_parallel_size=ranks, tensor_parallel_size=1, save_distributed_checkpoint=True)


def attach_to_trainer(module: Any, callbacks: tuple = (), steps: int = 0) -> Any:
    """Attach ``module`` to a real Lightning Trainer by fitting over ``steps`` dummy items (0 only sets up
    the optimizer and strategy), so ``module.update`` can be called directly by benchmarks and tests."""
    import lightning as L

    trainer = L.Trainer(
        logger=False, enable_progress_bar=False, accelerator="cpu", devices=1, callbacks=list(callbacks), **quiet_trainer_kwargs()
    )
    from torch.utils.data import DataLoader

    trainer.fit(module, train_dataloaders=DataLoader(list(range(steps)), batch_size=None))
    return module


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
