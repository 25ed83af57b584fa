"""Held-out splits of real data (``env.data_path``): evaluation episodes ask only held-out items,
training and warm-start episodes only the others, so a held-out success is never a trained item's.

Evaluation seeds are those below ``seeds.TRAIN_SEED_BASE`` (training maps start there, warm-start
demonstrations far above). Where the data brings no held-out file of its own, the ``HELDOUT_SHARE``
of items whose key (a problem's statement, a question, an instruction) hashes lowest is held out:
the split does not depend on the file's order, and equal keys fall on one side.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TypeVar

from agentcollapse.seeds import TRAIN_SEED_BASE

T = TypeVar("T")
HELDOUT_SHARE = 0.1


def is_held_out_seed(seed: int) -> bool:
    """Whether an episode seed is an evaluation one (it draws from the held-out items)."""
    return int(seed) < TRAIN_SEED_BASE


def split_by_hash(items: Sequence[T], key: Callable[[T], str], share: float = HELDOUT_SHARE) -> tuple[list[T], list[T]]:
    """(training, held-out) items: the ``share`` (at least one) whose keys hash lowest are held out,
    each part in the items' order. Fewer than two items, or every key the same: both parts are all of
    them (there is nothing to hold out apart)."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"held-out share {share!r} must be in (0, 1)")
    if len(items) < 2:
        return list(items), list(items)
    digest = [hashlib.sha256(key(item).encode("utf-8", "surrogatepass")).hexdigest() for item in items]
    by_hash = sorted(range(len(items)), key=lambda i: (digest[i], i))
    cut = digest[by_hash[min(len(items) - 1, max(1, round(share * len(items)))) - 1]]
    held = [digest[i] <= cut for i in range(len(items))]
    if all(held):
        return list(items), list(items)
    return [x for x, h in zip(items, held) if not h], [x for x, h in zip(items, held) if h]
