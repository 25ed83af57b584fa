"""README's benchmark figures (and docs/performance.md's table of goals) are the ones in the result files
they cite (``benchmarks/results/*.json``, the ones kept in git): each figure below is formatted from its
file and must appear in the document as written. When a benchmark is re-run and its file committed, the
sentence changes with it. Reads JSON and Markdown only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _json(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text())


def _text(doc: str) -> str:
    return " ".join((ROOT / doc).read_text().split())  # lines wrap anywhere


def _warm_start_row(env: str, tuned: bool, temperature: float) -> str:
    rows = _json("warm_start.json")["rows"]
    r = next(r for r in rows if r["env"] == env and r["warm_start"] == tuned and r["temperature"] == temperature)
    success = f"{r['success']:.3f}".rstrip("0") if tuned else f"{r['success']:.2f}"
    low, high = r["success_ci"]
    cells = [env, "warm-started" if tuned else "untuned", f"{temperature:.1f}", f"{success} [{low:.2f}, {high:.2f}]"]
    cells.append(f"{r['format_valid_rate']:.2f}")
    cells.append(f"{r['state_grounding']:.2f}" if tuned else "-")
    return "| " + " | ".join(cells) + " |"


# (the file it cites, what README writes, formatted from the file)
FIGURES: list[tuple[str, Callable[[], str]]] = [
    (
        "iteration_best.json",
        lambda: (
            lambda d: (
                f"takes **{d['ratio']:.2f}x** the CPU time of an iteration of that code (pairs {d['pair_ratios'][0]:.2f} and {d['pair_ratios'][1]:.2f}"
            )
        )(_json("iteration_best.json")),
    ),
    (
        "trl.json",
        lambda: f"ours takes {_json('trl.json')['summary']['smollm2']['ratio_ours_over_trl']:.2f}x its time on SmolLM2-135M itself",
    ),
    ("trl.json", lambda: f"{_json('trl.json')['summary']['49152']['ratio_ours_over_trl']:.2f}x at its 49,152-token head"),
    ("trl.json", lambda: f"{_json('trl.json')['summary']['natural']['ratio_ours_over_trl']:.2f}x at the tiny head"),
    (
        "dtype.json",
        lambda: (
            lambda r: (
                f"bfloat16 weights take {r['rollout_s']:.2f}x fp32's time in the rollout, {r['scoring_s']:.2f}x in scoring and {r['update_s']:.2f}x in the update"
            )
        )(_json("dtype.json")["ratio_bf16_over_fp32"]),
    ),
    ("dtype.json", lambda: f"differ from fp32's by {_json('dtype.json')['logp_abs_diff']:.3f} nats"),
    ("experiment.json", lambda: f"SmolLM2's update took {_json('experiment.json')['summary']['update_ratio']:.2f}x the pilot's time"),
    (
        "experiment.json",
        lambda: (lambda s: f"{s['ratio']:.2f}x, at {s['peak_gib']['prereg']:.1f} GiB peak instead of {s['peak_gib']['pilot']:.1f}")(
            _json("experiment.json")["summary"]
        ),
    ),
    (
        "engines.json",
        lambda: (
            lambda d: (
                f"took **{d['vllm']['rollout_s']:.1f} s with vLLM (bf16, {d['vllm']['tokens_per_s']:.0f} generated tokens/s) against "
                f"{d['hf']['rollout_s']:.1f} s with `hf` (fp32, {d['hf']['tokens_per_s']:.0f} tokens/s): {d['ratio_vllm_over_hf_time']:.2f}x the time**"
            )
        )(_json("engines.json")),
    ),
    ("engines.json", lambda: f"after an engine start-up of {_json('engines.json')['vllm_startup_s']:.0f} s"),
    (
        "engines.json",
        lambda: (lambda p: f"{p['vllm_s']:.1f} s against {p['hf_s']:.1f} s for the cached transformers cross-scoring")(
            _json("engines.json")["proxy"]
        ),
    ),
    (
        "engines.json",
        lambda: (lambda z: f"trajectory z-score {z['vllm']:.4f} vs {z['hf']:.4f}")(_json("engines.json")["proxy"]["trajectory_zscore"]),
    ),
    *[
        ("warm_start.json", lambda env=env, tuned=tuned, t=t: _warm_start_row(env, tuned, t))
        for env in ("frozenlake", "sokoban")
        for tuned in (False, True)
        for t in (1.0, 0.5)
    ],
]

# docs/performance.md's table of the first round's goals, against the file its TRL table reads
PERFORMANCE_FIGURES: list[tuple[str, Callable[[], str]]] = [
    (
        "iteration_best.json",
        lambda: (
            lambda d: (
                f"| 1. iteration <= 0.5x the code before | CPU time: {d['ratio']:.2f}x (pairs {d['pair_ratios'][0]:.2f}, {d['pair_ratios'][1]:.2f};"
            )
        )(_json("iteration_best.json")),
    ),
    (
        "trl.json",
        lambda: (
            lambda s: (
                f"| 3. <= 0.8x TRL with the proxy on | {s['natural']['ratio_ours_over_trl']:.2f}x at 1,086 tokens and {s['49152']['ratio_ours_over_trl']:.2f}x at 49,152"
            )
        )(_json("trl.json")["summary"]),
    ),
]
CASES = [("README.md", *f) for f in FIGURES] + [("docs/performance.md", *f) for f in PERFORMANCE_FIGURES]


@pytest.mark.parametrize("doc, source, figure", CASES, ids=[f"{doc}-{source}-{i}" for i, (doc, source, _) in enumerate(CASES)])
def test_the_docs_quote_the_result_file(doc, source, figure):
    text = figure()
    assert text in _text(doc), f"{doc} should say {text!r} ({source}); the file and the document disagree"


def test_each_cited_file_is_kept_in_git():
    ignored = (ROOT / ".gitignore").read_text().split()
    for _, source, _ in CASES:
        assert f"!benchmarks/results/{source}" in ignored, f"{source} is quoted in README but not kept in git"
