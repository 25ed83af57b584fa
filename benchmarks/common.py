"""The benchmarks' one harness and what they share: each benchmark declares itself as a :class:`Benchmark`
(its name, its own flags, how it measures) and :func:`run` parses its command line (the flags every
benchmark spells the same way, then its own), hands it a :class:`Results` that saves and reports under its
name with the provenance each record carries, and runs it; beside it, timing, alternating arms (within a
time budget), the matmul limit, a worktree of an older commit, the timed training run (``agentcollapse
train`` in a subprocess) and the configs they compose.

Every benchmark runs from the repository root as a module, ``python -m benchmarks.<name>`` (the
Makefile's ``bench-*`` targets), so it imports this one as ``benchmarks.common``::

    def flags(ap): ap.add_argument("--steps", type=int, default=5)
    def main(args, save): ... save.json({...}); save.markdown(lines)
    BENCHMARK = Benchmark("name", __doc__, main, flags, repeats=2)
    if __name__ == "__main__": run(BENCHMARK)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agentcollapse.progress import peak_rss_mib

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CODE = ("src", "benchmarks", ":(exclude)benchmarks/results")  # what a measurement depends on (results/ is its output)
# The per-phase times every training run logs (perf/*), by the names the benchmarks report them under.
PHASES = {
    "step": "perf/step_time_s",
    "rollout": "perf/rollout_time_s",
    "scoring": "perf/scoring_time_s",
    "update": "perf/update_time_s",
    "proxy": "perf/collapse_time_s",
}


# -- results and their provenance ----------------------------------------------------------------
def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def commit() -> str:
    """Short hash of HEAD, with ``+dirty`` when tracked files under src/ or benchmarks/ (but results/) differ from it."""
    head = _git("rev-parse", "--short", "HEAD").stdout.strip() or "unknown"
    return head + ("+dirty" if _git("status", "--porcelain", "--untracked-files=no", "--", *CODE).stdout.strip() else "")


def code_changed_since(measured_at: str) -> bool:
    """Whether src/ or benchmarks/ differ between the commit a result was measured at and the working tree
    (unknown commits and ``+dirty`` measurements count as changed)."""
    if measured_at.endswith("+dirty") or measured_at == "unknown":
        return True
    return _git("diff", "--quiet", measured_at, "--", *CODE).returncode != 0


def command() -> str:
    """This process's command line, as ``python -m <module> ...`` when it was started with ``-m``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return " ".join([f"python -m {spec.name}" if spec is not None else sys.argv[0], *sys.argv[1:]])


def kept_rows(path: Path, measured: set[tuple[Any, ...]], key: Callable[[dict[str, Any]], tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The rows saved in ``path`` that this run does not measure again (``key(row)`` not in ``measured``), each
    stamped with its own run's commit, date and overrides: a benchmark measured a row at a time keeps the rest."""
    if not path.exists():
        return []
    old = json.loads(path.read_text())
    stamp = {k: old.get(k) for k in ("commit", "measured_at", "model_overrides")}
    return [{**stamp, **row} for row in old.get("rows", []) if key(row) not in measured]


def save_result(name: str, data: dict[str, Any], out: str | Path = RESULTS) -> Path:
    """Write ``<out>/<name>.json``: ``data`` plus when, at which commit and by which command it was measured,
    and the process's peak memory."""
    record = {
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "command": command(),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        **data,
    }
    path = Path(out) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str))
    return path


def save_markdown(name: str, lines: list[str], out: str | Path = RESULTS) -> Path:
    """Write ``<out>/<name>.md`` from its lines."""
    path = Path(out) / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


# -- timing and alternation ----------------------------------------------------------------------------
def timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[float, T]:
    """(wall seconds, result) of ``fn(*args, **kwargs)``."""
    started = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - started, out


def median(values: Sequence[float]) -> float:
    """The median, nan when there are no values."""
    return statistics.median(values) if values else float("nan")


def turn_order(arms: Sequence[T], rep: int, swap: bool = False) -> Sequence[T]:
    """The arms in the order round ``rep`` runs them: as given, or reversed every other round with ``swap``
    (ABBA: neither arm always runs first, after the other has warmed the machine)."""
    return arms[::-1] if swap and rep % 2 else arms


def alternating(arms: Sequence[T], repeats: int, swap: bool = False) -> Iterator[tuple[int, T]]:
    """(round, arm) for ``repeats`` rounds of every arm in turn, so machine noise hits each arm alike."""
    for rep in range(repeats):
        for arm in turn_order(arms, rep, swap):
            yield rep, arm


