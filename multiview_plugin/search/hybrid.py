"""Hybrid dense + sparse (BM25) search: fuse two ranked lists per query.

Two fusions, the two that Pyserini users reach for:

* ``interpolation`` -- Pyserini's ``HybridSearcher`` (``pyserini.search.hybrid``; Ma et al., "A replication study
  of dense passage retriever", 2021): per query, each list's scores are min-max normalised over its own
  retrieved top-k, a document missing from one list takes that list's lowest retrieved score (Pyserini's rule;
  when every retrieved score of a list is equal, e.g. BM25 matched one document, those documents get 1 and the
  missing ones 0, where Pyserini's formula divides by zero), and the fused score is
  ``alpha * dense + (1 - alpha) * sparse``. ``alpha = 1`` is the dense order, ``alpha = 0`` the BM25 order.
  (Pyserini writes ``dense + alpha' * sparse``; for ``0 < alpha < 1`` that is the same ranking with
  ``alpha' = (1 - alpha) / alpha``: this form keeps the weight in [0, 1] for a grid search.)
* ``rrf`` -- reciprocal rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009): ``sum 1 / (k + rank)`` over the
  lists a document appears in, rank 1-based, ``k = 60``; with ``alpha`` the two terms are weighted
  ``2 * alpha`` and ``2 * (1 - alpha)`` (:data:`DEFAULT_ALPHA` = 0.5, the default, is plain RRF).

Ties are broken by the dense list's order, then the sparse list's. BM25 comes from ``bm25s`` (Lù 2024) through
:class:`BM25Searcher`.

>>> fuse_lists(["a", "b", "c"], [3.0, 2.0, 1.0], ["c", "b"], [9.0, 1.0], "interpolation", alpha=1.0)
[('a', 1.0), ('b', 0.5), ('c', 0.0)]
>>> [d for d, _ in fuse_lists(["a", "b", "c"], [3.0, 2.0, 1.0], ["c", "b"], [9.0, 1.0], "interpolation", 0.0)]
['c', 'a', 'b']
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from multiview_plugin.errors import ConfigError

if TYPE_CHECKING:
    from multiview_plugin.search._searcher import Hit

logger = logging.getLogger(__name__)

FUSIONS = ("interpolation", "rrf")
RRF_K = 60
# the dense side's weight when none is chosen (driver.search --hybrid_alpha, the quickstart's --hybrid_alpha,
# hybrid_searcher): equal weights; for rrf, plain reciprocal rank fusion
DEFAULT_ALPHA = 0.5
DEFAULT_DEPTH = 100  # documents fetched from each side before fusing (driver.search --hybrid_depth)
Run = dict[str, list[tuple[str, float]]]


def _normalised(scores: Sequence[float]) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    if not len(s):
        return s
    low, high = s.min(), s.max()
    return np.ones_like(s) if high <= low else (s - low) / (high - low)


def check_fusion(fusion: str, alpha: float) -> None:
    if fusion not in FUSIONS:
        raise ConfigError(f"unknown fusion {fusion!r}: choose one of {', '.join(FUSIONS)}")
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"the hybrid weight alpha must lie in [0, 1] (1 = dense only, 0 = BM25 only), got {alpha}")


def fuse_lists(dense_ids: Sequence[str], dense_scores: Sequence[float], sparse_ids: Sequence[str],
               sparse_scores: Sequence[float], fusion: str = "interpolation", alpha: float = DEFAULT_ALPHA,
               k: int | None = None, rrf_k: int = RRF_K) -> list[tuple[str, float]]:
    """One query's fused ranking, best first, ``k`` documents (default: all of either list). ``None`` ids
    (padding of a short result list) are skipped."""
    check_fusion(fusion, alpha)
    dense = [(d, s) for d, s in zip(dense_ids, dense_scores) if d is not None]
    sparse = [(d, s) for d, s in zip(sparse_ids, sparse_scores) if d is not None]
    order: dict[str, int] = {}
    for d, _ in dense + sparse:
        order.setdefault(d, len(order))
    fused = np.zeros(len(order))
    if fusion == "interpolation":
        for weight, hits in ((alpha, dense), (1.0 - alpha, sparse)):
            if not hits:
                continue
            norm = _normalised([s for _, s in hits])
            column = np.full(len(order), 0.0)  # missing: the list's lowest retrieved score, 0 after min-max
            for (d, _), v in zip(hits, norm):
                column[order[d]] = v
            fused += weight * column
    else:
        for weight, hits in ((2.0 * alpha, dense), (2.0 * (1.0 - alpha), sparse)):
            for rank, (d, _) in enumerate(hits, start=1):
                fused[order[d]] += weight / (rrf_k + rank)
    docs = list(order)
    ranked = sorted(range(len(docs)), key=lambda i: (-fused[i], i))
    if k is not None:
        ranked = ranked[:k]
    return [(docs[i], float(fused[i])) for i in ranked]


def fuse_runs(dense: Mapping[str, Sequence[tuple[str, float]]], sparse: Mapping[str, Sequence[tuple[str, float]]],
              fusion: str = "interpolation", alpha: float = DEFAULT_ALPHA, k: int | None = None,
              rrf_k: int = RRF_K) -> Run:
    """:func:`fuse_lists` for every query of ``dense`` (a run: ``{qid: [(docid, score), ...]}`` best first);
    a query missing from ``sparse`` keeps its dense ranking's documents."""
    out: Run = {}
    for qid, hits in dense.items():
        other = sparse.get(qid, [])
        out[qid] = fuse_lists([d for d, _ in hits], [s for _, s in hits], [d for d, _ in other],
                              [s for _, s in other], fusion, alpha, k, rrf_k)
    return out


