import pytest
import torch
from transformers import LlamaForCausalLM

from agentcollapse.diagnostics import cross_score, naive_cross_score
from agentcollapse.diagnostics.cross_score import sequence_cross_score
from tests.helpers import small_llama

VOCAB = 50


def _tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    return small_llama(VOCAB, seed=seed)  # 2 layers, GQA (4 heads, 2 key/value): exercises the cache head layout


def _ragged():
    g = torch.Generator().manual_seed(1)
    contexts = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (3, 9, 1, 5)]
    contexts.append(list(contexts[0]))  # duplicate context (shares the cache internally)
    traces = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (4, 1, 11, 2, 6, 0, 3)]
    return contexts, traces


def test_cached_matches_naive_ragged_batched():
    model = _tiny_llama()
    contexts, traces = _ragged()
    naive = naive_cross_score(model, contexts, traces)
    cached = cross_score(model, contexts, traces, batch_size=3)  # 7 traces -> 3 batches
    assert cached.shape == (len(traces), len(contexts))
    assert cached.dtype == torch.float32 and cached.device.type == "cpu"
    torch.testing.assert_close(cached, naive, atol=1e-4, rtol=0)
    # empty trace scores 0, non-empty traces have negative log-likelihood
    assert torch.all(cached[5] == 0)
    assert torch.all(cached[[0, 1, 2, 3, 4, 6]] < 0)
    # identical contexts give identical columns; different contexts differ
    torch.testing.assert_close(cached[:, 0], cached[:, 4])
    assert not torch.allclose(cached[:, 0], cached[:, 1])


def test_single_token_trace_uses_context_last_logit():
    model = _tiny_llama()
    ctx, tok = [4, 7, 9], 13
    with torch.no_grad():
        ref = torch.log_softmax(model(torch.tensor([ctx])).logits[0, -1], -1)[tok]
    got = cross_score(model, [ctx], [[tok]])
    assert abs(float(got[0, 0]) - float(ref)) < 1e-5


def test_context_cache_not_mutated_and_batch_size_invariant():
    model = _tiny_llama()
    contexts, traces = _ragged()
    a = cross_score(model, contexts, traces, batch_size=2)
    b = cross_score(model, contexts, traces, batch_size=2)
    c = cross_score(model, contexts, traces, batch_size=1)
    d = cross_score(model, contexts, traces, batch_size=64)
    assert torch.equal(a, b)
    torch.testing.assert_close(a, c, atol=1e-5, rtol=0)
    torch.testing.assert_close(a, d, atol=1e-5, rtol=0)


