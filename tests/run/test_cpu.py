"""A CPU without native bf16 computes bf16 matmuls ~100x slower than float32: a run that asks for bf16 there is
warned in one line naming the settings, and every run records its CPU."""

from __future__ import annotations

from agentcollapse.run.checks import compose_run
from agentcollapse.run.cpu import bf16_fields, cpu_flags, cpu_summary, native_bf16, slow_bf16_warning

AVX2 = frozenset({"fpu", "sse2", "avx", "avx2", "fma"})
ZEN4 = AVX2 | {"avx512f", "avx512_bf16"}


def test_flags_come_from_the_first_processor_and_name_native_bf16(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx avx2 avx512f amx_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    flags = cpu_flags(info)
    assert flags == {"fpu", "avx", "avx2", "avx512f", "amx_bf16"} and native_bf16(flags) is True
    assert cpu_summary(flags) == "avx512f, native bf16 (amx_bf16)"
    assert native_bf16(AVX2) is False and cpu_summary(AVX2) == "avx2, no native bf16"
    assert cpu_flags(tmp_path / "missing") == frozenset() and native_bf16(frozenset()) is None and cpu_summary(frozenset()) == "unknown"


def test_a_bf16_run_on_a_cpu_without_it_is_warned_naming_each_setting():
    cfg = compose_run(["model=smollm2-135m", "rollout.engine=vllm", "algorithm.update_dtype=bfloat16"])
    assert bf16_fields(cfg) == ["algorithm.update_dtype=bfloat16", "rollout.vllm.dtype=bfloat16"]
    line = slow_bf16_warning(cfg, AVX2)
    assert line and "\n" not in line and "algorithm.update_dtype=bfloat16 rollout.vllm.dtype=bfloat16" in line and "float32" in line
    assert slow_bf16_warning(cfg, ZEN4) is None  # native bf16: nothing to say
    assert slow_bf16_warning(cfg, frozenset()) is None  # unknown flags (not Linux): no guess
    # the engine's dtype counts only where vLLM is the engine; the defaults compute in float32
    assert bf16_fields(compose_run(["model=smollm2-135m"])) == []
    assert slow_bf16_warning(compose_run([]), AVX2) is None


def test_this_machine_s_summary_matches_its_flags():
    flags = cpu_flags()
    if not flags:  # no /proc/cpuinfo (not Linux): nothing known, and said so
        assert cpu_summary(flags) == "unknown" and native_bf16(flags) is None
    else:
        assert cpu_summary(flags).endswith("no native bf16") == (not flags & {"avx512_bf16", "amx_bf16"})
