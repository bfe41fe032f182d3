"""Searching a multi-vector index: Pyserini's ``search`` / ``batch_search`` API over documents with many vectors.

The index returns vectors; documents are ranked by an aggregator (max by default). The fetch depth starts at
``k × mean views per document`` and widens, for the queries that still have fewer than k distinct documents,
until they have k or the index is exhausted. For max aggregation over an exact (flat) index this is exact:
a document absent from the top F vectors scores at most the F-th vector's score, below every document found.
With a fixed number of views K the first fetch, k·K, always suffices (at most (k−1)·K vectors can outrank the
k-th document's best one).

Approximate indexes (HNSW, IVF, PQ, SQ) can miss some of a document's views, so a document whose best view was
missed is silently demoted, or lost when all its views were. For max aggregation the searcher then
(1) over-fetches ``overfetch ×`` that depth (its search beam, HNSW ``efSearch``, is at least the depth, and IVF
probes at least ``nprobe_floor(depth)`` lists), (2) takes every distinct document among the fetched vectors as a
candidate and (3) re-scores each candidate with *all* its views, reconstructed from the index (exact for
``HNSW32``/``Flat`` storage, the quantised vectors for ``SQ8``/``SQfp16``/``PQ``) or, where the folder has a
re-scoring store (``build_index(rescore_store=)``), read from its memory-mapped float16/float32 copy of the views
(exact, or within float16 rounding, whatever the index's coding), then ranks by that score.
Failure mode: a document none of whose views is among the fetched vectors is missed; ``bench/ann.py`` measures
how often (document recall against exact max-sim), and raising ``--overfetch`` / ``--ef_search`` /
``--nprobe`` trades latency for it.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch

from multiview_plugin.encoding.fingerprint import model_fingerprint
from multiview_plugin.encoding.shard_sets import check_query_dim, check_same_model
from multiview_plugin.encoding.shards import (
    NonFiniteVectorsError,
    ShardFormatError,
    nonfinite_rows,
    read_info,
    read_shard,
    shard_view_ids,
    split_lookup,
)
from multiview_plugin.encoding.view_info import INDEX_VIEWS_FILE, VIEW_INFO_KEY
from multiview_plugin.errors import ConfigError
from multiview_plugin.index.adds import contiguous_docs
from multiview_plugin.index.faiss_build import construction_beam, hnsw_graphs, read_faiss_index
from multiview_plugin.index.folder import (
    DOC_INDEX_FILE,
    DOCID_FILE,
    FINGERPRINTED_FILES,
    INDEX_FILE,
    META_FILE,
    RESCORE_STORE_FILE,
)
from multiview_plugin.index.meta import IndexMeta, check_index_file
from multiview_plugin.index.rescore import advise_random_reads, prefetch_rows
from multiview_plugin.progress import progress_bar
from multiview_plugin.search._backend import (
    EF_SEARCH,
    IVF_OVERFETCH,
    MIN_DOC_CANDIDATES,
    OVERFETCH,
    SearchBackend,
    capped_depth,
    order_ties,
)
from multiview_plugin.search.aggregators import AGGREGATORS, Aggregator, get_aggregator
from multiview_plugin.search.explain import Explanation, ViewExplainer

logger = logging.getLogger(__name__)

DEFAULT_QUERY_BATCH_SIZE = 64  # query strings encoded per forward pass (MultiVectorSearcher, ShardedSearcher)
FAISS_SEARCH_KNOBS = ("overfetch", "ef_search", "nprobe", "doc_candidates", "min_doc_candidates")


@dataclass(frozen=True)
class Hit:
    """A ranked document, with the fields of Pyserini's ``DenseSearchResult``."""

    docid: str
    score: float
    raw: str | None = None
    explanation: Explanation | None = None  # with explain=True: the matching view and what it is


