"""Run records -> tidy frames: one row per finished run (its config, sweep axes and metric summaries)
and one long frame of every logged value.

Reads only run directories (``config.yaml`` + ``metrics.csv`` + ``summary.json``, found recursively);
a sweep's ``trials.csv`` (or, without it, its Optuna ``study.db``) only adds the trial number, its
status and the swept axes as columns, and names trials that left no readable run. Runs that are not
``finished`` (running, failed, interrupted) or whose records are missing or unreadable are skipped and
named in one :class:`SkippedRunsWarning`; they are never mixed in. Runs stopped early by the sweep's
pruner or by ``CollapseEarlyStopping`` are ``finished`` and stay in (they are the collapsed ones),
flagged ``stopped_early``.

Per metric ``m`` the run row holds (over post-update rows, ``step >= 1``; the step-0 evaluation of the
warm start is left out of every summary):

* ``final/m``: mean of the last ``last_k`` logged values;
* ``peak/m``: the largest value;
* ``mean/m``: the mean over the run;
* ``at/m``: the last value logged at or before ``at_step`` (only when ``at_step`` is given);
* ``evals/m``: how many values were logged (the number of held-out evaluations for ``val/*``).

**Undefined MI.** A proxy step is a row where ``collapse_<sampler>/valid_thinking_rate`` is logged (every
sampler of the diagnostics' registry, :func:`agentcollapse.diagnostics.sampler_names`); when no reasoning
was valid there, the MI metrics are missing (a policy driven to uniform babble has no
MI at all). For the MI proxies of :data:`CHANCE_ZERO` and :data:`CHANCE_RETRIEVAL`, ``<stat>/m@chance``
summarises the series with every undefined proxy step counted at its chance value (0 for MI estimates,
z-scores and above-chance retrieval; ``1/C`` for retrieval accuracy, ``min(k, C)/C`` at ``@k``, C the
run's last logged ``num_contexts``, else the number of prompts (the first-turn samplers) or
``min(trajectory_samples, P * G)`` (the trajectory ones)). The plain columns leave those steps out, so a run
whose MI was never defined has NaN there and drops out of a correlation; the ``@chance`` columns keep it.
"""

from __future__ import annotations

import csv
import json
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from agentcollapse.records import RUN_DIR, STRAY, TRIAL_COLUMNS, read_summary, trial_reason, trial_status

__all__ = [
    "CHANCE_RETRIEVAL",
    "CHANCE_ZERO",
    "LAST_K",
    "RunSet",
    "SkippedRunsWarning",
    "filter_arm",
    "find_run_dirs",
    "load_runs",
    "metric_summaries",
]

LAST_K = 3  # final/m: the mean of the last three values (for val/*: the last three held-out evaluations)
# MI metrics whose chance value is 0, and retrieval metrics whose chance is 1/C (min(k, C)/C at @k)
CHANCE_ZERO = (
    "mi_estimate",
    "mi_seq_estimate",
    "mi_zscore",
    "mi_zscore_seq",
    "mi_zscore_ema",
    "mi_zscore_ema_seq",
    "retrieval_above_chance",
    "retrieval_above_chance@2",
    "retrieval_above_chance@4",
    "retrieval_above_chance@8",
)
CHANCE_RETRIEVAL = ("retrieval_accuracy", "retrieval_accuracy@2", "retrieval_accuracy@4", "retrieval_accuracy@8")
RECORD_FILES = ("summary.json", "metrics.csv", "config.yaml")
STOPPED_EARLY = ("pruned", "collapse")  # reasons of finished runs that did not reach max_steps
STATS = ("final", "peak", "mean", "at", "evals")
# run-frame columns that are bookkeeping, not a setting to group by
HOUSEKEEPING = {
    "run_id",
    "run_dir",
    "source",
    "status",
    "reason",
    "stopped_early",
    "last_step",
    "steps_logged",
    "wall_time_s",
    "overrides",
    "trial",
    "trial_status",
    "trial_reason",
    "cache_dir",
    "resume",
}


class SkippedRunsWarning(UserWarning):
    """Some run directories were not finished or not readable; the message names each one."""


