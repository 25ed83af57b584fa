"""Train one run (or a Hydra multirun sweep): ``agentcollapse train env=frozenlake algorithm=grpo``.

Every run writes a record (config.yaml, metrics.csv, summary.json) to its directory. A failure inside a
run is written to its summary as ``failed`` with the reason, so a sweep records it and goes on; SIGTERM or
SIGINT is written as ``interrupted`` and the run continues with ``resume=true run_dir=<dir>`` from its
last checkpoint, reproducing an uninterrupted run's metrics exactly (per-iteration seeds come from
``seed`` and the iteration counter, and checkpoints carry the RNG states and diagnostics state).
Bad input (an unknown name or key, a bad number, an unusable path) fails before anything is written,
with one line that names the fix.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import signal
import sys
import tempfile
import threading
import traceback
import typing
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

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        self.signum = int(signum)
        super().__init__(f"interrupted by {signal.Signals(self.signum).name}")


def to_run_config(cfg: DictConfig | RunConfig) -> RunConfig:
    if isinstance(cfg, RunConfig):
        return cfg
    try:
        obj = OmegaConf.to_object(cfg)
    except Exception as exc:  # omegaconf raises several types for missing/invalid values
        raise UserError(f"invalid config: {str(exc).splitlines()[0]}") from None
    if not isinstance(obj, RunConfig):
        raise UserError("config does not follow the run schema (compose it from conf/config.yaml)")
    unknown = _unknown_keys(cfg, RunConfig)
    if unknown:
        raise UserError(_unknown_key_message(unknown[0]))
    return obj


def _unknown_keys(node: Any, schema: type, prefix: str = "") -> list[str]:
    """Keys of ``node`` that its dataclass schema lacks (``+trainer.max_stepz=3`` is otherwise dropped silently)."""
    if not isinstance(node, DictConfig):
        return []
    hints = typing.get_type_hints(schema)
    out = []
    for key in node.keys():
        if key not in hints:
            out.append(f"{prefix}{key}")
        elif dataclasses.is_dataclass(hints[key]):
            out += _unknown_keys(node._get_node(key), hints[key], f"{prefix}{key}.")
    return out


def _schema_keys(path: str) -> list[str] | None:
    """Field names of the schema node holding ``path`` (``trainer.max_stepz`` -> TrainerConfig's), or None."""
    schema: Any = RunConfig
    for part in path.split(".")[:-1]:
        hints = typing.get_type_hints(schema)
        if part not in hints or not dataclasses.is_dataclass(hints[part]):
            return None
        schema = hints[part]
    return [f.name for f in dataclasses.fields(schema)]


def _unknown_key_message(key: str) -> str:
    parent = key.rpartition(".")[0]
    valid = _schema_keys(key)
    where = f"under {parent}" if parent else "at the top level"
    hint = f"; valid keys {where}: {', '.join(valid)}" if valid else ""
    return f"unknown config key {key!r}{hint} (check the spelling; `agentcollapse train --cfg job` prints the config)"


def _group_options(group: str) -> list[str]:
    """The choices of a config group: the YAML files under conf/<group>/."""
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def _finite(name: str, value: Any, minimum: float = 0.0) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise UserError(f"{name}={value} must be a finite number >= {minimum:g}")


def _at_least(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{name}={value} must be an integer >= {minimum}")


def validate_config(cfg: RunConfig) -> None:
    """Cheap checks of every name and number before anything heavy is imported or a run dir is claimed.

    Each failure is a UserError whose one-line message names the fix.
    """
    import numpy as np

    from agentcollapse import envs

    if not 0 <= cfg.seed <= 2**32 - 1:
        raise UserError(f"seed={cfg.seed} must be in [0, 2**32 - 1]")
    envs.make(cfg.env.name, **dict(cfg.env.kwargs))  # unknown env or bad env.kwargs -> UserError
    # Model: a known name, or a local causal LM; the cache must take the built tiny model.
    m = cfg.model
    if m.path:
        if not Path(m.path).expanduser().is_dir():
            raise UserError(f"model.path={m.path} does not exist; give a local Hugging Face model directory")
        from agentcollapse.models.policy import check_causal_lm_dir

        check_causal_lm_dir(m.path)
    else:
        models = _group_options("model")
        if m.name not in models:
            raise UserError(f"unknown model {m.name!r}; valid models: {', '.join(models)} (choose with model=<name>, or set model.path=<dir>)")
        if m.name == "hf":
            raise UserError("model=hf needs model.path=<local Hugging Face model directory>")
        _check_writable_dir(Path(cfg.cache_dir).expanduser(), "cache directory", "set cache_dir=<a writable dir> or AGENTCOLLAPSE_CACHE")
        if m.name == "tiny":
            ws = m.warm_start
            for key in ("episodes", "steps", "batch_size"):
                _at_least(f"model.warm_start.{key}", getattr(ws, key), 1)
            if ws.batch_tokens is not None:
                _at_least("model.warm_start.batch_tokens", ws.batch_tokens, 1)
    # Algorithm: a preset name, finite non-negative coefficients, settings the preset accepts.
    from agentcollapse.algorithms.presets import PRESETS

    a = cfg.algorithm
    if a.name not in PRESETS:
        raise UserError(f"unknown algorithm {a.name!r}; valid algorithms: {', '.join(sorted(PRESETS))} (choose with algorithm=<name>)")
    for key in ("kl_coef", "entropy_coef", "clip_low", "clip_high", "clip_ratio_c", "gamma", "lam", "lr", "critic_lr", "max_grad_norm"):
        _finite(f"algorithm.{key}", getattr(a, key))
    for key in ("ppo_epochs", "micro_batch_size", "max_nonfinite_steps"):
        _at_least(f"algorithm.{key}", getattr(a, key), 1)
    preset = PRESETS[a.name]
    overrides = {k: getattr(a, k) for k in preset.__dataclass_fields__ if k != "name" and getattr(a, k, None) is not None}
    try:
        algo = preset.__class__(**{**preset.__dict__, **overrides})
    except (ValueError, TypeError) as exc:
        raise UserError(f"bad algorithm settings: {exc}") from None
    # Rollout sizes; group-relative advantages need at least two rollouts per prompt.
    r = cfg.rollout
    for key in ("num_prompts", "group_size", "max_new_tokens", "generation_batch_size"):
        _at_least(f"rollout.{key}", getattr(r, key), 1)
    _finite("rollout.temperature", r.temperature)
    if r.group_size < 2 and algo.advantage in ("grpo", "dr_grpo"):
        raise UserError(f"algorithm={a.name} normalises rewards within a group: set rollout.group_size>=2 (got {r.group_size})")
    # Filter: a known filter whose metric, strategy and value make sense for this group size.
    f = cfg.filter
    filters = _group_options("filter")
    if f.name not in filters:
        raise UserError(f"unknown filter {f.name!r}; valid filters: {', '.join(filters)} (choose with filter=<name>)")
    _at_least("filter.max_empty_steps", f.max_empty_steps, 1)
    _at_least("filter.trajectory_k", f.trajectory_k, 0)
    if f.name != "none" and f.trajectory_k == 0:
        from agentcollapse.filtering import METRICS, SCALE_MODES, select_groups

        if f.metric not in METRICS:
            raise UserError(f"unknown filter.metric {f.metric!r}; valid metrics: {', '.join(METRICS)}")
        if f.loss_scale not in SCALE_MODES:
            raise UserError(f"unknown filter.loss_scale {f.loss_scale!r}; valid modes: {', '.join(SCALE_MODES)}")
        if f.metric in ("reward_variance", "reward_std", "entropy_variance") and r.group_size < 2:
            raise UserError(
                f"filter={f.name} ranks groups by {f.metric}, which needs rollout.group_size>=2 (got {r.group_size}); "
                "raise group_size or use filter=none"
            )
        value = tuple(f.value) if isinstance(f.value, (list, tuple)) else f.value
        try:  # validates strategy, top_p_mode, selection_eps and value on a dummy batch
            select_groups(np.array([1.0, 0.5]), f.strategy, value, f.include_zero, f.top_p_mode, f.selection_eps)
        except UserError as exc:
            raise UserError(f"filter={f.name}: {exc}") from None
    # Trainer and diagnostics counts.
    t = cfg.trainer
    _at_least("trainer.max_steps", t.max_steps, 1)
    _at_least("trainer.val_every", t.val_every, 0)
    _at_least("trainer.checkpoint_every", t.checkpoint_every, 0)
    _at_least("trainer.num_threads", t.num_threads, 1)
    _at_least("trainer.devices", t.devices, 1)
    if t.val_every > 0:
        _at_least("trainer.val_episodes", t.val_episodes, 1)
    _at_least("diagnostics.compute_freq", cfg.diagnostics.compute_freq, 0)
    _at_least("diagnostics.score_batch_size", cfg.diagnostics.score_batch_size, 1)


def _check_writable_dir(path: Path, what: str, fix: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UserError(f"{what} {path} is not writable ({exc.strerror or type(exc).__name__}); {fix}") from None


def prepare_run_dir(cfg: RunConfig) -> tuple[Path, Path | None]:
    """The run directory and the checkpoint to resume from (None for a fresh run).

    An existing run is never overwritten: without ``resume=true`` a directory holding a record or a
    checkpoint is an error; with it, the checkpoint must exist and load.
    """
    run_dir = Path(cfg.run_dir).expanduser()
    last = run_dir / "checkpoints" / "last.ckpt"
    if cfg.resume:
        if not last.exists():
            raise UserError(f"resume=true but {last} does not exist; start a fresh run (resume=false) or point run_dir at a run with a checkpoint")
        _checkpoint_iteration(last)  # a corrupt checkpoint fails here, before anything is written
        _check_writable_dir(run_dir, "run_dir", "choose another run_dir")
        return run_dir, last
    if any((run_dir / name).exists() for name in ("summary.json", "metrics.csv", "checkpoints/last.ckpt")):
        raise UserError(f"{run_dir} already holds a run; pass resume=true to continue it or choose another run_dir")
    _check_writable_dir(run_dir, "run_dir", "choose another run_dir")
    return run_dir, None


def run_training(cfg_in: DictConfig | RunConfig) -> dict[str, Any]:
    """Build everything from the config, train, and return the run's summary dict.

    Config errors raise UserError before the run directory is touched. Once it is claimed, every way out
    is recorded in summary.json first: ``finished``, ``failed`` (with the reason) or ``interrupted``
    (SIGTERM/SIGINT, raised as :class:`Interrupted`; resume with ``resume=true run_dir=...``).
    """
    cfg = to_run_config(cfg_in)
    validate_config(cfg)
    run_dir, ckpt = prepare_run_dir(cfg)

    import lightning as L
    import torch
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    torch.set_num_threads(cfg.trainer.num_threads)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    recorder = RunRecorder.resume(run_dir, up_to_step=_checkpoint_iteration(ckpt)) if ckpt else RunRecorder(run_dir)
    config_yaml = OmegaConf.to_yaml(OmegaConf.structured(cfg))
    recorder.write_config(config_yaml)
    recorder.write_summary("running")
    previous = {}
    if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
        previous = {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGTERM, signal.SIGINT)}
    module = None
    try:
        module, trainer = build_trainer(cfg, recorder, run_dir)
        trainer.fit(module, train_dataloaders=_iterations(cfg.trainer.max_steps), ckpt_path=str(ckpt) if ckpt else None)
        reason = module.stop_reason or f"reached trainer.max_steps={cfg.trainer.max_steps}"
        recorder.write_summary("finished", reason=reason, iteration=module.iteration)
    except (KeyboardInterrupt, Interrupted, SIGTERMException) as exc:
        if previous:
            _ignore_interrupts()  # a second Ctrl+C must not cut the record short (restored in finally)
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
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _close_wandb()
    return read_summary(run_dir) or {}


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def _ignore_interrupts() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


def _interrupted_reason(signum: int, iteration: int, run_dir: Path) -> str:
    last = run_dir / "checkpoints" / "last.ckpt"
    try:
        resumable = f"resume from iteration {_checkpoint_iteration(last)} with resume=true run_dir={run_dir}"
    except UserError:
        resumable = "no checkpoint was written yet (trainer.checkpoint_every), so start again in a new run_dir"
    return f"interrupted by {signal.Signals(signum).name} after {iteration} iteration(s); {resumable}"


def _checkpoint_iteration(ckpt: Path) -> int:
    import torch

    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=True)
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
            CollapseDiagnostics(
                compute_freq=cfg.diagnostics.compute_freq,
                batch_size=cfg.diagnostics.score_batch_size,
                seed=cfg.seed,
                trajectory_samples=cfg.diagnostics.trajectory_samples or None,
            )
        )
    if cfg.diagnostics.grad_buckets_every > 0:
        from agentcollapse.lightning.grad_buckets import GradBucketAnalysis

        callbacks.append(GradBucketAnalysis(every=cfg.diagnostics.grad_buckets_every))
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
            try:
                wandb.finish()
            except Exception as exc:  # the run record is already written; a dashboard hiccup must not fail it
                log.warning("wandb.finish failed: %s", exc)


