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

    Sorting the composite keys ``doc << b | position`` within each row groups a document's hits with the
    earliest one first; with Faiss rows sorted by score, a document's first hit is its best (max-sim) vector.
    Entries with doc -1 (nothing fetched) are never marked.
    """
    q_count, fetched = docs.shape
    bits = max(1, (fetched - 1).bit_length())
    missing = docs < 0
    any_missing = bool(missing.any())
    top_doc = int(docs.max()) + 1  # stands in for -1 so missing entries sort last
    dtype = np.int32 if (top_doc + 1) << bits < 2**31 else np.int64
    keys = docs.astype(dtype)
    if any_missing:
        keys[missing] = top_doc
    keys <<= bits
    keys |= np.arange(fetched, dtype=dtype)
    keys.sort(axis=1)
    doc_sorted = keys >> bits
    start = np.empty(keys.shape, dtype=bool)
    start[:, 0] = True
    np.not_equal(doc_sorted[:, 1:], doc_sorted[:, :-1], out=start[:, 1:])
    if any_missing:
        start &= doc_sorted != top_doc
    # each row's positions form a permutation, so every cell of ``first`` is written exactly once
    first = np.empty(keys.shape, dtype=bool)
    np.put_along_axis(first, keys & ((1 << bits) - 1), start, axis=1)
    return first


def take_ranked(mask: np.ndarray, docs: np.ndarray, scores: np.ndarray, k: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keep the first k marked entries of each row, in row order: (docs (Q, k), scores (Q, k), marked per row)."""
    found = mask.sum(axis=1)
    width = min(k, mask.shape[1])
    # a stable sort of "not marked" puts the marked positions first, in their original order
    cols = np.argsort(~mask, axis=1, kind="stable")[:, :width]
    valid = np.arange(width)[None, :] < found[:, None]
    out_doc = np.full((docs.shape[0], k), -1, dtype=np.int64)
    out_score = np.full((docs.shape[0], k), -np.inf, dtype=np.float32)
    out_doc[:, :width] = np.where(valid, np.take_along_axis(docs, cols, axis=1), -1)
    out_score[:, :width] = np.where(valid, np.take_along_axis(scores, cols, axis=1), -np.inf)
    return out_doc, out_score, found


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
