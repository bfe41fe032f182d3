"""The small interface every search backend implements (Faiss :class:`~multiview_plugin.search.VectorStore`,
Qdrant :class:`~multiview_plugin.search._qdrant.QdrantStore`).

Searchers, explanations and the analysis driver only use what is declared here: the documents (``docids``,
each one's first row ``doc_start`` and view count ``doc_views``, in the order of the index folder's ``docid``
file), the vector ``dim``, ``search`` (top-k document indices and scores for a batch of query vectors under an
aggregator) and ``doc_vectors`` (one document's view vectors, for explanations).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from multiview_plugin.search.aggregators import Aggregator


def capped_depth(k: int, num_docs: int) -> int:
    """A search depth capped at the number of documents: no result array is wider than the collection (a depth of
    10**12 on a 60-document index allocates 60 columns, not 10**12)."""
    return max(1, min(int(k), int(num_docs)))


class SearchBackend(ABC):
    docids: np.ndarray
    doc_start: np.ndarray
    doc_views: np.ndarray

    @property
    @abstractmethod
    def dim(self) -> int:
        """Vector dimension."""

    @abstractmethod
    def search(self, q_reps: np.ndarray, k: int, aggregator: Aggregator) -> tuple[np.ndarray, np.ndarray]:
        """Top-k documents per query: (document indices (Q, k), -1 padded; scores (Q, k), -inf padded)."""

    @abstractmethod
    def doc_vectors(self, doc: int) -> np.ndarray:
        """The (views, dim) vectors of document ``doc`` as the backend stores them."""

    def search_docids(self, q_reps: np.ndarray, k: int, aggregator: Aggregator) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`search`, with docids: (object array (Q, k'), None padded; scores (Q, k')), ``k'`` = ``k``
        capped at the number of documents (:func:`capped_depth`)."""
        doc, score = self.search(q_reps, capped_depth(k, len(self.docids)), aggregator)
        return np.where(doc >= 0, self.docids[np.maximum(doc, 0)], None), score