def main(argv: list[str] | None = None) -> None:
    """Hydra entry point; a UserError prints one line and exits 2, with no traceback.

    A plain single run is composed and checked here first (see :func:`preflight`), so a bad override,
    name or number fails in about a second, before Hydra or the run touch any directory. SIGTERM/SIGINT
    exit with 128 + the signal number after the run is recorded as ``interrupted``.
    """
    import hydra

    register_configs()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv = preflight(argv)
    except UserError as exc:
        _print_error(exc)
        sys.exit(2)

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
    def _task(cfg: DictConfig) -> float:
        try:
            summary = run_training(cfg)
        except Interrupted as exc:
            print(f"{exc}; the run is recorded as interrupted (see summary.json)", file=sys.stderr)
            sys.exit(128 + exc.signum)  # a sweep stops too
        except UserError as exc:
            _print_error(exc)
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

    sys.argv = [sys.argv[0], *argv]
    _task()


def _print_error(exc: BaseException) -> None:
    print("error: " + " ".join(str(exc).split()), file=sys.stderr)  # always one line


def preflight(argv: list[str]) -> list[str]:
    """Compose and check a plain single run (no flags, no hydra.* overrides) before Hydra starts it.

    Raises UserError with a one-line message for what Hydra would report at length (an unknown config
    group option or key, a value of the wrong type) and for everything :func:`validate_config` and
    :func:`prepare_run_dir` reject. With an explicit ``run_dir=...`` it returns argv plus
    ``hydra.run.dir=<the same>``, so Hydra's own files land in the run dir instead of a stray
    ``runs/<env>/<algorithm>/<time>`` directory.
    """
    if any(a.startswith("-") or a.lstrip("+~").startswith("hydra") for a in argv):
        return argv  # multirun, --cfg, --help, other config dirs: Hydra's own handling
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    explicit = [a.split("=", 1)[1] for a in argv if a.startswith("run_dir=")]
    overrides = argv if explicit else ["run_dir=unused", *argv]  # the default run_dir is Hydra's output dir
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            composed = compose("config", overrides=overrides)
    except HydraException as exc:
        raise UserError(_hydra_message(exc)) from None
    except OmegaConfBaseException as exc:
        raise UserError(f"invalid config: {str(exc).splitlines()[0]}") from None
    cfg = to_run_config(composed)
    validate_config(cfg)
    if not explicit:
        return argv
    prepare_run_dir(cfg)
    return [*argv, f"hydra.run.dir={explicit[-1]}"]


