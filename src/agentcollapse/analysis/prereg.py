"""The pre-registered SmolLM2 experiments' rules (docs/results.md sections 10 and 13), as written before their runs.

Each experiment is a :class:`Plan` in :data:`PLANS`, named as the folder its runs are committed in
(``docs/results/<plan>/``): its effect size, primary outcome, pair counts and proxy noise. The rules below
take the plan's numbers, so both experiments are read by the same code.

Each rule is a plain function on one run's logged series, so the reading cannot drift from the plan:

* :func:`decline_step`: the first iteration at which held-out success, as the mean of three consecutive
  evaluations, lies ``drop`` (0.10) or more below the step-0 evaluation; the iteration is the last of the
  three, the first at which the decline can be seen.
* :func:`collapse_class`: template collapse (the trajectory MI z-score more than 2 sigma_z below its first
  reading at two consecutive proxy steps while the trajectory conditional entropy stays within 2 sigma_H of
  its own, the MI onset at or before success's), a drift to noise (the same MI fall with the conditional
  entropy up by more than 2 sigma_H), or neither. The first reading is the mean of the first two proxy steps.
* :func:`paired_length`: L = t + 8 rounded up to a multiple of 4, within [24, 60]; 40 when nothing happened.
* :func:`final_success`: the primary outcome, the mean of the evaluations at L-8, L-4 and L.
* :func:`paired_test`: the paired t-test with its interval and the exact Wilcoxon signed-rank test,
  applied to the primary outcome and to the secondary ones (:data:`SECONDARY_OUTCOMES`: final T=1
  success, the peak after an update), which are reported, not deciding.
* :func:`collapse_counts` and :func:`step_time_ratio`: each arm's runs by collapse class, and the
  filter's cut of the step time per pair.
* :func:`pairs_for_power`: the pairs a paired t-test needs for a power at an SD of the paired difference.
* :func:`planned_pairs`: the interim look after 4 pairs: the SD of their differences only (the mean is not
  looked at), and the n it asks for within the plan's range (section 10: 8-12; section 13: 6-10, sized at
  no less than its planning SD).
* :func:`load_committed` and :func:`spearman_reading`: the committed runs as the analysis package's run set,
  and the plan's secondary Spearman table (final MI z-score, conditional entropies and policy entropy
  against final T=0.5 success) with its can-it-speak verdict.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf
from scipy import stats as sps

from agentcollapse.analysis.correlations import spearman_markdown, spearman_table
from agentcollapse.analysis.lag import onset
from agentcollapse.analysis.runs import RunSet, load_runs
from agentcollapse.analysis.stats import binomial_se

__all__ = [
    "SIGMA_H",
    "SIGMA_Z",
    "SECONDARY_OUTCOMES",
    "PLANS",
    "SECTION_10",
    "CollapseReading",
    "Plan",
    "PairedResult",
    "collapse_class",
    "collapse_counts",
    "decline_step",
    "final_success",
    "first_batch_differs",
    "paired_length",
    "paired_test",
    "pairs_for_power",
    "arm_and_seed",
    "load_committed",
    "paired_differences",
    "plan_for",
    "planned_pairs",
    "progress",
    "spearman_reading",
    "step_time_ratio",
]

SIGMA_Z = 0.59
"""The trajectory MI z-score's SD over rollouts of one fixed SmolLM2 policy at P=4 x G=4 (section 9b)."""
SIGMA_H = 0.21
"""The trajectory conditional entropy's SD over the same rollouts, in nats (section 9b)."""
SIGMA_Z_SOKOBAN = 0.47
"""The same on SmolLM2 warm-started on Sokoban, 8 rollouts of P=4 x G=4 (section 13, measured before its runs)."""
SIGMA_H_SOKOBAN = 0.094
"""The trajectory conditional entropy's SD over those rollouts, in nats (section 13)."""


