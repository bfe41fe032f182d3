"""Turning ranked vector hits into ranked documents.

An aggregator takes, for each query, the fetched vector hits (scores sorted descending and the document of
each hit) and returns the top-k documents with their scores. All work is vectorised over the whole batch.
"""

from __future__ import annotations

import math

import numpy as np

from multiview_plugin.errors import ConfigError


class Aggregator:
    """Base class; :meth:`aggregate` must be implemented.

    ``exact_with_distinct_k`` tells the searcher that once the fetched hits contain k distinct documents,
    the result is exact (true for max aggregation over an exact index), so it may stop widening the fetch.
    """

    name = "base"
    exact_with_distinct_k = False

    def aggregate(self, scores: np.ndarray, docs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``scores``/``docs``: (Q, F), docs = -1 where nothing was fetched.

        Returns (doc indices (Q, k) with -1 padding, scores (Q, k) with -inf padding, distinct docs found (Q,)).
        """
        raise NotImplementedError

    def initial_fetch(self, k: int, mean_views: float) -> int:
        """How many vectors to fetch first for k documents (the searcher widens if needed)."""
        return max(k, int(math.ceil(k * mean_views)))


def first_hits(scores: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each (query, doc) pair's first hit in rank order: (query, doc, score, position), vectorised.

    With scores sorted descending per row, the first hit of a document is its best (max-sim) vector.
    """
    q_count, fetched = docs.shape
    n_docs = int(docs.max()) + 2 if docs.size else 1
    keys = (np.arange(q_count, dtype=np.int64)[:, None] * n_docs + (docs.astype(np.int64) + 1)).ravel()
    uniq, first = np.unique(keys, return_index=True)
    doc = uniq % n_docs - 1
    keep = doc >= 0
    first = first[keep]
    return uniq[keep] // n_docs, doc[keep], scores.ravel()[first], first


def top_k_per_query(query: np.ndarray, doc: np.ndarray, score: np.ndarray, tiebreak: np.ndarray, q_count: int,
                    k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scatter (query, doc, score) triples into (Q, k) arrays ranked by score (ties by ``tiebreak``)."""
    order = np.lexsort((tiebreak, -score, query))
    query, doc, score = query[order], doc[order], score[order]
    found = np.bincount(query, minlength=q_count)
    starts = np.concatenate(([0], np.cumsum(found)[:-1]))
    rank = np.arange(len(query)) - starts[query]
    sel = rank < k
    out_doc = np.full((q_count, k), -1, dtype=np.int64)
    out_score = np.full((q_count, k), -np.inf, dtype=np.float32)
    out_doc[query[sel], rank[sel]] = doc[sel]
    out_score[query[sel], rank[sel]] = score[sel]
    return out_doc, out_score, found


class MaxAggregator(Aggregator):
    """f(q, d) = max over d's vectors (MVR, ME-BERT, MLR-max): a document's first hit is its score."""

    name = "max"
    exact_with_distinct_k = True

    def aggregate(self, scores, docs, k):
        q, d, s, pos = first_hits(scores, docs)
        return top_k_per_query(q, d, s, pos, docs.shape[0], k)


AGGREGATORS: dict[str, type[Aggregator]] = {"max": MaxAggregator}


def get_aggregator(name: str | Aggregator) -> Aggregator:
    if isinstance(name, Aggregator):
        return name
    if name not in AGGREGATORS:
        raise ConfigError(f"unknown aggregation {name!r}; known: {', '.join(sorted(AGGREGATORS))}")
    return AGGREGATORS[name]()
