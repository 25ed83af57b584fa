"""SNR-aware filtering (the ``SNRFilter`` callback) driving the RL module, and the gradient-bucket
analysis (docs/method.md sections 4-5).

Real tiny model, real LoRA, hand-built batches with chosen returns (P <= 4, G = 4).
"""

import math

import numpy as np
import pytest
import torch

from agentcollapse.lightning import AgentRLModule, GradBucketAnalysis, Selection, SNRFilter
from agentcollapse.lightning.grad_buckets import group_loss_terms
from agentcollapse.models.policy import load_policy
from agentcollapse.records import RunRecorder
from tests.helpers import attach_to_trainer
from tests.helpers import hand_batch as _hand_batch
from tests.helpers import snapshot as _snapshot

# Group RVs (ddof=1): g0 = 1/3, g1 = 0, g2 = 1/4, g3 = 1/400. top_p 0.9 (linear) keeps g0 and g2.
RETURNS = [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0]]
EQUAL = [[1.0] * 4, [0.0] * 4, [1.0] * 4]


def _attach(module, callbacks=(), steps=0):
    return attach_to_trainer(module, tuple(callbacks), steps)


def _fresh_module(make_cfg, *overrides, perturb=False):
    """A module on its own freshly loaded policy (same seed -> bit-identical weights), attached to a Trainer.

    ``perturb`` sets every LoRA B matrix to a fixed non-zero pattern so the adapter changes the output
    and the KL to the reference (adapter off) has a non-zero gradient (peft initialises B to zero).
    """
    cfg = make_cfg(*overrides)
    policy = load_policy(cfg.model, cfg.env, cfg.cache_dir, seed=0)
    if perturb:
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.copy_(0.05 * torch.sin(torch.arange(p.numel(), dtype=p.dtype)).reshape(p.shape))
    return _attach(AgentRLModule(cfg, policy))


def _select(cfg, policy, returns):
    """(kept groups, trajectory mask, loss scale, metrics) that the filter callback of ``cfg`` returns."""
    module = AgentRLModule(cfg, policy)
    result = SNRFilter.from_run_config(cfg).on_rollout(module, _hand_batch(policy, returns), 1)
    sel = result.selection
    return sel.groups, sel.trajectory_mask, sel.loss_scale, result.metrics


def _everything(batch, scale=1.0):
    return Selection(np.arange(batch.num_prompts), None, scale)


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


# -- the filter callback's selection -----------------------------------------------------------------------------------
def test_rv_top_p_keeps_the_high_variance_groups(make_cfg, tiny_policy):
    kept, mask, scale, metrics = _select(make_cfg("filter=rv_top_p", "rollout.num_prompts=4"), tiny_policy, RETURNS)
    assert kept.tolist() == [0, 2]  # highest RV first; g3's tiny RV is outside the 0.9 mass, g1 has none
    assert mask is None and scale == 1.0
    assert metrics["filter/kept_count"] == 2 and metrics["filter/kept_ratio"] == 0.5
    assert metrics["filter/zero_count"] == 1
    assert metrics["filter/chosen_rv_mean"] > metrics["filter/all_rv_mean"]


def test_rv_top_p_linear_loss_scale_is_the_kept_fraction(make_cfg, tiny_policy):
    _, _, scale, _ = _select(make_cfg("filter=rv_top_p", "filter.loss_scale=linear"), tiny_policy, RETURNS)
    assert scale == 0.5


def test_filter_none_keeps_every_group(make_cfg, tiny_policy):
    kept, mask, scale, metrics = _select(make_cfg("filter=none"), tiny_policy, RETURNS)
    assert kept.tolist() == [0, 1, 2, 3] and mask is None and scale == 1.0
    assert metrics["filter/kept_ratio"] == 1.0


@pytest.mark.parametrize("value, expected", [("[0.0,0.25]", [0]), ("[0.25,0.5]", [2]), ("[0.75,1.0]", [1])])
def test_quartile_keeps_its_quartile(make_cfg, tiny_policy, value, expected):
    kept, mask, _, _ = _select(make_cfg("filter=quartile", f"filter.value={value}"), tiny_policy, RETURNS)
    assert kept.tolist() == expected and mask is None  # RV ranking: g0 > g2 > g3 > g1


