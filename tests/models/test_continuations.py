"""Continuations after shared prefixes (models.continuations): equal to plain forwards over the whole
sequences, log-probs, logits and gradients alike, on a real transformers Llama with a real LoRA."""

import pytest
import torch
from peft import LoraConfig, get_peft_model

from agentcollapse.models.continuations import continuation_logprobs, shared_prefix_forward
from agentcollapse.models.logprobs import token_logprobs
from tests.helpers import small_llama

VOCAB = 40


def _lora_llama() -> torch.nn.Module:
    model = get_peft_model(small_llama(VOCAB), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.1)  # a trained adapter: the keys/values of the prefix depend on it
    return model


def _plain_logprobs(model, prefix, cont):
    ids = torch.tensor([prefix + cont])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    return token_logprobs(logits[:, len(prefix) - 1 : -1], ids[:, len(prefix) :])[0]


def test_continuation_logprobs_equal_plain_forwards_and_use_the_memo():
    model = _lora_llama()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (7, 12, 1)]
    pairs = [(prompts[k % 3], torch.randint(0, VOCAB, (n,), generator=g).tolist()) for k, n in enumerate((5, 9, 3, 1, 14, 6, 2))]
    pairs += [pairs[0], (prompts[0], [])]  # a repeated pair, an empty continuation
    memo = {}
    got = continuation_logprobs(model, pairs, batch_size=3, memo=memo)
    assert len(memo) == 7  # each distinct non-empty pair once
    for (prefix, cont), lp in zip(pairs, got):
        assert lp.dtype == torch.float32 and lp.shape == (len(cont),)
        if cont:
            assert torch.allclose(lp, _plain_logprobs(model, prefix, cont), atol=1e-5)
    again = continuation_logprobs(model, pairs[:2], memo=memo)
    assert all(a is memo[k] for a, k in zip(again, [(tuple(p), tuple(c)) for p, c in pairs[:2]]))
    with pytest.raises(ValueError, match="empty prefix"):
        continuation_logprobs(model, [([], [1, 2])])


def test_shared_prefix_forward_equals_the_whole_forward_with_its_gradients():
    model = _lora_llama()
    model.train()
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, VOCAB, (9,), generator=g)
    lengths = (6, 11, 3)
    rows = [torch.cat([prompt, torch.randint(0, VOCAB, (n,), generator=g)]) for n in lengths]
    ids = torch.full((3, 9 + max(lengths)), 0, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r  # right-padded
    start = 8  # the prompt's last token predicts the first continuation token
    mask = torch.zeros(3, ids.shape[1] - 1 - start)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1

    def loss_and_grads(forward):
        model.zero_grad(set_to_none=True)
        out = forward()
        logp = token_logprobs(out.logits[:, :-1], ids[:, start + 1 :])
        hidden = out.hidden_states[-1][:, -out.logits.shape[1] :]
        loss = (logp * mask).sum() + hidden.square().mean()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        return out.logits.detach(), hidden.detach(), grads

    whole = loss_and_grads(lambda: model(input_ids=ids, logits_to_keep=ids.shape[1] - start, output_hidden_states=True))
    shared = loss_and_grads(lambda: shared_prefix_forward(model, ids, start, output_hidden_states=True))
    assert shared[0].shape == whole[0].shape
    valid = torch.zeros(3, ids.shape[1] - start, dtype=torch.bool)
    for i, n in enumerate(lengths):
        valid[i, : n + 1] = True  # the prompt's last position and the real continuation tokens
    assert torch.allclose(shared[0][valid], whole[0][valid], atol=1e-5)
    assert torch.allclose(shared[1][valid], whole[1][valid], atol=1e-5)
    assert whole[2] and set(shared[2]) == set(whole[2])
    for name, grad in whole[2].items():
        assert grad.abs().max() > 0, name
        assert torch.allclose(shared[2][name], grad, atol=1e-5, rtol=1e-4), name
    with pytest.raises(ValueError, match="start"):
        shared_prefix_forward(model, ids, 0)