@dataclass(frozen=True)
class Plan:
    """One pre-registered experiment's numbers, fixed before its runs (docs/results.md says why each)."""

    name: str  # the folder its runs are committed in: docs/results/<name>/
    section: str  # where docs/results.md writes it down
    effect: float  # the paper's effect the reading is sized against ("no effect of the paper's size": CI below it)
    primary: str  # the read_run field that decides: "final_success" or "peak_after_update"
    secondary: dict[str, str]  # read_run field -> label: reported with the primary's test, not deciding
    min_pairs: int  # the interim look never plans fewer
    max_pairs: int  # nor more
    planning_sd: float  # the interim look sizes n at no less than this SD (0: at the interim SD alone)
    sigma_z: float  # the trajectory MI z-score's noise on this policy (collapse_class)
    sigma_h: float  # the trajectory conditional entropy's, in nats


_PEAK_T05 = "peak T=0.5 success after an update"
_FINAL_T1 = "final held-out success at T=1"
PLANS = {
    plan.name: plan
    for plan in (
        Plan(
            name="smollm2-prereg",
            section="10",
            effect=0.10,
            primary="final_success",
            secondary={"final_success_t1": _FINAL_T1, "peak_after_update": _PEAK_T05},
            min_pairs=8,
            max_pairs=12,
            planning_sd=0.0,
            sigma_z=SIGMA_Z,
            sigma_h=SIGMA_H,
        ),
        Plan(
            name="smollm2-ppo-sokoban",
            section="13",
            effect=0.16,  # Sokoban, PPO, Qwen2.5-3B: 12.9% -> 28.9% peak success
            primary="peak_after_update",
            secondary={
                "final_success": "final held-out success at T=0.5",
                "peak_after_update_t1": "peak T=1 success after an update",
                "final_success_t1": _FINAL_T1,
            },
            min_pairs=6,
            max_pairs=10,
            planning_sd=0.10,
            sigma_z=SIGMA_Z_SOKOBAN,
            sigma_h=SIGMA_H_SOKOBAN,
        ),
    )
}
SECTION_10 = PLANS["smollm2-prereg"]
SECONDARY_OUTCOMES = SECTION_10.secondary  # section 10's, by their old name


def plan_for(folder: str | Path, name: str | None = None) -> Plan:
    """The plan called ``name``, else the one named as ``folder`` (its runs' folder)."""
    key = name or Path(folder).resolve().name
    if key not in PLANS:
        raise ValueError(f"no pre-registered plan is called {key!r}; name one with --plan ({', '.join(PLANS)})")
    return PLANS[key]


