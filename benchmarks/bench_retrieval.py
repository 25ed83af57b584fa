"""The retrieval envs' BM25 index: bm25s against rank-bm25 and tantivy, on index build time and query
latency at SearchQA's default corpus size and at 100k documents, and whether their top-k agree.

    python -m benchmarks.bench_retrieval [--sizes 2000,100000] [--queries 400] [--slow-queries 60] [--k 3]

The corpus is SearchQA's generated world (``agentcollapse.envs.searchqa.generate_world``: one short passage per
invented entity) at each size; the queries alternate, per question seed, the entity a planner searches
(its first hop, e.g. ``Kaerpir Tralpem``) and the question's whole text (what a model might type).
Every arm indexes the same words, :func:`agentcollapse.envs.retrieval.tokenize`'s (tantivy reads them
joined by spaces through its default tokenizer, which yields the same words), and scores with k1=1.2,
b=0.75 (tantivy's fixed values), so disagreement is the implementation's, not the parameters':
rank-bm25's ``BM25Okapi`` has the classic idf (floored at 0.25 x the mean idf), tantivy quantises
document lengths to one byte.

- build: wall seconds from the passage texts to a searchable index (tokenizing included), one process,
  one thread (``OMP_NUM_THREADS=1``; tantivy's writer gets one thread).
- latency: per query, ``search(query, k)`` to the ranked (document, score) list, in milliseconds;
  median and p99. rank-bm25 scores every document in Python per query word (O(N)), so it runs only
  ``--slow-queries`` of the queries.
- agreement with bm25s: the share of bm25s's top-k documents an arm also returns in its top-k, and of
  queries whose top-1 is the same; ``recall@k``: share of entity queries whose passage is in the top-k.

Writes ``benchmarks/results/retrieval.json`` and ``.md``. About 1-2 minutes on one core.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.common import Benchmark, Results, command, csv_list, run, timed

K1, B = 1.2, 0.75
Search = Callable[[str, int], list[int]]


def build_bm25s(texts: list[str]) -> Search:
    from agentcollapse.envs.retrieval import BM25Index

    index = BM25Index(texts, k1=K1, b=B)
    return lambda q, k: [i for i, _ in index.search(q, k)]


def build_rank_bm25(texts: list[str]) -> Search:
    from rank_bm25 import BM25Okapi

    from agentcollapse.envs.retrieval import tokenize

    index = BM25Okapi([tokenize(t) for t in texts], k1=K1, b=B)

    def search(q: str, k: int) -> list[int]:
        scores = index.get_scores(tokenize(q))
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]  # best first, ties by lower index
        return [int(i) for i in order if scores[i] > 0]

    return search


def build_tantivy(texts: list[str]) -> Search:
    import tantivy

    from agentcollapse.envs.retrieval import tokenize

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False)
    builder.add_unsigned_field("id", stored=True)
    schema = builder.build()
    index = tantivy.Index(schema)
    writer = index.writer(heap_size=200_000_000, num_threads=1)
    for i, text in enumerate(texts):
        writer.add_document(tantivy.Document(body=" ".join(tokenize(text)), id=i))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()

    def search(q: str, k: int) -> list[int]:
        words = tokenize(q)
        query = index.parse_query(" ".join(words), ["body"])
        return [searcher.doc(address)["id"][0] for _, address in searcher.search(query, k).hits]

    return search


ARMS: dict[str, Callable[[list[str]], Search]] = {"bm25s": build_bm25s, "rank-bm25": build_rank_bm25, "tantivy": build_tantivy}


def workload(size: int, queries: int) -> tuple[list[str], list[str], list[int | None]]:
    """(passage texts, queries, the passage each entity query should find or None) at ``size``."""
    from agentcollapse.envs.searchqa import generate_world, make_question

    world = generate_world(size)
    texts = [p.index_text() for p in world.passages]
    qs: list[str] = []
    gold: list[int | None] = []
    seed = 0
    while len(qs) < queries:
        question = make_question(world, seed)
        qs += [question.hops[0].query, question.text]
        gold += [question.hops[0].passage, None]
        seed += 1
    return texts, qs[:queries], gold[:queries]


def measure(arm: str, texts: list[str], queries: list[str], k: int) -> dict[str, Any]:
    ARMS[arm](texts[:50])  # imports and first-call set-up are not the build's
    started = time.perf_counter()
    search = ARMS[arm](texts)
    build_s = time.perf_counter() - started
    search(queries[0], k)  # a warm-up query: first-call costs are not a query's
    times, results = [], []
    for q in queries:
        t0 = time.perf_counter()
        results.append(search(q, k))
        times.append((time.perf_counter() - t0) * 1000)
    return {
        "build_s": build_s,
        "queries": len(queries),
        "median_ms": float(np.median(times)),
        "p99_ms": float(np.percentile(times, 99)),
        # the two kinds of query alternate: entity names at even positions, whole questions at odd ones
        "entity_median_ms": float(np.median(times[0::2])),
        "question_median_ms": float(np.median(times[1::2])),
        "question_p99_ms": float(np.percentile(times[1::2], 99)),
        "results": results,
    }


def agreement(ref: list[list[int]], other: list[list[int]], k: int) -> dict[str, float]:
    n = min(len(ref), len(other))
    overlap = [len(set(ref[i]) & set(other[i])) / max(1, min(k, len(ref[i]))) for i in range(n)]
    top1 = [bool(ref[i]) and bool(other[i]) and ref[i][0] == other[i][0] for i in range(n)]
    return {"topk_overlap": float(np.mean(overlap)), "top1_same": float(np.mean(top1)), "compared": n}


def recall(results: list[list[int]], gold: list[int | None]) -> float:
    hits = [g in r for r, g in zip(results, gold, strict=False) if g is not None]
    return float(np.mean(hits)) if hits else float("nan")


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--sizes", type=csv_list, default=["2000", "100000"], help="corpus sizes (passages)")
    ap.add_argument("--queries", type=int, default=400, help="queries per size for bm25s and tantivy")
    ap.add_argument("--slow-queries", type=int, default=60, help="queries per size for rank-bm25 (O(N) per query word in Python)")
    ap.add_argument("--k", type=int, default=3, help="results per query (SearchQA's default top_k)")
    ap.add_argument("--arms", type=csv_list, default=list(ARMS), help="which libraries")


def main(args: argparse.Namespace, save: Results) -> None:
    from agentcollapse.envs.retrieval import tokenize

    rows: list[dict[str, Any]] = []
    tokenize_times: dict[int, float] = {}
    for size in map(int, args.sizes):
        texts, queries, gold = workload(size, args.queries)
        tokenize_s = timed(lambda corpus: [tokenize(t) for t in corpus], texts)[0]
        print(f"{size:>7}: tokenizing the passages takes {tokenize_s:.2f}s (inside every arm's build)", flush=True)
        tokenize_times[size] = tokenize_s
        ref: list[list[int]] | None = None
        for arm in args.arms:
            n = args.slow_queries if arm == "rank-bm25" else args.queries
            r = measure(arm, texts, queries[:n], args.k)
            results = r.pop("results")
            if arm == "bm25s":
                ref = results
            row = {"size": size, "arm": arm, **r, "recall_at_k": recall(results, gold[:n])}
            if ref is not None and arm != "bm25s":
                row.update(agreement(ref, results, args.k))
            rows.append(row)
            print(
                f"{size:>7} {arm:>9}: build {r['build_s']:.2f}s, query median {r['median_ms']:.3f} ms, "
                f"p99 {r['p99_ms']:.3f} ms ({n} queries), recall@{args.k} {row['recall_at_k']:.3f}",
                flush=True,
            )

    save.json(
        {"k": args.k, "k1": K1, "b": B, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "tokenize_s": tokenize_times, "rows": rows}
    )
    lines = [
        "# The retrieval envs' BM25 index: bm25s vs rank-bm25 vs tantivy",
        "",
        f"`{command()}`; SearchQA's generated passages, one thread, k={args.k}, k1={K1}, b={B}. "
        "Latency: one `search(query, k)` to the ranked list (entity names and whole questions, alternating). "
        "Agreement: share of bm25s's top-k also in the arm's top-k, and of queries with the same top-1.",
        "",
        f"| passages | library | build (s) | query median (ms) | query p99 (ms) | entity / question median (ms) | question p99 (ms) "
        f"| queries | recall@{args.k} (entity queries) | top-k overlap with bm25s | same top-1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        overlap = f"{r['topk_overlap']:.3f}" if "topk_overlap" in r else "-"
        top1 = f"{r['top1_same']:.3f}" if "top1_same" in r else "-"
        lines.append(
            f"| {r['size']} | {r['arm']} | {r['build_s']:.2f} | {r['median_ms']:.3f} | {r['p99_ms']:.3f} "
            f"| {r['entity_median_ms']:.3f} / {r['question_median_ms']:.3f} | {r['question_p99_ms']:.3f} | {r['queries']} "
            f"| {r['recall_at_k']:.3f} | {overlap} | {top1} |"
        )
    lines += [
        "",
        "Tokenizing the passages (inside every build): " + ", ".join(f"{s:.2f} s at {n}" for n, s in tokenize_times.items()) + ".",
    ]
    save.markdown(lines)


BENCHMARK = Benchmark("retrieval", __doc__, main, flags, overrides=None)

if __name__ == "__main__":
    run(BENCHMARK)
