"""Building a multi-vector Faiss index folder in Pyserini's layout: :class:`IndexConfig` (the build's options) and
:func:`build_index`, in stages (check the inputs, set the index up on the first vectors, add the shards one at a time,
write the folder and swap it in).

A folder holds ``index`` (a Faiss index, one row per vector, inner product), ``docid`` (one line per row, in
row order: ``docid#j`` for multi-vector models, the plain docid for single-vector ones — so a single-vector
index is exactly Pyserini's) and ``multiview.json`` (dim, counts, views, aggregation, model). Shards are added
one at a time, so memory is bounded by the largest shard (plus the index itself, the training sample of at most
``train_size`` vectors, and ~16 bytes per document for the duplicate-docid check). An IVF index's inverted lists
are sized before the adds (:class:`~multiview_plugin.index.adds.PresizedIVFAdds`), so they hold no growth headroom.
With a re-scoring store (``rescore_store`` fp16 / fp32) every view vector is also written, in row order, to
``rescore_views.npy`` (:class:`~multiview_plugin.index.rescore.RescoreStoreWriter`), which searchers memory-map to
re-score candidate documents exactly where the index's own codes are lossy (SQ8, PQ).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import faiss
import numpy as np
from tqdm import tqdm

from multiview_plugin.data.seen_ids import SeenIds
from multiview_plugin.encoding.fingerprint import sampled_identity
from multiview_plugin.encoding.shard_sets import model_identity
from multiview_plugin.encoding.shards import ShardFormatError, read_shard, shard_view_ids, split_lookup
from multiview_plugin.encoding.view_info import INDEX_VIEWS_FILE, VIEW_INFO_KEY, concat_rows
from multiview_plugin.errors import ConfigError
from multiview_plugin.index.adds import (
    ADD_CHUNK,
    ASSIGN_FILE,
    PresizedIVFAdds,
    check_new_docids,
    contiguous_docs,
    document_means,
)
from multiview_plugin.index.faiss_build import (
    IVF_TRAININGS,
    make_faiss_index,
    sample_for_training,
    set_hnsw_construction,
    shard_sizes,
    to_gpu,
    train_faiss_index,
    train_ivf_two_level,
)
from multiview_plugin.index.folder import (
    DOC_INDEX_FILE,
    DOCID_FILE,
    FINGERPRINTED_FILES,
    INDEX_FILE,
    META_FILE,
    RESCORE_STORE_FILE,
    check_index_folder,
    one_writer,
)
from multiview_plugin.index.meta import (
    DEFAULT_AGGREGATION,
    DEFAULT_INDEX_FACTORY,
    MAX_EF_CONSTRUCTION,
    IndexMeta,
    check_shard_paths,
    merge_extra,
    passage_shard_infos,
)
from multiview_plugin.index.rescore import RESCORE_STORES, RescoreStoreWriter
from multiview_plugin.paths import refuse_output_over_input, swap_in_folder

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexConfig:
    """The options of :func:`build_index`, checked when made (one-line :class:`ConfigError` naming the flag).

    ``index_factory`` is any ``faiss.index_factory`` string (``Flat``, ``HNSW32``, ``IVF4096,PQ64``, ...);
    indexes that need training are trained on a random sample of ``train_size`` vectors across shards (drawn with
    ``seed``). ``aggregation`` (None: the model's default, ``max`` for most) is what searchers use unless told
    otherwise. The shards must be complete sets from one model
    (:func:`~multiview_plugin.encoding.shard_sets.check_shard_set`; ``allow_partial`` accepts missing shards);
    ``unsafe_pickle`` loads them with plain pickle (trusted files only). ``overwrite`` replaces an earlier index
    (only a folder this tool wrote). ``use_gpu`` builds on the GPUs Faiss sees.
    ``doc_index_factory`` (``HNSW32``, ``Flat``: no training) also writes ``doc_index``, one vector per document
    (the normalised mean of its views): searchers take candidate documents from it and re-score them over all
    their views from ``index`` (which must reconstruct vectors: ``Flat``, ``SQfp16``, ``SQ8``, ``HNSW32`` ...).
    ``rescore_store`` (``fp16``, ``fp32``; default ``none``) also writes ``rescore_views.npy``, every view vector in
    row order at that precision (rows × dim × 2 or 4 bytes of disk): searchers memory-map it and re-score candidate
    documents from it instead of the index's own (for SQ8 / PQ lossy) codes. Refused for a ``Flat`` index, which
    already holds the exact vectors.
    ``ivf_training`` (``flat``, the default: Faiss's k-means over all ``nlist`` centroids; ``two_level``:
    :func:`~multiview_plugin.index.faiss_build.train_ivf_two_level`, for 10⁴–10⁶ lists, where flat k-means
    dominates the build) says how an IVF index's coarse centroids are trained; pair it with an HNSW quantiser
    (``IVF131072_HNSW32,SQ8``) so the adds do not scan every centroid either (``bench/ivf_build.py``).
    ``hnsw_ef_construction`` (None: Faiss's default, 40) is the beam every HNSW graph of the build is made with
    (the index's, an ``IVF<n>_HNSW32`` quantiser's, the document index's): a wider beam costs build time, about
    linearly, and gives a graph whose search reaches recall a narrow one cannot at any ``efSearch``
    (``bench/hnsw_construction.log``); refused for factories without a graph.
    ``before_swap`` is called with the finished folder while it is still beside ``index_dir`` (the build's
    temporary folder): an error it raises (a calibration below target) leaves ``index_dir`` as it was.
    """

    index_factory: str = DEFAULT_INDEX_FACTORY
    aggregation: str | None = None
    train_size: int = 262_144
    use_gpu: bool = False
    overwrite: bool = False
    seed: int = 42
    allow_partial: bool = False
    unsafe_pickle: bool = False
    doc_index_factory: str | None = None
    rescore_store: str = "none"
    ivf_training: str = "flat"
    hnsw_ef_construction: int | None = None
    before_swap: Callable[[Path], None] | None = None

    def __post_init__(self) -> None:
        if self.ivf_training not in IVF_TRAININGS:
            raise ConfigError(f"--ivf_training {self.ivf_training!r}: expected one of {', '.join(IVF_TRAININGS)}")
        if self.ivf_training != "flat" and self.use_gpu:
            raise ConfigError("--ivf_training two_level trains on the CPU; drop --use_gpu (GPU k-means is flat and "
                              "fast) or use --ivf_training flat")
        if self.rescore_store not in RESCORE_STORES:
            raise ConfigError(f"--rescore_store {self.rescore_store!r}: expected one of {', '.join(RESCORE_STORES)}")
        ef = self.hnsw_ef_construction
        if ef is not None and (isinstance(ef, bool) or not isinstance(ef, int) or not 1 <= ef <= MAX_EF_CONSTRUCTION):
            raise ConfigError(f"--hnsw_ef_construction must be an integer >= 1 and <= {MAX_EF_CONSTRUCTION}, "
                              f"got {ef!r}")

    @property
    def store_dtype(self) -> str | None:
        """The re-scoring store's dtype (``float16``, ``float32``), None without one."""
        return RESCORE_STORES[self.rescore_store]

    @classmethod
    def of(cls, config: IndexConfig | None, options: dict[str, Any]) -> IndexConfig:
        """``config`` (default: the defaults) with ``options`` (``build_index``'s keyword arguments, as before the
        config existed) in place of its fields; an unknown option is a ``TypeError`` naming it."""
        if config is not None and not isinstance(config, cls):
            raise TypeError(f"build_index: config must be an IndexConfig, got {type(config).__name__}; pass the "
                            "other options by keyword")
        unknown = sorted(set(options) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"build_index() got an unexpected keyword argument {unknown[0]!r}")
        return dataclasses.replace(config or cls(), **options)


class _ViewCounts:
    """Views per document over the shards, in O(1) memory: the largest count, the first, whether all are equal."""

    def __init__(self) -> None:
        self.max, self.first, self.uniform = 0, 0, True
        self._any = False

    def add(self, per_doc: np.ndarray) -> None:
        if not len(per_doc):
            return
        if not self._any:
            self.first, self._any = int(per_doc[0]), True
        self.max = max(self.max, int(per_doc.max()))
        self.uniform = self.uniform and bool((per_doc == self.first).all())


class _Build:
    """One build's state: the folder written beside ``index_dir`` (so the final rename is atomic: same filesystem),
    the index once the first vectors set it up, and what the shards added so far."""

    def __init__(self, paths: list[Path], index_dir: Path, config: IndexConfig, infos: list, model_name: str):
        self.paths, self.index_dir, self.config = paths, index_dir, config
        self.infos, self.model_name = infos, model_name
        self.multi = any(i is not None and i.multi_vector for i in infos)
        self.index: faiss.Index | None = None
        self.doc_index: faiss.Index | None = None
        self.presized: PresizedIVFAdds | None = None
        self.store: RescoreStoreWriter | None = None
        self.store_record: dict | None = None
        self.seen = SeenIds()  # docids across shards, ~28 bytes each (not a set of strings)
        self.num_docs = self.num_vectors = 0
        self.views = _ViewCounts()
        index_dir.parent.mkdir(parents=True, exist_ok=True)
        self.tmp_dir = Path(tempfile.mkdtemp(dir=index_dir.parent, prefix=f".{index_dir.name}.", suffix=".tmp"))

    def add_shards(self) -> None:
        """Every shard, one at a time, into the index, the docid file and the optional document index and store."""
        with (self.tmp_dir / DOCID_FILE).open("w", encoding="utf-8") as docid_out:
            for path in tqdm(self.paths, desc="index shards", unit="shard"):
                self._add_shard(path, docid_out)
        if self.presized is not None:
            self.presized.finish()
            self.presized.close()

    def _add_shard(self, path: Path, docid_out: TextIO) -> None:
        reps, lookup, info = read_shard(path, self.config.unsafe_pickle)
        shard_multi = shard_view_ids(path, lookup, info)  # without a sidecar: inferred, with a warning
        self.multi = self.multi or shard_multi
        row_docids = split_lookup(lookup, shard_multi)
        docs, row_doc = contiguous_docs(row_docids, str(path))
        if not shard_multi and len(docs) != len(row_docids):
            repeated = row_docids[1:][row_doc[1:] == row_doc[:-1]][0]
            raise ShardFormatError(f"{path}: docid {repeated!r} has several rows in a single-vector shard")
        check_new_docids(self.seen, docs, row_doc, self.num_vectors, self.tmp_dir / DOCID_FILE, docid_out,
                          shard_multi, path)
        if not len(reps):
            return  # an empty shard: nothing to add (its dim may be unknown)
        if self.index is None:
            dim = reps.shape[1]
            del reps  # the set-up below may read every shard again: hold one shard at a time, not two
            self._set_up(dim)
            reps = read_shard(path, self.config.unsafe_pickle)[0]
        elif reps.shape[1] != self.index.d:
            raise ShardFormatError(f"{path}: dim {reps.shape[1]} differs from {self.index.d}")
        self._add_vectors(reps, path)
        if self.doc_index is not None and len(reps):
            self.doc_index.add(document_means(reps, row_doc))
        docid_out.write("\n".join(lookup) + "\n" if lookup else "")
        self.num_docs += len(docs)
        self.num_vectors += len(lookup)
        self.views.add(np.bincount(row_doc))

    def _set_up(self, dim: int) -> None:
        """On the first vectors: make the index (and the document index, the store), train it, size its lists."""
        config, factory = self.config, self.config.index_factory
        index = make_faiss_index(dim, factory)
        if config.ivf_training != "flat" and (faiss.try_extract_index_ivf(index) is None or isinstance(
                faiss.downcast_index(index), faiss.IndexPreTransform)):
            raise ConfigError(f"--ivf_training {config.ivf_training}: {factory!r} is not a plain IVF "
                              "index (IVF<n>,... or IVF<n>_HNSW32,...); drop the flag")
        if config.store_dtype is not None and isinstance(faiss.downcast_index(index), faiss.IndexFlat):
            raise ConfigError(f"--rescore_store {config.rescore_store} with --index_factory {factory}: "
                              "a Flat index holds the exact vectors and searches exactly; the store is "
                              "for approximate indexes (IVF...,SQ8, PQ, HNSW)")
        # vectors per shard, once, for the store's size and the training sample's proportions
        sizes = (shard_sizes(self.paths, self.infos, config.unsafe_pickle)
                 if config.store_dtype is not None or not index.is_trained else [])
        if config.store_dtype is not None:
            self.store = RescoreStoreWriter(self.tmp_dir / RESCORE_STORE_FILE, config.store_dtype, sum(sizes), dim)
        if config.doc_index_factory:
            self.doc_index = make_faiss_index(dim, config.doc_index_factory, "--doc_index_factory")
            if not self.doc_index.is_trained:
                raise ConfigError(f"--doc_index_factory {config.doc_index_factory} needs training; use one "
                                  "that does not (HNSW32, Flat)")
        if config.hnsw_ef_construction is not None:  # before the training builds an IVF's HNSW quantiser
            set_hnsw_construction([index, self.doc_index], config.hnsw_ef_construction, f"--index_factory "
                                  f"{factory!r}" + (f" with --doc_index_factory {config.doc_index_factory!r}"
                                                    if config.doc_index_factory else ""))
        if config.use_gpu:
            index = to_gpu(index)
        if not index.is_trained:
            self._train(index, sizes)
        self.index = index
        self.presized = PresizedIVFAdds.prepare(index, self.paths, self.tmp_dir / ASSIGN_FILE, config.unsafe_pickle)

    def _train(self, index: faiss.Index, sizes: list[int]) -> None:
        config = self.config
        sample = sample_for_training(self.paths, sizes, config.train_size, config.seed, config.unsafe_pickle)
        logger.info("training %s on %d vectors (%s k-means)", config.index_factory, len(sample), config.ivf_training)
        if config.ivf_training == "two_level":
            train_ivf_two_level(index, sample, config.index_factory, config.seed)
        else:
            train_faiss_index(index, sample, config.index_factory)

    def _add_vectors(self, reps: np.ndarray, path: Path) -> None:
        for start in range(0, len(reps), ADD_CHUNK):  # bounded float32 copies of float16 shards
            chunk = np.ascontiguousarray(reps[start:start + ADD_CHUNK], dtype=np.float32)
            if self.presized is not None:
                self.presized.add(chunk)
            else:
                self.index.add(chunk)
            if self.store is not None:
                self.store.add(chunk, path)

    def finish(self) -> IndexMeta:
        """Write the index, the optional files and ``multiview.json``, then swap the folder in for ``index_dir``."""
        config = self.config
        self.store_record = self.store.close() if self.store is not None else None
        if self.index is None:
            raise ShardFormatError(f"no vectors: all {len(self.paths)} shard(s) are empty")
        index = faiss.index_gpu_to_cpu(self.index) if config.use_gpu else self.index
        faiss.write_index(index, str(self.tmp_dir / INDEX_FILE))
        extra = merge_extra(self.infos)
        if extra.get(VIEW_INFO_KEY, {}).get("rows") and not concat_rows(self.paths, self.tmp_dir / INDEX_VIEWS_FILE,
                                                                         self.num_vectors):
            extra[VIEW_INFO_KEY]["rows"] = False  # a shard lacks its view rows: explanations omit what the view is
        if self.doc_index is not None:
            faiss.write_index(self.doc_index, str(self.tmp_dir / DOC_INDEX_FILE))
        meta = self._meta(int(index.d), extra)
        if not self.multi and meta.max_views > 1:
            raise ShardFormatError(f"{', '.join(map(str, self.paths))}: single-vector shards hold several rows for "
                                   "one docid")
        meta.files = {name: sampled_identity(self.tmp_dir / name) for name in FINGERPRINTED_FILES
                      if (self.tmp_dir / name).is_file()}
        (self.tmp_dir / META_FILE).write_text(json.dumps(asdict(meta), indent=2) + "\n", encoding="utf-8")
        if config.before_swap is not None:
            config.before_swap(self.tmp_dir)
            meta = IndexMeta.load(self.tmp_dir)  # what it recorded (a calibration's search defaults)
        # checked again: the folder may have changed while the index was built
        check_index_folder(self.index_dir, config.overwrite)
        swap_in_folder(self.tmp_dir, self.index_dir)  # the old index stays until the new one is complete
        return meta

    def _meta(self, dim: int, extra: dict) -> IndexMeta:
        config, views = self.config, self.views
        return IndexMeta(
            dim=dim, num_docs=self.num_docs, num_vectors=self.num_vectors, max_views=views.max,
            mean_views=self.num_vectors / self.num_docs if self.num_docs else 0.0,
            views_per_doc=views.first if views.uniform else "variable",
            aggregation=config.aggregation or DEFAULT_AGGREGATION.get(self.model_name, "max"),
            model_name=self.model_name, index_factory=config.index_factory, shards=[str(p) for p in self.paths],
            extra=extra, view_ids=self.multi,
            model_fingerprint=next((model_identity(i) for i in self.infos if i is not None and i.fingerprint), None),
            doc_index_factory=config.doc_index_factory if self.doc_index is not None else None,
            rescore_store=self.store_record)

    def clean_up(self) -> None:
        """Remove what the build left beside ``index_dir`` (all of it after a failure; nothing after the swap)."""
        if self.presized is not None:
            self.presized.close()
        if self.store is not None:
            self.store.abort()
        if self.tmp_dir.exists():
            shutil.rmtree(self.tmp_dir, ignore_errors=True)


@one_writer
def build_index(shards: Sequence[str | os.PathLike], index_dir: str | os.PathLike, config: IndexConfig | None = None,
                **options: Any) -> IndexMeta:
    """Write an index folder from encoded shards (see the module docstring), built as ``config`` says
    (:class:`IndexConfig`; its fields may also be given as keyword arguments, ``build_index(shards, out,
    index_factory="HNSW32")``, which take the place of ``config``'s). Empty shards (more shards than documents) are
    valid and add nothing. Run under ``<index_dir>.lock`` (:func:`~multiview_plugin.index.folder.one_writer`)."""
    config = IndexConfig.of(config, options)
    paths = check_shard_paths(shards)
    index_dir = Path(index_dir)
    # never replace a folder this tool did not write, nor one holding anything besides an index (or an input)
    refuse_output_over_input({"--index_dir": index_dir}, {"--passage_reps": paths}, folder_outputs=["--index_dir"])
    check_index_folder(index_dir, config.overwrite)
    infos, model_name = passage_shard_infos(paths, config.allow_partial)
    build = _Build(paths, index_dir, config, infos, model_name)
    try:
        build.add_shards()
        meta = build.finish()
    finally:
        build.clean_up()
    if build.store_record and meta.aggregation != "max":
        logger.warning("%s: the re-scoring store serves max aggregation; this index searches with %s by default, "
                       "which does not re-score: search with --aggregation max to use it", index_dir,
                       meta.aggregation)
    if meta.doc_index_factory and meta.aggregation != "max":
        logger.warning("%s: the document index (--doc_index_factory %s) serves max aggregation; this index searches "
                       "with %s by default, which scans every view instead: search with --aggregation max to use it",
                       index_dir, meta.doc_index_factory, meta.aggregation)
    logger.info("index %s: %d documents, %d vectors (max %d views), %s%s", index_dir, meta.num_docs,
                meta.num_vectors, meta.max_views, config.index_factory,
                f", re-scoring store {RESCORE_STORE_FILE} ({config.store_dtype})" if build.store_record else "")
    return meta