def _sorted_finite(steps: Sequence[float], values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    t, x = np.asarray(steps, float), np.asarray(values, float)
    ok = np.isfinite(t) & np.isfinite(x)
    order = np.argsort(t[ok], kind="stable")
    return t[ok][order], x[ok][order]


def decline_step(steps: Sequence[float], success: Sequence[float], drop: float = 0.10, window: int = 3) -> float:
    """The first evaluation step that ends ``window`` consecutive evaluations whose mean lies ``drop`` or
    more below the first evaluation (step 0's); NaN when none does."""
    t, x = _sorted_finite(steps, success)
    for end in range(window, len(x)):  # the window never includes step 0 itself
        if x[end - window + 1 : end + 1].mean() <= x[0] - drop + 1e-12:
            return float(t[end])
    return math.nan


@dataclass(frozen=True)
class CollapseReading:
    """One run's proxy reading against the pre-registered signature."""

    kind: str  # "template collapse", "drift to noise" or "neither"
    mi_fall_step: float  # the first of two consecutive proxy steps with MI more than 2 sigma_z down (NaN: none)
    signature_step: float  # the MI fall's step when the conditional entropy held there (NaN otherwise)
    success_onset: float  # section 7's onset of held-out success (NaN: none)
    mi_first: float  # the first reading of the MI z-score
    entropy_first: float  # the first reading of the conditional entropy


def collapse_class(
    proxy_steps: Sequence[float],
    mi_z: Sequence[float],
    cond_entropy: Sequence[float],
    eval_steps: Sequence[float],
    success: Sequence[float],
    *,
    sigma_z: float = SIGMA_Z,
    sigma_h: float = SIGMA_H,
    success_floor: float = 0.0,
) -> CollapseReading:
    """Class one run (module docstring). ``success_floor`` is the noise floor of section 7's success onset
    (twice the binomial SE at the run's mean success and its episodes per evaluation)."""
    t, z = _sorted_finite(proxy_steps, mi_z)
    th, h = _sorted_finite(proxy_steps, cond_entropy)
    s_on = onset(eval_steps, success, min_drop=success_floor)
    if len(z) < 4 or len(h) < 2:
        return CollapseReading("neither", math.nan, math.nan, s_on, math.nan, math.nan)
    z0, h0 = float(z[:2].mean()), float(h[:2].mean())
    by_step = dict(zip(th, h))
    down = z < z0 - 2 * sigma_z
    fall = next((i for i in range(2, len(z) - 1) if down[i] and down[i + 1]), None)
    if fall is None:
        return CollapseReading("neither", math.nan, math.nan, s_on, z0, h0)
    entropies = [by_step.get(t[fall], math.nan), by_step.get(t[fall + 1], math.nan)]
    holds = all(abs(e - h0) <= 2 * sigma_h for e in entropies)
    rises = all(e > h0 + 2 * sigma_h for e in entropies)
    mi_step = float(t[fall])
    if holds:
        first = math.isnan(s_on) or mi_step <= s_on
        kind = "template collapse" if first else "neither"
        return CollapseReading(kind, mi_step, mi_step, s_on, z0, h0)
    return CollapseReading("drift to noise" if rises else "neither", mi_step, math.nan, s_on, z0, h0)


def paired_length(event_step: float, *, pad: int = 8, multiple: int = 4, lo: int = 24, hi: int = 60, default: int = 40) -> int:
    """The paired runs' length L from the first decline or signature step of the long no-filter run."""
    if math.isnan(event_step):
        return default
    length = multiple * math.ceil((event_step + pad) / multiple)
    return int(min(hi, max(lo, length)))


def final_success(steps: Sequence[float], success: Sequence[float], length: int, *, at: Sequence[int] = (8, 4, 0)) -> float:
    """The mean held-out success at iterations ``length - a`` for ``a`` in ``at``; NaN if one is missing."""
    by_step = dict(zip(*_sorted_finite(steps, success)))
    values = [by_step.get(float(length - a), math.nan) for a in at]
    return float(np.mean(values)) if all(math.isfinite(v) for v in values) else math.nan


@dataclass(frozen=True)
class PairedResult:
    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float
    t_p: float
    wilcoxon_p: float
    reading: str  # "the filter helps", "no effect of the paper's size", "inconclusive"


def paired_test(differences: Sequence[float], *, effect: float = 0.10, level: float = 0.95) -> PairedResult:
    """Paired t-test (two-sided) with the t interval of the mean difference, the exact Wilcoxon
    signed-rank p beside it, and the pre-registered reading of the interval."""
    d = np.asarray(differences, float)
    d = d[np.isfinite(d)]
    n = len(d)
    if n < 2:
        mean = float(d.mean()) if n else math.nan
        return PairedResult(n, mean, math.nan, math.nan, math.nan, math.nan, math.nan, "inconclusive")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    half = float(sps.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n))
    t_p = float(sps.ttest_1samp(d, 0.0).pvalue) if sd > 0 else (0.0 if mean != 0 else 1.0)
    w_p = float(sps.wilcoxon(d, method="exact").pvalue) if np.any(d != 0) else 1.0
    lo, hi = mean - half, mean + half
    reading = "the filter helps" if lo > 0 else ("no effect of the paper's size" if hi < effect else "inconclusive")
    return PairedResult(n, mean, sd, lo, hi, t_p, w_p, reading)


