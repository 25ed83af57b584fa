"""The real SmolLM2-135M-Instruct policy (part of the install): conversion, BPE stopping and parsing,
token-in/token-out multi-turn contexts, its warm start, and the bad inputs a real model directory brings."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from agentcollapse.errors import UserError

# one xdist worker runs every test that needs the converted SmolLM2 (converting it takes ~40 s)
pytestmark = pytest.mark.xdist_group("smollm2")


@pytest.fixture(scope="session")
def converted(cache_dir):
    """The converted SmolLM2 directory and what converting it printed (nothing when it was cached already)."""
    import contextlib
    import io

    from agentcollapse.models.smollm2 import smollm2_dir

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        path = smollm2_dir(cache_dir)
    return path, printed.getvalue()


@pytest.fixture(scope="session")
def smollm2_path(converted):
    return converted[0]


@pytest.fixture(scope="session")
def smollm2_policy(smollm2_path, cache_dir):
    """The untuned SmolLM2 with a LoRA adapter, as `model=smollm2-135m model.warm_start.enabled=false` loads it."""
    from agentcollapse.models.policy import load_policy
    from agentcollapse.run.checks import compose_run as compose

    cfg = compose(["model=smollm2-135m", "model.warm_start.enabled=false", f"cache_dir={cache_dir}"])
    return load_policy(cfg.model, cfg.env, cfg.cache_dir, seed=0)


def test_converted_once_and_answers_sensibly(smollm2_path, cache_dir):
    from transformers import AutoModelForCausalLM

    from agentcollapse.models.smollm2 import smollm2_dir
    from agentcollapse.models.tiny import load_tokenizer

    stamp = (smollm2_path / "config.json").stat().st_mtime_ns
    assert smollm2_dir(cache_dir) == smollm2_path and (smollm2_path / "config.json").stat().st_mtime_ns == stamp  # cached
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_path))
    tok = load_tokenizer(smollm2_path)
    assert tok.pad_token_id == tok.eos_token_id == 2
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], tokenize=False, add_generation_prompt=True
    )
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1] :])


def test_conversion_prints_no_progress_bars(converted):
    path, printed = converted
    assert (path / "model.safetensors").exists()
    assert "it/s" not in printed and "%|" not in printed, printed[-500:]


def test_missing_package_is_a_user_error(monkeypatch):
    from agentcollapse.models import smollm2

    monkeypatch.setattr(smollm2, "PACKAGE", "no_such_package_here")
    with pytest.raises(UserError, match="make venv"):
        smollm2.gguf_path()


def test_answer_close_is_several_tokens_and_stops_as_text(smollm2_policy):
    tok = smollm2_policy.tokenizer
    stop = smollm2_policy.stop_text
    assert stop is not None and smollm2_policy.stop_ids == {tok.eos_token_id}  # </answer> is </ answer >
    ids = tok("<think> I am at ( 1 , 2 ) . </think> <answer> Left </answer>\n\nMore", add_special_tokens=False)["input_ids"]
    ends = [k for k in range(1, len(ids) + 1) if ids[k - 1] in stop.trigger_ids and stop.hit(ids[:k])]
    assert ends and "</answer>" in tok.decode(ids[: ends[0]]) and "</answer>" not in tok.decode(ids[: ends[0] - 1])
    text = smollm2_policy.response_text(ids + [tok.eos_token_id])
    assert text.endswith("<answer> Left </answer>") and "More" not in text  # cut at </answer>, EOS dropped
    from agentcollapse.envs.parsing import parse_response

    parsed = parse_response(text)
    assert parsed.format_valid and parsed.answer == "Left" and parsed.think == "I am at ( 1 , 2 ) ."


def test_decoding_stops_at_a_text_spanning_tokens(smollm2_policy):
    """Greedy SmolLM2 continues a prompt; a stop text that spans two of its tokens ends the same
    continuation exactly at the token that completes it."""
    from agentcollapse.models.context import encode
    from agentcollapse.models.policy import StopText
    from agentcollapse.rollout.generate import generate

    tok, model = smollm2_policy.tokenizer, smollm2_policy.decoding_model()
    prompt = encode(
        tok,
        tok.apply_chat_template(
            [{"role": "user", "content": "Count from one to ten in words."}], tokenize=False, add_generation_prompt=True
        ),
    )
    gen = [torch.Generator().manual_seed(0)]
    free, _ = generate(model, [prompt], gen, 0.0, 24, {tok.eos_token_id}, tok.pad_token_id)
    pieces = [tok.decode([t]) for t in free[0]]
    k = next(i for i in range(4, len(pieces)) if pieces[i].strip() and pieces[i - 1].strip())
    text = (pieces[k - 1] + pieces[k]).strip()
    stop = StopText.for_tokenizer(tok, text)
    cut, _ = generate(model, [prompt], gen, 0.0, 24, {tok.eos_token_id}, tok.pad_token_id, stop_text=stop)
    first = next(i for i in range(1, len(free[0]) + 1) if text in tok.decode(free[0][:i]))
    assert cut[0] == free[0][:first] and len(cut[0]) < len(free[0])


def test_multi_turn_contexts_keep_the_sampled_tokens(smollm2_policy):
    """Token in, token out with a BPE tokenizer: each turn's context is the previous context plus the
    exact sampled response ids, and each trajectory is one training sequence of exactly those tokens."""
    from agentcollapse import envs
    from agentcollapse.models.context import after_response_text, encode
    from agentcollapse.rollout.runner import collect_rollouts
    from agentcollapse.rollout.sequences import build_sequences

    tok = smollm2_policy.tokenizer
    batch, _ = collect_rollouts(smollm2_policy, lambda: envs.make("frozenlake", max_turns=3), [11, 12], 2, 1.0, 16, sample_seed=0)
    assert max(len(t.turns) for t in batch.trajectories) > 1  # untuned: invalid answers use up the turns
    for traj in batch.trajectories:
        for prev, nxt in zip(traj.turns, traj.turns[1:]):
            assert nxt.context_ids[: len(prev.context_ids) + len(prev.response_ids)] == prev.context_ids + prev.response_ids
            tail = nxt.context_ids[len(prev.context_ids) + len(prev.response_ids) :]
            text = after_response_text(tok, nxt.observation)
            if prev.response_ids[-1] == tok.eos_token_id:
                text = text[len(tok.eos_token) :]
            assert tail == encode(tok, text)  # only the template's own text was encoded, never a response
    seqs = build_sequences(batch)
    assert len(seqs.input_ids) == len(batch.trajectories) and seqs.traj_index == list(range(len(batch.trajectories)))
    for ids, mask, traj in zip(seqs.input_ids, seqs.loss_mask, batch.trajectories):
        last = traj.turns[-1]
        assert ids == last.context_ids + last.response_ids
        assert [t for t, m in zip(ids, mask) if m] == [t for turn in traj.turns for t in turn.response_ids]


def test_warm_start_is_built_once_under_its_key(smollm2_path, cache_dir):
    from agentcollapse.models.policy import resolve_model_dir
    from agentcollapse.models.warm_start import warm_start_key
    from agentcollapse.run.checks import compose_run as compose

    # the CLI test's warm start (tests/cli/test_smollm2_cli.py), so a session builds it once
    overrides = [
        "model=smollm2-135m",
        f"cache_dir={cache_dir}",
        "model.warm_start.episodes=4",
        "model.warm_start.steps=1",
        "env.kwargs.max_turns=2",
    ]
    cfg = compose(overrides)
    path = resolve_model_dir(cfg.model, cfg.env, cfg.cache_dir)
    meta = json.loads((path / "meta.json").read_text())
    assert path.parent == smollm2_path.parent and meta["episodes"] == 4 and meta["env"] == "frozenlake"
    assert resolve_model_dir(cfg.model, cfg.env, cfg.cache_dir) == path  # cached
    other = compose([*overrides, "model.warm_start.lr=5e-4"])
    assert warm_start_key(smollm2_path, other.model, other.env) != path.name  # anything that shapes it changes the key


def test_a_run_loads_its_tokenizer_once(smollm2_path, cache_dir, monkeypatch):
    """The check of a pretrained tokenizer, the warm start and the policy share one load (they were up
    to three); the warm-started directory's tokenizer, saved from the base's, is the base's."""
    from transformers import PreTrainedTokenizerFast

    from agentcollapse.models.policy import load_policy, resolve_model_dir
    from agentcollapse.models.tiny import load_tokenizer
    from agentcollapse.run.checks import compose_run as compose

    # the warm start of test_warm_start_is_built_once_under_its_key and the CLI test
    warm = ["model.warm_start.episodes=4", "model.warm_start.steps=1", "env.kwargs.max_turns=2"]
    warm_cfg = compose(["model=smollm2-135m", f"cache_dir={cache_dir}", *warm])
    warm_dir = resolve_model_dir(warm_cfg.model, warm_cfg.env, warm_cfg.cache_dir)
    base, tuned = load_tokenizer(smollm2_path), load_tokenizer(warm_dir)
    assert base.get_vocab() == tuned.get_vocab() and base.special_tokens_map == tuned.special_tokens_map
    assert base.chat_template == tuned.chat_template
    loads: list[str] = []
    real = PreTrainedTokenizerFast.from_pretrained.__func__

    def counted(cls, path, *args, **kwargs):
        loads.append(str(path))
        return real(cls, path, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerFast, "from_pretrained", classmethod(counted))
    for cfg in (compose(["model=smollm2-135m", "model.warm_start.enabled=false", f"cache_dir={cache_dir}"]), warm_cfg):
        loads.clear()
        policy = load_policy(cfg.model, cfg.env, cfg.cache_dir)
        assert loads == [str(smollm2_path)]
        assert policy.tokenizer.pad_token_id == policy.tokenizer.eos_token_id and policy.tokenizer.padding_side == "left"