@dataclass
class RunSet:
    """What :func:`load_runs` returns."""

    runs: pd.DataFrame  # one row per finished run
    history: pd.DataFrame  # long: run_id, step, metric, value (every logged value, and the MI ``@chance`` series)
    skipped: pd.DataFrame  # run_dir, status, reason: everything left out, and why
    last_k: int = LAST_K
    at_step: int | None = None
    sources: list[str] = field(default_factory=list)

    @property
    def axes(self) -> list[str]:
        """Config keys and sweep axes whose value differs between the loaded runs (what to group by)."""
        out = []
        for col in self.runs.columns:
            if ("/" in col and not col.startswith("sweep/")) or col in HOUSEKEEPING or col.startswith("sweep."):
                continue
            if self.runs[col].astype(str).nunique(dropna=False) > 1:
                out.append(col)
        return out

    def __len__(self) -> int:
        return len(self.runs)


def _is_run_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in RECORD_FILES) and ".hydra" not in path.parts


def find_run_dirs(source: str | Path) -> list[Path]:
    """``source`` itself when it is a run directory, else every run directory below it (sorted, a
    trial's ``.hydra/`` and ``checkpoints/`` are not runs)."""
    source = Path(source)
    if _is_run_dir(source):
        return [source]
    found = set()
    for name in RECORD_FILES:
        for path in source.rglob(name):
            run = path.parent
            if ".hydra" in run.relative_to(source).parts or run.name == "checkpoints":
                continue
            found.add(run)
    # a run directory nested in another (e.g. a copied run inside one) is its own run; keep both
    return sorted(found, key=lambda p: [int(s) if s.isdigit() else s for s in p.relative_to(source).parts])


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list | tuple):
        out[prefix] = json.dumps(list(value))
    else:
        out[prefix] = value


