"""Composing a config imports no torch: ``agentcollapse train --help``, ``--cfg job`` and a bad key's
one-line error answer in about a second, not after the ~8 s (and ~400 MB) that torch, transformers and
peft take to import (``make bench``'s ``benchmarks/bench_cli.py`` times them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("torch", "transformers", "peft", "lightning")

# One fresh process: compose the default config, print train's help, and fail on a bad key, then report
# which heavy libraries had been imported by then.
SCRIPT = f"""
import contextlib, io, json, sys
from agentcollapse.config.compose import compose
from agentcollapse.cli.train import main
from agentcollapse.errors import UserError

cfg = compose(["cache_dir=/tmp/unused", "env=sokoban", "algorithm=ppo", "filter=rv_top_p"])
with contextlib.redirect_stdout(io.StringIO()) as help_text:
    main(["--help"])
with contextlib.redirect_stderr(io.StringIO()) as error:
    try:
        main(["trainer.max_stepz=3"])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({{
    "env": cfg.env.name,
    "help": "rollout.group_size" in help_text.getvalue(),
    "error": error.getvalue().strip(),
    "code": code,
    "heavy": [m for m in {HEAVY!r} if m in sys.modules],
}}))
"""


def test_composing_a_config_and_the_cli_s_quick_answers_import_no_torch(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["env"] == "sokoban" and out["help"]
    assert out["code"] == 2 and out["error"].startswith("error: unknown config key 'trainer.max_stepz'"), out
    assert out["heavy"] == [], f"composing a config imported {out['heavy']}"


# A bad registry name is checked against registries that live beside torch code, so torch is imported;
# transformers, peft and Lightning are not (they took a bad name's answer from ~4 s to ~12 s).
NAME_SCRIPT = f"""
import contextlib, io, json, sys
from agentcollapse.cli.train import main

with contextlib.redirect_stderr(io.StringIO()) as error:
    try:
        main(["algorithm.policy_loss=nope"])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({{"error": error.getvalue().strip(), "code": code, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""


def test_a_bad_registry_name_is_answered_before_transformers_and_lightning_load(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run([sys.executable, "-c", NAME_SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["code"] == 2 and out["error"].startswith("error: unknown algorithm.policy_loss 'nope'"), out
    assert out["heavy"] == ["torch"], f"checking a name imported {out['heavy']}"
