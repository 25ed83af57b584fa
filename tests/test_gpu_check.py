"""scripts.gpu_check (`make gpu-check`) is harmless without CUDA, and plans its phases from the GPUs seen."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def gpu_check():
    from scripts import gpu_check  # the repository root is on pytest's path

    return gpu_check


def test_without_cuda_it_says_so_and_exits_0(gpu_check, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "needs a CUDA GPU" in out[0]


def test_phases_follow_the_gpu_count_and_the_qwen_path(gpu_check):
    from agentcollapse.config import group_options

    one, notes = gpu_check.phases(1)
    assert [label for label, _ in one] == ["smollm2 1 GPU", "smollm2 1 GPU vllm"] and any(n.startswith("ddp, fsdp: skipped") for n in notes)
    assert ["trainer.devices=1", "rollout.engine=vllm"] in [args for _, args in one]
    without, notes = gpu_check.phases(1, vllm=False)
    assert [label for label, _ in without] == ["smollm2 1 GPU"] and any(n.startswith("vllm: skipped") for n in notes)
    assert any(n.startswith("qwen2.5-3b: skipped") for n in notes)
    many, notes = gpu_check.phases(4, "/weights/qwen")
    assert ["trainer=ddp", "trainer.devices=4"] in [args for _, args in many]
    assert ["trainer=fsdp", "trainer.devices=4"] in [args for _, args in many]
    assert ["trainer=ddp", "trainer.devices=4", "rollout.engine=vllm"] in [args for _, args in many]  # an engine per rank
    assert ["trainer=fsdp", "trainer.devices=4", "rollout.engine=vllm"] in [args for _, args in many]
    assert not any("vllm" in label for label, _ in gpu_check.phases(4, vllm=False)[0])
    assert ["model=qwen2.5-3b", "model.path=/weights/qwen", "trainer=fsdp", "trainer.devices=4"] in [args for _, args in many]
    assert ["model=qwen2.5-3b", "model.path=/weights/qwen", "trainer.devices=1", "rollout.engine=vllm"] in [args for _, args in many]
    assert not notes
    for _, args in many:  # every preset a phase names exists
        for arg in args:
            group, _, option = arg.partition("=")
            if group in ("trainer", "model"):  # rollout.engine is a field, checked by the config tests
                assert option in group_options(group), arg


def test_summary_reads_the_run_record(gpu_check, tmp_path):
    csv = tmp_path / "metrics.csv"
    header = "step,perf/step_time_s,perf/rollout_tokens_per_s,perf/update_tokens,perf/update_time_s," + ",".join(
        f"perf/gpu_peak_memory_after_{phase}_gib" for phase in ("rollout", "hooks", "update")
    )
    csv.write_text(f"{header}\n1,9.0,10,5,1,1.0,1.0,1.0\n2,2.0,100,300,1,1.2,1.3,1.5\n3,4.0,300,500,1,1.2,1.4,1.5\n")
    assert gpu_check.summarise(csv) == (
        "step 3.00 s (median of 2), 400 update tokens/s, 200 rollout tokens/s, peak GPU memory after rollout 1.20, hooks 1.40, update 1.50 GiB"
    )
