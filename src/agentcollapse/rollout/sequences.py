"""Turn a rollout batch into padded training sequences with masks over the policy's own tokens.

A trajectory is one sequence per context segment: the segment's last context plus last response. Within
a segment each turn's context extends the previous context and response token for token
(``models.context``: token in, token out), so the sequence holds exactly the tokens the policy read and
sampled. Under ``rollout.context=full`` a trajectory is one segment; a turn whose context was re-rendered
at a window start (``Turn.window_start``: ``window``, ``single_turn``) begins the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentcollapse.models.logprobs import token_logprobs
from agentcollapse.rollout.batch import RolloutBatch


@dataclass
class Sequences:
    input_ids: list[list[int]]
    loss_mask: list[list[int]]  # 1 on tokens the policy generated
    traj_index: list[int]  # which trajectory of the batch each sequence belongs to
    is_last: list[bool]  # does this sequence hold the trajectory's final response (reward goes there)
    # the rollout engine's log-prob of each token (0 off the response), where it gave them (vLLM)
    sample_logp: list[list[float]] | None = None


def build_sequences(batch: RolloutBatch) -> Sequences:
    """One sequence per context segment of each trajectory (with at least one turn), in batch order;
    only the trajectory's last one ``is_last``."""
    engine = all(t.sample_logprobs is not None for traj in batch.trajectories for t in traj.turns)
    out = Sequences([], [], [], [], [] if engine else None)

    def flush(index: int, ids: list[int], mask: list[int], sampled: list[float], last: bool) -> None:
        out.input_ids.append(ids)
        out.loss_mask.append(mask)
        if out.sample_logp is not None:
            out.sample_logp.append(sampled)
        out.traj_index.append(index)
        out.is_last.append(last)

    for index, traj in enumerate(batch.trajectories):
        ids: list[int] = []
        mask: list[int] = []
        sampled: list[float] = []
        for k, turn in enumerate(traj.turns):
            if k and turn.window_start:  # a re-rendered context: the segment so far is one sequence
                flush(index, ids, mask, sampled, False)
                ids, mask, sampled = [], [], []
            elif turn.context_ids[: len(ids)] != ids:
                raise ValueError(
                    f"trajectory {index}: turn {k + 1}'s context does not extend the previous context and response; "
                    "build contexts with models.context.next_context_ids"
                )
            new_context = turn.context_ids[len(ids) :]
            ids = ids + new_context + turn.response_ids
            mask = mask + [0] * len(new_context) + [1] * len(turn.response_ids)
            if out.sample_logp is not None:
                sampled = sampled + [0.0] * len(new_context) + list(turn.sample_logprobs or [])
        if ids:
            flush(index, ids, mask, sampled, True)
    return out


def pad_right(rows: list[list[int]] | list[list[float]], value: float, dtype: torch.dtype = torch.long) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.as_tensor(r, dtype=dtype)
    return out


def collate(seqs: Sequences, indices: list[int], pad_id: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Right-padded tensors for the chosen sequences.

    No token before the batch's first response token is ever a target, so the LM head need not see
    those positions: ``logits_from`` (a 0-d CPU tensor) is the first position whose logits matter, and
    ``response_mask`` [B, T - 1 - logits_from] is aligned with the targets ``input_ids[:, logits_from + 1:]``
    (see :func:`gather_logprobs`). At a real vocabulary the head over the prompt dominated the update.
    """
    ids = pad_right([seqs.input_ids[i] for i in indices], pad_id)
    targets = pad_right([seqs.loss_mask[i] for i in indices], 0)[:, 1:]
    hit = targets.any(dim=0).nonzero()
    start = int(hit[0]) if len(hit) else 0
    # No attention mask: right padding sits after every real token, so causality alone hides it.
    out = {"input_ids": ids, "response_mask": targets[:, start:].float()}
    if seqs.sample_logp is not None:  # aligned with response_mask, as the trainer's log-probs are
        out["sample_logp"] = pad_right([seqs.sample_logp[i] for i in indices], 0.0, torch.float32)[:, 1 + start :]
    # logits_from stays on the CPU: every forward reads it back as an int, which on a GPU would sync
    return {**{k: v.to(device) for k, v in out.items()}, "logits_from": torch.tensor(start)}


def gather_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, logits_from: int = 0) -> torch.Tensor:
    """log p(token_{t+1} | prefix) at positions ``logits_from ..``: ``logits`` [B, T - logits_from, V]
    holds those positions only, the result is [B, T - 1 - logits_from]."""
    return token_logprobs(logits[:, :-1], input_ids[:, logits_from + 1 :])