def pairs_for_power(sd: float, *, effect: float = 0.10, alpha: float = 0.05, power: float = 0.80, max_n: int = 200) -> int:
    """The smallest n of pairs at which a two-sided paired t-test at ``alpha`` detects ``effect`` with
    ``power``, for an SD of the paired difference ``sd`` (noncentral t). Differences that agree to rounding
    (an SD within 1e-9 of the effect's scale) need the fewest, 2."""
    if sd <= 1e-9 * effect:
        return 2
    for n in range(2, max_n + 1):
        crit = sps.t.ppf(1 - alpha / 2, n - 1)
        nc = effect / (sd / math.sqrt(n))
        achieved = 1 - sps.nct.cdf(crit, n - 1, nc) + sps.nct.cdf(-crit, n - 1, nc)
        if achieved >= power:
            return n
    return max_n


def planned_pairs(
    differences: Sequence[float], *, minimum: int = 8, maximum: int = 12, effect: float = 0.10, planning_sd: float = 0.0
) -> tuple[float, int, int]:
    """The pre-registered interim look: the SD of the first pairs' differences (their mean is not
    computed), the pairs that give 80% power for ``effect`` at that SD or at ``planning_sd``, whichever is
    larger (an interim SD on 3 degrees of freedom can come out far too small: section 10's read 0.057, its
    final 0.145), and the planned n, that number within [``minimum``, ``maximum``]. Returns (sd, pairs for
    power, planned n)."""
    d = np.asarray(differences, float)
    d = d[np.isfinite(d)]
    if len(d) < 2:
        raise ValueError(f"the interim SD needs at least 2 pairs, got {len(d)}")
    sd = float(d.std(ddof=1))
    sizing = max(sd, planning_sd)
    needed = pairs_for_power(sizing, effect=effect)
    return sd, needed, min(max(needed, minimum), maximum)


# -- reading the committed runs ----------------------------------------------------------------------
STAGE1_SEED = 100  # the long runs' seed, not among the paired ones
FILTER_ARM, NO_FILTER_ARM = "rv_top_p", "none"
SUCCESS_KEY = "val/success_rate"  # T=0.5, the primary outcome
SUCCESS_T1_KEY = "val/success_rate_t1"  # T=1, a secondary outcome
STEP_TIME_KEY = "perf/step_time_s"
MI_KEY = "collapse_trajectory_sample/mi_zscore"
ENTROPY_KEY = "collapse_trajectory_sample/conditional_entropy_est"
FIRST_BATCH_KEYS = ("rollout/success_rate", "rollout/response_length")  # step 1's rollout, before any update


def val_episodes(metrics_path: str, default: int = 64) -> int:
    """Episodes per evaluation, from the run's committed config beside its metrics (the plan's 64 without one)."""
    config = _beside(metrics_path, "config.yaml")
    if not config.is_file():
        return default
    return int(OmegaConf.select(OmegaConf.load(config), "trainer.val_episodes", default=default))


def _is_paired(seed: int, seeds: set[int] | None) -> bool:
    """A stage-2 seed (not the long runs'), and one of ``seeds`` where they are given."""
    return seed != STAGE1_SEED and (seeds is None or seed in seeds)


def arm_and_seed(filename: str) -> tuple[str, int]:
    """``<arm>-seed<k>-metrics.csv`` (a committed run's file name, or its path) as (arm, k)."""
    arm, seed = Path(filename).name.removesuffix("-metrics.csv").rsplit("-seed", 1)
    return arm, int(seed)


def paired_differences(
    runs: Sequence[dict[str, float | str]], seeds: set[int] | None = None, key: str = "final_success"
) -> dict[int, float]:
    """Filter minus no filter of ``key`` (a :func:`read_run` field; the primary outcome by default), per seed
    whose two arms are both there (the stage-1 seed left out; ``seeds``: only these)."""
    by_seed: dict[int, dict[str, float]] = {}
    for r in runs:
        seed = int(r["seed"])
        if _is_paired(seed, seeds):
            by_seed.setdefault(seed, {})[str(r["arm"])] = float(r[key])
    return {k: v[FILTER_ARM] - v[NO_FILTER_ARM] for k, v in sorted(by_seed.items()) if {FILTER_ARM, NO_FILTER_ARM} <= set(v)}


