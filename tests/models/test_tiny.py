import json
import os
import stat
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentcollapse.errors import UserError
from agentcollapse.models.tiny import build_tiny_policy, cache_key, length_bucketed_batches, load_tokenizer, training_device
from agentcollapse.models.tokenizer import FORMAT_TOKENS


def test_build_is_deterministic_and_cached(make_cfg, tmp_path):
    cfg = make_cfg()
    a = build_tiny_policy(cfg.model, cfg.env, tmp_path / "a", progress=False)
    b = build_tiny_policy(cfg.model, cfg.env, tmp_path / "b", progress=False)
    meta_a, meta_b = (json.loads((p / "meta.json").read_text()) for p in (a, b))
    assert meta_a["weights_sha256"] == meta_b["weights_sha256"]
    assert 10_000 < meta_a["params"] < 5_000_000
    assert meta_a["sft_device"] == training_device().type  # the build says where it trained (CUDA where there is one)
    stamp = (a / "meta.json").stat().st_mtime_ns
    assert build_tiny_policy(cfg.model, cfg.env, tmp_path / "a") == a  # cached: not rebuilt
    assert (a / "meta.json").stat().st_mtime_ns == stamp


def test_cache_key_changes_with_what_shapes_the_model(make_cfg):
    cfg = make_cfg()
    key = cache_key(cfg.model, cfg.env)
    cfg.model.warm_start.suboptimal_prob = 0.123
    assert cache_key(cfg.model, cfg.env) != key


def test_unset_warm_start_options_keep_the_cache_key(make_cfg):
    cfg = make_cfg()
    key = cache_key(cfg.model, cfg.env)
    assert cfg.model.warm_start.batch_tokens is None
    cfg.model.warm_start.batch_tokens = 2048
    assert cache_key(cfg.model, cfg.env) != key


def test_a_real_data_set_changes_the_cache_key_and_none_keeps_it(make_cfg):
    cfg = make_cfg()
    key = cache_key(cfg.model, cfg.env)
    assert cfg.env.data_path is None
    cfg.env.data_path = "/data/nq_slice"  # its own vocabulary and demonstrations: its own model
    assert cache_key(cfg.model, cfg.env) != key
    cfg.env.data_path = None
    assert cache_key(cfg.model, cfg.env) == key


def test_how_an_env_runs_keeps_the_cache_key_and_what_it_poses_changes_it(tmp_path):
    from agentcollapse.config.compose import compose as compose_config
    from agentcollapse.models.warm_start import warm_start_key

    def keys(*overrides):
        cfg = compose_config(["env=deepcoder", *overrides])
        return cache_key(cfg.model, cfg.env), warm_start_key(tmp_path, cfg.model, cfg.env)

    assert keys("env.kwargs.workers=8") == keys()  # programs graded at once: the same episodes
    assert keys("env.kwargs.difficulty=2") != keys()


def test_single_turn_envs_bring_their_warm_start_and_overrides_still_win():
    from agentcollapse.config.compose import compose as compose_config

    assert compose_config(["env=frozenlake"]).model.warm_start.batch_tokens is None
    for env in ("math", "countdown"):
        ws = compose_config([f"env={env}"]).model.warm_start
        assert ws.batch_tokens == 2048 and ws.episodes >= 20000
    ws = compose_config(["env=countdown", "model.warm_start.batch_tokens=512", "model.warm_start.steps=7"]).model.warm_start
    assert (ws.batch_tokens, ws.steps) == (512, 7)


@pytest.mark.parametrize("seed", range(5))
def test_length_bucketed_batches_cover_every_sequence_once(seed):
    import random

    rng = random.Random(seed)
    lengths = [rng.randint(5, 300) for _ in range(97)]
    fixed = length_bucketed_batches(lengths, batch_size=8)
    assert [len(b) for b in fixed[:-1]] == [8] * (len(fixed) - 1)
    budget = length_bucketed_batches(lengths, batch_size=8, batch_tokens=600)
    for batches in (fixed, budget):
        assert sorted(i for b in batches for i in b) == list(range(97))
        flat = [lengths[i] for b in batches for i in b]
        assert flat == sorted(flat)  # similar lengths share a batch
    for batch in budget:  # padded size within budget, unless one sequence alone exceeds it
        assert len(batch) * max(lengths[i] for i in batch) <= 600 or len(batch) == 1
    # short sequences get more rows per batch than long ones
    assert len(budget[0]) > len(budget[-1])


