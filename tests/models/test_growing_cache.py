"""models.hf.growing_cache: decoding appends in place and holds exactly what DynamicCache's torch.cat would."""

from __future__ import annotations

import torch
from transformers import LlamaConfig

from agentcollapse.models.hf import growing_cache, layer_tensors


def tiny_config() -> LlamaConfig:
    return LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, vocab_size=10
    )


def test_appends_match_concatenation_across_regrowth_and_row_selection():
    torch.manual_seed(0)
    cache = growing_cache(tiny_config(), room=3)
    expected = [None, None]
    steps = [4, 1, 1, 1, 1, 1]  # a prefill, then single tokens past the room of 3 (one regrowth)
    for n in steps:
        for idx, layer in enumerate(cache.layers):
            k, v = torch.randn(2, 2, n, 8), torch.randn(2, 2, n, 8)
            keys, values = layer.update(k, v)
            old = expected[idx]
            expected[idx] = (k, v) if old is None else (torch.cat([old[0], k], -2), torch.cat([old[1], v], -2))
            assert torch.equal(keys, expected[idx][0]) and torch.equal(values, expected[idx][1])
    assert cache.get_seq_length() == sum(steps)
    cache.batch_select_indices(torch.tensor([1]))  # a row stopped and left the batch
    for idx, layer in enumerate(cache.layers):
        k, v = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)
        keys, _ = layer.update(k, v)
        assert torch.equal(keys, torch.cat([expected[idx][0][1:], k], -2))


def test_starting_layers_are_read_never_written():
    prefix = [(torch.randn(3, 2, 5, 8), torch.randn(3, 2, 5, 8)) for _ in range(2)]
    kept = [(k.clone(), v.clone()) for k, v in prefix]
    cache = growing_cache(tiny_config(), room=4, layers=prefix)
    assert cache.get_seq_length() == 5
    for layer in cache.layers:
        layer.update(torch.randn(3, 2, 2, 8), torch.randn(3, 2, 2, 8))
    for (k, v), (k0, v0) in zip(prefix, kept):
        assert torch.equal(k, k0) and torch.equal(v, v0)
    for (k, _), (k0, _) in zip(layer_tensors(cache), kept):
        assert k.shape[-2] == 7 and torch.equal(k[:, :, :5], k0)


def test_stacked_row_caches_pad_on_the_side_asked_and_mask_the_real_positions():
    from agentcollapse.models.hf import stack_row_caches

    rows = [[(torch.randn(2, n, 4), torch.randn(2, n, 4)) for _ in range(2)] if n else None for n in (3, 0, 5)]
    for left in (True, False):
        layers, mask = stack_row_caches(rows, left=left)
        assert mask.tolist() == ([[0, 0, 1, 1, 1], [0] * 5, [1] * 5] if left else [[1, 1, 1, 0, 0], [0] * 5, [1] * 5])
        for layer, (keys, values) in enumerate(layers):
            assert keys.shape == values.shape == (3, 2, 5, 4)
            assert torch.equal(keys[0][:, mask[0].bool()], rows[0][layer][0]) and torch.equal(values[2], rows[2][layer][1])
            assert not keys[~mask.bool()[:, None, :].expand(-1, 2, -1)].any()