def first_batch_differs(runs: Sequence[dict[str, float | str]]) -> list[int]:
    """The seeds (stage 1's included) whose two arms logged different step-1 rollouts: they did not share
    their first batch (section 10's pair 4). Reads nothing after the first update, so not the outcome."""
    every = {int(r["seed"]) for r in runs}
    differs: set[int] = set()
    for key in FIRST_BATCH_KEYS:
        differs |= {seed for seed, d in paired_differences(runs, every, f"step1:{key}").items() if not math.isnan(d) and d != 0}
    return sorted(differs)


def warm_start_differs(runs: Sequence[dict[str, float | str]]) -> list[int]:
    """The seeds whose two arms started from different warm-start builds (``policy_weights_sha256`` in their
    summaries): a fresh machine rebuilds the warm start, and a build is not bit for bit the same across machines.
    Runs whose summary names no build (older ones) are not compared."""
    builds: dict[int, set[str]] = {}
    for r in runs:
        if r.get("warm_start_sha256"):
            builds.setdefault(int(r["seed"]), set()).add(str(r["warm_start_sha256"]))
    return sorted(seed for seed, shas in builds.items() if len(shas) > 1)


def first_batch_line(runs: Sequence[dict[str, float | str]]) -> str:
    differs = first_batch_differs(runs)
    if not differs:
        return "first batch: both arms of every seed logged the same step-1 rollout"
    line = f"first batch: the arms of seed(s) {differs} logged different step-1 rollouts (no shared first batch; kept, named)"
    rebuilt = warm_start_differs(runs)
    return line + (f"; seed(s) {rebuilt}: the arms started from different warm-start builds" if rebuilt else "")


def step_time_ratio(runs: Sequence[dict[str, float | str]], seeds: set[int] | None = None) -> str:
    """The filter's cut of the step time: per pair, the filter arm's median iteration time over the no-filter
    arm's (the filter drops groups, so the update has fewer sequences), as the geometric mean and range."""
    ratios = [
        math.exp(d)
        for d in paired_differences(
            [{**r, "log_step_time": math.log(float(r["median_step_time_s"]))} for r in runs], seeds, "log_step_time"
        ).values()
        if math.isfinite(d)
    ]
    if not ratios:
        return "step time (filter / none): no pair logged perf/step_time_s"
    return (
        f"step time (filter / none, median iteration per run), n={len(ratios)} pairs: geometric mean "
        f"{math.exp(float(np.mean(np.log(ratios)))):.2f}x, range {min(ratios):.2f}-{max(ratios):.2f}x"
    )


def collapse_counts(runs: Sequence[dict[str, float | str]], seeds: set[int] | None = None) -> dict[str, dict[str, int]]:
    """The plan's count per arm of runs classed template collapse, drift to noise or neither (paired runs only)."""
    counts: dict[str, dict[str, int]] = {}
    for r in runs:
        seed = int(r["seed"])
        if _is_paired(seed, seeds):
            kinds = counts.setdefault(str(r["arm"]), {})
            kinds[str(r["collapse"])] = kinds.get(str(r["collapse"]), 0) + 1
    return dict(sorted(counts.items()))