@dataclass
class ApproximateSearch:
    """How a :class:`FaissStore` searches an approximate (non-flat) index; ignored for flat ones.

    ``overfetch``: fetch this many times the exact rule's depth (below 1 works too: the rule's depth is a worst
    case, and queries short of k distinct documents are widened). ``ef_search`` / ``nprobe``: lower bounds for
    HNSW's beam and IVF's probed lists (None: the index's stored value); the beam is raised to the fetch depth
    and the probes to :func:`nprobe_floor`, the lists that hold ``probe_factor ×`` the fetch depth on average.
    ``doc_candidates``: with a document index (one vector per document, ``build_index(doc_index_factory=)``),
    candidates are its top ``max(doc_candidates × k, min_doc_candidates)`` documents instead of the documents of
    the fetched vectors (the floor: small k needs relatively more candidates).
    ``rescore``: re-score candidate documents over all their views (needs a re-scoring store or an index that can
    reconstruct); None: on for IVF indexes and wherever the folder has a re-scoring store, off otherwise.
    Measured (5,000 clustered documents × 8 views × 64 dims, recall@10 of exact max-sim): it recovers views in
    unprobed IVF lists (IVF64,SQ8 0.905 → 0.931) but hardly changes HNSW (0.9725 → 0.973) at 2–3× its latency
    there."""

    overfetch: float = 2.0
    ef_search: int | None = None
    nprobe: int | None = None
    probe_factor: float = 32.0
    rescore: bool | None = None
    doc_candidates: float = 2.0
    min_doc_candidates: int = 200
    active: bool = field(default=False, init=False)
    can_rescore: bool = field(default=False, init=False)
    _hnsw: Any = field(default=None, init=False, repr=False)
    _ivf: Any = field(default=None, init=False, repr=False)

    def attach(self, index: faiss.Index, stored_views: bool = False) -> None:
        """Find the index's knobs; ``stored_views``: candidates can be re-scored from a re-scoring store (no
        reconstruction, so no IVF direct map either)."""
        if self.overfetch <= 0:
            raise ConfigError(f"overfetch must be > 0, got {self.overfetch}")
        self.active = not isinstance(faiss.downcast_index(index), faiss.IndexFlat)
        if not self.active:
            return
        self._hnsw = _find_hnsw(index)
        try:
            self._ivf = faiss.extract_index_ivf(index)
        except RuntimeError:
            self._ivf = None
        if self._ivf is not None and not stored_views:
            self._ivf.make_direct_map()  # reconstruct() by row id (8 bytes per vector)
        if self.ef_search is None and self._hnsw is not None:
            self.ef_search = int(self._hnsw.efSearch)
        if self.nprobe is None and self._ivf is not None:
            self.nprobe = int(self._ivf.nprobe)
        wanted = (self._ivf is not None or stored_views) if self.rescore is None else self.rescore
        self.can_rescore = wanted and (stored_views or _reconstructs(index))
        if wanted and not self.can_rescore:
            logger.warning("%s cannot reconstruct vectors: documents are ranked by their fetched views only",
                           type(faiss.downcast_index(index)).__name__)

    def prepare(self, fetch: int, ntotal: int) -> None:
        """Set the index's search knobs for a fetch of ``fetch`` vectors."""
        if self._hnsw is not None:
            self._hnsw.efSearch = max(self.ef_search or 0, fetch)
        if self._ivf is not None:
            # a fetch of the whole index (the last widening) probes every list, so it cannot come back short
            floor = self._ivf.nlist if fetch >= ntotal else nprobe_floor(fetch, ntotal, self._ivf.nlist,
                                                                           self.probe_factor)
            self._ivf.nprobe = max(self.nprobe or 1, floor)


def nprobe_floor(fetch: int, ntotal: int, nlist: int, probe_factor: float) -> int:
    """IVF lists to probe so that they hold ``probe_factor × fetch`` vectors on average (at most nlist)."""
    return min(nlist, max(1, math.ceil(probe_factor * fetch * nlist / max(1, ntotal))))


def _find_hnsw(index: faiss.Index) -> Any:
    """The search parameters (``hnsw``) of the HNSW graph over the index's own rows: the index itself, also behind a
    pre-transform or a refinement; None for others (an IVF index's HNSW quantiser is steered by nprobe)."""
    graphs = hnsw_graphs(index, quantisers=False)
    return graphs[0].hnsw if graphs else None


def _storage_view(index: faiss.Index) -> np.ndarray | bool:
    """The stored vectors as a zero-copy (ntotal, d) array for Flat (float32) and SQfp16 (float16) indexes;
    False for any other index (its vectors must be reconstructed)."""
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexFlat):
        dtype = np.float32
    elif (isinstance(index, faiss.IndexScalarQuantizer)
          and index.sq.qtype == faiss.ScalarQuantizer.QT_fp16):
        dtype = np.float16
    else:
        return False
    if index.ntotal == 0:
        return False
    nbytes = index.ntotal * index.d * np.dtype(dtype).itemsize
    raw = faiss.rev_swig_ptr(index.codes.data(), nbytes)
    return raw.view(dtype).reshape(index.ntotal, index.d)


def _reconstructs(index: faiss.Index) -> bool:
    try:
        index.reconstruct(0) if index.ntotal else None
        return True
    except RuntimeError:
        return False


