"""Template-collapse simulator demo: the MI proxy falls with template weight while H(Z|X) stays flat.

Trains the tiny simulator policy (a few seconds on CPU), then for each template weight simulates one
P x G batch, cross-scores it (first-turn sampler) and prints retrieval accuracy, MI estimate, MI
z-score, conditional entropy and the chance level. ``--regimes`` also prints the four corners of
METHOD.md section 2 (diverse / template collapse / compressed / low-entropy collapse).

    .venv/bin/python benchmarks/collapse_simulator_demo.py --help
"""

from __future__ import annotations

import argparse
import time

import torch

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
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

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
        print("\nregimes (METHOD.md section 2):")
        print(_header())
        corners = [("diverse", 0.0, 1.0), ("template collapse", 1.0, 1.0), ("compressed", 0.0, 0.0), ("low-entropy collapse", 1.0, 0.0)]
        for name, w, d in corners:
            m = run_simulation(
                w, d, num_prompts=args.num_prompts, group_size=args.group_size, seed=args.seed, scorer=get_scorer(d, steps=args.steps)
            )
            print(_row(name, m))


if __name__ == "__main__":
    main()
