"""Helpers shared by the module tests: hand-built batches of real tokens and weight snapshots."""

from __future__ import annotations

import torch

from agentcollapse.run.trainer import attach_to_trainer

__all__ = ["attach_to_trainer", "hand_batch", "small_llama", "snapshot"]
from agentcollapse.rollout.batch import RolloutBatch, Trajectory, Turn


def hand_batch(policy, rewards) -> RolloutBatch:
    """A real-token batch with chosen episode returns (one turn per trajectory)."""
    tok = policy.tokenizer
    ctx = tok("<|user|> _ P G <|end|> <|assistant|> <think>", add_special_tokens=False)["input_ids"]
    resp = tok("go right </think> <answer> Right </answer>", add_special_tokens=False)["input_ids"]
    trajs = []
    P, G = len(rewards), len(rewards[0])
    for p in range(P):
        for g in range(G):
            turn = Turn(
                context_ids=list(ctx),
                response_ids=list(resp),
                response_text="",
                think="go right",
                answer="Right",
                format_valid=True,
                action_is_valid=True,
                reward=float(rewards[p][g]),
            )
            trajs.append(Trajectory(group=p, env_seed=p, turns=[turn], success=rewards[p][g] > 0))
    return RolloutBatch(trajectories=trajs, num_prompts=P, group_size=G)


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def small_llama(vocab: int, layers: int = 2, heads: int = 4, kv_heads: int = 2, seed: int = 0):
    """A randomly initialised transformers Llama of hidden size 32 (fixed seed): a real model for the
    scoring tests, small enough to run pair by pair."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=128,
    )
    return LlamaForCausalLM(cfg)


def thread_ranks(world_size: int, fn):
    """``fn(share)`` run on ``world_size`` threads standing in for data-parallel ranks: each gets a
    ``ProxyShare`` whose gather is a real rendezvous of the threads (every rank blocks until all have given
    their object). Returns every rank's result, in rank order."""
    import threading

    from agentcollapse.diagnostics import ProxyShare
    from agentcollapse.lightning.distributed import deal_evenly

    barrier, lock = threading.Barrier(world_size), threading.Lock()
    rounds: list[list] = []  # one list of objects per gather call, filled in rank order
    calls = [0] * world_size
    results: list = [None] * world_size
    errors: list[BaseException] = []

    def gather_for(rank: int):
        def gather(obj):
            with lock:
                k = calls[rank]
                calls[rank] += 1
                while len(rounds) <= k:
                    rounds.append([None] * world_size)
                rounds[k][rank] = obj
            barrier.wait()
            return list(rounds[k])

        return gather

    def run(rank: int) -> None:
        try:
            results[rank] = fn(ProxyShare(rank, world_size, gather_for(rank), deal_evenly))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
