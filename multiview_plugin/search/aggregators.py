"""Turning ranked vector hits into ranked documents.

An aggregator takes, for each query, the fetched vector hits (scores sorted descending and the document of
each hit) and returns the top-k documents with their scores. All work is vectorised over the whole batch, but for
max aggregation of small batches (one interactive query), walked in Python where numpy's fixed cost per call dominates.
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


def group_by_doc(docs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row-wise groups of equal documents, in a per-row sorted order, vectorised.

    Sorting the composite keys ``doc << b | position`` within each row groups a document's hits with the
    earliest one first; with Faiss rows sorted by score, that is its best (max-sim) vector.

    Returns (group-start mask (Q, F), document of each sorted entry, its original position — also the order
    to gather other (Q, F) arrays by). Entries with doc -1 (nothing fetched) sort last and start no group.
    """
    fetched = docs.shape[1]
    bits = max(1, (fetched - 1).bit_length())
    missing = docs < 0
    any_missing = bool(missing.any())
    top_doc = int(docs.max()) + 1 if docs.size else 1  # stands in for -1 so missing entries sort last
    dtype = np.int32 if (top_doc + 1) << bits < 2**31 else np.int64  # int32 sorts faster
    keys = docs.astype(dtype)
    if any_missing:
        keys[missing] = top_doc
    keys <<= bits
    keys |= np.arange(fetched, dtype=dtype)
    keys.sort(axis=1)
    doc_sorted, pos_sorted = keys >> bits, keys & ((1 << bits) - 1)
    start = np.empty(keys.shape, dtype=bool)
    start[:, :1] = True
    np.not_equal(doc_sorted[:, 1:], doc_sorted[:, :-1], out=start[:, 1:])
    if any_missing:
        start &= doc_sorted != top_doc
    return start, doc_sorted, pos_sorted


def first_occurrences(docs: np.ndarray) -> np.ndarray:
    """(Q, F) bool mask of each (query, document) pair's first hit in rank order (see :func:`group_by_doc`).

    Entries with doc -1 (nothing fetched) are never marked.
    """
    start, _, pos_sorted = group_by_doc(docs)
    # each row's positions form a permutation, so every cell of ``first`` is written exactly once
    first = np.empty(docs.shape, dtype=bool)
    np.put_along_axis(first, pos_sorted, start, axis=1)
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


# Fetched hits (queries x depth) up to which :func:`first_hits_walked` beats the vectorised path: numpy's fixed
# cost per call (~1 us, some 25 calls) outweighs a Python walk over a few hundred hits. Measured on 2 CPU cores with
# mvr-like hits, 8 views per document (bench/aggregation_walk.log): one query of 80 hits 9.4 us walked against
# 23.4 us vectorised, 160 hits 14.9 against 24.1, 320 hits 28.2 against 25.7.
WALK_MAX_HITS = 256