def test_lora_adapter_cached_matches_naive_and_mode_restored():
    from peft import LoraConfig, get_peft_model

    contexts, traces = _ragged()
    base_scores = cross_score(_tiny_llama(), contexts, traces, batch_size=3)
    peft_model = get_peft_model(_tiny_llama(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.train()
    cached = cross_score(peft_model, contexts, traces, batch_size=3)
    assert peft_model.training and all(m.training for m in peft_model.modules())
    naive = naive_cross_score(peft_model, contexts, traces)
    torch.testing.assert_close(cached, naive, atol=1e-4, rtol=0)
    # the adapter really changes the scores
    assert (cached - base_scores).abs().max() > 1e-3


def test_eval_mode_restored_per_module():
    model = _tiny_llama()
    model.train()
    model.model.layers[0].eval()  # mixed flags must be restored exactly
    cross_score(model, [[1, 2]], [[3, 4]])
    assert model.training and not model.model.layers[0].training and model.model.layers[1].training


def test_edge_cases():
    model = _tiny_llama()
    out = cross_score(model, [[1, 2], [3]], [])
    assert out.shape == (0, 2) and out.dtype == torch.float32
    assert naive_cross_score(model, [[1, 2], [3]], []).shape == (0, 2)
    assert cross_score(model, [], [[1, 2]]).shape == (1, 0)
    with pytest.raises(ValueError):
        cross_score(model, [[]], [[1]])


# -- issue 17: token weights (the nocopy samplers' masked sums) ----------------------------------
def test_weighted_cached_matches_naive_masked_sum():
    model = _tiny_llama()
    contexts, traces = _ragged()
    g = torch.Generator().manual_seed(2)
    masks = [(torch.rand(len(t), generator=g) < 0.5).float().tolist() for t in traces]
    masks[2] = [0.0] * len(traces[2])  # all copied: scores 0 under every context
    cached = cross_score(model, contexts, traces, batch_size=3, weights=masks)
    naive = naive_cross_score(model, contexts, traces, weights=masks)
    torch.testing.assert_close(cached, naive, atol=1e-4, rtol=0)
    assert torch.all(cached[2] == 0)
    # the naive masked sum by hand: per-token log-probs of context + trace, masked, summed
    c, r = 1, 0
    with torch.no_grad():
        ids = torch.tensor([contexts[c] + traces[r]])
        logp = torch.log_softmax(model(ids).logits[0, len(contexts[c]) - 1 : -1], -1)
        per_token = logp[torch.arange(len(traces[r])), torch.tensor(traces[r])]
    assert abs(float((per_token * torch.tensor(masks[r])).sum()) - float(cached[r, c])) < 1e-4
    # weight 1 everywhere is the plain score; fractional weights are a weighted sum
    ones = [[1.0] * len(t) for t in traces]
    torch.testing.assert_close(
        cross_score(model, contexts, traces, batch_size=3, weights=ones), cross_score(model, contexts, traces, batch_size=3)
    )
    halves = [[0.5] * len(t) for t in traces]
    torch.testing.assert_close(
        cross_score(model, contexts, traces, weights=halves), 0.5 * naive_cross_score(model, contexts, traces), atol=1e-4, rtol=0
    )


def test_weights_must_match_the_traces():
    model = _tiny_llama()
    with pytest.raises(ValueError, match="weight rows"):
        cross_score(model, [[1, 2]], [[3, 4]], weights=[])
    with pytest.raises(ValueError, match="2 tokens but 1 weights"):
        naive_cross_score(model, [[1, 2]], [[3, 4]], weights=[[1.0]])


# -- issue 28: one forward per (context, trace) across the proxy's samplers ----------------------
def _count_forwards(model) -> list[int]:
    calls = [0]
    model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_memo_scores_each_pair_once_and_changes_nothing():
    model = _tiny_llama()
    contexts, traces = _ragged()
    traces.append(list(traces[0]))  # a repeated trace runs once per context
    plain = cross_score(model, contexts, traces, batch_size=3)
    naive = naive_cross_score(model, contexts, traces)
    torch.testing.assert_close(plain, naive, atol=1e-4, rtol=0)
    torch.testing.assert_close(plain[-1], plain[0])

    calls = _count_forwards(model)
    memo = {}
    first = cross_score(model, contexts, traces, batch_size=3, memo=memo)
    n_first = calls[0]
    torch.testing.assert_close(first, plain, atol=1e-5, rtol=0)
    # 4 distinct non-empty contexts x 6 distinct non-empty traces, nothing more
    assert len(memo) == 4 * 6
    # the nocopy samplers' second pass: other weights over the same pairs, no forward at all
    g = torch.Generator().manual_seed(3)
    masks = [(torch.rand(len(t), generator=g) < 0.5).float().tolist() for t in traces]
    calls[0] = 0
    weighted = cross_score(model, contexts, traces, batch_size=3, weights=masks, memo=memo)
    assert calls[0] == 0
    torch.testing.assert_close(weighted, naive_cross_score(model, contexts, traces, weights=masks), atol=1e-4, rtol=0)
    # a sampler with some pairs seen and some new runs only the new ones
    new_ctx = [5, 6, 7, 8]
    calls[0] = 0
    mixed = cross_score(model, [contexts[1], new_ctx], traces[:3], batch_size=3, memo=memo)
    assert 0 < calls[0] < n_first
    torch.testing.assert_close(mixed, naive_cross_score(model, [contexts[1], new_ctx], traces[:3]), atol=1e-4, rtol=0)


def test_sequence_cross_score_sends_each_pair_once():
    # the engine path with a score function of the same model (token log-probs after the first token)
    model = _tiny_llama()
    sent: list[int] = []

    def score(seqs):
        sent.append(len(seqs))
        out = []
        with torch.no_grad():
            for seq in seqs:
                logp = torch.log_softmax(model(torch.tensor([seq])).logits[0, :-1], -1)
                out.append(logp[torch.arange(len(seq) - 1), torch.tensor(seq[1:])].tolist())
        return out

    contexts, traces = _ragged()
    memo = {}
    plain = sequence_cross_score(score, contexts, traces, memo=memo)
    torch.testing.assert_close(plain, naive_cross_score(model, contexts, traces), atol=1e-4, rtol=0)
    assert sent == [4 * 6]  # the duplicate context and the empty trace send nothing
    masks = [[float(t % 2) for t in range(len(tr))] for tr in traces]
    weighted = sequence_cross_score(score, contexts, traces, weights=masks, memo=memo)
    assert sent == [4 * 6]
    torch.testing.assert_close(weighted, naive_cross_score(model, contexts, traces, weights=masks), atol=1e-4, rtol=0)


def test_bf16_autocast_is_close_and_float32_out():
    # diagnostics.proxy_dtype=bfloat16: the forwards in bf16, the scores still float32 sums near fp32's
    model = _tiny_llama()
    contexts, traces = _ragged()
    full = cross_score(model, contexts, traces, batch_size=3)
    half = cross_score(model, contexts, traces, batch_size=3, autocast=torch.bfloat16)
    assert half.dtype == torch.float32
    assert next(model.parameters()).dtype == torch.float32  # the weights are untouched
    lengths = torch.tensor([max(1, len(t)) for t in traces], dtype=torch.float32)[:, None]
    assert float(((half - full).abs() / lengths).max()) < 0.05  # nats per token
    assert not torch.equal(half, full)  # it did run in bf16


@pytest.mark.parametrize("world_size", [2, 3, 6])
def test_contexts_dealt_across_ranks_give_the_whole_matrix_on_every_rank(world_size):
    from agentcollapse.diagnostics import shared_cross_score
    from tests.helpers import thread_ranks

    model = _tiny_llama()
    contexts, traces = _ragged()  # 4 distinct contexts (one twice): with 6 ranks two have none
    whole = cross_score(model, contexts, traces, batch_size=3)
    scored: list[int] = []

    def rank_scores(share):
        def score_columns(cols):
            scored.extend(len(c) for c in cols)
            return cross_score(model, cols, traces, batch_size=3)

        return shared_cross_score(score_columns, contexts, traces, share)

    for got in thread_ranks(world_size, rank_scores):
        # other pairs share a forward batch than in one process: equal up to float rounding
        torch.testing.assert_close(got, whole, atol=1e-5, rtol=0)
    assert sorted(scored) == sorted({len(c) for c in contexts}) and len(scored) == 4  # each distinct context once, on one rank
