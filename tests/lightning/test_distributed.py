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
