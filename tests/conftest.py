"""Shared fixtures: a tiny policy built once per session with a short warm start (real model, real
tokenizer, real LoRA; only the sizes shrink)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# 2 cores: a plain pytest uses both; under `make test` two xdist workers share them, one thread each
# (two processes of 2 threads each on 2 cores thrash, 4-8x slower).
THREADS = int(os.environ.get("OMP_NUM_THREADS", "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2"))
torch.set_num_threads(THREADS)

# Small enough to build in seconds, large enough to produce the format sometimes.
TINY_OVERRIDES = [
    "model.warm_start.episodes=60",
    "model.warm_start.steps=8",
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_layers=2",
    "model.num_heads=2",
    "rollout.num_prompts=3",
    "rollout.group_size=4",
    "rollout.max_new_tokens=12",
    "trainer=smoke",
    "logger=csv",
    f"trainer.num_threads={THREADS}",  # train() sets the process's threads from the config
]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory, worker_id):
    if os.environ.get("AGENTCOLLAPSE_TEST_CACHE"):  # make test: both of its passes share one cache
        return os.environ["AGENTCOLLAPSE_TEST_CACHE"]
    if worker_id == "master":  # a plain pytest
        return str(tmp_path_factory.mktemp("cache"))
    # xdist: the workers of one run share one cache, so each model is built once (models.cache.build_lock)
    shared = tmp_path_factory.getbasetemp().parent / "cache"
    shared.mkdir(exist_ok=True)
    return str(shared)


@pytest.fixture()
def make_cfg(cache_dir, tmp_path):
    from agentcollapse.run.checks import compose_run as compose_config

    def _make(*overrides: str):
        cfg = compose_config([*TINY_OVERRIDES, f"cache_dir={cache_dir}", *overrides])
        cfg.run_dir = str(tmp_path / "run")
        return cfg

    return _make


@pytest.fixture()
def tiny_policy(make_cfg):
    from agentcollapse.models.policy import load_policy

    cfg = make_cfg()
    return load_policy(cfg.model, cfg.env, cfg.cache_dir, seed=0)
