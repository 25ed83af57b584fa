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


def test_phases_follow_the_gpu_count_and_never_invent_fsdp(gpu_check):
    one, notes = gpu_check.phases(1)
    assert [label for label, _ in one] == ["1 GPU"] and any(n.startswith("ddp: skipped") for n in notes)
    many, notes = gpu_check.phases(4)
    assert ["trainer=ddp", "trainer.devices=4"] in [args for _, args in many]
    assert any(n.startswith("fsdp: skipped") for n in notes) or any(label.startswith("fsdp") for label, _ in many)


def test_summary_reads_the_run_record(gpu_check, tmp_path):
    csv = tmp_path / "metrics.csv"
    header = "step,perf/step_time_s,perf/rollout_tokens_per_s,perf/gpu_peak_memory_gib"
    csv.write_text(f"{header}\n1,9.0,10,1.0\n2,2.0,100,1.5\n3,4.0,300,1.5\n")
    assert gpu_check.summarise(csv) == "step 3.00 s (median of 2), 200 rollout tokens/s, peak GPU memory 1.50 GiB"
