"""DeepCoder's grading: programs graded per second one by one against in parallel, and the share of a
rollout spent in the envs, on the tiny policy's own programs (issue 42 item 6).

    python -m benchmarks.bench_grading [--repeats 2] [overrides ...]

Iteration 1's training batch (P=8 x G=8 by default, the warm-started tiny policy, one thread) is
collected as training collects it: each decoded chunk's answers are submitted (``TextEnv.submit``) and
graded on the sandbox's ``env.kwargs.workers`` threads while the envs are stepped
(``perf/rollout_env_time_s`` is the rollout's seconds in the envs). Then the batch's first-turn answers
are graded again on fresh envs, alternating two ways: ``sequential`` (each ``step`` runs its program,
as the rollout did before ``submit``) and ``parallel`` (``submit`` all, then ``step`` each, as the
rollout does now). A program counts as graded when the sandbox ran it (an answer that does not compile,
or the generated reference, runs nothing).

Writes ``benchmarks/results/grading.json``. About 1-2 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.common import Benchmark, Results, command, median, run


def _grade(make_env: Any, items: list[tuple[int, str]], parallel: bool) -> tuple[float, int]:
    """(seconds, programs the sandbox ran) to step fresh envs with ``items`` (env seed, answer)."""
    batch = []
    for seed, _ in items:
        env = make_env()
        env.reset(seed)
        batch.append(env)
    started = time.perf_counter()
    if parallel:
        for env, (_, answer) in zip(batch, items):
            env.submit(answer)
    for env, (_, answer) in zip(batch, items):
        env.step(answer)
    return time.perf_counter() - started, sum(1 for env in batch if env.last_runs)


def main(args: argparse.Namespace, save: Results) -> None:
    from agentcollapse import envs
    from agentcollapse.run.jobs import config_and_policy, training_batch

    overrides = ["env=deepcoder", "rollout.num_prompts=8", "rollout.group_size=8", "trainer.num_threads=1", *args.overrides]
    cfg, policy = config_and_policy(overrides)
    batch, perf = training_batch(policy, cfg)
    items = [(traj.env_seed, traj.turns[0].answer if traj.turns[0].format_valid else "") for traj in batch.trajectories]

    def make_env() -> Any:
        return envs.from_config(cfg.env)

    make_env()  # the shared sandbox is probed once, outside the timings
    times: dict[str, list[float]] = {"sequential": [], "parallel": []}
    graded: dict[str, list[int]] = {"sequential": [], "parallel": []}
    for rep in range(args.repeats):
        for arm in ("sequential", "parallel") if rep % 2 == 0 else ("parallel", "sequential"):
            seconds, n = _grade(make_env, items, parallel=arm == "parallel")
            times[arm].append(seconds)
            graded[arm].append(n)
    result: dict[str, Any] = {
        "command": command(),
        "overrides": overrides,
        "workers": cfg.env.kwargs.get("workers"),
        "trajectories": len(items),
        "format_valid": sum(1 for traj in batch.trajectories if traj.turns[0].format_valid),
        "success_rate": float(batch.successes().mean()),
        "rollout_time_s": perf["perf/rollout_time_s"],
        "rollout_env_time_s": perf["perf/rollout_env_time_s"],
        "rollout_env_share": perf["perf/rollout_env_time_s"] / perf["perf/rollout_time_s"],
    }
    for arm in times:
        seconds, n = median(times[arm]), graded[arm][0]
        result[arm] = {"seconds": times[arm], "programs": n, "programs_per_s": n / seconds if seconds else 0.0}
    save.json(result)
    print(
        f"{len(items)} trajectories ({result['format_valid']} format-valid, success {result['success_rate']:.2f}); rollout "
        f"{result['rollout_time_s']:.1f} s, of it in the envs {result['rollout_env_time_s']:.1f} s ({result['rollout_env_share']:.0%})"
    )
    for arm in times:
        r = result[arm]
        print(
            f"{arm:>10}: {r['programs']} programs in {median(r['seconds']):.2f} s (median of {len(r['seconds'])}): {r['programs_per_s']:.1f}/s"
        )


BENCHMARK = Benchmark(
    "grading",
    __doc__.splitlines()[0],
    main,
    repeats=2,
    repeats_help="alternating rounds of the two grading arms",
    overrides="Hydra overrides (env=deepcoder and P=8 x G=8 come first)",
)

if __name__ == "__main__":
    run(BENCHMARK)
