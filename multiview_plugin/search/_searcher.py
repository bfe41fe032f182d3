"""Searching a multi-vector index: Pyserini's ``search`` / ``batch_search`` API over documents with many vectors.

The index returns vectors; documents are ranked by an aggregator (max by default). The fetch depth starts at
``k × mean views per document`` and widens, for the queries that still have fewer than k distinct documents,
until they have k or the index is exhausted. For max aggregation over an exact (flat) index this is exact:
a document absent from the top F vectors scores at most the F-th vector's score, below every document found.
With a fixed number of views K the first fetch, k·K, always suffices (at most (k−1)·K vectors can outrank the
k-th document's best one).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch
from tqdm import tqdm

from multiview_plugin.encoding.fingerprint import model_fingerprint
from multiview_plugin.encoding.shard_sets import check_same_model
from multiview_plugin.encoding.shards import ShardFormatError, read_info, read_shard, split_lookup
from multiview_plugin.encoding.view_info import INDEX_VIEWS_FILE, VIEW_INFO_KEY
from multiview_plugin.errors import ConfigError
from multiview_plugin.search._index import DOCID_FILE, INDEX_FILE, META_FILE, IndexMeta, contiguous_docs
from multiview_plugin.search.aggregators import Aggregator, get_aggregator
from multiview_plugin.search.explain import Explanation, ViewExplainer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hit:
    """A ranked document, with the fields of Pyserini's ``DenseSearchResult``."""

    docid: str
    score: float
    raw: str | None = None
    explanation: Explanation | None = None  # with explain=True: the matching view and what it is


class VectorStore:
    """A Faiss index whose rows are document views, plus the row → document map."""

    def __init__(self, index: faiss.Index, docids: np.ndarray, row_doc: np.ndarray, mean_views: float):
        if index.ntotal != len(row_doc):
            raise ConfigError(f"index has {index.ntotal} rows but {len(row_doc)} docid lines")
        self.index = index
        self.docids = docids
        self.row_doc = row_doc.astype(np.int64)
        self.mean_views = max(1.0, mean_views)

    @classmethod
    def from_lookup(cls, index: faiss.Index, lookup: Sequence[str], multi_vector: bool, where: str) -> VectorStore:
        docids, row_doc = contiguous_docs(split_lookup(list(lookup), multi_vector), where)
        return cls(index, docids, row_doc, len(row_doc) / max(1, len(docids)))

    @classmethod
    def from_shards(cls, paths: Sequence[str | os.PathLike], unsafe_pickle: bool = False) -> VectorStore:
        """An in-memory flat index over encoded shards (Tevatron's search without an index folder).

        Empty shards add nothing; ``unsafe_pickle`` loads with plain pickle (trusted files only)."""
        index, lookup, multi = None, [], False
        for path in paths:
            reps, lk, info = read_shard(path, unsafe_pickle)
            if info is not None and info.is_query:
                raise ShardFormatError(f"{path} holds queries, not passages")
            multi = multi or (info.multi_vector if info is not None else False)
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

    @property
    def dim(self) -> int:
        return self.index.d

    def search(self, q_reps: np.ndarray, k: int, aggregator: Aggregator) -> tuple[np.ndarray, np.ndarray]:
        """Top-k documents for each query: (doc indices (Q, k), -1 padded; scores (Q, k), -inf padded)."""
        q_reps = np.ascontiguousarray(q_reps, dtype=np.float32)
        if q_reps.ndim != 2 or q_reps.shape[1] != self.dim:
            raise ConfigError(f"query vectors have shape {q_reps.shape}, the index expects (N, {self.dim})")
        n_q, ntotal = len(q_reps), self.index.ntotal
        k_docs = min(k, len(self.docids))
        out_doc = np.full((n_q, k), -1, dtype=np.int64)
        out_score = np.full((n_q, k), -np.inf, dtype=np.float32)
        todo = np.arange(n_q)
        fetch = min(ntotal, aggregator.initial_fetch(k, self.mean_views))
        while len(todo):
            scores, rows = self.index.search(q_reps[todo], fetch)
            exhausted = (rows < 0).any(axis=1)
            docs = np.where(rows >= 0, self.row_doc[np.maximum(rows, 0)], -1) if exhausted.any() else self.row_doc[rows]
            doc, score, found = aggregator.aggregate(scores, docs, k)
            out_doc[todo], out_score[todo] = doc, score
            # Widen only where fewer than k distinct documents came back and the index had more to give.
            exhausted |= fetch >= ntotal
            todo = todo[(found < k_docs) & ~exhausted] if aggregator.exact_with_distinct_k else todo[:0]
            fetch = min(ntotal, fetch * 2)
        return out_doc, out_score

    def search_docids(self, q_reps: np.ndarray, k: int, aggregator: Aggregator) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`search`, with docids: (object array (Q, k), None padded; scores (Q, k))."""
        doc, score = self.search(q_reps, k, aggregator)
        return np.where(doc >= 0, self.docids[np.maximum(doc, 0)], None), score


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
    nprobe, ef_search : search-time knobs of IVF / HNSW indexes.
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
        query_batch_size: int = 64,
        aggregation_options: dict[str, Any] | None = None,
        corpus: Any = None,
        pseudo_queries: str | None = None,
    ):
        index_dir = Path(index_dir)
        self.index_dir = index_dir
        self._explain_sources = (corpus, pseudo_queries)
        self._explainer: ViewExplainer | None = None
        self.meta = IndexMeta.load(index_dir)
        index = faiss.read_index(str(index_dir / INDEX_FILE))
        if nprobe is not None:
            faiss.extract_index_ivf(index).nprobe = nprobe
        if ef_search is not None:
            faiss.downcast_index(index).hnsw.efSearch = ef_search
        lookup = (index_dir / DOCID_FILE).read_text(encoding="utf-8").splitlines()
        self.store = VectorStore.from_lookup(index, lookup, self.meta.multi_vector, str(index_dir / DOCID_FILE))
        options = {k: v for k, v in (aggregation_options or {}).items() if v is not None}
        options.setdefault("temperature", self.meta.extra.get("temperature"))
        self.aggregator = get_aggregator(aggregation or self.meta.aggregation, **options)
        self.query_batch_size = query_batch_size
        self.encoder = None
        if query_encoder is not None:
            from multiview_plugin.modeling.base import MultiViewEncoder, load_encoder

            encoder = query_encoder if isinstance(query_encoder, MultiViewEncoder) else load_encoder(query_encoder)
            if self.meta.model_fingerprint is not None:  # queries of another model would score nonsense
                name = "the query encoder" if encoder is query_encoder else str(query_encoder)
                check_same_model((str(index_dir / META_FILE), self.meta.model_fingerprint),
                                 (name, model_fingerprint(encoder)))
            dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
            self.encoder = encoder.to(dev).eval()

    @property
    def num_docs(self) -> int:
        return len(self.store.docids)

    def encode(self, queries: Sequence[str]) -> np.ndarray:
        """Query vectors (Q, D) from the query encoder."""
        if self.encoder is None:
            raise ConfigError("this searcher has no query encoder: pass query_encoder= or search with vectors")
        return self.encoder.encode_queries(list(queries), self.query_batch_size)

    def search_vectors(self, q_reps: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised core: (docids (Q, k) object array with None padding, scores (Q, k))."""
        return self.store.search_docids(q_reps, k, self.aggregator)

    def search(self, query: str | np.ndarray, k: int = 10, explain: bool = False) -> list[Hit]:
        """Top-k documents; ``explain=True`` fills each hit's :class:`Explanation` (its best view and what
        that view is)."""
        q = self.encode([query]) if isinstance(query, str) else np.asarray(query, dtype=np.float32).reshape(1, -1)
        return self._hits(q, *self.search_vectors(q, k), explain)[0]

    def batch_search(
        self, queries: Sequence[str] | np.ndarray, q_ids: Sequence[str], k: int = 10, threads: int = 1,
        explain: bool = False,
    ) -> dict[str, list[Hit]]:
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