def first_hits_walked(scores: np.ndarray, docs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``take_ranked(first_occurrences(docs), docs, scores, k)`` row by row in Python's dicts (same output), for
    small batches such as one interactive query, where numpy's per-call cost dominates."""
    n_q = docs.shape[0]
    out_doc = np.full((n_q, k), -1, dtype=np.int64)
    out_score = np.full((n_q, k), -np.inf, dtype=np.float32)
    found = np.zeros(n_q, dtype=np.int64)
    for i, (row_doc, row_score) in enumerate(zip(docs.tolist(), scores.tolist())):
        order = dict.fromkeys(row_doc)  # distinct documents, in order of their first hit
        order.pop(-1, None)  # nothing fetched
        first = dict(zip(reversed(row_doc), reversed(row_score)))  # the first hit's score wins
        found[i] = len(order)
        top = list(order)[:k]
        out_doc[i, :len(top)] = top
        out_score[i, :len(top)] = [first[d] for d in top]
    return out_doc, out_score, found


class MaxAggregator(Aggregator):
    """f(q, d) = max over d's vectors (MVR, ME-BERT, MLR-max): a document's first hit is its score."""

    name = "max"
    exact_with_distinct_k = True

    def aggregate(self, scores, docs, k):
        if docs.size <= WALK_MAX_HITS:
            return first_hits_walked(scores, docs, k)
        return take_ranked(first_occurrences(docs), docs, scores, k)


def log_one_minus_softmax(scores: np.ndarray, valid: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """``log(1 − p)`` for ``p = softmax(scores / temperature)`` over each row's valid entries (0 elsewhere).

    Stable in float64: ``log1p(−p)`` where p ≤ 1/2, and for a row's top entry (the only one that can exceed
    1/2) ``log(Σ_{others} e^{s}) − log(Σ e^{s})`` with the sum of the others taken directly, not as
    ``1 − p`` (which would round to 0 when one score dominates).

    >>> out = log_one_minus_softmax(np.array([[0.0, 0.0]]), np.array([[True, True]]))
    >>> np.allclose(out, np.log(0.5))
    True
    """
    s = np.where(valid, scores.astype(np.float64) / temperature, -np.inf)
    top = s.max(axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(s - top)  # 0 where invalid
    z = e.sum(axis=1, keepdims=True)
    z = np.where(z > 0, z, 1.0)
    p = e / z
    with np.errstate(divide="ignore"):
        out = np.log1p(-p)
        arg = np.argmax(s, axis=1)[:, None]
        others = e.copy()
        np.put_along_axis(others, arg, 0.0, axis=1)
        top_value = np.log(others.sum(axis=1, keepdims=True)) - np.log(z)
    big = np.take_along_axis(p, arg, axis=1) > 0.5
    np.put_along_axis(out, arg, np.where(big, top_value, np.take_along_axis(out, arg, axis=1)), axis=1)
    return np.where(valid, out, 0.0)


class HasAnsAggregator(Aggregator):
    """DCSR's passage score (Wu et al., 2022, eq. 2): ``HasAns(P) = 1 − Π_{s∈P} (1 − p_s)``.

    The fetched sentence scores of a query are softmax-normalised into ``p`` (with ``temperature``: 1 is
    the paper's; a cosine-trained model's own τ makes ``p`` its training distribution), and passages are ranked
    by ``Σ_s log(1 − p_s)`` (log space: a product of hundreds of factors does not underflow, and passages
    whose HasAns rounds to 1 stay ordered; ties go to the better best sentence). Scores returned are HasAns.

    The fetch is ``ceil(max(k, fetch_docs) · mean_sentences)`` sentences, fixed (the softmax depends on it):
    the paper's top ``100 · s̄`` for 100 passages. ``mean_sentences`` defaults to the index's mean views.

    Examples
    --------
    >>> agg = HasAnsAggregator()
    >>> scores = np.log(np.array([[4.0, 2.0, 1.0, 1.0]]))     # p = .5, .25, .125, .125
    >>> docs = np.array([[0, 1, 1, 2]])
    >>> doc, has, found = agg.aggregate(scores, docs, 3)
    >>> doc.tolist(), [round(float(x), 4) for x in has[0]]    # 1-(1-.25)(1-.125) = .34375 < .5
    ([[0, 1, 2]], [0.5, 0.3438, 0.125])
    """

    name = "hasans"
    exact_with_distinct_k = False

    def __init__(self, temperature: float = 1.0, fetch_docs: int = 100, mean_sentences: float | None = None):
        if temperature <= 0:
            raise ConfigError(f"hasans temperature must be > 0, got {temperature}")
        if fetch_docs < 1:
            raise ConfigError(f"hasans fetch_docs must be >= 1, got {fetch_docs}")
        self.temperature = temperature
        self.fetch_docs = fetch_docs
        self.mean_sentences = mean_sentences

    def initial_fetch(self, k: int, mean_views: float) -> int:
        return int(math.ceil(max(k, self.fetch_docs) * (self.mean_sentences or mean_views)))

    def aggregate(self, scores, docs, k):
        q_count, fetched = docs.shape
        log1m = log_one_minus_softmax(scores, docs >= 0, self.temperature)
        start, doc_sorted, pos_sorted = group_by_doc(docs)
        values = np.take_along_axis(log1m, pos_sorted, axis=1).ravel()
        flat_start = start.ravel()
        group = np.maximum(np.cumsum(flat_start) - 1, 0)  # entries before a row's first group add 0
        n_groups = int(flat_start.sum())
        sums = np.bincount(group, weights=values, minlength=n_groups)[:n_groups]
        where = np.flatnonzero(flat_start)
        rows = where // max(fetched, 1)
        found = start.sum(axis=1)
        col = np.arange(n_groups) - np.concatenate([[0], np.cumsum(found)[:-1]])[rows]
        width = max(int(found.max()) if q_count else 0, 1)
        table_sum = np.full((q_count, width), np.inf)
        table_pos = np.full((q_count, width), fetched, dtype=np.int64)
        table_doc = np.full((q_count, width), -1, dtype=np.int64)
        table_sum[rows, col] = sums
        table_pos[rows, col] = pos_sorted.ravel()[where]
        table_doc[rows, col] = doc_sorted.ravel()[where]
        ranked = np.lexsort((table_pos, table_sum), axis=1)[:, :k]
        out_doc = np.full((q_count, k), -1, dtype=np.int64)
        out_score = np.full((q_count, k), -np.inf, dtype=np.float32)
        top_doc = np.take_along_axis(table_doc, ranked, axis=1)
        top_sum = np.take_along_axis(table_sum, ranked, axis=1)
        ok = top_doc >= 0
        out_doc[:, :ranked.shape[1]] = np.where(ok, top_doc, -1)
        with np.errstate(invalid="ignore"):
            out_score[:, :ranked.shape[1]] = np.where(ok, -np.expm1(np.where(ok, top_sum, 0.0)), -np.inf)
        return out_doc, out_score, found


AGGREGATORS: dict[str, type[Aggregator]] = {"max": MaxAggregator, "hasans": HasAnsAggregator}


def get_aggregator(name: str | Aggregator, **options: float | int | None) -> Aggregator:
    """An aggregator by name; ``options`` go to its constructor (e.g. ``temperature`` for ``hasans``)."""
    if isinstance(name, Aggregator):
        return name
    if name not in AGGREGATORS:
        raise ConfigError(f"unknown aggregation {name!r}; known: {', '.join(sorted(AGGREGATORS))}")
    cls = AGGREGATORS[name]
    if cls is MaxAggregator:
        return cls()
    return cls(**{k: v for k, v in options.items() if v is not None})