def test_tokenizer_knows_format_tags_and_chat_template(make_cfg):
    cfg = make_cfg()
    tok = load_tokenizer(build_tiny_policy(cfg.model, cfg.env, cfg.cache_dir))
    for tag in FORMAT_TOKENS:
        assert len(tok(tag, add_special_tokens=False)["input_ids"]) == 1
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|assistant|> ")
    ids = tok("_ O\nP G", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["_", "O", "\n", "P", "G"]  # grid rows stay apart


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_cache_is_a_user_error(make_cfg, tmp_path):
    cfg = make_cfg()
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    with pytest.raises(UserError, match="not writable"):
        build_tiny_policy(cfg.model, cfg.env, ro)


def test_cache_path_that_is_a_file_is_a_user_error(make_cfg, tmp_path):
    cfg = make_cfg()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="cache directory"):
        build_tiny_policy(cfg.model, cfg.env, blocker / "sub")


def test_checks_of_one_shared_cache_at_the_same_moment_do_not_trip_each_other(make_cfg):
    """The suite's xdist workers (and a sweep's) share one cache: checking that it is writable at the same
    moment must not fail (a fixed probe-file name let one worker delete the other's probe: ENOENT)."""
    cfg = make_cfg()
    built = build_tiny_policy(cfg.model, cfg.env, cfg.cache_dir, progress=False)
    with ThreadPoolExecutor(max_workers=4) as pool:
        paths = list(pool.map(lambda _: build_tiny_policy(cfg.model, cfg.env, cfg.cache_dir, progress=False), range(400)))
    assert set(paths) == {built}


@pytest.mark.parametrize("context_weight", [0.0, 0.1])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_warm_start_loss_and_gradient_equal_the_full_logits_ones(context_weight, checkpointing):
    """sft_loss computes logits only where some row has loss (a pretrained model's loss is on its
    responses alone), and the build recomputes activations where checkpointing is on: the loss and every
    gradient equal, bit for bit, those of one cross-entropy over every position's logits."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentcollapse.models.hf import enable_activation_checkpointing
    from agentcollapse.models.lora import add_lora
    from agentcollapse.models.tiny import sft_loss

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 64, (3, 16), generator=gen)
    attn = torch.ones_like(ids)
    attn[1, 12:], ids[1, 12:] = 0, 0  # a padded row
    weights = torch.full(ids.shape, context_weight)
    weights[0, 5:8] = weights[1, 9:11] = weights[2, 3:6] = weights[2, 14:] = 1.0  # responses; the rest context
    weights[1, 12:] = 0.0

    def model(checkpointing):
        torch.manual_seed(1)
        base = LlamaForCausalLM(
            LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
        )
        if checkpointing:
            enable_activation_checkpointing(base)
        model = add_lora(base, 4, 8, 0.0, ["q_proj", "v_proj"])
        model.train()
        return model

    reference = model(False)
    logits = reference(input_ids=ids, attention_mask=attn).logits[:, :-1]
    token_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), ids[:, 1:].reshape(-1), reduction="none")
    w = weights[:, 1:].reshape(-1)
    want = (token_loss * w).sum() / w.sum()
    want.backward()
    trained = model(checkpointing)
    got = sft_loss(trained, ids, weights, attn)
    got.backward()
    assert torch.equal(got, want)
    grads = [(n, p.grad) for n, p in trained.named_parameters() if p.requires_grad]
    assert all(g is not None for _, g in grads) and any(g.abs().sum() > 0 for _, g in grads)  # lora_A's are 0 while B is
    for (name, g), ref in zip(grads, [p.grad for p in reference.parameters() if p.requires_grad]):
        assert torch.equal(g, ref), name
