"""The data-parallel helpers (``lightning.distributed``): the split of groups and micro-batches, and
the collectives, on a real 2-process gloo group (no model: a second or two)."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from agentcollapse.algorithms import whiten_across
from agentcollapse.lightning import distributed


@pytest.mark.parametrize("num_items,world_size", [(8, 2), (3, 2), (1, 2), (7, 3), (0, 2), (5, 1)])
def test_shard_bounds_tile_the_items_in_order(num_items, world_size):
    blocks = [distributed.shard_bounds(num_items, r, world_size) for r in range(world_size)]
    assert blocks[0][0] == 0 and blocks[-1][1] == num_items
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))  # contiguous, in rank order
    sizes = [stop - start for start, stop in blocks]
    assert max(sizes) - min(sizes) <= 1


def test_shard_bounds_rejects_a_rank_outside_the_world():
    with pytest.raises(ValueError, match="outside"):
        distributed.shard_bounds(4, 2, 2)


@pytest.mark.parametrize("costs,world_size", [([5, 1, 1, 1], 2), ([3], 2), ([4, 4, 4], 2), ([1, 2, 3, 4, 5, 6, 7], 3), ([2, 2], 1)])
def test_deal_evenly_gives_every_rank_the_same_number_of_slots(costs, world_size):
    shares = distributed.deal_evenly(costs, world_size)
    assert sorted(i for s in shares for i in s) == list(range(len(costs)))  # every item once
    slots = -(-len(costs) // world_size)
    assert max(len(s) for s in shares) == slots
    assert all(s == sorted(s) for s in shares)


def test_deal_evenly_balances_cost_within_the_slots():
    # 4 items on 2 ranks, 2 slots each: the big one pairs with the smallest, not with another big one.
    assert distributed.deal_evenly([10, 9, 2, 1], 2) == [[0, 3], [1, 2]]
    assert distributed.deal_evenly([1], 3) == [[0], [], []]  # ranks 1 and 2 run one padding slot


def test_fsdp_param_dtype_choices():
    cpu = torch.device("cpu")
    assert distributed.fsdp_param_dtype("auto", cpu) is None  # CPU: the weights' own, exactly one process
    assert distributed.fsdp_param_dtype("bfloat16", cpu) is torch.bfloat16
    assert distributed.fsdp_param_dtype("none", cpu) is None
    from agentcollapse.config.schema import FSDP_PARAM_DTYPES

    for choice in FSDP_PARAM_DTYPES:  # every name the config accepts maps to a dtype here
        distributed.fsdp_param_dtype(choice, cpu)


def test_one_process_collectives_are_identities():
    assert distributed.gather_objects({"a": 1}) == [{"a": 1}]
    assert distributed.broadcast_object("x") == "x"
    assert distributed.any_rank(True) and not distributed.any_rank(False)
    x = torch.tensor(3.0)
    assert distributed.sum_across(x) is x
    assert distributed.gradient_scale() == 1.0
    model = torch.nn.Linear(1, 1)
    with distributed.gradient_sync(model, model, enabled=False), distributed.whole_weights(model):  # nothing to do
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _in_process_group(rank: int, world_size: int, port: int, body, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        results[rank] = body(rank, world_size)
    finally:
        torch.distributed.destroy_process_group()


def on_two_gloo_processes(body) -> list:
    """``body(rank, world_size)`` on 2 forked processes of one gloo group; what each returned, by rank.
    Fork: the children inherit the imports (spawn re-imports torch, ~20 s on a busy 2-core machine)."""
    results = mp.Manager().dict()
    mp.start_processes(_in_process_group, args=(2, _free_port(), body, results), nprocs=2, join=True, start_method="fork")
    return [results[0], results[1]]


def _collectives(rank: int, world_size: int) -> dict:
    out = {"world": distributed.world()}
    out["gathered"] = distributed.gather_objects(("rank", rank))
    out["broadcast"] = distributed.broadcast_object({"from": rank})
    out["any"] = (distributed.any_rank(rank == 1), distributed.any_rank(False))
    # PPO's whitening over both ranks' micro-batches equals one process's over all of them.
    values = [torch.tensor([[1.0, 2.0, 5.0]]), torch.tensor([[0.5, 7.0]])] if rank == 0 else []
    masks = [torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[1.0, 1.0]])] if rank == 0 else []
    if rank == 1:
        values, masks = [torch.tensor([[3.0, -1.0]])], [torch.tensor([[1.0, 1.0]])]
    out["whitened"] = [v.tolist() for v in whiten_across(values, masks, reduce=distributed.sum_across)]
    return out


def test_collectives_on_two_gloo_processes():
    r0, r1 = on_two_gloo_processes(_collectives)
    assert r0["world"] == (0, 2) and r1["world"] == (1, 2)
    for r in (r0, r1):
        assert r["gathered"] == [("rank", 0), ("rank", 1)]
        assert r["broadcast"] == {"from": 0}
        assert r["any"] == (True, False)
    # The reference: one process whitening the three micro-batches together.
    values = [torch.tensor([[1.0, 2.0, 5.0]]), torch.tensor([[0.5, 7.0]]), torch.tensor([[3.0, -1.0]])]
    masks = [torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[1.0, 1.0]]), torch.tensor([[1.0, 1.0]])]
    expected = [v.tolist() for v in whiten_across(values, masks)]
    got = [x for v in (*r0["whitened"], *r1["whitened"]) for x in v[0]]
    assert got == pytest.approx([x for v in expected for x in v[0]], abs=1e-6)


# -- the strategies' own gradient sync, with micro-batches dealt by deal_evenly -------------------


def _tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2
    )
    return LlamaForCausalLM(cfg)


def _micro_batches() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 32, (rows, length), generator=g) for rows, length in [(2, 7), (1, 5), (3, 4)]]


def _loss(model, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids).logits.float().logsumexp(-1).mean()


def _train_step(model, wrapper, rank: int, world_size: int) -> None:
    """One step over _micro_batches() as the update runs it: this rank's deal, a zero-weight padding
    micro-batch where it has fewer, sync at the last backward, the loss scaled by the world size."""
    every = _micro_batches()
    shares = distributed.deal_evenly([mb.numel() for mb in every], world_size)
    slots = max(len(s) for s in shares)
    mine = [(every[k], 1.0) for k in shares[rank]] + [(every[1], 0.0)] * (slots - len(shares[rank]))
    for k, (ids, weight) in enumerate(mine):
        with distributed.gradient_sync(wrapper, model, enabled=k == len(mine) - 1):
            (_loss(wrapper, ids) * weight * distributed.gradient_scale()).backward()


def _strategies(rank: int, world_size: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh

    out = {}
    ddp_model = _tiny_llama()
    ddp = torch.nn.parallel.DistributedDataParallel(ddp_model)
    _train_step(ddp_model, ddp, rank, world_size)
    out["ddp"] = {n: p.grad.clone() for n, p in ddp_model.named_parameters()}
    fsdp = _tiny_llama()
    distributed.shard_for_fsdp(fsdp, [], init_device_mesh("cpu", (world_size,)), None)
    assert len(distributed.fsdp_modules(fsdp)) == 3  # two decoder layers and the root
    _train_step(fsdp, fsdp, rank, world_size)
    out["fsdp"] = {n: p.grad.full_tensor() for n, p in fsdp.named_parameters()}
    # Decoding on gathered weights: rank 1 runs three forwards, rank 0 one; no collective waits.
    with torch.no_grad(), distributed.whole_weights(fsdp):
        logits = [fsdp(input_ids=_micro_batches()[0]).logits for _ in range(1 + 2 * rank)]
    out["decoded"] = logits[-1]
    out["resharded"] = all(type(p).__name__ == "DTensor" for p in fsdp.parameters())
    return out


def test_ddp_and_fsdp2_sync_to_the_one_process_gradient_on_two_gloo_processes():
    results = on_two_gloo_processes(_strategies)
    model = _tiny_llama()
    for ids in _micro_batches():  # one process: every micro-batch, gradients summed
        _loss(model, ids).backward()
    expected = {n: p.grad for n, p in model.named_parameters()}
    with torch.no_grad():
        logits = model(input_ids=_micro_batches()[0]).logits
    for rank in (0, 1):
        for strategy in ("ddp", "fsdp"):
            got = results[rank][strategy]
            for name, grad in expected.items():
                torch.testing.assert_close(got[name], grad, rtol=1e-5, atol=1e-7, msg=f"{strategy} rank {rank} {name}")
        torch.testing.assert_close(results[rank]["decoded"], logits, rtol=1e-5, atol=1e-6)
        assert results[rank]["resharded"]


# -- every policy loss through the update's objective and micro-batch weights, DDP and FSDP2 ---------------
# The same dealing and sync as above, with the loss the update trains on (algorithms.rl_objective, each
# micro-batch weighted by micro_batch_weight) instead of a stand-in: the one-process gradient of the whole
# batch is what each strategy's ranks reach, for every registered policy loss under its own defaults
# (GSPO's sequence ratio, CISPO's capped weights, SAPO's gate, the clipped loss's dual clip).


def _token_logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(model(input_ids=ids).logits.float()[:, :-1], dim=-1)
    return logp.gather(-1, ids[:, 1:, None])[..., 0]


def _policy_batches() -> list[dict[str, torch.Tensor]]:
    """Micro-batches with response masks, one advantage per sequence and old log-probs a little off the
    untrained model's (so ratios move and some clips act)."""
    g = torch.Generator().manual_seed(2)
    model = _tiny_llama()
    out = []
    for ids in _micro_batches():
        mask = (torch.rand(ids.shape[0], ids.shape[1] - 1, generator=g) < 0.7).float()
        mask[:, -1] = 1.0  # every sequence has a response token
        with torch.no_grad():
            old = _token_logprobs(model, ids) + 0.3 * torch.randn(mask.shape, generator=g)
        out.append({"ids": ids, "mask": mask, "old": old, "adv": torch.randn(ids.shape[0], generator=g)})
    return out


