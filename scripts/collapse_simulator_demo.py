"""Template-collapse simulator demo: the MI proxy falls with template weight while H(Z|X) stays flat.

Trains the tiny simulator policy (a few seconds on CPU), then for each template weight simulates one
P x G batch, cross-scores it (first-turn sampler) and prints retrieval accuracy, MI estimate, MI
z-score, conditional entropy and the chance level. ``--regimes`` also prints the four corners of
docs/method.md section 2 (diverse / template collapse / compressed / low-entropy collapse). ``--out DIR``
sweeps every weight at diversity 0 and 1 over ``--seeds`` and writes ``simulator.csv`` (one row per
weight, diversity and seed), ``simulator.md`` (mean and spread per cell) and ``simulator.png``.

    .venv/bin/python -m scripts.collapse_simulator_demo --help
    .venv/bin/python -m scripts.collapse_simulator_demo --out docs/results --seeds 0 1 2   # docs/results.md
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from agentcollapse.analysis.markdown import md_table
from agentcollapse.analysis.plots import plot_simulator
from agentcollapse.diagnostics.simulator import get_scorer, run_simulation

COLUMNS = (
    ("retrieval_accuracy", "retr_acc"),
    ("retrieval_chance_level", "chance"),
    ("mi_estimate", "MI/tok"),
    ("mi_seq_estimate", "MI_seq"),
    ("mi_zscore", "MI_z"),
    ("conditional_entropy_est", "H(Z|X)/tok"),
)


def _row(label: str, metrics: dict[str, float]) -> str:
    return f"{label:>22} " + " ".join(f"{metrics[k]:>11.3f}" for k, _ in COLUMNS)


def _header() -> str:
    return f"{'':>22} " + " ".join(f"{name:>11}" for _, name in COLUMNS)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--weights",
        type=float,
        nargs="+",
        default=[0.0, 0.25, 0.5, 0.75, 1.0],
        help="template weights to sweep (default: 0 0.25 0.5 0.75 1)",
    )
    ap.add_argument("--diversity", type=float, default=1.0, help="within-input synonym diversity in [0, 1]")
    ap.add_argument("--num-prompts", type=int, default=8, help="P: prompts (columns) per batch")
    ap.add_argument("--group-size", type=int, default=8, help="G: traces per prompt")
    ap.add_argument("--seed", type=int, default=0, help="simulation seed")
    ap.add_argument("--steps", type=int, default=200, help="training steps of the tiny scorer")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--regimes", action="store_true", help="also print the four (weight, diversity) corners")
    ap.add_argument("--out", type=Path, help="write simulator.csv/.md/.png here (every weight x diversity 0, 1 x --seeds)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="simulation seeds for --out (default: 0 1 2)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.out is not None:
        write_sweep(args.out, args.weights, args.seeds, args.num_prompts, args.group_size, args.steps)
        return

    t0 = time.perf_counter()
    scorer = get_scorer(args.diversity, steps=args.steps)
    print(
        f"trained scorer (diversity={args.diversity}) in {time.perf_counter() - t0:.1f}s, "
        f"final loss {scorer.train_log[-1]:.3f}; P={args.num_prompts} G={args.group_size}"
    )
    print(_header())
    for w in args.weights:
        m = run_simulation(w, args.diversity, num_prompts=args.num_prompts, group_size=args.group_size, seed=args.seed, scorer=scorer)
        print(_row(f"template_weight={w:g}", m))

    if args.regimes:
        print("\nregimes (docs/method.md section 2):")
        print(_header())
        corners = [("diverse", 0.0, 1.0), ("template collapse", 1.0, 1.0), ("compressed", 0.0, 0.0), ("low-entropy collapse", 1.0, 0.0)]
        for name, w, d in corners:
            m = run_simulation(
                w, d, num_prompts=args.num_prompts, group_size=args.group_size, seed=args.seed, scorer=get_scorer(d, steps=args.steps)
            )
            print(_row(name, m))


def write_sweep(out: Path, weights: list[float], sim_seeds: list[int], num_prompts: int, group_size: int, steps: int) -> None:
    """Every weight at diversity 0 and 1 over ``sim_seeds``: the CSV, a Markdown summary and the plot."""
    rows = []
    for diversity in (0.0, 1.0):
        scorer = get_scorer(diversity, steps=steps)
        for w in weights:
            for seed in sim_seeds:
                m = run_simulation(w, diversity, num_prompts=num_prompts, group_size=group_size, seed=seed, scorer=scorer)
                rows.append({"seed": seed, **{k: m[k] for k in ("template_weight", "diversity")}, **{k: m[k] for k, _ in COLUMNS}})
                print(_row(f"w={w:g} d={diversity:g} s={seed}", m))
    frame = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "simulator.csv", index=False)
    cells = frame.groupby(["diversity", "template_weight"])[[k for k, _ in COLUMNS]].agg(["mean", "std"])
    cells.columns = [f"{k} {stat}" for k, stat in cells.columns]
    (out / "simulator.md").write_text(
        f"Template-collapse simulator, P={num_prompts} x G={group_size}, seeds {sim_seeds} (mean and std over seeds):\n\n"
        + md_table(cells.reset_index())
        + "\n"
    )
    plot_simulator(frame, out / "simulator.png")
    print(f"wrote {out / 'simulator.csv'}, simulator.md, simulator.png ({len(frame)} rows)")


if __name__ == "__main__":
    main()