def _copy_model(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_a_model_without_chat_template_is_one_clear_line(smollm2_path, tmp_path, cache_dir):
    from agentcollapse.models.policy import resolve_model_dir
    from agentcollapse.run.checks import compose_run as compose

    bare = _copy_model(smollm2_path, tmp_path / "bare")
    (bare / "chat_template.jinja").unlink()
    config = json.loads((bare / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    cfg = compose(["model=hf", f"model.path={bare}", f"cache_dir={cache_dir}"])
    with pytest.raises(UserError, match="no chat template"):
        resolve_model_dir(cfg.model, cfg.env, cfg.cache_dir)


def test_a_tokenizer_without_eos_is_one_clear_line(smollm2_path, tmp_path, cache_dir):
    from agentcollapse.models.policy import resolve_model_dir
    from agentcollapse.run.checks import compose_run as compose

    no_eos = _copy_model(smollm2_path, tmp_path / "no-eos")
    config = json.loads((no_eos / "tokenizer_config.json").read_text())
    config.pop("eos_token", None)
    config.pop("pad_token", None)
    (no_eos / "tokenizer_config.json").write_text(json.dumps(config))
    cfg = compose(["model=hf", f"model.path={no_eos}", f"cache_dir={cache_dir}"])
    with pytest.raises(UserError, match="no EOS token"):
        resolve_model_dir(cfg.model, cfg.env, cfg.cache_dir)


def test_lora_targets_that_do_not_exist_are_one_clear_line(smollm2_path, cache_dir):
    from agentcollapse.models.policy import load_policy
    from agentcollapse.run.checks import compose_run as compose

    cfg = compose(
        ["model=smollm2-135m", "model.warm_start.enabled=false", f"cache_dir={cache_dir}", "model.lora.target_modules=[q_proj,c_attn]"]
    )
    with pytest.raises(UserError, match=r"c_attn not found .* q_proj"):
        load_policy(cfg.model, cfg.env, cfg.cache_dir)


def test_grounding_and_copy_masks_read_bpe_text(smollm2_policy):
    """The nocopy samplers' masks and rollout/state_grounding on SmolLM2's tokens of a real observation."""
    from agentcollapse import envs
    from agentcollapse.diagnostics.copying import copied_token_mask
    from agentcollapse.models.context import encode

    tok = smollm2_policy.tokenizer
    env = envs.make("frozenlake")
    obs = env.reset(7)
    position = next(line for line in obs.splitlines() if line.startswith("You are at"))
    reasoning = f"{position} I will go left ."
    ids = encode(tok, reasoning)
    mask = copied_token_mask(obs, reasoning, lambda text: encode(tok, text), ids)
    copied = tok.decode([t for t, m in zip(ids, mask) if m])
    assert copied.strip() == position and not all(mask)  # the restated position, not the plan
    assert env.grounding(reasoning) == 1.0  # a true position claim
    assert env.grounding("You are at ( 9 , 9 ) .") == 0.0  # off the 4x4 map, so not the goal either
