"""The harness benchmarks/common.py owns for every benchmark: every benchmark declared to it and run by
it, its command line, where results go, medians, the matmul limit's best probe, rounds within a time
budget and an older commit's worktree."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import time
from pathlib import Path

import pytest


def test_the_parser_spells_the_shared_flags_once():
    from benchmarks.common import RESULTS, bench_parser

    ap = bench_parser("doc", repeats=3, threads=2, overrides="extra overrides")
    args = ap.parse_args(["--repeats", "5", "env=sokoban", "seed=1"])
    assert (args.repeats, args.threads, args.out, args.overrides) == (5, 2, str(RESULTS), ["env=sokoban", "seed=1"])
    bare = bench_parser(None, out=None, overrides=None).parse_args([])
    assert not any(hasattr(bare, name) for name in ("repeats", "threads", "out", "overrides"))


def test_the_harness_parses_measures_and_saves_under_the_benchmark_s_name(tmp_path, capsys):
    from benchmarks.common import Benchmark, run

    seen = {}

    def flags(ap):
        ap.add_argument("--steps", type=int, default=5)

    def main(args, save):
        seen.update(vars(args))
        save.json({"steps": args.steps, "overrides": args.overrides})
        save.markdown(["# toy", "", f"{args.repeats} rounds"], echo=True)
        save.json({"other": True}, name="toy_other")

    run(Benchmark("toy", "doc", main, flags, repeats=2), ["env=sokoban", "--steps", "7", "--out", str(tmp_path), "seed=1"])
    assert (seen["steps"], seen["repeats"], seen["overrides"]) == (7, 2, ["env=sokoban", "seed=1"])  # overrides around the flags
    record = json.loads((tmp_path / "toy.json").read_text())
    assert record["steps"] == 7 and record["commit"] and record["measured_at"]  # with its provenance
    assert (tmp_path / "toy.md").read_text() == "# toy\n\n2 rounds\n" and "2 rounds" in capsys.readouterr().out
    assert json.loads((tmp_path / "toy_other.json").read_text())["other"] is True


def test_every_benchmark_is_declared_to_the_one_harness():
    """Each benchmarks/bench_*.py declares a Benchmark whose main the harness runs, and its command line
    (the shared flags and its own) parses with every default."""
    from benchmarks.common import Benchmark, parser

    names = set()
    for path in sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("bench_*.py")):
        module = importlib.import_module(f"benchmarks.{path.stem}")
        bench = module.BENCHMARK
        assert isinstance(bench, Benchmark) and bench.main is module.main, path.name
        parser(bench).parse_intermixed_args([])
        names.add(bench.name)
    assert len(names) == 22  # one result name each


def test_medians_and_the_best_probe():
    from benchmarks.common import best_probe, medians

    got = medians({"a": [3.0, 1.0, 2.0], "b": []})
    assert got["a"] == 2.0 and math.isnan(got["b"])
    assert best_probe([{"64x8x8": 10.0, "8x8x8": 5.0}, {"64x8x8": 7.0, "8x8x8": 6.0}]) == {"64x8x8": 10.0, "8x8x8": 6.0}


def test_rounds_stop_before_one_that_would_pass_the_budget(capsys):
    from benchmarks.common import rounds_within

    assert list(rounds_within(3, 0.0, time.perf_counter())) == [0, 1, 2]  # 0: no limit
    started = time.perf_counter()
    done = []
    for rep in rounds_within(5, 0.05 / 60, started):  # a 50 ms budget, rounds of 30 ms
        time.sleep(0.03)
        done.append(rep)
    assert done == [0]  # round 2 would have ended at ~60 ms
    assert "stopping after 1" in capsys.readouterr().out


def test_a_worktree_is_removed_after_use_also_on_error(tmp_path):
    from benchmarks.common import ROOT, worktree

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    path = tmp_path / "tree"
    with pytest.raises(RuntimeError), worktree(head, path) as tree:
        assert (tree / "benchmarks" / "common.py").exists()
        raise RuntimeError("a failed run")
    assert not path.exists()
    listed = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout
    assert str(path) not in listed
