import json
import os
import stat

import pytest

from agentcollapse.errors import UserError
from agentcollapse.models.tiny import build_tiny_policy, cache_key, load_tokenizer
from agentcollapse.models.tokenizer import FORMAT_TOKENS


def test_build_is_deterministic_and_cached(make_cfg, tmp_path):
    cfg = make_cfg()
    a = build_tiny_policy(cfg.model, cfg.env, tmp_path / "a", progress=False)
    b = build_tiny_policy(cfg.model, cfg.env, tmp_path / "b", progress=False)
    meta_a, meta_b = (json.loads((p / "meta.json").read_text()) for p in (a, b))
    assert meta_a["weights_sha256"] == meta_b["weights_sha256"]
    assert 10_000 < meta_a["params"] < 5_000_000
    stamp = (a / "meta.json").stat().st_mtime_ns
    assert build_tiny_policy(cfg.model, cfg.env, tmp_path / "a") == a  # cached: not rebuilt
    assert (a / "meta.json").stat().st_mtime_ns == stamp


def test_cache_key_changes_with_what_shapes_the_model(make_cfg):
    cfg = make_cfg()
    key = cache_key(cfg.model, cfg.env)
    cfg.model.warm_start.suboptimal_prob = 0.123
    assert cache_key(cfg.model, cfg.env) != key


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
