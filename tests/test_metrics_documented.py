"""Every metric a smoke run logs is documented in docs/metrics.md (names are a stable interface)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from agentcollapse import run

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
PLACEHOLDERS = {"<k>": r"\d+", "<sampler>": r"[a-z_]+", "<metric>": r"(?P<metric>[^/]+)"}


def _first_cells(section: str) -> list[list[str]]:
    return [re.findall(r"`([^`]+)`", line.split("|")[1]) for line in section.splitlines() if line.startswith("| `")]


def _documented() -> tuple[list[re.Pattern], list[list[str]]]:
    text = DOC.read_text()
    main, _, rest = text.partition("## The MI proxy family")
    patterns = []
    for cell in _first_cells(main):
        for name in cell:
            if "/" not in name:
                continue
            regex = re.escape(name)
            for holder, sub in PLACEHOLDERS.items():
                regex = regex.replace(re.escape(holder), sub)
            patterns.append(re.compile(regex + "$"))
    proxy_section = rest.partition("\n## ")[0]
    return patterns, _first_cells(proxy_section)


def _proxy_documented(metric: str, rows: list[list[str]]) -> bool:
    base, at, k = metric.partition("@")
    for cell in rows:
        if at and (metric in cell or f"{base}@k" in cell or (base in cell and f"@{k}" in cell)):
            return True
        if not at and base in cell:
            return True
    return False


def test_every_logged_metric_is_documented(make_cfg):
    cfg = make_cfg(
        "algorithm=ppo",
        "filter=rv_top_p",
        "callbacks=with_grad_buckets",
        "diagnostics.grad_buckets_every=1",
        "diagnostics.compute_freq=1",
        "trainer.val_temperatures=[1.0,0.5,0.0]",
        "trainer.num_threads=1",
    )
    assert run.train(cfg)["status"] == "finished"
    logged = [c for c in pd.read_csv(Path(cfg.run_dir) / "metrics.csv").columns if c != "step"]
    patterns, proxy_rows = _documented()
    missing = []
    for name in logged:
        matches = [m for m in (p.match(name) for p in patterns) if m]
        if not matches:
            missing.append(name)
        elif all("metric" in m.groupdict() for m in matches) and not any(_proxy_documented(m["metric"], proxy_rows) for m in matches):
            missing.append(name)
    assert not missing, f"logged but not in docs/metrics.md: {missing}"
    assert any(n.startswith("collapse_trajectory_sample/") for n in logged) and any(n.startswith("grad_bucket/") for n in logged)
