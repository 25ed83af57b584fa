"""It learns: held-out success of the warm-started tiny policy before and after RL.

    python -m benchmarks.bench_learning [--algorithms grpo,dr_grpo,dapo,ppo,grpo+gspo,grpo+cispo,grpo+sapo]
                                        [--seeds 0,1,2] [--steps 40] [--episodes 200] [overrides ...]

An entry ``preset+loss`` is the preset with ``algorithm.policy_loss=loss`` (and that loss's own
defaults: GSPO's clip 3e-4/4e-4, CISPO's cap 5, SAPO's gate), one row per loss.

Each (algorithm, seed) is an ordinary training run (run records under benchmarks/results/learning/);
its step-0 and final validation rows give success on the held-out maps (seeds 0..episodes-1) at
temperature 1.0 (the training temperature), 0.5 and greedy. Seeds are pooled per algorithm; 95% Wilson
intervals. Not a test: about 10-13 minutes per run on one thread (P=8 x G=8 by default). Budget by
iterations (--steps), not wall time. Measured: GRPO T=1.0 0.630 -> 0.830 over 3 seeds (see the issue notes).
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from agentcollapse.analysis.stats import wilson_interval
from agentcollapse.run.checks import compose_run as compose_config
from benchmarks.common import RESULTS, csv_list, timed

LOSS_ROWS = ["grpo+gspo", "grpo+cispo", "grpo+sapo"]  # GRPO's advantages and KL under each other policy loss


def algorithm_overrides(entry: str) -> list[str]:
    """``grpo`` -> algorithm=grpo; ``grpo+gspo`` -> algorithm=grpo algorithm.policy_loss=gspo."""
    preset, _, loss = entry.partition("+")
    return [f"algorithm={preset}", *([f"algorithm.policy_loss={loss}"] if loss else [])]


TEMPERATURES = {"val/success_rate_t1": "T=1.0", "val/success_rate": "T=0.5", "val/success_rate_greedy": "greedy"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--algorithms", type=csv_list, default=["grpo", "dr_grpo", "dapo", "ppo", *LOSS_ROWS], help="presets; preset+loss for a policy loss"
    )
    ap.add_argument("--seeds", type=lambda t: [int(x) for x in csv_list(t)], default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40, help="RL iterations per run")
    ap.add_argument("--episodes", type=int, default=200, help="held-out maps evaluated before and after")
    ap.add_argument("--out", default=str(RESULTS / "learning"))
    ap.add_argument("overrides", nargs="*", help="Hydra overrides applied to every run")
    args = ap.parse_args()

    from agentcollapse.run import train as run_training

    stamp = time.strftime("%Y%m%d-%H%M%S")
    results: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for algo in args.algorithms:
        for seed in args.seeds:
            run_dir = Path(args.out) / stamp / f"{algo}-seed{seed}"
            cfg = compose_config(
                [
                    *algorithm_overrides(algo),
                    f"seed={seed}",
                    f"trainer.max_steps={args.steps}",
                    f"trainer.val_every={args.steps}",
                    f"trainer.val_episodes={args.episodes}",
                    "trainer.val_temperatures=[1.0,0.5,0.0]",
                    "trainer.checkpoint_every=0",
                    "callbacks=filter_only",
                    "logger=csv",
                    "trainer.progress_bar=false",
                    "rollout.group_size=8",
                    *args.overrides,
                ]
            )
            cfg.run_dir = str(run_dir)
            seconds, summary = timed(run_training, cfg)
            minutes = seconds / 60
            rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
            before = next(r for r in rows if int(float(r["step"])) == 0)
            after = [r for r in rows if r.get("val/success_rate_t1")][-1]
            line = [f"{algo:8s} seed={seed} {summary.get('status')} in {minutes:.1f} min:"]
            for key, label in TEMPERATURES.items():
                b, a = float(before[key]), float(after[key])
                results.setdefault(algo, {}).setdefault(f"before {label}", []).append((round(b * args.episodes), args.episodes))
                results[algo].setdefault(f"after {label}", []).append((round(a * args.episodes), args.episodes))
                line.append(f"{label} {b:.3f}->{a:.3f}")
            print(" ".join(line), flush=True)

    print(f"\nheld-out success over {len(args.seeds)} seeds x {args.episodes} maps, {args.steps} iterations, 95% Wilson CI")
    for algo, table in results.items():
        for label in TEMPERATURES.values():
            parts = []
            for when in ("before", "after"):
                k = sum(x for x, _ in table[f"{when} {label}"])
                n = sum(y for _, y in table[f"{when} {label}"])
                lo, hi = wilson_interval(k, n)
                parts.append(f"{when} {k / n:.3f} [{lo:.3f}, {hi:.3f}]")
            b_hi = wilson_interval(*map(sum, zip(*table[f"before {label}"])))[1]
            a_lo = wilson_interval(*map(sum, zip(*table[f"after {label}"])))[0]
            verdict = "separated" if a_lo > b_hi else "overlapping"
            print(f"{algo:8s} {label:7s} {parts[0]}  {parts[1]}  ({verdict})")


if __name__ == "__main__":
    main()