class BM25Searcher:
    """BM25 (bm25s, English stop words removed, as the project's BM25 baseline) over an in-memory corpus.

    >>> s = BM25Searcher({"d1": "the cat sat", "d2": "a dog ran", "d3": "cats and dogs"})
    >>> s.search(["dog"], ["q"], 2)["q"][0][0]
    'd2'
    """

    def __init__(self, corpus: Mapping[str, str]):
        import bm25s

        if not corpus:
            raise ConfigError("BM25 needs a non-empty corpus")
        self.docids = list(corpus)
        self.retriever = bm25s.BM25()
        tokens = bm25s.tokenize(list(corpus.values()), stopwords="en", show_progress=False)
        if not tokens.vocab:  # bm25s itself fails with "max() arg is an empty sequence"
            raise ConfigError(f"BM25: none of the corpus's {len(corpus)} documents has a word BM25 indexes (all "
                              "stop words, e.g. 'the'): nothing to search")
        self.retriever.index(tokens, show_progress=False)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> BM25Searcher:
        """A corpus file the encode driver reads (jsonl/tsv/BEIR), texts formatted as for encoding."""
        from multiview_plugin.data.readers import load_corpus

        corpus = load_corpus(path)
        try:
            return cls(corpus)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None

    def batch_search(self, queries: Sequence[str], q_ids: Sequence[str], k: int = 10, threads: int = 1
                     ) -> dict[str, list[Hit]]:
        """Pyserini's ``batch_search`` shape: ``{qid: [Hit(docid, score), ...]}`` (``threads`` is accepted for
        Pyserini's signature; bm25s scores all queries at once)."""
        from multiview_plugin.search._searcher import Hit  # here: the module's constants are --help's defaults

        if len(queries) != len(q_ids):
            raise ConfigError(f"{len(queries)} queries but {len(q_ids)} query ids")
        return {q: [Hit(d, s) for d, s in hits] for q, hits in self.search(queries, q_ids, k).items()}

    def search(self, queries: Sequence[str], q_ids: Sequence[str], k: int) -> Run:
        """``{qid: [(docid, score), ...]}``, best first, at most ``k`` documents with a positive BM25 score."""
        import bm25s

        k = min(k, len(self.docids))
        if not len(queries) or k <= 0:
            return {q: [] for q in q_ids}
        tokens = bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
        ranked, scores = self.retriever.retrieve(tokens, k=k, show_progress=False)
        docids = np.asarray(self.docids, dtype=object)
        run: Run = {}
        for qid, row, row_s in zip(q_ids, np.asarray(ranked), np.asarray(scores)):
            # bm25s pads with zero-score hits when fewer documents match: those are not retrieved
            run[qid] = [(docids[i], float(s)) for i, s in zip(row.tolist(), row_s.tolist()) if s > 0]
        return run


def select_alpha(dense: Run, sparse: Run, evaluate, alphas: Sequence[float], fusion: str = "interpolation",
                 k: int | None = None) -> tuple[float, list[tuple[float, float]]]:
    """The alpha of ``alphas`` whose fused run scores best under ``evaluate(run) -> float`` (on a dev split,
    never the reported questions); ties go to the larger alpha (more weight on the dense model). Returns the
    alpha and the ``(alpha, value)`` sweep."""
    sweep = [(float(a), float(evaluate(fuse_runs(dense, sparse, fusion, a, k)))) for a in alphas]
    best = max(sweep, key=lambda av: (av[1], av[0]))
    logger.info("hybrid %s: alpha %.2f on dev (%s)", fusion, best[0],
                ", ".join(f"{a:.2f}: {v:.4f}" for a, v in sweep))
    return best[0], sweep


def _as_run(results: Mapping[str, Sequence]) -> Run:
    """A ``batch_search`` result (hits with ``docid`` / ``score``, e.g. Pyserini's, or ``(docid, score)``
    pairs) as a run."""
    return {q: [(h.docid, float(h.score)) if hasattr(h, "docid") else (h[0], float(h[1])) for h in hits]
            for q, hits in results.items()}


class HybridSearcher:
    """Dense + sparse search with Pyserini's ``HybridSearcher`` calls (``search`` / ``batch_search``).

    ``dense`` and ``sparse`` are anything with Pyserini's ``batch_search(queries, q_ids, k, threads)``: a
    :class:`~multiview_plugin.search.MultiVectorSearcher` with a query encoder, :class:`BM25Searcher`, or
    Pyserini's own ``FaissSearcher`` / ``LuceneSearcher``. Each side fetches ``depth`` documents (at least
    ``k``); :func:`fuse_lists` fuses them.
    """

    def __init__(self, dense, sparse, fusion: str = "interpolation", alpha: float = DEFAULT_ALPHA,
                 depth: int = DEFAULT_DEPTH, rrf_k: int = RRF_K):
        check_fusion(fusion, alpha)
        if depth < 1:
            raise ConfigError(f"the hybrid depth must be a positive number of documents, got {depth}")
        self.dense, self.sparse = dense, sparse
        self.fusion, self.alpha, self.depth, self.rrf_k = fusion, alpha, depth, rrf_k

    def batch_search(self, queries: Sequence[str], q_ids: Sequence[str], k: int = 10, threads: int = 1
                     ) -> dict[str, list[Hit]]:
        from multiview_plugin.search._searcher import Hit

        depth = max(k, self.depth)
        dense = _as_run(self.dense.batch_search(list(queries), list(q_ids), k=depth, threads=threads))
        sparse = _as_run(self.sparse.batch_search(list(queries), list(q_ids), k=depth, threads=threads))
        fused = fuse_runs(dense, sparse, self.fusion, self.alpha, k, self.rrf_k)
        return {q: [Hit(d, s) for d, s in hits] for q, hits in fused.items()}

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.batch_search([query], ["q"], k)["q"]
