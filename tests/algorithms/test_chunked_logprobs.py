"""Token log-probs and entropy at a real vocabulary, block by block, equal the dense computation (values
and gradients), without the [B, T, V] log-softmax the dense one keeps."""

import torch

from agentcollapse.algorithms.losses import _dense_entropy, entropy_from_logits
from agentcollapse.models.logprobs import CHUNK_ELEMENTS, token_logprobs


def _logits(requires_grad: bool = True) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn((2, 172, 49_152), generator=g) * 3  # SmolLM2's vocabulary: just over one block (16.8M elements)
    assert x[:, :-1].numel() > CHUNK_ELEMENTS
    return x.requires_grad_(requires_grad)


def test_token_logprobs_match_log_softmax_with_gradients():
    x = _logits()
    targets = torch.randint(0, x.shape[-1], (2, 171), generator=torch.Generator().manual_seed(1))
    chunked = token_logprobs(x[:, :-1], targets)
    chunked.sum().backward()
    grad, x.grad = x.grad.clone(), None
    dense = torch.log_softmax(x[:, :-1], -1).gather(-1, targets[..., None]).squeeze(-1)
    dense.sum().backward()
    torch.testing.assert_close(chunked, dense)
    torch.testing.assert_close(grad, x.grad)


def test_entropy_blocks_match_the_dense_entropy_with_gradients():
    x = _logits()
    chunked = entropy_from_logits(x[:, :-1])
    (chunked * torch.linspace(0, 1, 171)).sum().backward()
    grad, x.grad = x.grad.clone(), None
    dense = _dense_entropy(x[:, :-1])
    (dense * torch.linspace(0, 1, 171)).sum().backward()
    torch.testing.assert_close(chunked, dense)
    torch.testing.assert_close(grad, x.grad)
    with torch.no_grad():
        torch.testing.assert_close(entropy_from_logits(x[:, :-1]), dense.detach())


def test_token_logprobs_of_a_small_vocabulary_in_one_op_match_log_softmax():
    # below CHUNK_ELEMENTS every row goes at once: same values and gradients, from a sliced (non-contiguous) view
    x = (torch.randn((5, 13, 300), generator=torch.Generator().manual_seed(2)) * 3).requires_grad_(True)
    targets = torch.randint(0, 300, (5, 12), generator=torch.Generator().manual_seed(3))
    got = token_logprobs(x[:, :-1], targets)
    (got * torch.linspace(0, 1, 12)).sum().backward()
    grad, x.grad = x.grad.clone(), None
    dense = torch.log_softmax(x[:, :-1], -1).gather(-1, targets[..., None]).squeeze(-1)
    (dense * torch.linspace(0, 1, 12)).sum().backward()
    assert got.dtype == torch.float32 and got.shape == (5, 12)
    torch.testing.assert_close(got, dense)
    torch.testing.assert_close(grad, x.grad)
    half = token_logprobs(x.detach()[:, :-1].bfloat16(), targets)
    assert half.dtype == torch.float32
