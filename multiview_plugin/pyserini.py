"""Use multiview_plugin models and indexes from Pyserini (``pip install .[pyserini]``).

* :class:`MultiViewFaissSearcher` — a ``pyserini.search.faiss.FaissSearcher`` whose ``search`` / ``batch_search``
  over-fetch and collapse ``docid#j`` rows exactly like :class:`~multiview_plugin.search.MultiVectorSearcher`
  (max-sim by default, HasAns for dcsr indexes) and return Pyserini's own ``DenseSearchResult``.
* :class:`MultiViewQueryEncoder` — a Pyserini ``QueryEncoder`` wrapping any saved multiview model.
* :func:`hybrid_searcher` — dense + BM25 search with Pyserini's ``HybridSearcher`` calls (``search`` /
  ``batch_search``): a multiview index fused with BM25 from ``bm25s`` (no Pyserini needed) or from Pyserini's
  Lucene index (``lucene_index=``), by normalised score interpolation (weight ``alpha`` on the dense side) or
  reciprocal rank fusion (:mod:`multiview_plugin.search.hybrid`).
* :func:`write_encoded_queries` / ``python -m multiview_plugin.pyserini encode-queries`` — query vectors in the
  layout of Pyserini's ``--encoded-queries`` folders (``embedding.pkl``: a pandas frame of text and embedding),
  so stock ``python -m pyserini.search.faiss --max-passage`` searches our indexes.

Pyserini is imported only when one of these classes is first used. Supported: 0.2x (Java 11/17; ``QueryEncoder``
lives in ``pyserini.search.faiss``) and 1.x/2.x (Java 21; ``pyserini.encode.QueryEncoder``, extra constructor
arguments ``normalize_distances`` / ``faiss_device``, ``encode_batch`` used when present). Importing Pyserini's
search modules starts a JVM, and releases up to 1.x build an OpenAI client at import time: if
``OPENAI_API_KEY`` is unset, a placeholder is set (nothing here calls OpenAI).

Examples
--------
>>> from multiview_plugin.pyserini import MultiViewFaissSearcher                     # doctest: +SKIP
>>> searcher = MultiViewFaissSearcher("indexes/mvr", "runs/mvr")                      # doctest: +SKIP
>>> [(h.docid, round(h.score, 3)) for h in searcher.search("who won super bowl 50?", k=3)]  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)
__all__ = ["MultiViewFaissSearcher", "MultiViewQueryEncoder", "hybrid_searcher", "write_encoded_queries",  # noqa: F822
           "pyserini_version"]  # lazy (PEP 562)
_CLASSES: dict[str, type] = {}


def pyserini_version() -> str | None:
    """The installed Pyserini version, or None (without importing it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyserini")
    except PackageNotFoundError:
        return None


def _build() -> dict[str, type]:
    if _CLASSES:
        return _CLASSES
    if pyserini_version() is None:
        raise ImportError("multiview_plugin.pyserini needs Pyserini: pip install 'multiview_plugin[pyserini]' "
                          "(pyserini 0.2x runs on Java 11/17, 1.x+ needs Java 21)")
    if not os.environ.get("OPENAI_API_KEY"):
        os.environ["OPENAI_API_KEY"] = "unused-by-multiview-plugin"  # Pyserini <= 1.x builds a client at import
    import pyserini.search.faiss as psf

    try:
        from pyserini.encode import QueryEncoder as EncodeQueryEncoder
    except ImportError:  # pragma: no cover - very old releases
        EncodeQueryEncoder = object
    base_encoder = getattr(psf, "QueryEncoder", None) or EncodeQueryEncoder

    encoder_cls = _query_encoder_class(base_encoder)
    _CLASSES.update(MultiViewQueryEncoder=encoder_cls, MultiViewFaissSearcher=_searcher_class(psf, encoder_cls))
    return _CLASSES


def _query_encoder_class(base_encoder: type) -> type:
    """Pyserini's query-encoder interface over a saved multiview model (a class made once Pyserini is imported)."""
    from multiview_plugin.modeling.base import MultiViewEncoder
    from multiview_plugin.modeling.persistence import load_encoder

    class MultiViewQueryEncoder(base_encoder):
        """Encodes query strings with a saved multiview model (``encode`` → (D,), ``encode_batch`` → (N, D))."""

        def __init__(self, encoder_dir: str | os.PathLike | MultiViewEncoder, device: str | None = None,
                     batch_size: int = 64, **kwargs: Any):
            try:
                super().__init__()
            except TypeError:  # a base whose constructor wants arguments we do not use
                pass
            import torch

            model = encoder_dir if isinstance(encoder_dir, MultiViewEncoder) else load_encoder(encoder_dir)
            self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
            self.model = model.to(self.device).eval()
            self.batch_size = batch_size
            self.has_model, self.has_encoded_query = True, False

        def encode_batch(self, queries: Sequence[str], **kwargs: Any) -> np.ndarray:
            return self.model.encode_queries(list(queries), self.batch_size)

        def encode(self, query: str, **kwargs: Any) -> np.ndarray:
            return self.encode_batch([query])[0]

    return MultiViewQueryEncoder


def _searcher_class(psf: Any, encoder_cls: type) -> type:
    """Pyserini's ``FaissSearcher`` subclass over a multiview index folder (made once Pyserini is imported)."""
    from multiview_plugin.search import FaissStore, MultiVectorSearcher

    class MultiViewFaissSearcher(psf.FaissSearcher):
        """Pyserini's ``FaissSearcher`` over a multiview index folder (``index``, ``docid``, ``multiview.json``).

        ``query_encoder`` is a saved model folder, a :class:`MultiViewQueryEncoder` or any Pyserini encoder.
        ``aggregation`` / ``aggregation_options`` are :class:`~multiview_plugin.search.MultiVectorSearcher`'s
        (default: the index's own). Other keyword arguments go to Pyserini's constructor where it has them
        (``normalize_distances``, ``faiss_device`` in 1.x+).
        """

        def __init__(self, index_dir: str | os.PathLike, query_encoder: Any, aggregation: str | None = None,
                     aggregation_options: dict | None = None, **kwargs: Any):
            if isinstance(query_encoder, (str, os.PathLike)):
                query_encoder = encoder_cls(query_encoder)
            self._aggregation = (aggregation, aggregation_options)
            accepted = inspect.signature(psf.FaissSearcher.__init__).parameters
            unknown = [k for k in kwargs if k not in accepted]
            if unknown:
                logger.warning("this Pyserini's FaissSearcher ignores %s", unknown)
            super().__init__(str(index_dir), query_encoder, **{k: v for k, v in kwargs.items() if k in accepted})

        def load_index(self, index_dir: str):
            """Called by Pyserini's constructor: our searcher reads the folder once; Pyserini sees the Faiss
            index and each row's plain docid."""
            aggregation, options = self._aggregation
            self.multiview = MultiVectorSearcher(index_dir, aggregation=aggregation, aggregation_options=options)
            store = self.multiview.store
            if not isinstance(store, FaissStore):
                from multiview_plugin.errors import ConfigError

                raise ConfigError(f"{index_dir} is a {store.kind} index, not a Faiss one: search it "
                                  "with multiview_plugin.search.MultiVectorSearcher (the same API) or driver.search")
            return store.index, store.docids[store.row_doc].tolist()

        def _vectors(self, queries: Any) -> np.ndarray:
            if isinstance(queries, np.ndarray):
                return queries.reshape(-1, self.dimension).astype(np.float32)
            if isinstance(queries, (str, dict)):
                queries = [queries]
            if all(isinstance(q, str) for q in queries) and hasattr(self.query_encoder, "encode_batch"):
                return np.asarray(self.query_encoder.encode_batch(list(queries)), dtype=np.float32)
            embs = [self.query_encoder.encode(**q) if isinstance(q, dict) else self.query_encoder.encode(q)
                    for q in queries]
            return np.vstack([np.asarray(e, dtype=np.float32).reshape(1, -1) for e in embs])

        def _results(self, docids: np.ndarray, scores: np.ndarray) -> list[list]:
            if getattr(self, "normalize_distances", False):
                scores = (1.0 + scores) / 2.0  # Pyserini 1.x's Lucene-style [0, 1] mapping
            return [[psf.DenseSearchResult(d, float(s)) for d, s in zip(row_d, row_s) if d is not None]
                    for row_d, row_s in zip(docids.tolist(), scores.tolist())]

        def search(self, query: Any, k: int = 10, threads: int = 1, remove_dups: bool = False,
                   return_vector: bool = False):
            if return_vector:
                raise NotImplementedError("return_vector (PRF) is not defined for multi-vector documents")
            import faiss

            faiss.omp_set_num_threads(threads)
            return self._results(*self.multiview.search_vectors(self._vectors(query), k))[0]

        def batch_search(self, queries: Any, q_ids: list[str], k: int = 10, threads: int = 1,
                         return_vector: bool = False):
            if return_vector:
                raise NotImplementedError("return_vector (PRF) is not defined for multi-vector documents")
            if len(queries) != len(q_ids):
                raise ValueError(f"{len(queries)} queries but {len(q_ids)} query ids")
            import faiss

            faiss.omp_set_num_threads(threads)
            return dict(zip(q_ids, self._results(*self.multiview.search_vectors(self._vectors(queries), k))))

    return MultiViewFaissSearcher


def __getattr__(name: str) -> type:  # PEP 562: Pyserini is imported on first use only
    if name in ("MultiViewFaissSearcher", "MultiViewQueryEncoder"):
        return _build()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def hybrid_searcher(index_dir: str | os.PathLike, query_encoder: Any, bm25_corpus: str | os.PathLike | None = None,
                    lucene_index: str | None = None, fusion: str = "interpolation", alpha: float | None = None,
                    depth: int | None = None, aggregation: str | None = None):
    """A :class:`~multiview_plugin.search.hybrid.HybridSearcher` over a multiview index folder and BM25.

    ``query_encoder``: a saved model folder (or a loaded model). BM25: ``bm25_corpus`` (a corpus file, searched
    with bm25s) or ``lucene_index`` (a Pyserini ``LuceneSearcher`` index name or folder; needs Pyserini and
    Java). ``alpha`` is the dense side's weight (1 = dense ranking, 0 = BM25 ranking; None: the hybrid module's
    ``DEFAULT_ALPHA``, equal weights); choose it on dev data. ``depth``: documents fetched from each side before
    fusing (None: the hybrid module's ``DEFAULT_DEPTH``).

    >>> s = hybrid_searcher("indexes/dcsr", "runs/dcsr", bm25_corpus="corpus.jsonl", alpha=0.4)  # doctest: +SKIP
    >>> [(h.docid, round(h.score, 3)) for h in s.search("who won super bowl 50?", k=3)]              # doctest: +SKIP
    """
    from multiview_plugin.errors import ConfigError
    from multiview_plugin.search import MultiVectorSearcher
    from multiview_plugin.search.hybrid import DEFAULT_ALPHA, DEFAULT_DEPTH, BM25Searcher, HybridSearcher

    if (bm25_corpus is None) == (lucene_index is None):
        raise ConfigError("hybrid_searcher needs exactly one of bm25_corpus= (bm25s) or lucene_index= (Pyserini)")
    dense = MultiVectorSearcher(index_dir, query_encoder, aggregation=aggregation)
    if lucene_index is not None:
        if pyserini_version() is None:
            raise ImportError("lucene_index= needs Pyserini: pip install 'multiview_plugin[pyserini]'")
        from pyserini.search.lucene import LuceneSearcher

        sparse = (LuceneSearcher(str(lucene_index)) if Path(str(lucene_index)).exists()
                  else LuceneSearcher.from_prebuilt_index(str(lucene_index)))
    else:
        from multiview_plugin.index.meta import check_corpus_is_indexed

        check_corpus_is_indexed(dense.meta, str(bm25_corpus), None, "bm25_corpus=")  # the corpus the index holds
        sparse = BM25Searcher.from_file(bm25_corpus)
    return HybridSearcher(dense, sparse, fusion, DEFAULT_ALPHA if alpha is None else alpha,
                          DEFAULT_DEPTH if depth is None else depth)


def write_encoded_queries(folder: str | os.PathLike, texts: Sequence[str], vectors: np.ndarray) -> Path:
    """Write Pyserini's encoded-queries layout: ``folder/embedding.pkl``, a pandas frame with columns ``text`` and
    ``embedding`` (Pyserini looks queries up by text). Needs pandas (a Pyserini dependency)."""
    import pandas as pd

    from multiview_plugin.atomic import atomic_open

    if len(texts) != len(vectors):
        raise ValueError(f"{len(texts)} texts but {len(vectors)} vectors")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame({"text": list(texts), "embedding": [np.asarray(v, dtype=np.float32) for v in vectors]})
    with atomic_open(folder / "embedding.pkl", "wb") as f:
        frame.to_pickle(f)
    return folder / "embedding.pkl"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m multiview_plugin.pyserini", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    enc = sub.add_parser("encode-queries", help="Encode topics into a Pyserini --encoded-queries folder.")
    enc.add_argument("--encoder", required=True, help="Saved multiview model folder.")
    enc.add_argument("--topics", required=True, help="Topics: qid<TAB>text, jsonl, BEIR queries or a DPR QA file.")
    enc.add_argument("--output", required=True, help="Folder to write embedding.pkl into.")
    enc.add_argument("--batch_size", type=int, default=64, help="Queries per forward pass.")
    enc.add_argument("--device", help="cpu, cuda ... (default: cuda if available).")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import torch

    from multiview_plugin.data.topics import load_topics
    from multiview_plugin.modeling.persistence import load_encoder

    topics = load_topics(args.topics)
    model = load_encoder(args.encoder)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model.to(device).eval()
    texts = list(topics.values())
    vectors = model.encode_queries(texts, args.batch_size)
    path = write_encoded_queries(args.output, texts, vectors)
    logger.info("wrote %s (%d queries)", path, len(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