def read_run(path: str, length: int | None = None, plan: Plan = SECTION_10) -> dict[str, float | str]:
    """One committed run (``<arm>-seed<k>-metrics.csv``) read by the rules above, with ``plan``'s proxy noise."""
    arm, seed = arm_and_seed(path)
    d = pd.read_csv(path)
    ev = d[d[SUCCESS_KEY].notna()]
    px = d[d[MI_KEY].notna()]
    floor = 2 * binomial_se(float(ev[SUCCESS_KEY].mean()), float(val_episodes(path)))
    reading = collapse_class(
        px["step"],
        px[MI_KEY],
        px[ENTROPY_KEY],
        ev["step"],
        ev[SUCCESS_KEY],
        sigma_z=plan.sigma_z,
        sigma_h=plan.sigma_h,
        success_floor=floor,
    )
    last = int(d["step"].max())
    end = length or last
    ev1 = d[d[SUCCESS_T1_KEY].notna()] if SUCCESS_T1_KEY in d else d.iloc[:0]
    trained = ev[(ev["step"] > 0) & (ev["step"] <= end)][SUCCESS_KEY]
    trained_t1 = ev1[(ev1["step"] > 0) & (ev1["step"] <= end)][SUCCESS_T1_KEY] if len(ev1) else pd.Series(dtype=float)
    times = d[d["step"] <= end][STEP_TIME_KEY].dropna() if STEP_TIME_KEY in d else pd.Series(dtype=float)
    return {
        "arm": arm,
        "seed": seed,
        "last_step": last,
        "step0_success": float(ev[SUCCESS_KEY].iloc[0]),
        "decline_step": decline_step(ev["step"], ev[SUCCESS_KEY]),
        "collapse": reading.kind,
        "mi_fall_step": reading.mi_fall_step,
        "signature_step": reading.signature_step,
        "success_onset": reading.success_onset,
        "final_success": final_success(ev["step"], ev[SUCCESS_KEY], end),
        # secondary outcomes (reported with the primary's test, not deciding) and the step's cost
        "final_success_t1": final_success(ev1["step"], ev1[SUCCESS_T1_KEY], end) if len(ev1) else math.nan,
        "peak_after_update": float(trained.max()) if len(trained) else math.nan,
        "peak_after_update_t1": float(trained_t1.max()) if len(trained_t1) else math.nan,
        "median_step_time_s": float(times.median()) if len(times) else math.nan,
        # the first batch: the same in both arms of a seed when they share it (no outcome: before any update)
        **{f"step1:{key}": _first_value(d, key) for key in FIRST_BATCH_KEYS},
        "warm_start_sha256": _summary(path).get("policy_weights_sha256", ""),
    }


def _beside(metrics_path: str, name: str) -> Path:
    """The committed run's file ``name`` (``config.yaml``, ``summary.json``) beside its ``-metrics.csv``."""
    return Path(metrics_path.removesuffix("-metrics.csv") + f"-{name}")


def _summary(metrics_path: str) -> dict:
    """The run's committed ``summary.json`` beside its metrics ({} without one)."""
    path = _beside(metrics_path, "summary.json")
    return json.loads(path.read_text()) if path.is_file() else {}


def _first_value(d: pd.DataFrame, key: str) -> float:
    logged = d[key].dropna() if key in d else pd.Series(dtype=float)
    return float(logged.iloc[0]) if len(logged) else math.nan


MI_EMA_KEY = "collapse_trajectory_sample/mi_zscore_ema"
"""The paper's +0.39 is this variant (the z-score over EMA-smoothed marginals, ``analysis.paper.HEADLINE_MI``):
the like-for-like row, added after section 10's read (its plan named the plain z-score, :data:`MI_KEY`)."""

# the plan's secondary correlations: the final value of each, against final held-out success at T=0.5
SPEARMAN_DIAGNOSTICS = (
    MI_KEY,
    MI_EMA_KEY,
    "collapse_first_turn_sample/conditional_entropy_est",
    ENTROPY_KEY,
    "actor/entropy",
)
RUN_FILES = ("metrics.csv", "config.yaml", "summary.json")
CURVE_METRICS = (SUCCESS_KEY, "val/success_rate_t1", MI_KEY, ENTROPY_KEY, "actor/entropy", "rollout/success_rate")