def _read_config(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(data, dict):
        return None
    flat: dict[str, Any] = {}
    _flatten("", data, flat)
    return flat


def _read_overrides(run_dir: Path) -> str:
    try:
        data = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return ""
    return " ".join(str(o) for o in data) if isinstance(data, list) else ""


def _read_metrics(run_dir: Path) -> pd.DataFrame | None:
    try:
        df = pd.read_csv(run_dir / "metrics.csv")
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    if "step" not in df.columns or df.empty:
        return None
    df = df.apply(pd.to_numeric, errors="coerce")
    df = df[df["step"].notna()].sort_values("step", kind="stable").reset_index(drop=True)
    return df if len(df) else None


def filter_arm(cfg: dict[str, Any]) -> str:
    """A short label of a run's filter: ``none``, ``trajectory k=4``, ``rv_top_p 0.9``, ``quartile Q2``,
    ``entropy 0.9`` (name, then the strategy's value)."""
    name = str(cfg.get("filter.name", "none"))
    if name in ("none", "nan", "None"):
        return "none"
    if name == "trajectory":
        return f"trajectory k={cfg.get('filter.trajectory_k', '')}"
    q = quartile_of(cfg)
    if q:
        return f"{name} {q}"
    value = cfg.get("filter.value", "")
    return f"{name} {value}".strip()


def quartile_of(cfg: dict[str, Any]) -> str:
    """``Q1``..``Q4`` for a ``percentile_range`` filter on one RV quartile (Q1 = highest RV), else ''."""
    if cfg.get("filter.strategy") != "percentile_range":
        return ""
    try:
        lo, hi = json.loads(cfg.get("filter.value", "")) if isinstance(cfg.get("filter.value"), str) else cfg.get("filter.value")
    except (TypeError, ValueError):
        return ""
    edges = {(0.0, 0.25): "Q1", (0.25, 0.5): "Q2", (0.5, 0.75): "Q3", (0.75, 1.0): "Q4"}
    return edges.get((round(float(lo), 4), round(float(hi), 4)), f"[{lo}, {hi})")


def _chance_series(df: pd.DataFrame, cfg: dict[str, Any]) -> dict[str, pd.Series]:
    """MI proxies with every undefined proxy step at its chance value (module docstring)."""
    out: dict[str, pd.Series] = {}
    prompts = float(cfg.get("rollout.num_prompts") or math.nan)
    group = float(cfg.get("rollout.group_size") or math.nan)
    traj = float(cfg.get("diagnostics.trajectory_samples") or math.nan)
    from agentcollapse.diagnostics import sampler_names, sampler_prefix

    for sampler in sampler_names():
        pre = f"{sampler_prefix(sampler)}/"
        proxy = df.get(pre + "valid_thinking_rate")
        if proxy is None or not proxy.notna().any():
            continue
        at_proxy = proxy.notna()
        contexts = df.get(pre + "num_contexts")
        c = contexts.dropna().iloc[-1] if contexts is not None and contexts.notna().any() else math.nan
        if not (c >= 1):
            c = prompts if sampler.startswith("first_turn") else np.nanmin([traj, prompts * group])
        for name in (*CHANCE_ZERO, *CHANCE_RETRIEVAL):
            series = df[pre + name] if pre + name in df else pd.Series(np.nan, index=df.index)
            if name in CHANCE_ZERO:
                chance = 0.0
            else:
                k = int(name.split("@")[1]) if "@" in name else 1
                chance = min(k, c) / c if c >= 1 else math.nan
            out[pre + name + "@chance"] = series.where(~(at_proxy & series.isna()), chance).where(at_proxy | series.notna())
    return out


def _summaries(df: pd.DataFrame, extra: dict[str, pd.Series], last_k: int, at_step: int | None) -> dict[str, float]:
    post = df["step"] >= 1
    row: dict[str, float] = {}
    columns = {c: df[c] for c in df.columns if c != "step"} | extra
    steps = df["step"]
    for name, series in columns.items():
        s = series[post].dropna()
        s = s[np.isfinite(s)]
        row[f"evals/{name}"] = float(len(s))
        if len(s) == 0:
            row[f"final/{name}"] = row[f"peak/{name}"] = row[f"mean/{name}"] = math.nan
        else:
            row[f"final/{name}"] = float(s.tail(last_k).mean())
            row[f"peak/{name}"] = float(s.max())
            row[f"mean/{name}"] = float(s.mean())
        if at_step is not None:
            upto = series[(steps <= at_step) & post].dropna()
            row[f"at/{name}"] = float(upto.iloc[-1]) if len(upto) else math.nan
    return row


def metric_summaries(run_dir: str | Path, metric: str, last_k: int = LAST_K) -> dict[str, float] | None:
    """``metric``'s ``final``, ``peak``, ``mean`` and ``evals`` in one run, as :func:`load_runs` has them in
    ``<stat>/<metric>`` (NaN when the run never logged it after step 0); None when its ``metrics.csv``
    is missing or unreadable."""
    metrics = _read_metrics(Path(run_dir))
    if metrics is None:
        return None
    column = metrics[metric] if metric in metrics else pd.Series(np.nan, index=metrics.index)
    row = _summaries(pd.DataFrame({"step": metrics["step"], metric: column}), {}, last_k, None)
    return {stat: row[f"{stat}/{metric}"] for stat in ("final", "peak", "mean", "evals")}


def _trials_table(sweep_dir: Path) -> pd.DataFrame | None:
    """The sweep's trials (``trials.csv``, else ``study.db``): trial, trial_status, run_dir, reason,
    ``sweep/<axis>`` columns. None when the directory holds neither."""
    path = sweep_dir / "trials.csv"
    if path.is_file():
        try:
            with path.open() as fh:
                rows = list(csv.DictReader(fh))
        except (OSError, csv.Error):
            rows = []
        if rows:
            axes = [c for c in rows[0] if c not in {*TRIAL_COLUMNS[0], *TRIAL_COLUMNS[1]}]
            table = pd.DataFrame(
                {
                    "trial": [r.get("trial", "") for r in rows],
                    "trial_status": [r.get("status", "") for r in rows],
                    "trial_run_dir": [r.get("run_dir") or str(sweep_dir / r.get("trial", "")) for r in rows],
                    "trial_reason": [r.get("reason", "") for r in rows],
                    **{f"sweep/{a}": [r.get(a, "") for r in rows] for a in axes},
                }
            )
            return table
    db = sweep_dir / "study.db"
    if db.is_file():
        return _study_db_table(db, sweep_dir)
    return None


def _study_db_table(db: Path, sweep_dir: Path) -> pd.DataFrame | None:
    """Trials read from an Optuna SQLite study through Optuna's API, read-only: number, state, axis values
    and the sweep's user attributes (status, run_dir, reason); a grid's strays are left out. None when
    the file is no Optuna study this Optuna reads."""
    from urllib.parse import quote

    import optuna
    from optuna.distributions import CategoricalDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = optuna.storages.RDBStorage(f"sqlite:///file:{quote(str(db.resolve()))}?mode=ro&uri=true", skip_table_creation=True)
        studies = [s.study_name for s in optuna.study.get_all_study_summaries(storage, include_best_trial=False)]
        trials = [t for name in studies for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)]
    except Exception:  # not a study (SQLAlchemy's error), or another Optuna's schema (Optuna's)
        return None
    rows = []
    for t in trials:
        if t.user_attrs.get(STRAY):
            continue
        row: dict[str, Any] = {
            "trial": str(t.number),
            "trial_status": trial_status(t),
            "trial_run_dir": str(t.user_attrs.get(RUN_DIR) or sweep_dir / str(t.number)),
        }
        if reason := trial_reason(t):
            row["trial_reason"] = reason
        for name, value in t.params.items():
            row[f"sweep/{name}"] = str(value) if isinstance(t.distributions.get(name), CategoricalDistribution) else value
        rows.append(row)
    return pd.DataFrame(rows) if rows else None


