"""Data parallelism of the RL iteration (``trainer=ddp``), as plain functions of the process group.

One RL iteration on N ranks computes what one process computes: ``rollout.num_prompts`` is the
global P; each rank rolls out a contiguous block of the P groups (:func:`shard_bounds`), with the
sampling streams the single-process batch gives those groups, and :func:`gather_objects` hands every
rank the whole batch in global group order. Hooks (diagnostics, filter) then see the same global
batch everywhere; the update splits the kept micro-batches across ranks (:func:`rank_share`) and sums
their gradients (:func:`all_reduce_grads`) instead of relying on the DDP reducer, which expects one
backward per forward and hangs when ranks run different numbers of micro-batches or none.

Every function is a no-op with one process (or no initialised process group).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

import torch

__all__ = [
    "all_reduce_grads",
    "any_rank",
    "broadcast_object",
    "gather_objects",
    "rank_share",
    "shard_bounds",
    "sum_across",
    "world",
    "without_reducer",
]

T = TypeVar("T")


def world() -> tuple[int, int]:
    """(rank, world size) of the default process group; (0, 1) without one."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_bounds(num_items: int, rank: int, world_size: int) -> tuple[int, int]:
    """The contiguous block ``[start, stop)`` of ``num_items`` that ``rank`` owns; blocks differ in
    size by at most one (the first ``num_items % world_size`` ranks get one more) and may be empty."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside a world of {world_size}")
    base, extra = divmod(num_items, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def rank_share(num_items: int, rank: int, world_size: int) -> list[int]:
    """Item indices ``rank`` works on, round-robin: micro-batches come sorted by length, so
    dealing them out like cards spreads long and short ones evenly."""
    return list(range(rank, num_items, world_size))


def gather_objects(obj: T) -> list[T]:
    """Every rank's ``obj``, in rank order (picklable objects; one process: ``[obj]``)."""
    _, size = world()
    if size == 1:
        return [obj]
    out: list[Any] = [None] * size
    torch.distributed.all_gather_object(out, obj)
    return out


def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank ``src``'s ``obj`` on every rank."""
    _, size = world()
    if size == 1:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=src)
    return box[0]


def any_rank(flag: bool) -> bool:
    """True on every rank when ``flag`` is true on at least one."""
    _, size = world()
    if size == 1:
        return bool(flag)
    t = torch.tensor([1.0 if flag else 0.0], device=_device())
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return bool(t.item() > 0)


def sum_across(x: torch.Tensor) -> torch.Tensor:
    """``x`` summed over the ranks (a new tensor; one process: ``x`` itself)."""
    _, size = world()
    if size == 1:
        return x
    out = x.detach().clone()
    torch.distributed.all_reduce(out, op=torch.distributed.ReduceOp.SUM)
    return out


def all_reduce_grads(params: Iterable[torch.Tensor]) -> None:
    """Sum every parameter's ``.grad`` over the ranks, in place. A rank whose share was empty (no
    micro-batch, ``.grad`` None) contributes zeros, so it joins the collective instead of leaving the
    others waiting; a parameter no rank produced a gradient for keeps ``.grad`` None, as it would in
    one process (the optimizer skips it). One flat buffer: one collective per step."""
    _, size = world()
    params = [p for p in params if p.requires_grad]
    if size == 1 or not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    # float32 throughout: parameters may mix dtypes (a bf16 policy, an fp32 value head)
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=grads[0].device)
    flat = torch.cat([g.reshape(-1).float() for g in grads] + [has])
    torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM)
    start = 0
    for k, (p, g) in enumerate(zip(params, grads)):
        n = g.numel()
        got = bool(flat[flat.numel() - len(params) + k] > 0)
        p.grad = flat[start : start + n].view_as(p).to(p.dtype, copy=True) if got else None
        start += n


@contextmanager
def without_reducer(model: Any) -> Iterator[None]:
    """Backward passes that leave DDP's reducer out (``model`` is the strategy's wrapper, or anything
    else, then nothing changes); gradients are then summed by :func:`all_reduce_grads`."""
    with model.no_sync() if isinstance(model, torch.nn.parallel.DistributedDataParallel) else nullcontext():
        yield


def _device() -> torch.device:
    # NCCL collectives need CUDA tensors; gloo takes CPU ones.
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
