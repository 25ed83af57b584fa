"""Did mutual information predict success better than entropy? Spearman table over finished runs.

    .venv/bin/python analysis/correlations.py multirun/frozenlake/<time>

One row per run (diagnostics averaged over the run), correlated with the run's peak held-out success.
"""

from agentcollapse.analysis.runs import load_runs, spearman_table

if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="a sweep directory (or any folder holding run directories)")
    ap.add_argument("--target", default="peak/val/success_rate")
    args = ap.parse_args()
    runs, skipped = load_runs(args.root)
    print(f"{len(runs)} finished runs, {len(skipped)} skipped (unfinished or unreadable)")
    if len(runs):
        print(spearman_table(runs, args.target).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
