"""`agentcollapse mi-check` and `base-model` on the tiny policy."""

from tests.conftest import TINY_OVERRIDES


def test_mi_check_prints_the_ratio_and_a_reading(cache_dir, capsys):
    from agentcollapse.cli.tools import mi_check

    mi_check([*TINY_OVERRIDES, f"cache_dir={cache_dir}", "trainer.num_threads=1"])
    out = capsys.readouterr().out
    assert "Std(RV)/Mean(RV) =" in out
    assert "per-group reward variance:" in out
    last = out.strip().splitlines()[-1]
    assert any(word in last for word in ("filtering", "variance"))  # the one-line reading


def test_base_model_rebuilds_and_reports(cache_dir, capsys):
    from agentcollapse.cli.tools import base_model

    base_model([*TINY_OVERRIDES, f"cache_dir={cache_dir}"])
    out = capsys.readouterr().out
    assert "built " in out and '"weights_sha256"' in out