def _resolve(path: str | Path) -> str:
    try:
        return str(Path(path).resolve())
    except OSError:
        return str(path)


def load_runs(
    sources: str | Path | Iterable[str | Path],
    *,
    last_k: int = LAST_K,
    at_step: int | None = None,
    warn: bool = True,
) -> RunSet:
    """Load one sweep directory, several, or a list of run directories (module docstring)."""
    if isinstance(sources, str | Path):
        sources = [sources]
    sources = [Path(s) for s in sources]
    rows: list[dict[str, Any]] = []
    hist: list[pd.DataFrame] = []
    skipped: list[dict[str, str]] = []
    seen: set[str] = set()
    ids: set[str] = set()
    for source in sources:
        if not source.exists():
            skipped.append({"run_dir": str(source), "status": "missing", "reason": "no such directory"})
            continue
        trials = _trials_table(source) if source.is_dir() else None
        if trials is None and _is_run_dir(source):
            trials = _trials_table(source.parent)
        by_dir = {}
        if trials is not None:
            by_dir = {_resolve(r["trial_run_dir"]): r for r in trials.to_dict("records")}
        run_dirs = find_run_dirs(source)
        root = source if not _is_run_dir(source) else source.parent
        # With several sources a run is named by its sweep: "<sweep>/<trial>", whether the source was the
        # sweep or the trial's own directory (two sweeps' trial 0 given one by one must not collide).
        prefix = root.name if len(sources) > 1 else ""
        found_resolved = set()
        for run_dir in run_dirs:
            resolved = _resolve(run_dir)
            found_resolved.add(resolved)
            if resolved in seen:
                continue
            seen.add(resolved)
            trial = by_dir.get(resolved, {})
            row, metrics, why = _load_one(run_dir, last_k, at_step)
            if row is None:
                if why["status"] == "running" and trial.get("trial_status") in ("interrupted", "failed"):
                    # a killed worker leaves its record at "running"; the study knows what became of it
                    why = {"status": trial["trial_status"], "reason": trial.get("trial_reason") or "its worker was stopped"}
                skipped.append({"run_dir": str(run_dir), **why})
                continue
            rel = run_dir.relative_to(root).as_posix() if run_dir != root else run_dir.name
            run_id = f"{prefix}/{rel}" if prefix else rel
            if run_id in ids:  # same-named sweeps in different places: the path is unique
                run_id = str(run_dir)
            ids.add(run_id)
            row = {"run_id": run_id, "run_dir": str(run_dir), "source": str(source), **row}
            for k, v in trial.items():
                if k != "trial_run_dir":
                    row[k] = v
            rows.append(row)
            long = metrics.melt(id_vars="step", var_name="metric", value_name="value").dropna(subset=["value"])
            long.insert(0, "run_id", run_id)
            hist.append(long)
        for resolved, trial in by_dir.items():  # trials that left no run directory at all
            if resolved not in found_resolved and resolved not in seen:
                status = trial.get("trial_status", "") or "unknown"
                reason = trial.get("trial_reason", "") or ("not started" if status == "waiting" else "no run record")
                skipped.append({"run_dir": trial["trial_run_dir"], "status": f"trial {trial.get('trial', '?')} {status}", "reason": reason})
    runs = pd.DataFrame(rows)
    if len(runs):
        runs = runs.set_index("run_id", drop=False)
        runs.index.name = None
    history = pd.concat(hist, ignore_index=True) if hist else pd.DataFrame(columns=["run_id", "step", "metric", "value"])
    skipped_df = pd.DataFrame(skipped, columns=["run_dir", "status", "reason"])
    if warn and len(skipped_df):
        named = "; ".join(f"{r.run_dir} ({r.status}{': ' + _short(r.reason) if r.reason else ''})" for r in skipped_df.itertuples())
        warnings.warn(SkippedRunsWarning(f"skipped {len(skipped_df)} run(s) that are not finished or not readable: {named}"), stacklevel=2)
    return RunSet(runs, history, skipped_df, last_k=last_k, at_step=at_step, sources=[str(s) for s in sources])


