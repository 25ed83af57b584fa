"""Did mutual information predict success better than entropy? Spearman rho of every diagnostic with
held-out success across runs, with bootstrap intervals, per env, beside the paper's values -- and
whether the table can speak at all.

**Can the table speak?** Each run's held-out success is a proportion measured on
``trainer.val_episodes`` episodes, so it carries a binomial standard error (plus-four estimate,
:func:`~agentcollapse.analysis.stats.binomial_se`; a ``final`` averaged over m evaluations has
m times the episodes, a ``mean`` over every evaluation likewise). The table reports the spread of the
target across runs (sample std) against that evaluation noise (root mean square of the runs' standard
errors) and says it **cannot speak** when the spread is under twice the noise: the runs then differ by
about what re-evaluating one run would change, and rho ranks noise, however small its p-value. It
cannot speak either when there are too few runs for any rho to clear p < 0.05: an exact Spearman test
of n runs gives at least 2 / n! (:func:`~agentcollapse.analysis.stats.spearman_min_p`: 1/12 at n = 4),
so under 5 runs no table can speak, whatever the spread.

**p-values** are exact up to :data:`~agentcollapse.analysis.stats.EXACT_SPEARMAN_MAX_N` runs (every
pairing of the ranks enumerated, ties at average ranks) and ``scipy.stats.spearmanr``'s t
approximation above (:func:`~agentcollapse.analysis.stats.spearman`).

**Undefined MI.** A finished run whose MI proxy was never defined (no valid reasoning: the worst runs)
drops out of the plain columns; the ``*_at_chance`` columns count its undefined proxy steps at their
chance value (``agentcollapse.analysis.runs``), so both tables are reported, each with its n.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from agentcollapse.analysis.markdown import fmt, fmt_ci, md_table
from agentcollapse.analysis.paper import DIAGNOSTICS, PAPER_SPEARMAN, T1_TARGETS, TARGETS
from agentcollapse.analysis.runs import RunSet
from agentcollapse.analysis.stats import EXACT_SPEARMAN_MAX_N, binomial_se, bootstrap_spearman_ci, spearman, spearman_min_p

__all__ = ["ALPHA", "COLUMNS", "spearman_markdown", "spearman_table", "target_noise"]

ALPHA = 0.05  # a table whose runs are too few for any exact p below this cannot speak

COLUMNS = ["diagnostic", "target", "rho", "p_value", "n", "ci_low", "ci_high"]
EXTRA = [
    "group",
    "stat",
    "n_undefined",
    "rho_at_chance",
    "p_value_at_chance",
    "n_at_chance",
    "ci_low_at_chance",
    "ci_high_at_chance",
    "paper",
    "paper_low",
    "paper_high",
    "target_spread",
    "eval_se",
    "can_speak",
]


def _episodes(runs: pd.DataFrame, target: str, last_k: int) -> pd.Series:
    """Episodes behind each run's value of ``target`` (NaN when it is not a success rate)."""
    stat, _, metric = target.partition("/")
    nan = pd.Series(np.nan, index=runs.index)
    if "success_rate" not in metric:
        return nan
    if metric.startswith("val/"):
        per_eval = pd.to_numeric(runs.get("trainer.val_episodes", nan), errors="coerce")
    elif metric.startswith("rollout/"):
        per_eval = pd.to_numeric(runs.get("rollout.num_prompts", nan), errors="coerce") * pd.to_numeric(
            runs.get("rollout.group_size", nan), errors="coerce"
        )
    else:
        return nan
    evals = pd.to_numeric(runs.get(f"evals/{metric}", nan), errors="coerce")
    if stat == "final":
        return per_eval * np.minimum(evals, last_k)
    if stat == "mean":
        return per_eval * evals
    return per_eval  # peak, at: one evaluation


def target_noise(runs: pd.DataFrame, target: str, last_k: int = 3) -> dict[str, float | bool | None]:
    """Spread of ``target`` across ``runs`` against its evaluation noise, and whether the table can
    speak: False when the spread is under twice the noise or the runs are too few for any exact
    Spearman p to fall below :data:`ALPHA` (``min_p``, :func:`spearman_min_p`); None when the noise
    is unknown and the runs are enough (module docstring)."""
    values = pd.to_numeric(runs.get(target, pd.Series(dtype=float)), errors="coerce")
    ok = values.notna()
    values = values[ok]
    spread = float(values.std(ddof=1)) if len(values) >= 2 else math.nan
    episodes = _episodes(runs[ok], target, last_k)
    ses = [binomial_se(p, n) for p, n in zip(values, episodes)]
    ses = [s for s in ses if math.isfinite(s)]
    se = math.sqrt(float(np.mean(np.square(ses)))) if ses and len(ses) == len(values) else math.nan
    episodes_med = float(np.nanmedian(episodes)) if len(episodes) and episodes.notna().any() else math.nan
    min_p = spearman_min_p(len(values)) if len(values) else math.nan
    if len(values) >= 2 and not min_p < ALPHA:
        can = False  # no rho over so few runs can be told from chance, whatever the spread
    elif not math.isfinite(spread) or not math.isfinite(se):
        can = None
    else:
        can = bool(spread > 0 and spread >= 2 * se)
    return {"n_runs": int(len(values)), "spread": spread, "se": se, "episodes": episodes_med, "min_p": min_p, "can_speak": can}