def test_trajectory_filter_keeps_2k_per_group(make_cfg, tiny_policy):
    kept, mask, scale, metrics = _select(make_cfg("filter=trajectory", "filter.trajectory_k=1"), tiny_policy, RETURNS)
    assert kept.tolist() == [0, 1, 2, 3] and scale == 1.0
    assert mask.shape == (4, 4) and mask.sum(axis=1).tolist() == [2, 2, 2, 2]
    assert mask[0].tolist() == [False, True, True, False]  # bottom-1 = first 0 (idx 1), top-1 = last 1 (idx 2)
    assert metrics["filter/kept_count"] == 8 and metrics["filter/kept_ratio"] == 0.5


def test_rv_top_p_on_equal_rewards_keeps_nothing(make_cfg, tiny_policy):
    kept, _, _, metrics = _select(make_cfg("filter=rv_top_p"), tiny_policy, EQUAL)
    assert len(kept) == 0 and metrics["filter/kept_count"] == 0


# -- loss scaling -----------------------------------------------------------------------------------
@pytest.mark.parametrize("rewards", [RETURNS, EQUAL], ids=["task+reg", "reg-only"])
def test_loss_scale_scales_every_term_of_the_gradient(make_cfg, rewards):
    # Big KL/entropy coefficients and a perturbed adapter so both regularisers have real gradients; with
    # EQUAL rewards the advantages are 0 and the gradient is KL + entropy alone.
    overrides = ("algorithm.max_grad_norm=1e9", "algorithm.kl_coef=0.5", "algorithm.entropy_coef=0.1")
    results = []
    for scale in (1.0, 0.5):
        module = _fresh_module(make_cfg, *overrides, perturb=True)
        batch = _hand_batch(module.policy, rewards)
        results.append(module.update(batch, _everything(batch, scale)))
    full, half = results
    assert "actor/kl" in full and full["actor/kl"] > 0
    assert full["actor/grad_norm"] > 0
    assert half["actor/loss_scale"] == 0.5
    assert half["actor/grad_norm"] / full["actor/grad_norm"] == pytest.approx(0.5, abs=1e-5)
    assert half["actor/kl"] == full["actor/kl"] and half["actor/entropy"] == full["actor/entropy"]  # same forward


# -- empty selections inside training_step -------------------------------------------------------------
def _drive(monkeypatch, module, batches, tmp_path, callbacks=()):
    """Run ``len(batches)`` real training steps whose rollouts are ``batches`` (in order)."""
    import agentcollapse.lightning.module as module_mod

    queue = list(batches)

    def fake_collect(*args, **kwargs):
        return queue.pop(0), {"perf/rollout_time_s": 0.0, "perf/rollout_tokens_per_s": 0.0}

    monkeypatch.setattr(module_mod, "collect_rollouts", fake_collect)
    module.recorder = RunRecorder(tmp_path / "record")
    _attach(module, callbacks, steps=len(batches))
    return module.recorder.rows


def test_empty_selection_skips_the_update_and_stops_after_n(make_cfg, tiny_policy, monkeypatch, tmp_path):
    cfg = make_cfg("filter=rv_top_p", "filter.max_empty_steps=2", "trainer.val_every=0", "trainer.max_steps=10")
    assert cfg.filter.include_zero is False
    module = AgentRLModule(cfg, tiny_policy)
    before = _snapshot(module.model)
    batch = _hand_batch(tiny_policy, EQUAL)
    snr = SNRFilter.from_run_config(cfg)
    rows = _drive(monkeypatch, module, [batch] * 4, tmp_path, callbacks=[GradBucketAnalysis(every=1), snr])
    assert [r["step"] for r in rows] == [1.0, 2.0]  # stopped after 2 consecutive empty steps, not at 1
    assert all(r["rollout/empty_after_filter"] == 1.0 and r["filter/kept_count"] == 0 for r in rows)
    assert not any(k.startswith("actor/") for r in rows for k in r)  # no update ran
    assert snr.empty_steps == 2 and module.iteration == 2
    assert module.trainer.should_stop and "kept no group for 2 consecutive steps" in module.stop_reason
    assert _same(before, _snapshot(module.model))
    # The bucket callback ran through the rollout hook too: equal rewards -> no task gradient.
    assert rows[0]["grad_bucket/0/task_norm"] == 0.0 and rows[0]["grad_bucket/0/reg_norm"] > 0


