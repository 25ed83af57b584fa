"""Which reasoning tokens are copied from the observation (the "MI beyond copying" proxy, docs/metrics.md).

A reasoning word is *copied* when it lies in a run of at least ``min_words`` consecutive words that
also occurs, word for word, in the observation the agent read at that turn. Words are
whitespace-separated and compared case-folded ("Box at" in the observation, "box at" in the
reasoning). Our envs write coordinates with spaces around the punctuation, so "( 2 , 3 )" is five
words and a restated position is always a copy.

Word runs become token positions by encoding prefixes of the reasoning that end at a word boundary
with the caller's ``encode`` and checking that each is a prefix of the whole encoding: exact for
word-level, byte-level BPE and SentencePiece tokenizers (none merges across a space), and no
offsets needed. A run whose boundary does not line up with a token boundary is left unmarked, so
the masked score can only overstate what the reasoning says beyond copying, never hide it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

__all__ = ["MIN_COPY_WORDS", "copied_runs", "copied_token_mask", "copied_words"]

# 3 words: the shortest run that is rarely a coincidence in our small env vocabularies ("the goal",
# ", 3" or "you ." match by chance), yet short enough to catch restated phrases such as the goal
# direction "down and right"; a coordinate pair "( r , c )" is 5 words, so it is always caught.
MIN_COPY_WORDS = 3

_WORD = re.compile(r"\S+")


def _check_min_words(min_words: int) -> None:
    if isinstance(min_words, bool) or int(min_words) != min_words or min_words < 1:
        raise ValueError(f"min_words must be an integer >= 1, got {min_words!r}")


def copied_words(observation: str, reasoning: str, min_words: int = MIN_COPY_WORDS) -> list[bool]:
    """Per whitespace-separated word of ``reasoning``: is it in a run of >= ``min_words`` words that
    occurs verbatim (case-folded) in ``observation``?

    A word lies in such a run exactly when some ``min_words``-gram covering it occurs in the
    observation, so the union of the matching n-grams is the union of the maximal copied runs.
    """
    _check_min_words(min_words)
    obs = observation.casefold().split()
    words = reasoning.casefold().split()
    grams = {tuple(obs[i : i + min_words]) for i in range(len(obs) - min_words + 1)}
    out = [False] * len(words)
    for i in range(len(words) - min_words + 1):
        if tuple(words[i : i + min_words]) in grams:
            out[i : i + min_words] = [True] * min_words
    return out


def copied_runs(observation: str, reasoning: str, min_words: int = MIN_COPY_WORDS) -> list[tuple[int, int]]:
    """Character ranges ``[start, end)`` of ``reasoning`` covering each maximal run of copied words
    (from the first word's first character to the last word's last)."""
    spans = [m.span() for m in _WORD.finditer(reasoning)]
    runs: list[tuple[int, int]] = []
    prev = False
    for (start, end), copied in zip(spans, copied_words(observation, reasoning, min_words)):
        if copied and prev:
            runs[-1] = (runs[-1][0], end)
        elif copied:
            runs.append((start, end))
        prev = copied
    return runs


def _prefix_tokens(encode: Callable[[str], Sequence[int]], prefix: str, ids: Sequence[int]) -> int | None:
    """Tokens of ``ids`` that encode ``prefix`` exactly, or None when its encoding is not a prefix of ``ids``."""
    if not prefix:
        return 0
    head = [int(t) for t in encode(prefix)]
    return len(head) if list(ids[: len(head)]) == head else None


def copied_token_mask(
    observation: str,
    reasoning: str,
    encode: Callable[[str], Sequence[int]],
    ids: Sequence[int] | None = None,
    min_words: int = MIN_COPY_WORDS,
) -> list[bool]:
    """Per token of ``ids`` (default ``encode(reasoning)``): is it part of a run copied from ``observation``?

    ``encode`` must be the tokenizer that produced ``ids`` from ``reasoning`` (no special tokens).
    A run's tokens are those after the encoding of the text up to the previous word's end and up to
    the encoding of the text through the run's last word; with a byte-level BPE the space before
    the run belongs to its first token and so counts as copied.
    """
    ids = [int(t) for t in (encode(reasoning) if ids is None else ids)]
    mask = [False] * len(ids)
    for start, end in copied_runs(observation, reasoning, min_words):
        first = _prefix_tokens(encode, reasoning[:start].rstrip(), ids)
        last = _prefix_tokens(encode, reasoning[:end], ids)
        if first is None or last is None:
            continue  # the run's edge falls inside a token: leave it scored (see the module doc)
        mask[first:last] = [True] * (last - first)
    return mask