def search_batched(store: VectorStore, q_reps: np.ndarray, k: int, aggregator: Aggregator,
                   batch_size: int | None = None, progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`VectorStore.search_docids` over ``batch_size`` queries at a time (bounds the fetch arrays);
    ``batch_size`` None, 0 or negative (Tevatron's ``--batch_size -1``): all queries in one batch."""
    step = batch_size if batch_size and batch_size > 0 else max(1, len(q_reps))
    starts = tqdm(range(0, len(q_reps), step), desc="search", unit="batch", disable=not progress)
    parts = [store.search_docids(q_reps[i:i + step], k, aggregator) for i in starts]
    if not parts:
        return np.empty((0, k), dtype=object), np.empty((0, k), dtype=np.float32)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def search_shards(
    q_reps: np.ndarray, shard_paths: Sequence[str | os.PathLike], k: int, aggregation: str = "max",
    batch_size: int | None = None, unsafe_pickle: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Tevatron's ``--shard_search``: search each shard alone, then merge the per-shard top-k.

    Each shard is loaded once (memory: one shard) and searched for all queries, ``batch_size`` at a time.
    Exact for max aggregation because a document's vectors never span shards. Returns (docids, scores).
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
        store = VectorStore.from_shards([path], unsafe_pickle)
        dup = seen.intersection(store.docids.tolist())
        if dup:
            raise ShardFormatError(f"{path}: docids also in an earlier shard: {sorted(dup)[:5]}")
        seen.update(store.docids.tolist())
        ids, score = search_batched(store, q_reps, k, aggregator, batch_size)
        all_ids.append(ids)
        all_scores.append(score)
    ids, scores = np.concatenate(all_ids, axis=1), np.concatenate(all_scores, axis=1)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)