def _corr(runs: pd.DataFrame, col: str, target: str, n_boot: int, seed: int, level: float) -> tuple[float, float, int, float, float]:
    if col not in runs or target not in runs:
        return math.nan, math.nan, 0, math.nan, math.nan
    pair = runs[[col, target]].apply(pd.to_numeric, errors="coerce").dropna()
    pair = pair[np.isfinite(pair).all(axis=1)]
    x, y = pair[col].to_numpy(), pair[target].to_numpy()
    rho, p = spearman(x, y)
    lo, hi = bootstrap_spearman_ci(x, y, n_boot=n_boot, seed=seed, level=level) if math.isfinite(rho) else (math.nan, math.nan)
    return rho, p, len(pair), lo, hi


def default_targets(runset: RunSet) -> list[str]:
    """Peak and final held-out success at T = 0.5, plus at T = 1 where the runs logged it."""
    return [*TARGETS, *(t for t in T1_TARGETS if t in runset.runs)]


def spearman_table(
    runset: RunSet,
    targets: Sequence[str] | None = None,
    diagnostics: Sequence[str] = DIAGNOSTICS,
    *,
    stat: str = "mean",
    by_env: bool = True,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> pd.DataFrame:
    """One row per (target, group, diagnostic): rho, p, n and a seeded bootstrap interval over runs,
    the same with undefined MI at chance, the paper's value, and the can-it-speak columns.

    ``stat`` says which summary of each diagnostic is correlated (``mean`` over the run, ``final``,
    ``peak`` or ``at``); a target is a run-frame column (``peak/val/success_rate``; default:
    :func:`default_targets`), and one that no run has is a ValueError naming those that exist. Groups: ``all``
    (pooled), then each env when the runs span several. Rows are sorted by rho within each block."""
    runs = runset.runs
    targets = default_targets(runset) if targets is None else list(targets)
    missing = [t for t in targets if len(runs) and t not in runs]
    if missing:
        have = sorted(c for c in runs.columns if c.startswith(("peak/val/", "final/val/")))
        raise ValueError(f"no run has target(s) {', '.join(missing)}; these do: {', '.join(have) or 'none'}")
    groups: list[tuple[str, pd.DataFrame]] = [("all", runs)]
    if by_env and "env" in runs and runs["env"].nunique() > 1:
        groups += [(str(env), part) for env, part in runs.groupby("env", sort=True)]
    rows = []
    for target in targets:
        for group, part in groups:
            noise = target_noise(part, target, runset.last_k)
            block = []
            for diag in diagnostics:
                col = f"{stat}/{diag}"
                chance_col = col + "@chance"
                if col not in part and chance_col not in part:
                    continue  # not logged by any run (an all-babbling sweep keeps its MI rows: at chance)
                rho, p, n, lo, hi = _corr(part, col, target, n_boot, seed, level)
                if chance_col in part:
                    rho_c, p_c, n_c, lo_c, hi_c = _corr(part, chance_col, target, n_boot, seed, level)
                    plain = pd.to_numeric(part[col], errors="coerce") if col in part else pd.Series(np.nan, index=part.index)
                    tgt = pd.to_numeric(part.get(target, pd.Series(np.nan, index=part.index)), errors="coerce")
                    undefined = int((plain.isna() & pd.to_numeric(part[chance_col], errors="coerce").notna() & tgt.notna()).sum())
                else:
                    rho_c, p_c, n_c, lo_c, hi_c, undefined = rho, p, n, lo, hi, 0
                paper, paper_lo, paper_hi = PAPER_SPEARMAN.get(diag, ("", math.nan, math.nan))
                block.append(
                    {
                        "diagnostic": diag,
                        "target": target,
                        "rho": rho,
                        "p_value": p,
                        "n": n,
                        "ci_low": lo,
                        "ci_high": hi,
                        "group": group,
                        "stat": stat,
                        "n_undefined": undefined,
                        "rho_at_chance": rho_c,
                        "p_value_at_chance": p_c,
                        "n_at_chance": n_c,
                        "ci_low_at_chance": lo_c,
                        "ci_high_at_chance": hi_c,
                        "paper": paper,
                        "paper_low": paper_lo,
                        "paper_high": paper_hi,
                        "target_spread": noise["spread"],
                        "eval_se": noise["se"],
                        "can_speak": noise["can_speak"],
                    }
                )
            block.sort(key=lambda r: (not math.isfinite(r["rho"]), -r["rho"] if math.isfinite(r["rho"]) else 0.0))
            rows += block
    return pd.DataFrame(rows, columns=COLUMNS + EXTRA)


def verdict(noise_spread: float, se: float, can: bool | None, target: str, episodes: float = math.nan, n: int | None = None) -> str:
    """The can-it-speak sentence of one table (``n``: the runs that have ``target``)."""
    eps = f", {fmt(episodes, 0)} episodes per value" if math.isfinite(episodes) else ""
    if (n is not None and n < 2) or (n is None and not math.isfinite(noise_spread)):
        return f"Fewer than two runs have `{target}`: nothing to correlate."
    few = n is not None and not spearman_min_p(n) < ALPHA
    too_few = (
        f"with {n} runs the smallest two-sided p an exact Spearman test can give is {fmt(spearman_min_p(n))} (2 / {n}!), "
        f"so no rho below can be told from chance at {ALPHA:g}, however large"
    )
    known = math.isfinite(noise_spread) and math.isfinite(se)
    numbers = f"spread of `{target}` across runs {fmt(noise_spread)} against an evaluation standard error of {fmt(se)}{eps}"
    if few:
        if not known:
            return f"**This table cannot speak**: {too_few}."
        noisy = "; the runs also differ by less than twice the evaluation noise" if not noise_spread >= 2 * se else ""
        return f"**This table cannot speak**: {too_few} ({numbers}{noisy})."
    if can is None:
        return f"`{target}` is not a success rate of known episode count, so its evaluation noise is unknown: read rho with care."
    if can:
        return f"The table can speak: {numbers} (spread >= 2 x noise)."
    return (
        f"**This table cannot speak**: {numbers}. The runs differ by less than twice what re-evaluating one run "
        "would change, so every rho below ranks evaluation noise, whatever its p-value."
    )


def spearman_markdown(table: pd.DataFrame, runset: RunSet | None = None) -> str:
    """The Spearman table as Markdown: one block per target and group, its verdict in words first."""
    out = ["# Spearman correlation of each diagnostic with held-out success\n"]
    if runset is not None:
        out.append(
            f"{len(runset.runs)} finished runs"
            + (f", {len(runset.skipped)} skipped (not finished or unreadable)" if len(runset.skipped) else "")
            + f"; diagnostics summarised by `{table['stat'].iloc[0] if len(table) else 'mean'}` over post-update steps; "
            "bootstrap 95% intervals over runs (seeded); p two-sided, exact (every pairing of the ranks) "
            f"up to {EXACT_SPEARMAN_MAX_N} runs, scipy's t approximation above. Paper: RAGEN-2, docs/method.md section 8.\n"
        )
    if table.empty:
        out.append("_No diagnostic and target found in these runs._\n")
        return "\n".join(out)
    for (target, group), block in table.groupby(["target", "group"], sort=False):
        first = block.iloc[0]
        out.append(f"## `{target}`, {'all runs' if group == 'all' else 'env ' + group}\n")
        episodes, n_runs = math.nan, int(block["n"].max())
        if runset is not None:
            part = runset.runs if group == "all" else runset.runs[runset.runs["env"] == group]
            noise = target_noise(part, target, runset.last_k)
            episodes, n_runs = noise["episodes"], noise["n_runs"]
        can = first["can_speak"]
        can = None if can is None or (isinstance(can, float) and math.isnan(can)) else bool(can)
        out.append(verdict(first["target_spread"], first["eval_se"], can, target, episodes, n_runs) + "\n")
        any_undefined = (block["n_undefined"] > 0).any()
        view = pd.DataFrame(
            {
                "diagnostic": block["diagnostic"].map(lambda d: f"`{d}`"),
                "rho [95% CI]": [fmt_ci(r, lo, hi) for r, lo, hi in zip(block["rho"], block["ci_low"], block["ci_high"])],
                "p": block["p_value"],
                "n": block["n"].astype(int),
            }
        )
        if any_undefined:
            view["rho, undefined MI at chance [95% CI]"] = [
                fmt_ci(r, lo, hi) for r, lo, hi in zip(block["rho_at_chance"], block["ci_low_at_chance"], block["ci_high_at_chance"])
            ]
            view["n (at chance)"] = block["n_at_chance"].astype(int)
        view["paper"] = block["paper"]
        out.append(md_table(view))
        if (block["rho"].isna() & (block["n"] >= 3)).any():
            out.append("`-`: rho is undefined because the diagnostic or the target is constant across these runs.\n")
        if any_undefined:
            undefined = block[block["n_undefined"] > 0]
            names = ", ".join(f"`{d}` ({int(k)})" for d, k in zip(undefined["diagnostic"], undefined["n_undefined"]))
            out.append(
                f"Runs whose MI was undefined (no valid reasoning) drop out of the plain rho: {names}; "
                "the 'at chance' column keeps them at the proxy's chance value.\n"
            )
    return "\n".join(out)