def medians(times: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """The median of each named list of measurements (nan for an empty one)."""
    return {name: median(values) for name, values in times.items()}


def rounds_within(repeats: int, max_minutes: float, started: float) -> Iterator[int]:
    """Round numbers 0..``repeats``-1, stopping before a round that would end past ``max_minutes``
    after ``started`` (``time.perf_counter``), judged by the longest round so far (0: no limit): a
    benchmark cut short by its budget still finishes every round it starts."""
    longest = 0.0
    for rep in range(repeats):
        elapsed = time.perf_counter() - started
        if rep and max_minutes and elapsed + longest > max_minutes * 60:
            print(f"time limit: another round (~{longest:.0f} s) would end past {max_minutes} min; stopping after {rep}", flush=True)
            return
        round_started = time.perf_counter()
        yield rep
        longest = max(longest, time.perf_counter() - round_started)


# -- this CPU's matmul limit -------------------------------------------------------------------------
def matmul_probe(shapes: list[tuple[int, int, int]], threads: int, repeats: int = 20, dtype: str = "float32") -> dict[str, float]:
    """GFLOP/s of ``torch.matmul`` for each (rows, k, n), in ``dtype`` (bf16: avx512_bf16 on these CPUs, AMX on newer ones)."""
    import torch

    torch.set_num_threads(threads)
    out = {}
    for m, k, n in shapes:
        a, b = torch.randn(m, k, dtype=getattr(torch, dtype)), torch.randn(k, n, dtype=getattr(torch, dtype))
        for _ in range(3):
            a @ b
        started = time.perf_counter()
        for _ in range(repeats):
            a @ b
        out[f"{m}x{k}x{n}"] = 2 * m * k * n * repeats / (time.perf_counter() - started) / 1e9
    return out


def best_probe(probes: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each shape's best rate over several :func:`matmul_probe` results: a limit is a maximum, and one
    probe on a shared machine can read 30% low, so benchmarks probe before and after their runs."""
    return {shape: max(p[shape] for p in probes) for shape in probes[0]}


def linear_params(model_dir: Path) -> tuple[int, dict[str, int]]:
    """(weights every token passes through: the decoder's projections and the LM head, sizes) of a Llama-shaped model."""
    c = json.loads((model_dir / "config.json").read_text())
    h, i, layers, vocab = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    kv = h * c.get("num_key_value_heads", c["num_attention_heads"]) // c["num_attention_heads"]
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * i
    return layers * per_layer + h * vocab, {"hidden": h, "intermediate": i, "kv": kv, "layers": layers, "vocab": vocab}


# -- command lines -------------------------------------------------------------------------------------
def bench_parser(
    doc: str | None,
    *,
    repeats: int | None = None,
    repeats_help: str | None = None,
    threads: int | None = None,
    out: str | Path | None = RESULTS,
    overrides: str | None = "extra Hydra overrides",
) -> argparse.ArgumentParser:
    """The flags every benchmark spells the same way: its docstring as the description, ``--repeats``
    (when ``repeats`` is given), ``--threads`` (when ``threads`` is), ``--out`` (the results folder;
    None: no flag) and the positional Hydra ``overrides`` (None: none). A benchmark adds its own flags."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if repeats is not None:
        ap.add_argument("--repeats", type=int, default=repeats, help=repeats_help)
    if threads is not None:
        ap.add_argument("--threads", type=int, default=threads, help="torch threads of each run")
    if out is not None:
        ap.add_argument("--out", default=str(out), help="folder the result files go to")
    if overrides is not None:
        ap.add_argument("overrides", nargs="*", help=overrides)
    return ap


@dataclass(frozen=True)
class Results:
    """Where a benchmark's measurements go: ``<out>/<name>.json`` with its provenance (:func:`save_result`)
    and ``<out>/<name>.md`` (:func:`save_markdown`), under the benchmark's name unless given another
    (one benchmark may write several results). A benchmark that measures row by row saves after each."""

    name: str
    out: Path

    def json(self, data: dict[str, Any], name: str | None = None) -> Path:
        return save_result(name or self.name, data, self.out)

    def markdown(self, lines: list[str], name: str | None = None, echo: bool = False) -> Path:
        """Save the lines; ``echo``: print them too."""
        if echo:
            print("\n".join(lines))
        return save_markdown(name or self.name, lines, self.out)


@dataclass(frozen=True)
class Benchmark:
    """One benchmark, as :func:`run` runs it: ``name`` names its result files, ``doc`` is its ``--help``,
    ``flags(ap)`` adds its own flags to the shared ones (:func:`bench_parser`: ``repeats``, ``threads``, ``out``
    and ``overrides`` as there), and ``main(args, save)`` measures and saves through ``save``."""

    name: str
    doc: str | None
    main: Callable[[argparse.Namespace, Results], None]
    flags: Callable[[argparse.ArgumentParser], None] | None = None
    repeats: int | None = None
    repeats_help: str | None = None
    threads: int | None = None
    out: str | Path | None = RESULTS
    overrides: str | None = "extra Hydra overrides"


def parser(bench: Benchmark) -> argparse.ArgumentParser:
    """The benchmark's command line: the shared flags (:func:`bench_parser`), then its own."""
    ap = bench_parser(
        bench.doc, repeats=bench.repeats, repeats_help=bench.repeats_help, threads=bench.threads, out=bench.out, overrides=bench.overrides
    )
    if bench.flags is not None:
        bench.flags(ap)
    return ap


def run(bench: Benchmark, argv: list[str] | None = None) -> None:
    """Parse the command line (overrides may come before and after the flags) and measure, saving under
    ``--out`` (the results folder when the benchmark has no ``--out``)."""
    args = parser(bench).parse_intermixed_args(argv)
    out = Path(args.out) if bench.out is not None else RESULTS
    bench.main(args, Results(bench.name, out))


def floats(text: str) -> list[float]:
    """A comma-separated list of floats (an argparse ``type``)."""
    return [float(x) for x in csv_list(text)]


def csv_list(text: str) -> list[str]:
    """A comma-separated list, blanks dropped (an argparse ``type``)."""
    return [x.strip() for x in text.split(",") if x.strip()]


def with_model(overrides: list[str], model: str = "smollm2-135m") -> list[str]:
    """``overrides`` with ``model=<model>`` first unless they choose a model themselves."""
    return overrides if any(o.startswith("model=") for o in overrides) else [f"model={model}", *overrides]


# -- an older commit's code ------------------------------------------------------------------------------
@contextlib.contextmanager
def worktree(commit: str, path: Path) -> Iterator[Path]:
    """A detached ``git worktree`` of ``commit`` at ``path`` for the duration (removed after, also on
    error), so a benchmark runs an older version's code beside this one."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit], check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], capture_output=True)


# -- configs and timed training runs ---------------------------------------------------------------------
def timed_run_overrides(steps: int, threads: int) -> list[str]:
    """A run timed by its own perf/* metrics: no validation, no checkpoints, no live bar, CSV only."""
    return [
        f"trainer.max_steps={steps}",
        "trainer.val_every=0",
        "trainer.checkpoint_every=0",
        f"trainer.num_threads={threads}",
        "trainer.progress_bar=false",
        "logger=csv",
    ]


def iteration_overrides(steps: int, threads: int) -> list[str]:
    """The benchmarked iteration: FrozenLake P=8 x G=8, the MI proxy at step 1 and every 5 steps, timed."""
    return [
        "env=frozenlake",
        "rollout.num_prompts=8",
        "rollout.group_size=8",
        "diagnostics.compute_freq=5",
        *timed_run_overrides(steps, threads),
    ]


def policy_dir(overrides: list[str]) -> Path:
    """The warm-started policy ``overrides`` train (built here first if missing, as ``make base-model`` does)."""
    from agentcollapse.models.policy import resolve_model_dir
    from agentcollapse.run.checks import compose_run as compose

    cfg = compose(overrides)
    return Path(resolve_model_dir(cfg.model, cfg.env, cfg.cache_dir))


CLOCKS = ("wall", "cpu")
CPU_CLOCK = Path(__file__).resolve().parent / "cpu_clock"  # its sitecustomize makes perf_counter read CPU time


def subprocess_env(src: Path, threads: int | None = None, clock: str = "wall") -> dict[str, str]:
    """The environment of a child process that runs the code under ``src``: no wandb, ``threads``
    OpenMP threads when given, and (``clock="cpu"``) phase timers that read the process's CPU time."""
    path = f"{CPU_CLOCK}{os.pathsep}{src}" if clock == "cpu" else str(src)
    env = {**os.environ, "PYTHONPATH": path, "WANDB_MODE": "disabled"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def measured_train(src: Path, overrides: list[str], run_dir: Path, threads: int, clock: str = "wall") -> tuple[Any, float]:
    """(every metrics.csv row by step, step 0's evaluation included; peak resident memory in MiB) of one
    ``agentcollapse train`` of the code under ``src``, its perf/* times on ``clock`` (:data:`CLOCKS`).
    Output goes to ``<run_dir>.log``, a pipe nobody reads could fill up and stall it."""
    import pandas as pd

    cmd = [sys.executable, "-m", "agentcollapse.cli.main", "train", *overrides, f"run_dir={run_dir}"]
    log = run_dir.parent / f"{run_dir.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=subprocess_env(src, threads, clock), stdout=out, stderr=subprocess.STDOUT, cwd=src.parent)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not every child's maximum
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"run failed ({src}):\n{log.read_text()[-3000:]}")
    rows = pd.read_csv(run_dir / "metrics.csv")
    return rows.sort_values("step"), usage.ru_maxrss / 1024  # Linux: KiB


def train_rows(src: Path, overrides: list[str], run_dir: Path, threads: int) -> Any:
    """The metrics.csv rows after step 0 of one ``agentcollapse train`` of the code under ``src``."""
    rows = measured_train(src, overrides, run_dir, threads)[0]
    return rows[rows["step"] >= 1]


def timed_phases(rows: Any, columns: Mapping[str, str] = PHASES, from_step: int = 2) -> dict[str, list[float]]:
    """Each phase's per-step values from ``from_step`` on (step 1 pays one-off costs: an engine's start, a
    first batch an overlapped run waits for); a phase the run did not log is empty."""
    later = rows[rows["step"] >= from_step]
    return {name: later[col].dropna().tolist() if col in later else [] for name, col in columns.items()}


def smollm2_engine_overrides(steps: int, group_size: int, compute_freq: int) -> list[str]:
    """A timed SmolLM2-135M run on FrozenLake (its warm start) with its vLLM engine, P=4 x ``group_size``, the
    MI proxy every ``compute_freq`` steps (0: at step 1 only), one thread: bench-ranks' and bench-async's."""
    return [
        "model=smollm2-135m",
        "env=frozenlake",
        "rollout.engine=vllm",
        "rollout.vllm.kv_cache_gib=1",
        "rollout.num_prompts=4",
        f"rollout.group_size={group_size}",
        f"diagnostics.compute_freq={compute_freq}",
        *timed_run_overrides(steps, 1),
    ]


def timed_arms(
    arms: Mapping[str, list[str]],
    base: list[str],
    repeats: int,
    columns: Mapping[str, str] = PHASES,
    threads: Mapping[str, int] | None = None,
    engine_cores: Mapping[str, str] | None = None,
) -> dict[str, dict[str, list[float]]]:
    """``repeats`` rounds of one ``agentcollapse train`` per arm (``base`` + the arm's overrides), alternating
    (ABBA), each arm's phases from step 2 on (:func:`timed_phases`). ``threads``: an arm's OMP threads (else 1);
    ``engine_cores``: the cores an arm's vLLM engine binds to (else vLLM's own choice)."""
    times: dict[str, dict[str, list[float]]] = {arm: {name: [] for name in columns} for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for k, (rep, arm) in enumerate(alternating(list(arms), repeats, swap=True)):
            os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
            if engine_cores and arm in engine_cores:
                os.environ["VLLM_CPU_OMP_THREADS_BIND"] = engine_cores[arm]
            rows, _ = measured_train(ROOT / "src", [*base, *arms[arm]], Path(tmp) / f"run{k}", (threads or {}).get(arm, 1))
            for name, values in timed_phases(rows, columns).items():
                times[arm][name] += values
            print(f"round {rep} {arm}: step {median(timed_phases(rows)['step']):.2f} s", flush=True)
    return times


def arms_lines(
    title: str, table: Mapping[str, Mapping[str, float]], ratios: Sequence[str], reference: str, label: str | None = None
) -> list[str]:
    """A Markdown table of each arm's phase medians (seconds) and, for each of ``ratios``, the arm's value over
    the ``reference`` arm's (headed ``<phase> / <label>``, the reference's name by default), under ``title``."""
    import pandas as pd

    from agentcollapse.analysis.markdown import md_table

    ref = table[reference]
    frame = pd.DataFrame(
        [
            {
                "arm": arm,
                **{f"{c} (s)": f"{v:.2f}" for c, v in r.items()},
                **{f"{c} / {label or reference}": f"{r[c] / ref[c]:.2f}" for c in ratios},
            }
            for arm, r in table.items()
        ]
    )
    return [title, "", md_table(frame)]


def phase_lists(rows: Any) -> dict[str, list[float]]:
    """Per-step values of each phase and of the rollout's size from one run's rows."""
    out = {name: rows[col].fillna(0.0).tolist() if col in rows else [] for name, col in PHASES.items()}
    out["tokens_per_s"] = rows["perf/rollout_tokens_per_s"].tolist()
    out["response_length"] = rows["rollout/response_length"].tolist()
    out["num_turns"] = rows["rollout/num_turns"].tolist()
    return out