def _hydra_message(exc: BaseException) -> str:
    """One line, naming the fix, for a Hydra composition error."""
    from hydra.errors import MissingConfigException, OverrideParseException

    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    found = re.search(r"Could not find '([^'/]+)/([^']+)'", text)
    if isinstance(exc, MissingConfigException) and found:
        group, name = found.groups()
        options = _group_options(group)
        valid = f"valid {group}s: {', '.join(options)}" if options else f"no {group} is defined under conf/{group}/"
        how = f"choose with {group}=<name>" + (", or `make train ENV=<name>`" if group == "env" else "")
        return f"unknown {group} {name!r}; {valid} ({how})"
    key = re.match(r"Could not override '([^']+)'", text)
    cause = exc.__cause__
    if key and cause is not None and type(cause).__name__ in ("ConfigAttributeError", "ConfigKeyError"):
        return _unknown_key_message(key.group(1))
    merging = re.match(r"Error merging override (.+)", text)
    if merging and cause is not None:
        return f"invalid override {merging.group(1).strip()!r}: {str(cause).splitlines()[0]}"
    if isinstance(exc, OverrideParseException):
        return f"{' '.join(lines[:2])}; overrides look like key=value (see `agentcollapse train --help`)"
    return " ".join(lines[:2]) or type(exc).__name__


def _in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig

    try:
        return HydraConfig.get().mode.name == "MULTIRUN"
    except ValueError:
        return False


if __name__ == "__main__":
    main()