def progress(names: Sequence[str], planned: int = 8) -> str:
    """Both stages' progress from the committed runs' file names (``<arm>-seed<k>-metrics.csv``) alone, so a
    stop note can say how far the experiment is without reading any outcome."""
    arms: dict[str, set[int]] = {}
    stage1: list[str] = []
    for arm, seed in map(arm_and_seed, names):
        if _is_paired(seed, None):
            arms.setdefault(arm, set()).add(seed)
        else:
            stage1.append(arm)
    none, filt = sorted(arms.get(NO_FILTER_ARM, set())), sorted(arms.get(FILTER_ARM, set()))
    pairs = sorted(set(none) & set(filt))
    done = len(none) + len(filt)
    return (
        f"stage 1: {len(stage1)} of 2 runs committed {sorted(stage1)}; "
        f"stage 2: {done} of {2 * planned} paired runs committed (none: seeds {none}; rv_top_p: seeds {filt}); "
        f"{len(pairs)} of {planned} pairs complete {pairs}"
    )


def load_committed(folder: str | Path, scratch: str | Path, seeds: Sequence[int] | None = None) -> RunSet:
    """The committed runs (``<arm>-seed<k>-{metrics.csv,config.yaml,summary.json}``) as a :class:`RunSet`:
    each is linked into a run directory ``<scratch>/<arm>-seed<k>`` so the analysis package reads it as it
    reads a sweep's. ``seeds``: only these (default: every run but the stage-1 seed 100)."""
    folder, scratch = Path(folder).resolve(), Path(scratch)
    dirs = []
    for metrics in sorted(folder.glob("*-metrics.csv")):
        name = metrics.name.removesuffix("-metrics.csv")
        seed = arm_and_seed(metrics.name)[1]
        wanted = seed != STAGE1_SEED if seeds is None else seed in seeds
        if not wanted:
            continue
        missing = [f for f in RUN_FILES if not (folder / f"{name}-{f}").is_file()]
        if missing:
            raise FileNotFoundError(f"{folder}/{name}: no {', '.join(missing)} beside its metrics (commit each run's three files)")
        run_dir = scratch / name
        run_dir.mkdir(parents=True, exist_ok=True)
        for f in RUN_FILES:
            link = run_dir / f
            if not link.exists():
                link.symlink_to(folder / f"{name}-{f}")
        dirs.append(run_dir)
    return load_runs(dirs)


def spearman_reading(runset: RunSet) -> str:
    """The plan's secondary Spearman table over the runs, as Markdown, with the can-it-speak verdict."""
    table = spearman_table(runset, targets=[f"final/{SUCCESS_KEY}"], diagnostics=SPEARMAN_DIAGNOSTICS, stat="final", by_env=False)
    return spearman_markdown(table, runset)


