"""The retrieval envs' search engine: a BM25 index over passages or product texts (SearchQA, WebShop).

``BM25Index(texts).search(query, k)`` gives the ``k`` best documents as ``(index, score)``, best first,
ties broken by the lower index, only documents with a score above 0. The scoring is Lucene's BM25 as
``bm25s`` (its default ``method="lucene"``) computes it, in float32:

    score(q, d) = sum over query words t in d of  idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with ``tf`` the word's count in the document, ``|d|`` its length in words after :func:`tokenize`,
``avgdl`` the mean length, ``N`` the number of documents and ``df`` how many contain the word; a
word repeated in the query counts once per occurrence. (Lucene drops the classic ``(k1 + 1)``
factor of the numerator: the ranking is the same.)

Why ``bm25s`` (``make bench-retrieval``, benchmarks/results/retrieval.md; one thread, 100k passages):
``rank-bm25`` scores every document in Python per query word, ~70 ms a query, out; ``tantivy`` builds
in about half bm25s's time (1.7 s against 3.4 s) and answers the median query in 0.09 ms against
0.27 ms, with the same p99 (~8 ms) and the same top-3 on every query compared. Both are three orders
of magnitude below a rollout turn, so the difference buys nothing here, while bm25s takes ``k1`` and
``b`` (tantivy's Python binding fixes 1.2 and 0.75), keeps exact float scores (tantivy quantises
document lengths to a byte) that a test recomputes by hand, and needs no index files or writer.

One tokenizer, :func:`tokenize`, serves documents and queries: lower case, runs of letters and
digits (Unicode, so a real corpus's accented names stay words), and Lucene's 33 English stopwords
removed (``the``, ``of``, ``is`` ...): they match nearly every passage, so they add posting-list work
to each query and no ranking signal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

# Lucene's classic English stopword set (the same 33 words as bm25s.stopwords.STOPWORDS_EN).
STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
_WORD = re.compile(r"[^\W_]+")


def tokenize(text: str) -> list[str]:
    """The words BM25 indexes and matches: lower-cased runs of letters and digits, stopwords removed."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def _import_bm25s():
    """bm25s, on its numpy backend (the same scores). Imported here: building the env module does not need it.

    Left to itself bm25s JIT-compiles with numba at import, and after that vLLM's engine fails to start in the
    same process ("'_lib_fn_wrapper' object has no attribute 'get'", from llvmlite): a SearchQA or WebShop run
    with rollout.engine=vllm would not start. numba is hidden from bm25s's import, and put back after it."""
    import sys

    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    saved = {name: sys.modules.get(name) for name in ("numba",)}
    sys.modules["numba"] = None  # type: ignore[assignment]  # makes `from numba import ...` raise ImportError
    try:
        import bm25s
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return bm25s


class BM25Index:
    """A BM25 index over ``texts`` (see the module doc for the formula); built once, searched many times."""

    def __init__(self, texts: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        bm25s = _import_bm25s()

        if len(texts) == 0:
            raise ValueError("BM25Index needs at least one document")
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 parameters k1={k1} must be >= 0 and b={b} in [0, 1]")
        self.k1, self.b = float(k1), float(b)
        self._n = len(texts)
        self._bm25 = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        self._bm25.index([tokenize(t) for t in texts], show_progress=False)
        self._vocab: dict[str, int] = self._bm25.vocab_dict

    def __len__(self) -> int:
        return self._n

    def scores(self, query: str) -> np.ndarray:
        """Every document's score for ``query`` (float32, one per document); ValueError when the
        query is empty or has no searchable words."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("empty query")
        words = tokenize(query)
        if not words:
            raise ValueError("the query has no searchable words (only stopwords or punctuation)")
        ids = [self._vocab[w] for w in words if w in self._vocab]
        if not ids:
            return np.zeros(self._n, dtype=np.float32)
        return np.asarray(self._bm25.get_scores_from_ids(ids))

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best documents for ``query`` as (index, score), best first, ties broken by the
        lower index, only documents scoring above 0 (so possibly fewer than ``k``)."""
        if k < 1:
            raise ValueError(f"k={k} must be >= 1")
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        if len(hits) > k:  # keep everything tied with the k-th best, then order exactly
            kth = np.partition(scores[hits], len(hits) - k)[len(hits) - k]
            hits = hits[scores[hits] >= kth]
        order = np.lexsort((hits, -scores[hits]))[:k]
        return [(int(hits[i]), float(scores[hits[i]])) for i in order]


__all__ = ["STOPWORDS", "BM25Index", "tokenize"]