def _short(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _load_one(run_dir: Path, last_k: int, at_step: int | None) -> tuple[dict[str, Any] | None, pd.DataFrame | None, dict[str, str]]:
    summary = read_summary(run_dir)
    if summary is None:
        exists = (run_dir / "summary.json").exists()
        return None, None, {"status": "half-written", "reason": "summary.json unreadable" if exists else "no summary.json"}
    status = summary.get("status")
    if status != "finished":
        return None, None, {"status": str(status), "reason": str(summary.get("reason", ""))}
    cfg = _read_config(run_dir)
    if cfg is None:
        return None, None, {"status": "half-written", "reason": "config.yaml missing or unreadable"}
    metrics = _read_metrics(run_dir)
    if metrics is None:
        return None, None, {"status": "half-written", "reason": "metrics.csv missing, empty or unreadable"}
    reason = str(summary.get("reason", ""))
    row: dict[str, Any] = {
        "status": status,
        "reason": reason,
        "stopped_early": reason.startswith(STOPPED_EARLY),
        "last_step": int(metrics["step"].max()),
        "steps_logged": len(metrics),
        "wall_time_s": summary.get("wall_time_s", math.nan),
        "overrides": _read_overrides(run_dir),
        "env": cfg.get("env.name", ""),
        "algorithm": cfg.get("algorithm.name", ""),
        "filter": filter_arm(cfg),
        "quartile": quartile_of(cfg),
        "seed": cfg.get("seed", math.nan),
        "slip": cfg.get("env.kwargs.slip", math.nan),
        **cfg,
    }
    chance = _chance_series(metrics, cfg)
    row.update(_summaries(metrics, chance, last_k, at_step))
    return row, metrics.assign(**chance) if chance else metrics, {}


def metric_names(runset: RunSet, stat: str = "final") -> list[str]:
    """Every metric that has a ``<stat>/`` column."""
    pre = f"{stat}/"
    return sorted(c[len(pre) :] for c in runset.runs.columns if c.startswith(pre))


def value_column(metric: str, stat: str = "mean", chance: bool = False) -> str:
    """The run-frame column of ``metric`` summarised by ``stat`` (``@chance`` variant when asked and it exists)."""
    return f"{stat}/{metric}" + ("@chance" if chance else "")


def subset(runset: RunSet, mask: Sequence[bool] | pd.Series) -> RunSet:
    """The runs where ``mask`` holds, with their history."""
    runs = runset.runs[np.asarray(mask, dtype=bool)]
    history = runset.history[runset.history["run_id"].isin(runs["run_id"])]
    return RunSet(runs, history, runset.skipped, runset.last_k, runset.at_step, runset.sources)
