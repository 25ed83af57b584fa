from types import SimpleNamespace

from agentcollapse.models.hf import pad_token_id


def test_a_batch_is_padded_with_the_pad_token_else_eos():
    assert pad_token_id(SimpleNamespace(pad_token_id=0, eos_token_id=3)) == 0  # 0 is a pad id, not "none"
    assert pad_token_id(SimpleNamespace(pad_token_id=None, eos_token_id=3)) == 3