class FaissStore(SearchBackend):
    """The Faiss backend: a Faiss index whose rows are document views, plus the row → document map.

    ``rescore_views``: the views as an (ntotal, dim) array in row order (a memory-mapped re-scoring store,
    :func:`open_rescore_store`); candidate documents are then re-scored from it instead of from the index."""

    def __init__(self, index: faiss.Index, docids: np.ndarray, row_doc: np.ndarray, mean_views: float,
                 approximate: ApproximateSearch | None = None, doc_index: faiss.Index | None = None,
                 rescore_views: np.ndarray | None = None):
        self._direct_map_ready = False  # doc_vectors made an IVF index's direct map (it reconstructs by row)
        if index.ntotal != len(row_doc):
            raise ConfigError(f"index has {index.ntotal} rows but {len(row_doc)} docid lines")
        if rescore_views is not None and rescore_views.shape != (index.ntotal, index.d):
            raise ConfigError(f"the re-scoring views have shape {rescore_views.shape}, the index "
                              f"({index.ntotal}, {index.d})")
        self.index = index
        self.docids = docids
        self.row_doc = row_doc.astype(np.int64)
        self.mean_views = max(1.0, mean_views)
        self.approximate = approximate if approximate is not None else ApproximateSearch()
        self.approximate.attach(index, stored_views=rescore_views is not None)
        counts = np.bincount(self.row_doc, minlength=len(docids))
        self.doc_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.doc_views = counts.astype(np.int64)
        self.doc_index = doc_index
        self.rescore_views = rescore_views
        self._storage: np.ndarray | bool | None = None  # the index's vectors as an array (False: reconstruct)
        self._flat_ip: faiss.IndexFlat | None = None
        if doc_index is not None:
            if doc_index.ntotal != len(docids):
                raise ConfigError(f"doc_index has {doc_index.ntotal} rows for {len(docids)} documents")
            if rescore_views is None and not _reconstructs(index):
                raise ConfigError("a doc_index needs a main index that can reconstruct vectors (Flat, SQfp16, "
                                  "SQ8, HNSW32 ...) or a re-scoring store (--rescore_store)")

    @classmethod
    def from_lookup(cls, index: faiss.Index, lookup: Sequence[str], multi_vector: bool, where: str,
                    approximate: ApproximateSearch | None = None, doc_index: faiss.Index | None = None,
                    rescore_views: np.ndarray | None = None) -> FaissStore:
        docids, row_doc = contiguous_docs(split_lookup(list(lookup), multi_vector), where)
        return cls(index, docids, row_doc, len(row_doc) / max(1, len(docids)), approximate, doc_index,
                   rescore_views)

    @classmethod
    def from_shards(cls, paths: Sequence[str | os.PathLike], unsafe_pickle: bool = False) -> FaissStore:
        """An in-memory flat index over encoded shards (Tevatron's search without an index folder).

        Empty shards add nothing; ``unsafe_pickle`` loads with plain pickle (trusted files only)."""
        index, lookup, multi = None, [], False
        for path in paths:
            reps, lk, info = read_shard(path, unsafe_pickle)
            if info is not None and info.is_query:
                raise ShardFormatError(f"{path} holds queries, not passages")
            multi = multi or shard_view_ids(path, lk, info)  # without a sidecar: inferred, with a warning
            if not len(reps):
                continue
            if index is None:
                index = faiss.IndexFlatIP(reps.shape[1])
            elif reps.shape[1] != index.d:
                raise ShardFormatError(f"{path}: dim {reps.shape[1]} differs from {index.d}")
            index.add(np.ascontiguousarray(reps, dtype=np.float32))
            lookup.extend(lk)
        if index is None:
            raise ShardFormatError(f"no passage vectors in {', '.join(map(str, paths)) or 'no shards'}")
        return cls.from_lookup(index, lookup, multi, ", ".join(map(str, paths)))

    kind = "faiss"

    @property
    def dim(self) -> int:
        return self.index.d

    def doc_vectors(self, doc: int) -> np.ndarray:
        """Document ``doc``'s views from the re-scoring store where there is one (what the search scored with),
        else reconstructed from the index (an IVF index gains its direct map on first need)."""
        start, count = int(self.doc_start[doc]), int(self.doc_views[doc])
        if self.rescore_views is not None:
            return np.asarray(self.rescore_views[start:start + count], dtype=np.float32)
        try:
            return self.index.reconstruct_n(start, count)
        except RuntimeError:
            if self._direct_map_ready:
                raise
            ivf = faiss.try_extract_index_ivf(self.index)
            if ivf is None:
                raise ConfigError(f"explanations need the index's vectors, which {type(self.index).__name__} "
                                  "cannot reconstruct") from None
            ivf.make_direct_map()
            self._direct_map_ready = True
            return self.index.reconstruct_n(start, count)

    def construction_beam(self) -> int | None:
        """The narrowest ``efConstruction`` of the HNSW graphs of the index and the document index."""
        return construction_beam([self.index, self.doc_index])

    def calibration_grid(self) -> tuple[str, dict[str, Sequence[Any]]] | None:
        """``doc_index`` (its candidate floor), ``ivf`` (over-fetch × probed lists, up to nlist), ``hnsw`` (beam
        lower bound, the stored efSearch among them, × over-fetch), ``approximate`` (over-fetch); None for flat."""
        if self.doc_index is not None:
            return "doc_index", {"min_doc_candidates": MIN_DOC_CANDIDATES}
        approx = self.approximate
        if not approx.active:
            return None
        if approx._ivf is not None:
            nlist = int(approx._ivf.nlist)
            probes = [2 ** i for i in range(0, int(math.log2(nlist)) + 1)] + ([nlist] if nlist & (nlist - 1) else [])
            return "ivf", {"overfetch": IVF_OVERFETCH, "nprobe": probes}
        if approx._hnsw is not None:
            stored = int(approx.ef_search or approx._hnsw.efSearch)
            return "hnsw", {"ef_search": sorted({stored, *EF_SEARCH}), "overfetch": OVERFETCH}
        return "approximate", {"overfetch": OVERFETCH}

    def set_search_knob(self, name: str, value: Any) -> None:
        """``overfetch``, ``ef_search``, ``nprobe``, ``doc_candidates``, ``min_doc_candidates``: the
        :class:`ApproximateSearch` fields of those names."""
        if name not in FAISS_SEARCH_KNOBS:
            raise ConfigError(f"the Faiss backend has no search knob {name!r}; known: {', '.join(FAISS_SEARCH_KNOBS)}")
        setattr(self.approximate, name, value)

    def search(self, q_reps: np.ndarray, k: int, aggregator: Aggregator) -> tuple[np.ndarray, np.ndarray]:
        """Top-k documents for each query: (doc indices (Q, k), -1 padded; scores (Q, k), -inf padded); ``k`` is
        capped at the number of documents (:func:`~multiview_plugin.search._backend.capped_depth`)."""
        k = capped_depth(k, len(self.docids))
        q_reps = np.ascontiguousarray(q_reps, dtype=np.float32)
        if q_reps.ndim != 2 or q_reps.shape[1] != self.dim:
            raise ConfigError(f"query vectors have shape {q_reps.shape}, the index expects (N, {self.dim})")
        bad = nonfinite_rows(q_reps)
        if len(bad):  # Faiss would return no hits for them: the queries would vanish from the run
            raise NonFiniteVectorsError(f"{len(bad)} query vectors hold NaN or infinite values (rows "
                                        f"{bad[:5].tolist()}); the run would silently lack those queries")
        n_q, ntotal = len(q_reps), self.index.ntotal
        k_docs = min(k, len(self.docids))
        if self.doc_index is not None and aggregator.exact_with_distinct_k:
            return self._search_doc_candidates(q_reps, k)
        if not n_q:
            return np.full((0, k), -1, dtype=np.int64), np.full((0, k), -np.inf, dtype=np.float32)
        out_doc = out_score = None  # the first pass's answers; widened queries overwrite their rows
        todo = np.arange(n_q)
        approx = self.approximate.active
        rescore = approx and self.approximate.can_rescore and aggregator.exact_with_distinct_k
        fetch = aggregator.initial_fetch(k, self.mean_views)
        fetch = min(ntotal, math.ceil(fetch * self.approximate.overfetch) if approx else fetch)
        while len(todo):
            self.approximate.prepare(fetch, ntotal)
            batch = q_reps if out_doc is None else q_reps[todo]
            scores, rows = self.index.search(batch, fetch)
            exhausted = (rows < 0).any(axis=1)
            docs = np.where(rows >= 0, self.row_doc[np.maximum(rows, 0)], -1) if exhausted.any() else self.row_doc[rows]
            if rescore:
                doc, score, found = self._rescored(batch, scores, docs, k, aggregator)
            else:
                doc, score, found = aggregator.aggregate(scores, docs, k)
            if out_doc is None:
                out_doc, out_score = doc, score
            else:
                out_doc[todo], out_score[todo] = doc, score
            # Widen only where fewer than k distinct documents came back and the index had more to give
            # (an approximate index's -1 rows mean its probed lists or beam ran dry, not the index: widen it).
            exhausted = np.full(len(todo), fetch >= ntotal) if approx else exhausted | (fetch >= ntotal)
            todo = todo[(found < k_docs) & ~exhausted] if aggregator.exact_with_distinct_k else todo[:0]
            last_fetch, fetch = fetch, min(ntotal, fetch * 2)
        short = int(((out_doc >= 0).sum(axis=1) < k_docs).sum())
        if short:
            why = ("the whole index was fetched" if last_fetch >= ntotal else
                   f"{aggregator.name} aggregation does not widen its fetch of {last_fetch} vectors")
            logger.warning("%d of %d queries got fewer than %d distinct documents: %s", short, n_q, k_docs, why)
        return out_doc, out_score

    def _search_doc_candidates(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Candidates from the document index (top doc_candidates × k), ranked by max-sim over all their views.

        Failure mode: a document whose views' mean is far from the query but one view is close is missed when
        it falls outside the candidates (``bench/ann.py`` measures the recall this keeps).
        """
        n_docs = len(self.docids)
        depth = min(n_docs, max(k, self.approximate.min_doc_candidates,
                                 math.ceil(self.approximate.doc_candidates * k)))
        hnsw = _find_hnsw(self.doc_index)
        if hnsw is not None:
            hnsw.efSearch = max(self.approximate.ef_search or 0, depth)
        _, cand = self.doc_index.search(q, depth)
        exact = self.rescore_docs(q, cand)
        order = np.argsort(-exact, axis=1, kind="stable")[:, :k]
        out_doc = np.full((len(q), k), -1, dtype=np.int64)
        out_score = np.full((len(q), k), -np.inf, dtype=np.float32)
        top = np.take_along_axis(cand, order, axis=1)
        top_score = np.take_along_axis(exact, order, axis=1)
        out_doc[:, :order.shape[1]] = np.where(np.isfinite(top_score), top, -1)
        out_score[:, :order.shape[1]] = top_score
        short = int(((out_doc >= 0).sum(axis=1) < min(k, n_docs)).sum())
        if short:
            logger.warning("%d of %d queries got fewer than %d distinct documents: the document index returned "
                           "fewer than %d candidates (raise --doc_candidates or --ef_search)", short, len(q),
                           min(k, n_docs), depth)
        return out_doc, out_score

    def _rescored(self, q: np.ndarray, scores: np.ndarray, docs: np.ndarray, k: int, aggregator: Aggregator
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Max aggregation with every candidate document re-scored over all its (reconstructed) views."""
        cand, _, found = aggregator.aggregate(scores, docs, docs.shape[1])  # every distinct fetched document
        width = max(1, int(found.max())) if len(found) else 1
        cand = cand[:, :width]
        exact = self.rescore_docs(q, cand)
        order = np.argsort(-exact, axis=1, kind="stable")[:, :k]
        out_doc = np.full((len(q), k), -1, dtype=np.int64)
        out_score = np.full((len(q), k), -np.inf, dtype=np.float32)
        out_doc[:, :order.shape[1]] = np.take_along_axis(cand, order, axis=1)
        out_score[:, :order.shape[1]] = np.take_along_axis(exact, order, axis=1)
        return out_doc, out_score, found

    def rescore_docs(self, q: np.ndarray, cand: np.ndarray, max_floats: int = 1 << 24) -> np.ndarray:
        """Max-sim of each query with each candidate document (Q, C) over all its views; -inf where cand is -1.

        Views are read from the re-scoring store where there is one, else straight from the index's storage where
        it is a plain array (Flat, SQfp16), scored one query at a time by :func:`_row_sims` in file order, never
        gathered whole (an inner-product Flat index computes them in place instead); else they are reconstructed,
        each needed row once per chunk of queries, the chunks keeping the gathered (chunk, C, views, dim) block
        under ``max_floats`` floats.
        """
        valid_doc = cand >= 0
        safe = np.where(valid_doc, cand, 0)
        views = int(self.doc_views.max()) if len(self.doc_views) else 1
        offs = np.arange(views)
        rows = self.doc_start[safe][..., None] + offs  # (Q, C, V)
        valid = valid_doc[..., None] & (offs < self.doc_views[safe][..., None])
        rows = np.where(valid, rows, 0)
        if self._storage is None and self.rescore_views is None:  # with a store the index's own codes go unread
            self._storage = _storage_view(self.index)
            flat = faiss.downcast_index(self.index)
            self._flat_ip = flat if (isinstance(flat, faiss.IndexFlat)
                                     and flat.metric_type == faiss.METRIC_INNER_PRODUCT) else None
        out = np.empty(cand.shape, dtype=np.float32)
        source = self.rescore_views if self.rescore_views is not None else self._storage
        if not self._flat_ip and source is not False:  # a store, or the index's own plain array
            for j in range(len(q)):
                out[j] = np.where(valid[j], _row_sims(source, rows[j], q[j]), -np.inf).max(axis=1)
            return out
        step = max(1, max_floats // max(1, cand.shape[1] * views * self.dim))
        for i in range(0, len(q), step):
            chunk = rows[i:i + step]
            qc = np.ascontiguousarray(q[i:i + step])
            if self._flat_ip:  # Faiss computes the inner products with the listed rows in place (no gather)
                flat_rows = np.ascontiguousarray(chunk.reshape(len(chunk), -1), dtype=np.int64)
                sims = np.empty(flat_rows.shape, dtype=np.float32)
                self._flat_ip.compute_distance_subset(len(chunk), faiss.swig_ptr(qc), flat_rows.shape[1],
                                                      faiss.swig_ptr(sims), faiss.swig_ptr(flat_rows))
                out[i:i + step] = np.where(valid[i:i + step], sims.reshape(chunk.shape), -np.inf).max(axis=2)
                continue
            uniq, inverse = np.unique(chunk, return_inverse=True)  # each needed row reconstructed once
            block = np.asarray(self.index.reconstruct_batch(uniq.astype(np.int64)), dtype=np.float32)
            block = block.reshape(len(uniq), self.dim)[inverse.reshape(len(chunk), -1)]
            sims = np.matmul(block, q[i:i + step, :, None])[..., 0].reshape(chunk.shape)
            out[i:i + step] = np.where(valid[i:i + step], sims, -np.inf).max(axis=2)
        return out


def _row_sims(source: np.ndarray, rows: np.ndarray, q: np.ndarray, block: int = 1024,
              prefetch: bool = True) -> np.ndarray:
    """``q · source[r]`` for every row number ``r`` of ``rows`` (any shape), in float32: rows read in file order,
    ``block`` at a time, cast by torch. numpy casts float16 one element at a time, and a gathered float32 copy of
    every row is a fresh allocation as large as the rows (bench/rescore_speed.log: that way was 7.35x slower at 1,600
    documents of 8 views, 9.74x at 73). A memory-mapped store not in memory has its rows' pages read ahead, all
    at once (``prefetch``, :func:`~multiview_plugin.index.rescore.prefetch_rows`)."""
    flat = rows.reshape(-1)
    order = np.argsort(flat, kind="stable")
    in_order = np.ascontiguousarray(flat[order], dtype=np.int64)
    if prefetch:
        prefetch_rows(source, in_order)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a read-only memory map: torch only reads it
        src = torch.from_numpy(source)
    idx = torch.from_numpy(in_order)
    tq = torch.from_numpy(np.ascontiguousarray(q, dtype=np.float32))
    sims = torch.empty(len(flat), dtype=torch.float32)
    for lo in range(0, len(flat), block):
        torch.mv(src.index_select(0, idx[lo:lo + block]).float(), tq, out=sims[lo:lo + block])
    out = np.empty(len(flat), dtype=np.float32)
    out[order] = sims.numpy()
    return out.reshape(rows.shape)


def check_depth(k: object) -> int:
    """``k`` (documents per query) when it is a whole number >= 1; ``TypeError`` / ``ValueError`` otherwise."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k: expected an int >= 1 (documents per query), got {type(k).__name__} ({k!r})")
    if k < 1:  # ConfigError is a ValueError: a driver reports it in one line
        raise ConfigError(f"k: expected an int >= 1 (documents per query), got {k}")
    return int(k)


class MultiVectorSearcher:
    """Search an index folder written by :func:`multiview_plugin.search.build_index`.

    Parameters
    ----------
    index_dir : the folder (``index``, ``docid``, ``multiview.json``).
    query_encoder : a saved model folder or a loaded :class:`MultiViewEncoder`, used to encode query strings;
        None when searching with pre-encoded query vectors only.
    aggregation : ``max``, ``hasans`` or an :class:`Aggregator` (default: the index's recorded aggregation:
        ``hasans`` for dcsr indexes, else ``max``).
    aggregation_options : keyword arguments of the aggregator, e.g. ``{"temperature": 0.05, "fetch_docs": 100}``
        for ``hasans`` (its temperature defaults to the model's, recorded in the index).
    nprobe, ef_search : lower bounds for the search-time knobs of IVF / HNSW indexes (they are raised with the
        fetch depth; see the module docstring).
    overfetch, rescore : approximate indexes only: fetch depth multiplier, and whether candidate documents are
        re-scored over all their views (see :class:`ApproximateSearch`).
    doc_candidates : folders with a ``doc_index``, and Qdrant folders: candidate documents per result (see
        :class:`ApproximateSearch`).
        ``overfetch``, ``ef_search``, ``nprobe`` and ``doc_candidates`` left None take the settings calibrated when
        the index was built (``multiview.json`` ``search_defaults``, :mod:`multiview_plugin.search.calibrate`),
        else the class defaults.
    exact : Qdrant folders: score every document over all its views (a full scan) instead of taking candidates.
    qdrant_url : Qdrant folders: the server's address, overriding the one recorded at build time.
    qdrant_timeout : Qdrant servers: whole seconds one request may take (default 10).
    corpus, pseudo_queries : where explanations read sentence texts (a ``{docid: text}`` or corpus file) and DCE's
        pseudo-queries; default: the files recorded when the index was encoded.

    Examples
    --------
    >>> searcher = MultiVectorSearcher("indexes/squad-mvr", "runs/mvr")          # doctest: +SKIP
    >>> hits = searcher.search("who won super bowl 50?", k=10)                   # doctest: +SKIP
    >>> hits[0].docid, hits[0].score                                             # doctest: +SKIP
    """

    def __init__(
        self,
        index_dir: str | os.PathLike,
        query_encoder: Any = None,
        aggregation: str | Aggregator | None = None,
        nprobe: int | None = None,
        ef_search: int | None = None,
        device: str | None = None,
        query_batch_size: int = DEFAULT_QUERY_BATCH_SIZE,
        aggregation_options: dict[str, Any] | None = None,
        corpus: Any = None,
        pseudo_queries: str | None = None,
        overfetch: float | None = None,
        rescore: bool | None = None,
        doc_candidates: float | None = None,
        exact: bool = False,
        qdrant_url: str | None = None,
        qdrant_timeout: int | None = None,
    ):
        index_dir = Path(index_dir)
        self.index_dir = index_dir
        self._explain_sources = (corpus, pseudo_queries)
        self._explainer: ViewExplainer | None = None
        self.meta = IndexMeta.load(index_dir)
        if self.meta.backend == "qdrant":
            from multiview_plugin.search._qdrant import open_qdrant_store

            self.store = open_qdrant_store(index_dir, self.meta, exact, doc_candidates, ef_search, qdrant_url,
                                           qdrant_timeout)
        else:
            self.store = self._faiss_store(index_dir, overfetch, ef_search, nprobe, rescore, doc_candidates)
        options = {k: v for k, v in (aggregation_options or {}).items() if v is not None}
        options.setdefault("temperature", self.meta.extra.get("temperature"))
        if aggregation is None and self.meta.aggregation not in AGGREGATORS:
            raise ShardFormatError(f"{index_dir / META_FILE}: unknown aggregation {self.meta.aggregation!r}; known: "
                                   f"{', '.join(sorted(AGGREGATORS))}")
        self.aggregator = get_aggregator(aggregation or self.meta.aggregation, **options)
        self.query_batch_size = query_batch_size
        self.encoder = None
        if query_encoder is not None:
            from multiview_plugin.modeling.base import MultiViewEncoder
            from multiview_plugin.modeling.persistence import load_encoder

            encoder = query_encoder if isinstance(query_encoder, MultiViewEncoder) else load_encoder(query_encoder)
            name = "the query encoder" if encoder is query_encoder else str(query_encoder)
            if self.meta.model_fingerprint is not None:  # queries of another model would score nonsense
                check_same_model((str(index_dir / META_FILE), self.meta.model_fingerprint),
                                 (name, model_fingerprint(encoder)))
            else:
                logger.warning("%s records no model fingerprint (built from shards without sidecars, or by an "
                               "older version): cannot check that %s made its vectors", index_dir / META_FILE, name)
            dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
            self.encoder = encoder.to(dev).eval()

    def _faiss_store(self, index_dir: Path, overfetch: float | None, ef_search: int | None, nprobe: int | None,
                     rescore: bool | None, doc_candidates: float | None) -> FaissStore:
        calibrated = self.meta.search_defaults or {}  # explicit arguments win over the calibrated settings
        approximate = ApproximateSearch(
            overfetch=overfetch if overfetch is not None else calibrated.get("overfetch", ApproximateSearch.overfetch),
            ef_search=ef_search if ef_search is not None else calibrated.get("ef_search"),
            nprobe=nprobe if nprobe is not None else calibrated.get("nprobe"), rescore=rescore,
            doc_candidates=doc_candidates if doc_candidates is not None
            else calibrated.get("doc_candidates", ApproximateSearch.doc_candidates),
            min_doc_candidates=calibrated.get("min_doc_candidates", ApproximateSearch.min_doc_candidates))
        index = read_faiss_index(index_dir / INDEX_FILE)
        if index.d != self.meta.dim:
            raise ShardFormatError(f"{index_dir / INDEX_FILE}: holds {index.d}-dim vectors, {META_FILE} says "
                                   f"{self.meta.dim}")
        lookup = _read_docids(index_dir, index.ntotal, self.meta)
        views = open_rescore_store(index_dir, self.meta, index.ntotal) if self.meta.rescore_store else None
        doc_index = (read_faiss_index(index_dir / DOC_INDEX_FILE) if (index_dir / DOC_INDEX_FILE).is_file()
                     else None)
        if doc_index is not None and (doc_index.ntotal != self.meta.num_docs or doc_index.d != index.d):
            raise ShardFormatError(f"{index_dir / DOC_INDEX_FILE}: {doc_index.ntotal} vectors of dim {doc_index.d}, "
                                   f"for {self.meta.num_docs} documents of dim {index.d}")
        store = FaissStore.from_lookup(index, lookup, self.meta.multi_vector, str(index_dir / DOCID_FILE),
                                       approximate, doc_index, views)
        if len(store.docids) != self.meta.num_docs:
            raise ShardFormatError(f"{index_dir / DOCID_FILE}: names {len(store.docids)} documents, "
                                   f"{META_FILE} says {self.meta.num_docs}")
        for name in FINGERPRINTED_FILES:  # each as built, not another of the same shape (cheap: sampled)
            check_index_file(index_dir, self.meta, name)
        return store

    @property
    def num_docs(self) -> int:
        return len(self.store.docids)

    def encode(self, queries: Sequence[str]) -> np.ndarray:
        """Query vectors (Q, D) from the query encoder."""
        if self.encoder is None:
            raise ConfigError("this searcher has no query encoder: pass query_encoder= or search with vectors")
        queries = list(queries)
        for i, text in enumerate(queries):
            if not isinstance(text, str):
                raise TypeError(f"queries[{i}]: expected a str, got {type(text).__name__} ({text!r:.40})")
        return self.encoder.encode_queries(queries, self.query_batch_size)

    def search_vectors(self, q_reps: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised core: (docids (Q, k) object array with None padding, scores (Q, k)). ``k``: a whole number
        >= 1 (``ValueError`` otherwise: ``k=0`` used to return one hit)."""
        return self.store.search_docids(q_reps, check_depth(k), self.aggregator)

    def search(self, query: str | np.ndarray, k: int = 10, explain: bool = False) -> list[Hit]:
        """Top-k documents; ``explain=True`` fills each hit's :class:`Explanation` (its best view and what
        that view is)."""
        check_depth(k)
        if not isinstance(query, (str, np.ndarray, list, tuple)):
            raise TypeError(f"query: expected a str or a vector, got {type(query).__name__}")
        q = self.encode([query]) if isinstance(query, str) else np.asarray(query, dtype=np.float32).reshape(1, -1)
        return self._hits(q, *self.search_vectors(q, k), explain)[0]

    def batch_search(
        self, queries: Sequence[str] | np.ndarray, q_ids: Sequence[str], k: int = 10, threads: int = 1,
        explain: bool = False,
    ) -> dict[str, list[Hit]]:
        check_depth(k)
        if isinstance(queries, str):
            raise TypeError("queries: expected a list of query strings (or a (Q, dim) array), got one str")
        if len(queries) != len(q_ids):
            raise ConfigError(f"{len(queries)} queries but {len(q_ids)} query ids")
        if threads > 0:
            faiss.omp_set_num_threads(threads)
        q = queries if isinstance(queries, np.ndarray) else self.encode(list(queries))
        return dict(zip(q_ids, self._hits(q, *self.search_vectors(q, k), explain)))

    @property
    def explainer(self) -> ViewExplainer:
        """Explains hits of this index (see :mod:`multiview_plugin.search.explain`)."""
        if self._explainer is None:
            views = self.meta.extra.get(VIEW_INFO_KEY)
            rows_path = self.index_dir / INDEX_VIEWS_FILE
            rows = np.load(rows_path, mmap_mode="r") if views and views.get("rows") and rows_path.is_file() else None
            self._explainer = ViewExplainer(self.store, views, rows, *self._explain_sources)
        return self._explainer

    def explain(self, q_reps: np.ndarray, docids: np.ndarray) -> list[list[Explanation | None]]:
        """Explanations of (Q, k) hits (e.g. from :meth:`search_vectors`) for the (Q, D) query vectors."""
        return self.explainer.explain(q_reps, docids)

    def _hits(self, q_reps: np.ndarray, docids: np.ndarray, scores: np.ndarray, explain: bool) -> list[list[Hit]]:
        explanations = self.explain(q_reps, docids) if explain else [[None] * docids.shape[1]] * len(docids)
        return [[Hit(d, float(s), explanation=e) for d, s, e in zip(row_d, row_s, row_e) if d is not None]
                for row_d, row_s, row_e in zip(docids.tolist(), scores.tolist(), explanations)]


def open_rescore_store(index_dir: Path, meta: IndexMeta, ntotal: int) -> np.ndarray:
    """The folder's re-scoring store (``multiview.json`` ``rescore_store``), memory-mapped read-only; missing,
    unreadable (truncated) or of another shape or dtype than recorded is a one-line error naming the file and
    what was expected."""
    record = meta.rescore_store or {}
    rows, dim, dtype = record["rows"], record["dim"], record["dtype"]
    path = index_dir / record.get("file", RESCORE_STORE_FILE)
    expected = f"expected {rows} rows x {dim} {dtype}"
    if rows != ntotal or dim != meta.dim:
        raise ShardFormatError(f"{index_dir / META_FILE}: rescore_store records {rows} rows x {dim}, the index holds "
                               f"{ntotal} x {meta.dim}")
    if not path.is_file():
        raise ConfigError(f"{path}: the re-scoring store {META_FILE} records is missing ({expected}); rebuild the "
                          "index with --rescore_store")
    try:
        views = np.load(path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as err:
        why = " ".join(str(err).split())
        raise ShardFormatError(f"{path}: not a readable .npy (truncated or corrupt?): {why}; {expected}") from None
    if views.shape != (rows, dim) or views.dtype != np.dtype(dtype):
        raise ShardFormatError(f"{path}: holds {' x '.join(map(str, views.shape))} {views.dtype}, {expected}")
    advise_random_reads(views)  # a page fault reads its page, not 8 MB around it (bench/rescore_cold.log)
    return views


def _read_docids(index_dir: Path, ntotal: int, meta: IndexMeta) -> list[str]:
    """The docid file's lines, checked against the Faiss index and ``multiview.json``: one non-empty line per
    vector (a shifted line would credit every later vector to the wrong document)."""
    path = index_dir / DOCID_FILE
    try:
        lookup = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise ShardFormatError(f"{path}: not valid UTF-8 ({err.reason})") from None
    if len(lookup) != ntotal or ntotal != meta.num_vectors:
        raise ShardFormatError(f"{path}: {len(lookup)} lines, but {index_dir / INDEX_FILE} holds {ntotal} vectors "
                               f"and {META_FILE} says {meta.num_vectors}")
    if lookup and not min(map(len, lookup)):
        raise ShardFormatError(f"{path} line {lookup.index('') + 1}: empty (one docid per vector expected)")
    return lookup


def search_batched(store: SearchBackend, q_reps: np.ndarray, k: int, aggregator: Aggregator,
                   batch_size: int | None = None, progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`SearchBackend.search_docids` over ``batch_size`` queries at a time (bounds the fetch arrays);
    ``batch_size`` None, 0 or negative (Tevatron's ``--batch_size -1``): all queries in one batch."""
    step = batch_size if batch_size and batch_size > 0 else max(1, len(q_reps))
    starts = progress_bar(range(0, len(q_reps), step), desc="search", unit="batch", enabled=progress)
    parts = [store.search_docids(q_reps[i:i + step], k, aggregator) for i in starts]
    if not parts:
        return np.empty((0, k), dtype=object), np.empty((0, k), dtype=np.float32)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def merge_topk(parts: Sequence[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-shard (docids (Q, k) None-padded, scores (Q, k) -inf-padded) into the top-k, in the one ranking
    order of every search path (:func:`~multiview_plugin.search._backend.order_ties`: score descending, then docid
    ascending), so the ranking is that of one exact index over all the shards, ties included, whatever the shards'
    order. Used by :func:`search_shards` and :class:`~multiview_plugin.search.sharded.ShardedSearcher`."""
    if not parts:
        raise ConfigError("no shards to merge")
    ids = np.concatenate([p[0] for p in parts], axis=1)
    scores = np.concatenate([p[1] for p in parts], axis=1).astype(np.float32, copy=False)
    ids, scores = order_ties(ids, scores)
    out_ids, out_scores = ids[:, :k], scores[:, :k]
    if out_ids.shape[1] < k:  # fewer than k columns in all (k larger than every shard's answer width)
        pad = k - out_ids.shape[1]
        out_ids = np.concatenate([out_ids, np.full((len(out_ids), pad), None, dtype=object)], axis=1)
        out_scores = np.concatenate([out_scores, np.full((len(out_ids), pad), -np.inf, np.float32)], axis=1)
    return out_ids, out_scores


def search_shards(
    q_reps: np.ndarray, shard_paths: Sequence[str | os.PathLike], k: int, aggregation: str = "max",
    batch_size: int | None = None, unsafe_pickle: bool = False, queries_from: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Tevatron's ``--shard_search``: search each shard alone, then merge the per-shard top-k.

    Each shard is loaded once (memory: one shard) and searched for all queries, ``batch_size`` at a time.
    Exact for max aggregation because a document's vectors never span shards: the ranking is that of one index over
    the shards, ties included (equal scores: by docid, :func:`merge_topk`). Returns (docids, scores).
    ``queries_from``: the query file, named when the queries' dim differs from a shard's.
    """
    aggregator = get_aggregator(aggregation)
    if not aggregator.exact_with_distinct_k:
        raise ConfigError(f"shard-by-shard search merges per-shard top-k, exact only for max aggregation, not "
                          f"{aggregator.name}")
    all_ids, all_scores, seen = [], [], set()
    for path in shard_paths:
        info = read_info(path)
        if info is not None and info.num_vectors == 0:
            continue  # an empty shard (more shards than documents)
        store = FaissStore.from_shards([path], unsafe_pickle)
        check_query_dim(queries_from or "the queries", q_reps, store.dim, str(path))
        dup = seen.intersection(store.docids.tolist())
        if dup:
            raise ShardFormatError(f"{path}: docids also in an earlier shard: {sorted(dup)[:5]}")
        seen.update(store.docids.tolist())
        ids, score = search_batched(store, q_reps, k, aggregator, batch_size)
        all_ids.append(ids)
        all_scores.append(score)
    return merge_topk(list(zip(all_ids, all_scores)), k)