def test_a_non_empty_step_resets_the_empty_count(make_cfg, tiny_policy, monkeypatch, tmp_path):
    cfg = make_cfg("filter=rv_top_p", "filter.max_empty_steps=2", "trainer.val_every=0", "trainer.max_steps=3")
    module = AgentRLModule(cfg, tiny_policy)
    empty, good = _hand_batch(tiny_policy, EQUAL), _hand_batch(tiny_policy, RETURNS[:3])
    snr = SNRFilter.from_run_config(cfg)
    rows = _drive(monkeypatch, module, [empty, good, empty], tmp_path, callbacks=[snr])
    assert [r["rollout/empty_after_filter"] for r in rows] == [1.0, 0.0, 1.0]
    assert "actor/grad_norm" in rows[1] and "actor/grad_norm" not in rows[2]
    assert snr.empty_steps == 1 and module.iteration == 3 and module.stop_reason == ""


# -- gradient-bucket analysis -------------------------------------------------------------------------
def test_grad_bucket_callback_leaves_the_update_bit_identical(make_cfg):
    overrides = ("rollout.num_prompts=4", "algorithm.kl_coef=0.1", "algorithm.entropy_coef=0.01")
    plain = _fresh_module(make_cfg, *overrides, perturb=True)
    probed = _fresh_module(make_cfg, *overrides, perturb=True)
    assert _same(_snapshot(plain.model), _snapshot(probed.model))
    batch = _hand_batch(plain.policy, RETURNS)
    modes = {n: m.training for n, m in probed.named_modules()}
    rng = torch.get_rng_state()

    metrics = GradBucketAnalysis(every=1).on_rollout(probed, batch, step=1).metrics

    assert torch.equal(rng, torch.get_rng_state())  # no torch RNG drawn
    assert modes == {n: m.training for n, m in probed.named_modules()}  # train/eval flags restored
    assert all(p.grad is None for p in probed.parameters())  # autograd.grad, not .backward
    assert _same(_snapshot(plain.model), _snapshot(probed.model))
    before = _snapshot(plain.model)
    out_plain = plain.update(batch, _everything(batch))
    out_probed = probed.update(batch, _everything(batch))
    assert out_plain["actor/grad_norm"] == out_probed["actor/grad_norm"]
    assert _same(_snapshot(plain.model), _snapshot(probed.model))
    assert not _same(before, _snapshot(plain.model))  # the update did move the weights

    # P=4 prompts into 6 buckets: buckets 0..3 hold one prompt each (ascending RV: g1, g3, g2, g0), 4-5 empty.
    keys = {k for k in metrics if k.startswith("grad_bucket/")}
    assert keys == {f"grad_bucket/{k}/{m}" for k in range(4) for m in ("task_norm", "reg_norm", "rv_mean")}
    for k in range(4):
        for m in ("task_norm", "reg_norm"):
            v = metrics[f"grad_bucket/{k}/{m}"]
            assert math.isfinite(v) and v >= 0
        assert metrics[f"grad_bucket/{k}/reg_norm"] > 0
    assert [metrics[f"grad_bucket/{k}/rv_mean"] for k in range(4)] == pytest.approx([0.0, 0.0025, 0.25, 1 / 3])
    assert metrics["grad_bucket/0/task_norm"] == 0.0  # zero-variance prompt: no task gradient
    assert metrics["grad_bucket/1/task_norm"] > 0


