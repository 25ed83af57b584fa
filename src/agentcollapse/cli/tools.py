"""Small jobs around training: rebuild the base model, and the pre-training Std(RV)/Mean(RV) check."""

from __future__ import annotations

from agentcollapse.benchmarking import compose_config, config_and_policy, training_batch


def base_model(overrides: list[str]) -> None:
    import json

    from agentcollapse.models.tiny import build_tiny_policy

    cfg = compose_config(overrides)
    if cfg.model.name != "tiny":
        print(f"model={cfg.model.name} is not built here; nothing to do")
        return
    path = build_tiny_policy(cfg.model, cfg.env, cfg.cache_dir, force=True)
    print(f"built {path}")
    print(json.dumps(json.loads((path / "meta.json").read_text()), indent=2))


def mi_check(overrides: list[str]) -> None:
    from agentcollapse.filtering import group_scores, interpret_rv_ratio, rv_std_over_mean

    cfg, policy = config_and_policy(overrides, report=False)
    batch, _ = training_batch(policy, cfg, sample_seed=cfg.seed)
    returns = batch.returns()
    rv = group_scores(returns, "reward_variance")
    ratio = rv_std_over_mean(returns)
    print(f"env={cfg.env.name} P={batch.num_prompts} G={batch.group_size} success={batch.successes().mean():.3f}")
    print(f"per-group reward variance: {' '.join(f'{v:.3f}' for v in rv)}")
    print(f"Std(RV)/Mean(RV) = {ratio:.3f}")
    print(interpret_rv_ratio(ratio))
