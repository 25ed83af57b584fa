"""What this CPU computes natively, for a run's record and a warning before bfloat16 settings make it crawl.

Without ``avx512_bf16`` or AMX (``amx_bf16``), torch and vLLM compute bfloat16 matmuls in a slow fallback:
on an AMD EPYC with AVX2 only, 1.2 GFLOP/s against 96-119 in float32 at SmolLM2's shapes (2 threads,
``benchmarks.common.matmul_probe``), and section 13's step-0 evaluation (SmolLM2 on Sokoban, the vLLM engine in bf16)
took 2,121 s there against 195-201 s on a CPU with avx512_bf16 (10.6x). float32 is then the fast choice; a pre-registered setting that fixes
bf16 keeps it and runs on a CPU that has it.
"""

from __future__ import annotations

from pathlib import Path

from agentcollapse.config import RunConfig
from agentcollapse.run.trainer import resolve_accelerator

__all__ = ["BF16_FLAGS", "bf16_fields", "cpu_flags", "cpu_summary", "native_bf16", "slow_bf16_warning"]

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # /proc/cpuinfo names of native bf16 matmul support


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The first processor's flags (empty where the file cannot be read: not Linux)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def native_bf16(flags: frozenset[str]) -> bool | None:
    """Whether the CPU multiplies bf16 natively (None: its flags are unknown)."""
    return bool(flags & BF16_FLAGS) if flags else None


def cpu_summary(flags: frozenset[str]) -> str:
    """One line for a run's summary: the widest vector set and native bf16, e.g. ``avx2, no native bf16``."""
    if not flags:
        return "unknown"
    width = next((f for f in ("avx512f", "avx2", "avx") if f in flags), "no avx")
    bf16 = sorted(flags & BF16_FLAGS)
    return f"{width}, " + (f"native bf16 ({', '.join(bf16)})" if bf16 else "no native bf16")


def bf16_fields(cfg: RunConfig) -> list[str]:
    """The settings that make this run compute in bf16 (the vLLM engine's dtype only where it is the engine)."""
    fields = [
        ("model.dtype", cfg.model.dtype),
        ("algorithm.update_dtype", cfg.algorithm.update_dtype),
        ("diagnostics.proxy_dtype", cfg.diagnostics.proxy_dtype),
    ]
    if cfg.rollout.engine == "vllm":
        fields.append(("rollout.vllm.dtype", cfg.rollout.vllm.dtype))
    return [f"{name}=bfloat16" for name, value in fields if value == "bfloat16"]


def slow_bf16_warning(cfg: RunConfig, flags: frozenset[str] | None = None) -> str | None:
    """A one-line warning where a CPU run computes in bf16 on a CPU without native bf16 (None otherwise)."""
    flags = cpu_flags() if flags is None else flags
    if native_bf16(flags) is not False or resolve_accelerator(cfg.trainer.accelerator) != "cpu":
        return None
    fields = bf16_fields(cfg)
    if not fields:
        return None
    return (
        f"this CPU has no native bf16 (no avx512_bf16 or amx_bf16 in /proc/cpuinfo), so {' '.join(fields)} "
        "make its matmuls ~100x slower than float32 (an AVX2 EPYC: 1.2 against ~110 GFLOP/s; a SmolLM2 evaluation ~10x "
        "slower end to end); set them to float32 "
        "for speed, or run a setting that must stay bf16 (a pre-registered one) on a CPU with avx512_bf16 or AMX"
    )
