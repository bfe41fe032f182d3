"""BM25 (bm25s, Lù 2024) for hard negatives and the lexical baseline: one vectorised retrieval per call."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def bm25_search(passages: Sequence[str], queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k passage indices and BM25 scores per query, ``(Q, k)`` each (English stop words removed).

    >>> idx, _ = bm25_search(["the cat sat", "a dog ran", "cats and dogs"], ["dog"], 2)
    >>> int(idx[0, 0])
    1
    """
    import bm25s

    k = min(k, len(passages))
    if not len(queries) or k == 0:
        return np.zeros((len(queries), k), dtype=np.int64), np.zeros((len(queries), k), dtype=np.float32)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(passages), stopwords="en", show_progress=False), show_progress=False)
    query_tokens = bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
    ranked, scores = retriever.retrieve(query_tokens, k=k, show_progress=False)
    return np.asarray(ranked, dtype=np.int64), np.asarray(scores, dtype=np.float32)


def bm25_negatives(passages: Sequence[str], queries: Sequence[str], gold: Sequence[int | Sequence[int]],
                   num_negatives: int) -> list[list[int]]:
    """The top BM25-ranked passages of each query that are not among its gold ones (an index or a list),
    best first; fewer only when the corpus runs out."""
    if num_negatives == 0 or not len(queries):
        return [[] for _ in queries]
    gold_sets = [{g} if isinstance(g, (int, np.integer)) else set(g) for g in gold]
    depth = num_negatives + max(len(g) for g in gold_sets)
    ranked, _ = bm25_search(passages, queries, depth)
    return [[j for j in row if j not in g][:num_negatives] for row, g in zip(ranked.tolist(), gold_sets)]
