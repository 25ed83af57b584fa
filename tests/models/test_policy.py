import json

import pytest
import torch

from agentcollapse.errors import UserError
from agentcollapse.models.policy import load_policy


def test_lora_wraps_policy_and_reference_is_adapter_disabled(tiny_policy):
    model = tiny_policy.model
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    ids = torch.tensor([[5, 6, 7, 8]])
    for name, p in model.named_parameters():  # make the adapter non-trivial
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    with torch.no_grad():
        with_adapter = model(input_ids=ids).logits
        with model.disable_adapter():
            reference = model(input_ids=ids).logits
        base = model.get_base_model()
    assert not torch.allclose(with_adapter, reference)
    with torch.no_grad(), model.disable_adapter():
        assert torch.equal(base(input_ids=ids).logits, reference)


def test_missing_model_path(make_cfg):
    cfg = make_cfg()
    cfg.model.path = "/no/such/dir"
    with pytest.raises(UserError, match="does not exist"):
        load_policy(cfg.model, cfg.env, cfg.cache_dir)


def test_path_that_is_not_a_causal_lm(make_cfg, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertForMaskedLM"]}))
    cfg = make_cfg()
    cfg.model.path = str(tmp_path)  # past the config's own check: load_policy must refuse it too
    with pytest.raises(UserError, match="not a causal LM"):
        load_policy(cfg.model, cfg.env, cfg.cache_dir)


def test_directory_without_config(make_cfg, tmp_path):
    cfg = make_cfg()
    cfg.model.path = str(tmp_path)
    with pytest.raises(UserError, match="config.json"):
        load_policy(cfg.model, cfg.env, cfg.cache_dir)


QWEN = "Qwen/Qwen2.5-3B-Instruct"


def _offline_advice(line: str, target) -> None:
    """The one line a missing or unusable model directory gets: download elsewhere, copy, model.path."""
    assert "\n" not in line and "nothing downloads at run time" in line and "on a machine with network" in line, line
    assert f"hf download {QWEN} --local-dir {target}" in line and "copy that directory here" in line, line
    assert line.endswith(f"model.path={target}"), line


def test_a_model_path_that_does_not_exist_says_how_to_bring_the_weights(tmp_path):
    from agentcollapse.models.policy import check_causal_lm_dir

    missing = tmp_path / "no_weights"
    with pytest.raises(UserError, match="does not exist") as err:
        check_causal_lm_dir(missing, QWEN)
    _offline_advice(str(err.value), missing)
    with pytest.raises(UserError, match="a Hub id is not downloaded") as err:  # the Hub id itself, as if it would download
        check_causal_lm_dir(QWEN, QWEN)
    _offline_advice(str(err.value), "/models/Qwen2.5-3B-Instruct")


def test_a_directory_without_config_json_says_how_to_bring_the_weights(tmp_path):
    from agentcollapse.models.policy import check_causal_lm_dir

    (tmp_path / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(UserError, match="has no config.json") as err:
        check_causal_lm_dir(tmp_path, QWEN)
    _offline_advice(str(err.value), tmp_path)


def test_a_directory_without_weights_or_with_lfs_pointers_fails_before_loading(tmp_path):
    from agentcollapse.models.policy import check_causal_lm_dir

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}))
    with pytest.raises(UserError, match="no weight files") as err:
        check_causal_lm_dir(tmp_path, QWEN)
    _offline_advice(str(err.value), tmp_path)
    pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 6171926976\n"
    (tmp_path / "model-00001-of-00002.safetensors").write_text(pointer)
    with pytest.raises(UserError, match="Git LFS pointers") as err:
        check_causal_lm_dir(tmp_path, QWEN)
    assert "git lfs pull" in str(err.value)
    _offline_advice(str(err.value), tmp_path)


def test_a_preset_with_no_path_says_to_download_elsewhere(cache_dir):
    from agentcollapse.run.checks import compose_run as compose

    with pytest.raises(UserError, match="needs its weights in a local directory") as err:
        compose(["model=qwen2.5-3b", "model.path=null", f"cache_dir={cache_dir}"])
    _offline_advice(str(err.value), "/models/Qwen2.5-3B-Instruct")


def test_unknown_model_name(make_cfg):
    cfg = make_cfg()
    cfg.model.name = "gpt-17"
    with pytest.raises(UserError, match="valid models: tiny"):
        load_policy(cfg.model, cfg.env, cfg.cache_dir)


def test_folded_lora_decodes_like_the_adapter_model_and_follows_its_updates(tiny_policy):
    from agentcollapse.models.hf import FoldedLoRA

    model = tiny_policy.model
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.sin(torch.arange(p.numel(), dtype=p.dtype)).reshape(p.shape))
    base_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    folded = FoldedLoRA(model)
    assert not any("lora_" in n for n, _ in folded.model.named_parameters())
    model.eval()
    with torch.no_grad():
        assert torch.allclose(folded.model(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
        for name, p in model.named_parameters():  # an update moves the adapter
            if "lora_A" in name:
                p.add_(0.01)
        assert not torch.allclose(folded.model(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
        assert torch.allclose(folded.refresh()(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
    assert all(torch.equal(base_before[n], p) for n, p in model.named_parameters() if "lora_" not in n)  # base untouched
    assert all(not p.requires_grad for p in folded.model.parameters())
