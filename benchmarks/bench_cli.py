"""How fast the command line answers when it does not train: ``agentcollapse train --help``, ``train
--cfg job``, a bad key's one-line error, a bad name's (``env.name=...``, ``algorithm.policy_loss=...``:
checked by the run layer against the registries, so after torch is imported, but before transformers,
peft and Lightning), and ``doctor``'s first line; and what composing a config
imports.

    python -m benchmarks.bench_cli [--repeats 5] [--against DIR]

Each command runs as the installed console script in a fresh process (its wall time to exit, or to its
first line for ``doctor``, which is then stopped; and its peak resident memory, from ``wait4``), in a
scratch working directory, ``--repeats`` times; the median is reported. ``--against DIR`` times another
source tree too (a checkout's root, e.g. ``git archive <commit> src conf | tar -x -C DIR``), the two
alternating within each round so both see the same load. Composing: one fresh process composes the
default config with ``agentcollapse.config.compose.compose`` and reports its seconds, the package's
modules it loaded and whether torch, transformers, peft or lightning came with them.

Writes ``benchmarks/results/cli.json``. About a minute on 2 busy cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, Benchmark, Results, median, run, subprocess_env

HEAVY = ("torch", "transformers", "peft", "lightning")
# name -> (the console script's arguments, the exit status it must end with)
COMMANDS: dict[str, tuple[list[str], int]] = {
    "help": (["train", "--help"], 0),
    "cfg_job": (["train", "--cfg", "job"], 0),
    "bad_override": (["train", "trainer.max_stepz=3"], 2),
    "bad_name": (["train", "env.name=no_such_env"], 2),  # checked against the registries: after torch's import
    "bad_loss": (["train", "algorithm.policy_loss=nope"], 2),  # a registry in a torch module: torch, not transformers
    "doctor_first_line": (["doctor"], -1),  # stopped after its first line
}
COMPOSE = (
    "import json, sys, time; t = time.perf_counter();"
    "from agentcollapse.config.compose import compose; compose(['cache_dir=/tmp/unused']);"
    f"print(json.dumps({{'compose_s': time.perf_counter() - t, 'heavy': [m for m in {HEAVY!r} if m in sys.modules],"
    "'package_modules': sum(m.startswith('agentcollapse') for m in sys.modules)}))"
)


def script() -> list[str]:
    found = Path(sys.executable).with_name("agentcollapse")
    return [str(found)] if found.exists() else [sys.executable, "-m", "agentcollapse.cli.main"]


def run_once(args: list[str], expect: int, env: dict[str, str], cwd: Path) -> dict[str, float]:
    """Wall seconds to exit (or to the first line when ``expect`` is -1) and peak RSS in MiB."""
    started = time.perf_counter()
    proc = subprocess.Popen([*script(), *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if expect == -1:
        first = proc.stdout.readline() if proc.stdout else ""
        seconds = time.perf_counter() - started
        proc.kill()
        _, status, usage = os.wait4(proc.pid, 0)
        if not first:
            raise SystemExit(f"`agentcollapse {' '.join(args)}` printed nothing")
        return {"s": seconds, "peak_mib": usage.ru_maxrss / 1024}
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code != expect:
        raise SystemExit(f"`agentcollapse {' '.join(args)}` exited {code}, expected {expect}: {(out + err)[-2000:]}")
    return {"s": seconds, "peak_mib": usage.ru_maxrss / 1024}


def compose_imports(env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", COMPOSE], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(trees: dict[str, Path], repeats: int) -> dict[str, Any]:
    envs = {name: {**subprocess_env(tree / "src", threads=1), "HYDRA_FULL_ERROR": "0"} for name, tree in trees.items()}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {name: {c: [] for c in COMMANDS} for name in trees}
    with tempfile.TemporaryDirectory() as scratch:
        for rep in range(repeats):
            order = list(trees) if rep % 2 == 0 else list(reversed(trees))
            for command, (args, expect) in COMMANDS.items():
                for name in order:
                    runs[name][command].append(run_once(args, expect, envs[name], Path(scratch)))
    out: dict[str, Any] = {}
    for name in trees:
        out[name] = {
            c: {
                "median_s": median([r["s"] for r in rs]),
                "median_peak_mib": median([r["peak_mib"] for r in rs]),
                "runs_s": [r["s"] for r in rs],
            }
            for c, rs in runs[name].items()
        }
        out[name]["compose"] = compose_imports(envs[name])
    return out


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--against", default=None, help="another source tree's root to time alongside this one (e.g. an older commit's)")


def main(args: argparse.Namespace, save: Results) -> None:
    trees = {"now": ROOT}
    if args.against:
        trees["against"] = Path(args.against).resolve()
    result = measure(trees, args.repeats)
    for name, r in result.items():
        print(f"{name}: " + ", ".join(f"{c} {r[c]['median_s']:.2f} s ({r[c]['median_peak_mib']:.0f} MiB)" for c in COMMANDS))
        print(
            f"{name}: compose {r['compose']['compose_s']:.2f} s, {r['compose']['package_modules']} package modules, heavy {r['compose']['heavy']}"
        )
    save.json({"repeats": args.repeats, "load_1min": os.getloadavg()[0], "against": args.against, "commands": COMMANDS, **result})


BENCHMARK = Benchmark(
    "cli", __doc__, main, flags, repeats=5, repeats_help="runs of each command (the median is reported)", out=None, overrides=None
)

if __name__ == "__main__":
    run(BENCHMARK)
