"""``trainer.accelerator`` defaults to ``auto``: the GPU where CUDA sees one, else the CPU (issue 39: the
GPU recipe trained on the CPU while vLLM decoded on the GPU)."""

from __future__ import annotations

import pytest
import torch

from agentcollapse.errors import UserError
from agentcollapse.run.trainer import resolve_accelerator


def test_the_default_is_auto_and_auto_follows_cuda(cache_dir, monkeypatch):
    from agentcollapse.config.compose import compose

    assert compose([f"cache_dir={cache_dir}"]).trainer.accelerator == "auto"
    assert compose(["model=qwen2.5-3b", "model.path=/anywhere", f"cache_dir={cache_dir}"]).trainer.accelerator == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_accelerator("auto") == "gpu" and resolve_accelerator("gpu") == "gpu" and resolve_accelerator("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_accelerator("auto") == "cpu" and resolve_accelerator("cpu") == "cpu"
    with pytest.raises(UserError, match="trainer.accelerator=gpu but torch sees no CUDA GPU.*trainer.accelerator=auto"):
        resolve_accelerator("gpu")


def test_a_run_with_the_default_trains_where_cuda_says(make_cfg, tmp_path):
    # the Trainer a run builds: on this CPU-only machine the CPU (on a GPU machine, the GPU)
    from agentcollapse.records import RunRecorder
    from agentcollapse.run.trainer import build_trainer

    cfg = make_cfg("logger=csv")
    assert cfg.trainer.accelerator == "auto"
    _, trainer = build_trainer(cfg, RunRecorder(tmp_path, writes=False), tmp_path)
    assert trainer.strategy.root_device.type == ("cuda" if torch.cuda.is_available() else "cpu")
