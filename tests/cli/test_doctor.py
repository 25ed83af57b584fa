"""``agentcollapse doctor``: runs, prints one line per check, exit 0 when all is well."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def agentcollapse() -> list[str]:
    script = Path(sys.executable).with_name("agentcollapse")
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentcollapse.cli.main"]


def test_doctor_passes_and_names_the_cache_dir_and_wandb_mode(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AGENTCOLLAPSE_CACHE": str(cache)}
    env.pop("WANDB_MODE", None)  # the mode reported is the config's (offline by default)
    proc = subprocess.run([*agentcollapse(), "doctor"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    assert f"[ok] cache directory {cache} writable" in proc.stdout
    assert "[ok] wandb mode offline" in proc.stdout
    for check in ("torch", "lightning", "free disk", "tiny model buildable", "accelerator"):
        assert check in proc.stdout, check
    assert "[FIX]" not in proc.stdout and proc.stdout.strip().endswith("all good")


def test_doctor_flags_an_unwritable_cache_dir_and_takes_overrides(tmp_path, capsys):
    from agentcollapse.run.doctor import doctor

    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    status = doctor([f"cache_dir={blocker / 'cache'}", "logger.wandb.mode=disabled"])
    out = capsys.readouterr().out
    assert status == 1
    assert f"[FIX] cache directory {blocker / 'cache'} is not writable" in out and "cache_dir=" in out
    assert "[ok] wandb mode disabled" in out
    assert out.strip().endswith("some checks need attention (see FIX lines)")
