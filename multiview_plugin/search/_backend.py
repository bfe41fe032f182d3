"""The interface every search backend implements (Faiss :class:`~multiview_plugin.search.FaissStore`, Qdrant
:class:`~multiview_plugin.search._qdrant.QdrantStore`).

Searchers, explanations, calibration, the analysis driver and the Pyserini adapter use only what is declared here,
never a backend's own attributes probed with ``getattr``:

* ``kind``: the backend's name, as ``multiview.json`` records it (its ``backend`` field: ``faiss``, ``qdrant``);
* the documents: ``docids`` in the order of the index folder's ``docid`` file, each one's first row ``doc_start``
  and view count ``doc_views``, the row → document map ``row_doc`` and ``mean_views``; the vector ``dim``;
* ``search``: top-k document indices and scores for a batch of query vectors under an aggregator
  (``search_docids``: with docids, ranked by score, then docid: :func:`order_ties`);
* ``doc_vectors``: one document's view vectors as the backend scores them (explanations, view usage);
* calibration (:mod:`multiview_plugin.search.calibrate`): ``calibration_grid`` says what approximate search the
  backend does and which knob values to try (None: it searches exactly), ``set_search_knob`` sets one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from multiview_plugin.search.aggregators import Aggregator

# The knob values calibration (:mod:`multiview_plugin.search.calibrate`) tries, as the backends' calibration_grid
# offers them: the Faiss store's (over-fetch factors; HNSW efSearch, beside the index's stored efSearch, raised to
# the fetch depth anyway; IVF over-fetch) and the document-index / Qdrant candidates. Written once, here, below
# both the backends and calibration.
OVERFETCH = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
EF_SEARCH = (64, 128, 256, 512, 1024)
IVF_OVERFETCH = (1.0, 2.0, 4.0)
MIN_DOC_CANDIDATES = (50, 100, 200, 400, 800, 1600, 3200, 6400, 12800)


def capped_depth(k: int, num_docs: int) -> int:
    """A search depth capped at the number of documents: no result array is wider than the collection (a depth of
    10**12 on a 60-document index allocates 60 columns, not 10**12)."""
    return max(1, min(int(k), int(num_docs)))


TIE_MARGIN = 16  # documents fetched past k, so that up to this many ties at the cut-off are ordered by docid


def order_ties(docids: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row of (docids (Q, n) object array, None padded; scores (Q, n)) in the one ranking order of every search
    path (one index, ``--shard_search``, sharded indexes, Qdrant): score descending, then docid ascending (exact
    ties are ordered by docid, not by where a backend or shard found them); padding (-inf) last."""
    if docids.size == 0:
        return docids, scores
    if bool((scores[:, 1:] < scores[:, :-1]).all()):  # no ties, no padding (one column too): already in order
        return docids, scores
    keys = np.where(docids == None, "", docids).astype(str)  # noqa: E711 (element-wise)
    order = np.lexsort((keys, -scores.astype(np.float64)), axis=-1)
    return np.take_along_axis(docids, order, axis=1), np.take_along_axis(scores, order, axis=1)


class SearchBackend(ABC):
    kind: ClassVar[str]  # multiview.json's "backend": "faiss", "qdrant"
    docids: np.ndarray  # (documents,) str
    doc_start: np.ndarray  # (documents,) int64: the document's first row
    doc_views: np.ndarray  # (documents,) int64: its number of views (rows)
    row_doc: np.ndarray  # (rows,) int64: each row's document
    mean_views: float  # rows per document, at least 1

    @property
    @abstractmethod
    def dim(self) -> int:
        """Vector dimension."""

    @abstractmethod
    def search(self, q_reps: np.ndarray, k: int, aggregator: Aggregator) -> tuple[np.ndarray, np.ndarray]:
        """Top-k documents per query: (document indices (Q, k), -1 padded; scores (Q, k), -inf padded)."""

    @abstractmethod
    def doc_vectors(self, doc: int) -> np.ndarray:
        """The (views, dim) vectors of document ``doc`` as the backend scores them."""

    @abstractmethod
    def calibration_grid(self) -> tuple[str, dict[str, Sequence[Any]]] | None:
        """What calibration explores: (the kind of approximate search, e.g. ``hnsw`` or ``qdrant``; {knob: values
        to try}, the walked knob last); None where the backend searches exactly (nothing to calibrate)."""

    def construction_beam(self) -> int | None:
        """The narrowest construction beam of the backend's HNSW graphs that a rebuild could widen
        (``--hnsw_ef_construction``); None where it has none (the default) or cannot say."""
        return None

    @abstractmethod
    def set_search_knob(self, name: str, value: Any) -> None:
        """Set the search-time knob ``name`` (a key of :meth:`calibration_grid`'s knobs and of ``multiview.json``
        ``search_defaults``); a knob the backend does not have is a :class:`~multiview_plugin.errors.ConfigError`."""

    def search_docids(self, q_reps: np.ndarray, k: int, aggregator: Aggregator) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`search`, with docids: (object array (Q, k'), None padded; scores (Q, k')), ``k'`` = ``k``
        capped at the number of documents (:func:`capped_depth`). Ranked by :func:`order_ties` (score descending,
        then docid ascending). An exact search (nothing to calibrate) with an aggregation exact at any depth fetches
        :data:`TIE_MARGIN` more documents, so that documents tied at the cut-off are chosen by docid too, whatever
        order the backend found them in (an approximate search keeps its calibrated depth)."""
        n_docs = len(self.docids)
        k = capped_depth(k, n_docs)
        exact = aggregator.exact_with_distinct_k and self.calibration_grid() is None
        wide = min(n_docs, k + TIE_MARGIN) if exact else k
        doc, score = self.search(q_reps, wide, aggregator)
        ids, score = order_ties(np.where(doc >= 0, self.docids[np.maximum(doc, 0)], None), score)
        return ids[:, :k], score[:, :k]
