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


def test_rank_share_deals_every_item_once():
    shares = [distributed.rank_share(7, r, 3) for r in range(3)]
    assert sorted(i for s in shares for i in s) == list(range(7))
    assert shares == [[0, 3, 6], [1, 4], [2, 5]]


def test_one_process_collectives_are_identities():
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 2.0)
    distributed.all_reduce_grads([p])
    assert torch.equal(p.grad, torch.full((3,), 2.0))
    assert distributed.gather_objects({"a": 1}) == [{"a": 1}]
    assert distributed.broadcast_object("x") == "x"
    assert distributed.any_rank(True) and not distributed.any_rank(False)
    x = torch.tensor(3.0)
    assert distributed.sum_across(x) is x
    with distributed.without_reducer(torch.nn.Linear(1, 1)):  # not a DDP wrapper: nothing changes
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        out = {"world": distributed.world()}
        # Gradients: rank 0 has some; rank 1 trained nothing (no .grad at all) and must still join.
        a, b, unused = (torch.nn.Parameter(torch.zeros(2)) for _ in range(3))
        if rank == 0:
            a.grad, b.grad = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
        distributed.all_reduce_grads([a, b, unused])
        out["grads"] = (a.grad.tolist(), b.grad.tolist(), unused.grad)
        out["gathered"] = distributed.gather_objects(("rank", rank))
        out["broadcast"] = distributed.broadcast_object({"from": rank})
        out["any"] = (distributed.any_rank(rank == 1), distributed.any_rank(False))
        # PPO's whitening over both ranks' micro-batches equals one process's over all of them.
        values = [torch.tensor([[1.0, 2.0, 5.0]]), torch.tensor([[0.5, 7.0]])] if rank == 0 else []
        masks = [torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[1.0, 1.0]])] if rank == 0 else []
        if rank == 1:
            values, masks = [torch.tensor([[3.0, -1.0]])], [torch.tensor([[1.0, 1.0]])]
        out["whitened"] = [v.tolist() for v in whiten_across(values, masks, reduce=distributed.sum_across)]
        results[rank] = out
    finally:
        torch.distributed.destroy_process_group()


def test_collectives_on_two_gloo_processes():
    results = mp.Manager().dict()
    # fork: the children inherit the imports (spawn re-imports torch, ~20 s on a busy 2-core machine)
    mp.start_processes(_worker, args=(2, _free_port(), results), nprocs=2, join=True, start_method="fork")
    r0, r1 = results[0], results[1]
    assert r0["world"] == (0, 2) and r1["world"] == (1, 2)
    for r in (r0, r1):
        assert r["grads"] == ([1.0, 2.0], [3.0, 4.0], None)  # summed; one no rank touched stays None
        assert r["gathered"] == [("rank", 0), ("rank", 1)]
        assert r["broadcast"] == {"from": 0}
        assert r["any"] == (True, False)
    # The reference: one process whitening the three micro-batches together.
    values = [torch.tensor([[1.0, 2.0, 5.0]]), torch.tensor([[0.5, 7.0]]), torch.tensor([[3.0, -1.0]])]
    masks = [torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[1.0, 1.0]]), torch.tensor([[1.0, 1.0]])]
    expected = [v.tolist() for v in whiten_across(values, masks)]
    got = [x for v in (*r0["whitened"], *r1["whitened"]) for x in v[0]]
    assert got == pytest.approx([x for v in expected for x in v[0]], abs=1e-6)
