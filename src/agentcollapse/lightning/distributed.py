"""Data parallelism of the RL iteration (``trainer=ddp`` and ``trainer=fsdp``), as plain functions of
the process group.

One RL iteration on N ranks computes what one process computes: ``rollout.num_prompts`` is the
global P; each rank rolls out a contiguous block of the P groups (:func:`shard_bounds`), with the
sampling streams the single-process batch gives those groups, and :func:`gather_objects` hands every
rank the whole batch in global group order. Hooks (diagnostics, filter) then see the same global
batch everywhere. The update deals each optimizer step's micro-batches to the ranks so that every
rank runs the same number (:func:`deal_evenly`; a rank short of work runs a zero-weight padding
micro-batch), because the strategy's own gradient synchronisation needs that: DDP's reducer
all-reduces at the step's last backward (:func:`gradient_sync` holds it off before), FSDP2
all-gathers every layer in every forward and reduce-scatters in every synchronised backward. Both
average over ranks, so each rank's loss is scaled by the world size (:func:`gradient_scale`).

FSDP shards the weights (:func:`shard_for_fsdp`); decoding (rollouts, diagnostics, evaluation) runs
a different number of forwards on each rank, so it runs on weights gathered once for the whole
phase (:func:`whole_weights`), never per decoded token.

Every function is a no-op with one process (or no initialised process group).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

__all__ = [
    "any_rank",
    "broadcast_object",
    "deal_evenly",
    "fsdp_modules",
    "fsdp_param_dtype",
    "gather_objects",
    "gradient_scale",
    "gradient_sync",
    "shard_bounds",
    "shard_for_fsdp",
    "sum_across",
    "whole_weights",
    "world",
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


def deal_evenly(costs: Sequence[float], world_size: int) -> list[list[int]]:
    """Item indices per rank, every rank getting at most ``ceil(len(costs) / world_size)`` of them
    (the slots every rank runs; a rank with fewer pads), balanced by cost: the costliest item goes
    to the least-loaded rank that has a slot left (ties: the lower rank). Each rank's items keep
    their original order. Deterministic, so every rank computes the same deal."""
    if world_size < 1:
        raise ValueError(f"world size {world_size} < 1")
    slots = -(-len(costs) // world_size)
    load = [0.0] * world_size
    shares: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        rank = min((r for r in range(world_size) if len(shares[r]) < slots), key=lambda r: (load[r], r))
        shares[rank].append(i)
        load[rank] += costs[i]
    return [sorted(share) for share in shares]


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


def gradient_scale() -> float:
    """The loss factor that turns the strategy's gradient mean over ranks into the sum over every
    micro-batch, i.e. the one-process gradient (exact for a power-of-two world size)."""
    return float(world()[1])


def fsdp_modules(module: torch.nn.Module) -> list[Any]:
    """The FSDP2-sharded submodules of ``module`` (``fully_shard``), outermost first."""
    from torch.distributed.fsdp import FSDPModule

    return [m for m in module.modules() if isinstance(m, FSDPModule)]


@contextmanager
def gradient_sync(wrapper: Any, module: torch.nn.Module, enabled: bool) -> Iterator[None]:
    """Backward passes that synchronise gradients across ranks only when ``enabled`` (the last
    micro-batch of an optimizer step): DDP's ``no_sync`` on ``wrapper`` (the strategy's model) or
    FSDP2's ``set_requires_gradient_sync`` on ``module``'s sharded parts; one process: nothing."""
    if isinstance(wrapper, torch.nn.parallel.DistributedDataParallel):
        if enabled:
            yield
        else:
            with wrapper.no_sync():
                yield
        return
    sharded = fsdp_modules(module)
    for m in sharded:
        m.set_requires_gradient_sync(enabled, recurse=False)
    try:
        yield
    finally:
        for m in sharded:
            m.set_requires_gradient_sync(True, recurse=False)


@contextmanager
def whole_weights(module: torch.nn.Module) -> Iterator[None]:
    """FSDP2: every sharded part of ``module`` all-gathered once on entry and kept whole until the
    exit (FSDP's forward hooks then find them gathered and skip their collectives), so ranks may run
    different numbers of forwards in between (decoding); resharded on exit. Not sharded: nothing."""
    sharded = fsdp_modules(module)
    if not sharded:
        yield
        return
    for m in sharded:
        m.set_reshard_after_forward(False, recurse=False)
        m.unshard()
    try:
        yield
    finally:
        for m in sharded:
            m.reshard()
            m.set_reshard_after_forward(True, recurse=False)


def fsdp_param_dtype(choice: str, device: torch.device) -> torch.dtype | None:
    """The dtype FSDP gathers weights in and computes with (``trainer.fsdp_param_dtype``): ``auto`` is
    bf16 on a CUDA device that supports it and otherwise the weights' own (None), so a CPU run
    computes exactly what one process computes."""
    if choice == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else None
    return {"bfloat16": torch.bfloat16, "float32": torch.float32, "none": None}[choice]


def shard_for_fsdp(model: torch.nn.Module, extra: Sequence[torch.nn.Module], mesh: Any, param_dtype: torch.dtype | None) -> None:
    """FSDP2 on ``model`` (a transformers model, LoRA-wrapped or not): each decoder layer (the classes
    transformers itself never splits, ``_no_split_modules``) is one shard group, the rest of the model
    another; each of ``extra`` (the value head) its own. ``param_dtype``: the dtype weights are
    gathered and computed in (gradients are reduced in fp32); None keeps the weights' own."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype is not None else MixedPrecisionPolicy()
    names: set[str] = set()
    for m in model.modules():
        names.update(getattr(m, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{type(model).__name__} names no decoder layer class (_no_split_modules); FSDP needs one shard group per layer")
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    for m in extra:
        fully_shard(m, mesh=mesh, mp_policy=mp)


def _device() -> torch.device:
    # NCCL collectives need CUDA tensors; gloo takes CPU ones.
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