def _objective(model, mb: dict[str, torch.Tensor], algo, weight: float) -> torch.Tensor:
    from agentcollapse.algorithms import rl_objective

    logp = _token_logprobs(model, mb["ids"])
    return rl_objective(algo, torch.zeros_like(logp), logp, mb["old"], mb["adv"], mb["mask"], logp.shape[1], weight).total


def _weights(algo, batches) -> list[float]:
    from agentcollapse.algorithms import micro_batch_weight

    tokens = float(sum(b["mask"].sum() for b in batches))
    seqs = sum(len(b["ids"]) for b in batches)
    return [micro_batch_weight(algo.loss_agg_mode, float(b["mask"].sum()), tokens, len(b["ids"]), seqs) for b in batches]


def _loss_algo(name: str):
    from agentcollapse.algorithms import PRESETS, with_overrides

    return with_overrides(PRESETS["grpo"], policy_loss=name, kl_coef=0.0, entropy_coef=0.0)


def _policy_loss_strategies(rank: int, world_size: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh

    from agentcollapse.algorithms import POLICY_LOSSES

    every = _policy_batches()
    shares = distributed.deal_evenly([b["ids"].numel() for b in every], world_size)
    slots = max(len(s) for s in shares)
    out = {}
    for name in POLICY_LOSSES.names():
        algo = _loss_algo(name)
        weights = _weights(algo, every)
        mine = [(every[k], weights[k]) for k in shares[rank]] + [(every[1], 0.0)] * (slots - len(shares[rank]))
        for strategy in ("ddp", "fsdp"):
            model = _tiny_llama()
            if strategy == "ddp":
                wrapper = torch.nn.parallel.DistributedDataParallel(model)
            else:
                distributed.shard_for_fsdp(model, [], init_device_mesh("cpu", (world_size,)), None)
                wrapper = model
            for k, (mb, weight) in enumerate(mine):
                with distributed.gradient_sync(wrapper, model, enabled=k == len(mine) - 1):
                    (_objective(wrapper, mb, algo, weight) * distributed.gradient_scale()).backward()
            grads = {n: p.grad for n, p in model.named_parameters()}
            out[name, strategy] = {n: g.full_tensor() if strategy == "fsdp" else g.clone() for n, g in grads.items()}
    return out


def test_every_policy_loss_reaches_the_one_process_gradient_under_ddp_and_fsdp2():
    from agentcollapse.algorithms import POLICY_LOSSES

    results = on_two_gloo_processes(_policy_loss_strategies)
    assert {"gspo", "cispo", "sapo", "clipped"} <= set(POLICY_LOSSES.names())
    every = _policy_batches()
    for name in POLICY_LOSSES.names():
        algo = _loss_algo(name)
        model = _tiny_llama()
        for mb, weight in zip(every, _weights(algo, every)):  # one process: every micro-batch, weighted
            _objective(model, mb, algo, weight).backward()
        expected = {n: p.grad for n, p in model.named_parameters()}
        assert any(g.abs().sum() > 0 for g in expected.values()), name
        for rank in (0, 1):
            for strategy in ("ddp", "fsdp"):
                got = results[rank][name, strategy]
                for param, grad in expected.items():
                    torch.testing.assert_close(got[param], grad, rtol=1e-5, atol=1e-7, msg=f"{name} {strategy} rank {rank} {param}")