def test_grad_bucket_skips_off_steps_and_empty_buckets(make_cfg, tiny_policy):
    module = AgentRLModule(make_cfg(), tiny_policy)
    batch = _hand_batch(tiny_policy, RETURNS[:2])
    cb = GradBucketAnalysis(every=3)
    assert cb.on_rollout(module, batch, step=2).metrics == {}
    metrics = cb.on_rollout(module, batch, step=3).metrics
    assert {k.split("/")[1] for k in metrics if k.startswith("grad_bucket/")} == {"0", "1"}
    assert GradBucketAnalysis(every=0).on_rollout(module, batch, step=1).metrics == {}


@pytest.mark.parametrize("algorithm", ["grpo", "dr_grpo"])
def test_group_loss_terms_reproduce_the_update_gradient(make_cfg, algorithm):
    # task + reg over every group is the update's own objective (scale 1, one epoch), so its gradient
    # norm must equal the pre-clip actor/grad_norm of update() from the same weights.
    module = _fresh_module(
        make_cfg,
        f"algorithm={algorithm}",
        "algorithm.max_grad_norm=1e9",
        "algorithm.kl_coef=0.1",
        "algorithm.entropy_coef=0.01",
        perturb=True,
    )
    batch = _hand_batch(module.policy, RETURNS)
    params = [p for p in module.model.parameters() if p.requires_grad]
    task, reg = group_loss_terms(module, batch, np.arange(4))
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in torch.autograd.grad(task + reg, params)]))
    metrics = module.update(batch, _everything(batch))
    assert float(norm) == pytest.approx(metrics["actor/grad_norm"], rel=1e-5)


@pytest.mark.parametrize("algorithm", ["grpo", "dr_grpo", "ppo"])
def test_group_loss_terms_match_the_task_term_of_every_algorithm(make_cfg, tiny_policy, algorithm):
    # Group advantages depend on each prompt's own returns only, so a subset's task loss equals the loss
    # of the batch holding just that subset; a constant group gives an exactly zero task loss.
    module = AgentRLModule(make_cfg(f"algorithm={algorithm}", "rollout.num_prompts=4"), tiny_policy)
    batch = _hand_batch(tiny_policy, RETURNS)
    task, reg = group_loss_terms(module, batch, [0, 2])
    task_sub, reg_sub = group_loss_terms(module, batch.select_groups([0, 2]), [0, 1])
    assert torch.allclose(task, task_sub) and torch.allclose(reg, reg_sub)
    assert task.requires_grad and reg.requires_grad
    assert float(group_loss_terms(module, batch, [1])[0].detach()) == 0.0


def test_the_callbacks_group_lists_what_watches_and_what_intervenes(make_cfg):
    from agentcollapse.lightning import CollapseDiagnostics
    from agentcollapse.run.trainer import build_callbacks

    default = build_callbacks(make_cfg())
    assert [type(c) for c in default] == [CollapseDiagnostics, SNRFilter]
    found = [
        c
        for c in build_callbacks(make_cfg("callbacks=with_grad_buckets", "diagnostics.grad_buckets_every=3"))
        if isinstance(c, GradBucketAnalysis)
    ]
    assert len(found) == 1 and found[0].every == 3
    assert [type(c) for c in build_callbacks(make_cfg("~callbacks.collapse_diagnostics"))] == [SNRFilter]


