"""The simulator sweep that docs/results.md publishes: python -m scripts.collapse_simulator_demo --out."""

import pandas as pd


def test_simulator_sweep_writes_csv_markdown_and_plot(tmp_path):
    from scripts import collapse_simulator_demo  # the repository root is on pytest's path

    collapse_simulator_demo.main(["--out", str(tmp_path), "--weights", "0", "1", "--seeds", "0", "--num-prompts", "4", "--group-size", "4"])
    frame = pd.read_csv(tmp_path / "simulator.csv")
    assert len(frame) == 4  # 2 weights x 2 diversities x 1 seed
    for d in (0.0, 1.0):
        part = frame[frame["diversity"] == d].set_index("template_weight")
        # Template collapse: retrieval accuracy falls from above chance to chance ...
        assert part.loc[0.0, "retrieval_accuracy"] > part.loc[1.0, "retrieval_accuracy"]
        assert part.loc[1.0, "retrieval_accuracy"] <= part.loc[1.0, "retrieval_chance_level"] + 0.25
    # ... while the diverse traces' conditional entropy stays far above the compressed ones'.
    assert (
        frame[frame["diversity"] == 1.0]["conditional_entropy_est"].min()
        > frame[frame["diversity"] == 0.0]["conditional_entropy_est"].max()
    )
    assert "template_weight" in (tmp_path / "simulator.md").read_text()
    assert (tmp_path / "simulator.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
