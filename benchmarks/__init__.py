"""Benchmarks: each module measures one part and saves ``results/<name>.json`` (``common.save_result``);
``bench_report`` folds them into ``results/latest.{json,md}``. Run from the repository root as
``python -m benchmarks.<name>`` (the Makefile's ``bench-*`` targets). Not tests: numbers go in issue notes
and ``docs/performance.md``."""