def main() -> None:
    import argparse
    import glob

    ap = argparse.ArgumentParser(
        description="A pre-registered SmolLM2 experiment's runs read by its rules (docs/results.md sections 10 and 13)."
    )
    ap.add_argument("folder", help="the committed runs, e.g. docs/results/smollm2-prereg (its name picks the plan)")
    ap.add_argument("--plan", default=None, choices=sorted(PLANS), help="the plan to read them by (default: the folder's name)")
    ap.add_argument("--length", type=int, default=None, help="the paired runs' L (default: each run's last step)")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds of the paired runs (default: all but the stage-1 seed 100)")
    ap.add_argument(
        "--interim",
        action="store_true",
        help="the look after 4 pairs: prints only the SD of the paired differences and the planned n (no outcome, no mean)",
    )
    ap.add_argument(
        "--spearman", action="store_true", help="the secondary Spearman table over the paired runs (final diagnostics vs final success)"
    )
    ap.add_argument("--curves", default=None, metavar="PNG", help="plot the runs' curves (colour: arm, line: seed) to this file")
    ap.add_argument(
        "--status", action="store_true", help="runs done of runs planned, from the committed files' names only (no outcome is read)"
    )
    ap.add_argument("--planned", type=int, default=None, help="the planned pairs, for --status (default: the plan's minimum)")
    args = ap.parse_args()
    try:
        plan = plan_for(args.folder, args.plan)
    except ValueError as exc:
        ap.error(str(exc))
    seeds = {int(s) for s in args.seeds.split(",")} if args.seeds else None
    if args.status:
        print(progress([p.name for p in Path(args.folder).glob("*-metrics.csv")], args.planned or plan.min_pairs))
        return
    if args.spearman or args.curves:
        import tempfile

        from agentcollapse.analysis.plots import plot_curves

        with tempfile.TemporaryDirectory() as scratch:
            runset = load_committed(args.folder, scratch, sorted(seeds) if seeds else None)
            if args.spearman:
                print(spearman_reading(runset))
            if args.curves:
                print(f"curves: {plot_curves(runset, args.curves, CURVE_METRICS)}")
        return
    runs = [read_run(p, args.length, plan) for p in sorted(glob.glob(f"{args.folder}/*-metrics.csv"))]
    if args.interim:
        _interim(paired_differences(runs, seeds, plan.primary), plan)
        print(first_batch_line(runs))
        return
    for r in runs:
        print(", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    stage1_none = [r for r in runs if r["seed"] == STAGE1_SEED and r["arm"] == NO_FILTER_ARM]
    if stage1_none:
        r = stage1_none[0]
        seen = [float(s) for s in (r["decline_step"], r["signature_step"]) if not math.isnan(float(s))]
        event = min(seen) if seen else math.nan
        print(f"stage 1: the no-filter run's first decline or signature step {event}: L = {paired_length(event)}")
    diffs = paired_differences(runs, seeds, plan.primary)
    if diffs:
        res = paired_test(list(diffs.values()), effect=plan.effect)
        print(
            f"paired (filter - none), {plan.primary}, n={res.n}: mean {res.mean:+.3f}, 95% CI [{res.ci_low:+.3f}, {res.ci_high:+.3f}], "
            f"t p={res.t_p:.3f}, Wilcoxon exact p={res.wilcoxon_p:.3f}, SD {res.sd:.3f} "
            f"(80% power for +{plan.effect:.2f} needs {pairs_for_power(res.sd, effect=plan.effect)} pairs): {res.reading}"
        )
        for key, label in plan.secondary.items():
            sec = paired_test(list(paired_differences(runs, seeds, key).values()), effect=plan.effect)
            print(
                f"secondary, {label} (filter - none), n={sec.n}: mean {sec.mean:+.3f}, 95% CI [{sec.ci_low:+.3f}, {sec.ci_high:+.3f}], "
                f"t p={sec.t_p:.3f}, Wilcoxon exact p={sec.wilcoxon_p:.3f} (not deciding)"
            )
        print(step_time_ratio(runs, seeds))
    for arm, kinds in collapse_counts(runs, seeds).items():
        print(f"collapse classes, {arm}: " + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())))
    print(first_batch_line(runs))


def _interim(diffs: dict[int, float], plan: Plan) -> None:
    """Print the interim look blind to the outcome: which pairs are complete, their SD, the planned n."""
    complete = list(diffs)
    if len(complete) < 2:
        print(f"interim: {len(complete)} complete pair(s) (seeds {complete}); the SD needs at least 2")
        return
    sd, needed, planned = planned_pairs(
        list(diffs.values()), minimum=plan.min_pairs, maximum=plan.max_pairs, effect=plan.effect, planning_sd=plan.planning_sd
    )
    sizing = f" (sized at the larger of it and the planning SD {plan.planning_sd:.2f})" if plan.planning_sd else ""
    print(
        f"interim, pairs of seeds {complete} (n={len(complete)}): SD of the paired difference {sd:.3f}{sizing}; "
        f"80% power for +{plan.effect:.2f} needs {needed} pairs; planned n = {planned} (within [{plan.min_pairs}, {plan.max_pairs}])"
    )


if __name__ == "__main__":
    main()