@pytest.mark.parametrize("preset, metric", [("entropy", "entropy"), ("entropy_variance", "entropy_std"), ("length", "length")])
def test_entropy_and_length_filters_rank_real_rollouts_by_their_feature(make_cfg, tiny_policy, preset, metric):
    # A real rollout batch (lengths and entropies differ): the callback computes the per-trajectory
    # feature from the policy and ranks groups by it exactly as the pure filter does on that feature.
    from agentcollapse.filtering import group_scores, select_groups
    from agentcollapse.rollout.runner import collect_rollouts

    cfg = make_cfg(f"filter={preset}", "rollout.num_prompts=4")
    assert cfg.filter.metric == metric
    module = AgentRLModule(cfg, tiny_policy)
    batch, _ = collect_rollouts(tiny_policy, module.make_env, module.train_env_seeds(0), 4, 1.0, 12, sample_seed=3)
    snr = SNRFilter.from_run_config(cfg)
    feature = snr.features(module, batch)[metric.split("_")[0]]
    if metric == "length":
        expected_feature = [t.response_length for t in batch.trajectories]
    else:
        expected_feature = module.trajectory_entropies(batch)
    assert feature.shape == (4, 4) and np.allclose(feature.reshape(-1), expected_feature)
    assert feature.std() > 0  # the feature really varies, so the ranking is informative
    result = snr.on_rollout(module, batch, 1)
    f = cfg.filter
    expected = select_groups(group_scores(feature, metric), f.strategy, f.value, f.include_zero, f.top_p_mode, f.selection_eps)
    assert result.selection.groups.tolist() == expected.tolist()
    assert result.metrics["filter/kept_count"] == len(expected)


# -- DAPO dynamic sampling ------------------------------------------------------------------------------
def test_dynamic_sampling_refills_the_batch_with_groups_that_vary(make_cfg, tiny_policy, monkeypatch, tmp_path):
    # P=3: the first rollout has one varying group (g0), the extra one two more (its g0, g2): the update
    # trains on exactly those three, and the logged success rate is still the first batch's.
    cfg = make_cfg("algorithm=dapo", "rollout.num_prompts=3", "trainer.val_every=0", "trainer.max_steps=1")
    assert cfg.algorithm.dynamic_sampling is True
    first = _hand_batch(tiny_policy, [[1.0, 0.0, 1.0, 0.0], [1.0] * 4, [0.0] * 4])
    extra = _hand_batch(tiny_policy, [[0.0, 0.0, 0.5, 0.0], [0.0] * 4, [1.0, 1.0, 0.0, 1.0]])
    module = AgentRLModule(cfg, tiny_policy)
    seen = []
    snr = SNRFilter.from_run_config(cfg)
    original = snr.on_rollout
    snr.on_rollout = lambda m, batch, step: (seen.append(batch), original(m, batch, step))[1]
    rows = _drive(monkeypatch, module, [first, extra], tmp_path, callbacks=[snr])
    (row,) = rows
    assert row["rollout/dynamic_sampling_rounds"] == 1 and row["rollout/dynamic_sampling_groups"] == 3
    assert row["rollout/success_rate"] == pytest.approx(first.successes().mean())
    trained = seen[0]
    assert trained.num_prompts == 3
    assert trained.returns().tolist() == [[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.5, 0.0], [1.0, 1.0, 0.0, 1.0]]


def test_dynamic_sampling_is_bounded_and_falls_back_when_nothing_varies(make_cfg, tiny_policy, monkeypatch, tmp_path):
    cfg = make_cfg("algorithm=dapo", "algorithm.max_resample_rounds=2", "trainer.val_every=0", "trainer.max_steps=1")
    flat = _hand_batch(tiny_policy, EQUAL)
    module = AgentRLModule(cfg, tiny_policy)
    (row,) = _drive(monkeypatch, module, [flat, flat, flat], tmp_path)
    assert row["rollout/dynamic_sampling_rounds"] == 2 and row["rollout/dynamic_sampling_groups"] == 0
    assert row["rollout/empty_after_filter"] == 0.0 and "actor/grad_norm" in row  # no filter: the flat batch trains


def test_dynamic_sampling_draws_new_maps_and_streams():
    from agentcollapse import seeds

    regular = {s for it in range(50) for s in seeds.train_env_seeds(0, it, 8)}
    extra = {s for it in range(50) for a in range(1, seeds.MAX_RESAMPLE_ROUNDS + 1) for s in seeds.train_env_seeds(0, it, 8, attempt=a)}
    assert len(extra) == 50 * seeds.MAX_RESAMPLE_ROUNDS * 8 and not regular & extra
    streams = {seeds.rollout_sample_seed(0, it, a) for it in range(50) for a in range(seeds.MAX_RESAMPLE_ROUNDS + 1)}
    assert len(streams) == 50 * (seeds.MAX_RESAMPLE_ROUNDS + 1)


