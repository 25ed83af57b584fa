"""``make bench-warm-start`` measures one env, or one temperature of it, at a time (an hour a row on 2 cores
for the long envs): its saved file keeps every row the run does not measure again."""

from __future__ import annotations

import json


def test_measuring_one_temperature_keeps_the_env_s_other_rows(tmp_path):
    from benchmarks.bench_warm_start import measured_rows, row_key
    from benchmarks.common import kept_rows

    saved = tmp_path / "warm_start.json"
    rows = [
        {"env": "webshop", "warm_start": True, "temperature": 1.0, "success": 0.0},
        {"env": "webshop", "warm_start": True, "temperature": 0.5, "success": 0.1},
        {"env": "frozenlake", "warm_start": False, "temperature": 0.5, "success": 0.0},
    ]
    saved.write_text(json.dumps({"commit": "abc1234", "measured_at": "then", "model_overrides": ["model=smollm2-135m"], "rows": rows}))
    # --envs webshop --temperatures 0.5 --untuned-episodes 0: only the warm-started T=0.5 row is measured again
    measured = measured_rows(["webshop"], [0.5], episodes=32, untuned_episodes=0)
    assert measured == {("webshop", True, 0.5)}
    kept = kept_rows(saved, measured, row_key)
    assert [(r["env"], r["temperature"], r["success"]) for r in kept] == [("webshop", 1.0, 0.0), ("frozenlake", 0.5, 0.0)]
    assert all(r["commit"] == "abc1234" and r["measured_at"] == "then" for r in kept)  # each keeps its own run's stamp
    assert measured_rows(["sokoban"], [1.0, 0.5], episodes=64, untuned_episodes=16) == {
        ("sokoban", warm, t) for warm in (False, True) for t in (1.0, 0.5)
    }
