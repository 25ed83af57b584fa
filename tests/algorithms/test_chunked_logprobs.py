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


def test_response_token_stats_equal_the_dense_head_at_the_response_positions_with_gradients():
    from agentcollapse.algorithms.losses import response_token_stats

    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(3, 9, 16, generator=g, requires_grad=True)
    head = torch.nn.Linear(16, 50, bias=False)
    targets = torch.randint(0, 50, (3, 9), generator=g)
    mask = (torch.rand(3, 9, generator=g) > 0.6).float()  # observation tokens between responses
    mask[2] = 0  # a row with no response token
    weights = torch.rand(3, 9, generator=g)

    def grads(logp: torch.Tensor, ent: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.autograd.grad(((logp + ent) * weights * mask).sum(), (hidden, head.weight))

    logp, ent = response_token_stats(head, hidden, targets, mask)
    packed = grads(logp, ent)
    logits = head(hidden)
    dense_logp = torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
    dense_ent = _dense_entropy(logits)
    torch.testing.assert_close(logp, dense_logp * mask)
    torch.testing.assert_close(ent, dense_ent * mask)
    for a, b in zip(packed, grads(dense_logp, dense_ent)):
        torch.testing.assert_close(a, b)
    logp_only, none = response_token_stats(head, hidden, targets, mask, entropy=False)
    assert none is None and torch.equal(logp_only, logp)
    _, detached = response_token_stats(head, hidden, targets, mask, entropy_grad=False)
    assert not detached.requires_grad


def test_response_token_stats_of_a_mask_with_no_response_still_reach_the_weights():
    from agentcollapse.algorithms.losses import response_token_stats

    hidden = torch.randn(2, 4, 8, requires_grad=True)
    head = torch.nn.Linear(8, 10, bias=False)
    mask = torch.zeros(2, 4)
    logp, ent = response_token_stats(head, hidden, torch.zeros(2, 4, dtype=torch.long), mask)
    ((logp + ent) * mask).sum().backward()  # a data-parallel padding micro-batch: weight 0, but a backward
    assert hidden.grad is not None and head.weight.grad is not None