def test_under_a_staleness_bound_the_filter_refills_each_update_from_arriving_batches(make_cfg, monkeypatch):
    """rollout.max_staleness > 0 with a reward-scored filter: the producer filters each arriving batch of P
    groups whole, by the synchronous filter's own decision, and draws more (dynamic sampling's seeds) until P
    groups are kept; kept groups beyond P are dropped (they would be one version past the bound at the next
    update). Here the batches' decoding is stood in by hand batches: the engine's is tests/cli."""
    cfg = make_cfg("rollout.num_prompts=4", "rollout.group_size=4", "filter=rv_top_p", "algorithm.max_resample_rounds=3")
    policy = load_policy(cfg.model, cfg.env, cfg.cache_dir, seed=0)
    module = _attach(AgentRLModule(cfg, policy), callbacks=[SNRFilter.from_run_config(cfg)])
    hook = module.refill_filter()
    assert isinstance(hook, SNRFilter)
    # batch 0 and 1: RETURNS (top_p 0.9 keeps g0 and g2 of each); batch 2 would keep 3 groups
    third = [[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0] * 4]
    drawn = []

    def local_rollout(env_seeds, group_size, temperature, sample_seed, engine, min_new_tokens=0):
        drawn.append((tuple(env_seeds), sample_seed))
        batch = _hand_batch(policy, RETURNS if len(drawn) < 3 else third)
        for t in batch.trajectories:
            t.env_seed = 100 * len(drawn) + t.group  # which batch and group it came from
        return batch, {"perf/rollout_time_s": 1.0, "perf/rollout_tokens_per_s": 10.0, "perf/rollout_env_time_s": 0.1}

    monkeypatch.setattr(module, "local_rollout", local_rollout)
    refilled, perf = module.decode_refilled(5, hook)
    assert [s for s, _ in drawn] == [tuple(module.train_env_seeds(4, attempt)) for attempt in range(2)]  # dynamic sampling's seeds
    assert len({seed for _, seed in drawn}) == 2
    assert sorted({t.env_seed for t in refilled.trained.trajectories}) == [100, 102, 200, 202]  # g0, g2 of batches 1, 2
    assert refilled.first.num_prompts == 4 and {t.env_seed for t in refilled.first.trajectories} == {100, 101, 102, 103}
    assert perf["filter/refill_batches"] == 2 and perf["filter/refill_kept_groups"] == 4 and perf["filter/refill_dropped_groups"] == 0
    assert perf["perf/rollout_time_s"] == 2.0 and perf["perf/rollout_tokens_per_s"] == 10.0

    # P=3: of the 4 groups the two batches kept, one is dropped; with one batch allowed, the update trains on fewer
    cfg.rollout.num_prompts = 3
    drawn.clear()
    refilled, perf = module.decode_refilled(5, hook)
    assert perf["filter/refill_batches"] == 2 and perf["filter/refill_kept_groups"] == 3 and perf["filter/refill_dropped_groups"] == 1
    cfg.algorithm.max_resample_rounds = 0
    drawn.clear()
    refilled, perf = module.decode_refilled(5, hook)
    assert refilled.trained.num_prompts == 2 and perf["filter/refill_batches"] == 1


@pytest.mark.parametrize(
    "overrides",
    [["filter=entropy"], ["filter=trajectory"], ["filter=rv_top_p", "filter.loss_scale=linear"], ["filter=none"]],
)
def test_filters_that_cannot_score_on_arrival_filter_the_arrived_batch(make_cfg, overrides):
    """A score that needs the trainer's model, a trajectory-level or loss-scaled selection: no refill."""
    cfg = make_cfg(*overrides)
    policy = load_policy(cfg.model, cfg.env, cfg.cache_dir, seed=0)
    module = _attach(AgentRLModule(cfg, policy), callbacks=[SNRFilter.from_run_config(cfg)])
    assert module.refill_filter() is None
