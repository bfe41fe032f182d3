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


def first_occurrences(docs: np.ndarray) -> np.ndarray:
    """(Q, F) bool mask of each (query, document) pair's first hit in rank order, vectorised.

    Sorting the composite keys ``doc * F + position`` within each row groups a document's hits with the
    earliest one first; with Faiss rows sorted by score, a document's first hit is its best (max-sim) vector.
    Entries with doc -1 (nothing fetched) are never marked.
    """
    q_count, fetched = docs.shape
    invalid = np.iinfo(np.int64).max
    keys = np.where(docs >= 0, docs.astype(np.int64) * fetched + np.arange(fetched, dtype=np.int64), invalid)
    keys.sort(axis=1)
    doc_sorted = keys // fetched
    start = np.ones(keys.shape, dtype=bool)
    start[:, 1:] = doc_sorted[:, 1:] != doc_sorted[:, :-1]
    start &= keys != invalid
    first = np.zeros(keys.shape, dtype=bool)
    rows = np.nonzero(start)[0]
    first[rows, keys[start] % fetched] = True
    return first


def take_ranked(mask: np.ndarray, docs: np.ndarray, scores: np.ndarray, k: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keep the first k masked entries of each row, in row order: (docs (Q, k), scores (Q, k), kept per row)."""
    rank = np.cumsum(mask, axis=1) - 1
    r, c = np.nonzero(mask & (rank < k))
    out_doc = np.full((docs.shape[0], k), -1, dtype=np.int64)
    out_score = np.full((docs.shape[0], k), -np.inf, dtype=np.float32)
    out_doc[r, rank[r, c]] = docs[r, c]
    out_score[r, rank[r, c]] = scores[r, c]
    return out_doc, out_score, mask.sum(axis=1)


class MaxAggregator(Aggregator):
    """f(q, d) = max over d's vectors (MVR, ME-BERT, MLR-max): a document's first hit is its score."""

    name = "max"
    exact_with_distinct_k = True

    def aggregate(self, scores, docs, k):
        return take_ranked(first_occurrences(docs), docs, scores, k)


AGGREGATORS: dict[str, type[Aggregator]] = {"max": MaxAggregator}


def get_aggregator(name: str | Aggregator) -> Aggregator:
    if isinstance(name, Aggregator):
        return name
    if name not in AGGREGATORS:
        raise ConfigError(f"unknown aggregation {name!r}; known: {', '.join(sorted(AGGREGATORS))}")
    return AGGREGATORS[name]()
