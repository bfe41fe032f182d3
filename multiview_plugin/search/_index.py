"""Building a multi-vector Faiss index folder in Pyserini's layout.

A folder holds ``index`` (a Faiss index, one row per vector, inner product), ``docid`` (one line per row, in
row order: ``docid#j`` for multi-vector models, the plain docid for single-vector ones — so a single-vector
index is exactly Pyserini's) and ``multiview.json`` (dim, counts, views, aggregation, model). Shards are added
one at a time, so memory is bounded by the largest shard (plus the index itself, the training sample of at most
``train_size`` vectors, and ~16 bytes per document for the duplicate-docid check). An IVF index's inverted lists
are sized before the adds (:class:`PresizedIVFAdds`), so they hold no growth headroom. With a re-scoring store
(``rescore_store`` fp16 / fp32) every view vector is also written, in row order, to ``rescore_views.npy``
(:class:`RescoreStoreWriter`: sequential writes, one chunk in memory), which searchers memory-map to re-score
candidate documents exactly where the index's own codes are lossy (SQ8, PQ).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

from multiview_plugin.data.seen_ids import SeenIds
from multiview_plugin.encoding.fingerprint import file_identity, sampled_identity
from multiview_plugin.encoding.shard_sets import check_shard_set, model_identity
from multiview_plugin.encoding.shards import ShardFormatError, read_info, read_shard, shard_view_ids, split_lookup
from multiview_plugin.encoding.view_info import INDEX_VIEWS_FILE, VIEW_INFO_KEY, concat_rows, merge_descriptions
from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.paths import OutputLock, check_output_folder, refuse_output_over_input, swap_in_folder

logger = logging.getLogger(__name__)

INDEX_FILE, DOCID_FILE, META_FILE = "index", "docid", "multiview.json"
DOC_INDEX_FILE = "doc_index"  # optional: one vector per document (its views' normalised mean), for candidates
RESCORE_STORE_FILE = "rescore_views.npy"  # optional: every view vector, in row order, for exact re-scoring
RESCORE_STORES = {"none": None, "fp16": "float16", "fp32": "float32"}  # --rescore_store: the file's dtype
FORMAT_VERSION = 1
# everything build_index writes: a folder holding anything else is not replaced by --overwrite
INDEX_FOLDER_FILES = (INDEX_FILE, DOCID_FILE, META_FILE, DOC_INDEX_FILE, INDEX_VIEWS_FILE, RESCORE_STORE_FILE)
ADD_CHUNK = 65_536  # vectors per index.add
ASSIGN_FILE = ".ivf_lists.int32"  # in the build's temporary folder: each vector's IVF list, from the first pass
# Default aggregation per model: DCSR ranks passages by HasAns (its paper's eq. 2).
DEFAULT_AGGREGATION = {"dcsr": "hasans"}
DEFAULT_INDEX_FACTORY = "Flat"  # exact inner-product search: build_index, driver.index --index_factory, the API
BACKENDS = ("faiss", "qdrant")  # multiview.json "backend": each a SearchBackend's kind (search/_backend.py)


def check_index_folder(index_dir: str | os.PathLike, overwrite: bool, own_files: Sequence[str] = (),
                       resumable: Sequence[str] = ()) -> None:
    """The one rule every backend applies to ``--index_dir`` before writing anything in it.

    A folder without ``multiview.json`` is not ours: it must be absent or empty, except an interrupted build's
    folder that holds only ``resumable`` names (a backend that resumes: e.g. Qdrant's storage and temporary
    files). A folder with it is replaced only with ``overwrite`` and only when it holds nothing but what
    a build writes (:data:`INDEX_FOLDER_FILES` and ``own_files``). So someone's Pyserini index (``index``,
    ``docid``, no ``multiview.json``) is never written into, whatever the backend.
    """
    index_dir = Path(index_dir)
    ours = (index_dir / META_FILE).is_file()
    if not ours and resumable and index_dir.is_dir():
        entries = [p.name for p in index_dir.iterdir()]
        if entries and all(name in resumable for name in entries):
            return  # an interrupted build of this backend: it resumes
    check_output_folder(index_dir, ours, overwrite, "multiview index",
                        own_files=(*INDEX_FOLDER_FILES, *own_files, *resumable))


# the files whose identity multiview.json records (IndexMeta.files) and searchers check when they load them
FINGERPRINTED_FILES = (INDEX_FILE, DOCID_FILE, DOC_INDEX_FILE, RESCORE_STORE_FILE)


def check_index_file(folder: str | os.PathLike, meta: IndexMeta, name: str) -> None:
    """Refuse a file of the index folder that is not the one the index was built with (replaced by another of the
    same shape, or edited): its size and sampled SHA-256 must equal what ``multiview.json`` records. Folders
    built before the record are not checked."""
    recorded = (meta.files or {}).get(name)
    path = Path(folder) / name
    if recorded is None or not path.is_file():
        return
    now = sampled_identity(path)
    if now != recorded:
        raise ShardFormatError(f"{path}: not the file this index was built with ({META_FILE} records {recorded}, "
                               f"this file is {now}): it was replaced or edited since; rebuild the index")


def index_files(folder: str | os.PathLike | None) -> list[str]:
    """The files of an index folder (inputs that no output may overwrite); none when ``folder`` is None."""
    return [os.path.join(folder, name) for name in INDEX_FOLDER_FILES] if folder else []


@dataclass
class IndexMeta:
    dim: int
    num_docs: int
    num_vectors: int
    max_views: int
    mean_views: float
    views_per_doc: int | str
    aggregation: str = "max"
    model_name: str = ""
    index_factory: str = DEFAULT_INDEX_FACTORY
    metric: str = "inner_product"
    shards: list[str] = field(default_factory=list)
    # model facts searchers use: "temperature" (HasAns' default softmax scale), "sentences" (dcsr counts)
    extra: dict = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    view_ids: bool | None = None  # docid file lines are docid#j (None in older folders: inferred from counts)
    # the shards' model (encoding/shard_sets.model_identity): query vectors must come from the same one
    model_fingerprint: dict | None = None
    doc_index_factory: str | None = None  # the doc_index file's factory, when there is one
    backend: str = "faiss"  # "qdrant": the vectors live in a Qdrant collection (search/_qdrant.py)
    qdrant: dict | None = None  # backend "qdrant": where the collection lives (search/_qdrant.QdrantSettings)
    # search settings chosen at build time by search/calibrate.py (searchers use them unless told otherwise)
    search_defaults: dict | None = None
    calibration: dict | None = None  # how search_defaults were chosen: target, measured recall, operating points
    # the on-disk copy of the views searchers re-score from: {"file", "dtype" (float16/float32), "rows", "dim"}
    rescore_store: dict | None = None
    # what each file of the folder must be: {name: size and sampled SHA-256 (encoding/fingerprint.sampled_identity)},
    # checked at every load (check_index_file); None in older folders
    files: dict | None = None

    @property
    def multi_vector(self) -> bool:
        if self.view_ids is not None:
            return self.view_ids
        return self.max_views > 1 or self.views_per_doc == "variable"

    @classmethod
    def load(cls, folder: str | os.PathLike) -> IndexMeta:
        """Read ``multiview.json``; anything malformed (bad JSON, unknown or missing fields, wrong types,
        negative counts, a newer format) is a one-line error naming the file and field."""
        path = Path(folder) / META_FILE
        if not path.is_file():
            raise ConfigError(f"{folder} is not a multiview index: {META_FILE} is missing")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ShardFormatError(f"{path}: not valid JSON ({err})") from None
        if not isinstance(data, dict):
            raise ShardFormatError(f"{path}: expected a JSON object, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ShardFormatError(f"{path}: unknown field {unknown[0]!r} (written by a newer version, or edited?)")
        missing = sorted(f.name for f in fields(cls) if f.name not in data and f.default is MISSING
                         and f.default_factory is MISSING)
        if missing:
            raise ShardFormatError(f"{path}: field {missing[0]!r} is missing")
        for name, value in data.items():
            kinds = _META_TYPES.get(name)
            if kinds is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
                raise ShardFormatError(f"{path}: field {name!r}: expected {_META_KIND_NAMES[name]}, got {value!r}")
            if name in _META_COUNTS and value < (1 if name == "dim" else 0):
                least = "positive" if name == "dim" else "non-negative"
                raise ShardFormatError(f"{path}: field {name!r}: expected a {least} number, got {value!r}")
        if isinstance(data.get("views_per_doc"), str) and data["views_per_doc"] != "variable":
            raise ShardFormatError(f"{path}: field 'views_per_doc': expected a number or 'variable', got "
                                   f"{data['views_per_doc']!r}")
        if data.get("backend", "faiss") not in BACKENDS:
            raise ShardFormatError(f"{path}: field 'backend': expected {' or '.join(map(repr, BACKENDS))}, got "
                                   f"{data['backend']!r}")
        if data.get("rescore_store") is not None:
            _check_rescore_record(path, data["rescore_store"])
        if data.get("format_version", FORMAT_VERSION) > FORMAT_VERSION:
            raise ShardFormatError(f"{path}: format_version {data['format_version']} is newer than this version "
                                   f"reads ({FORMAT_VERSION}); upgrade multiview_plugin")
        return cls(**data)


_NONE = type(None)
_META_TYPES: dict[str, tuple[type, ...]] = {
    "dim": (int,), "num_docs": (int,), "num_vectors": (int,), "max_views": (int,), "mean_views": (int, float),
    "views_per_doc": (int, str), "aggregation": (str,), "model_name": (str,), "index_factory": (str,),
    "metric": (str,), "shards": (list,), "extra": (dict,), "format_version": (int,), "view_ids": (bool, _NONE),
    "model_fingerprint": (dict, _NONE), "doc_index_factory": (str, _NONE), "backend": (str,), "qdrant": (dict, _NONE),
    "search_defaults": (dict, _NONE), "calibration": (dict, _NONE), "rescore_store": (dict, _NONE),
    "files": (dict, _NONE)}
_META_KIND_NAMES = {name: " or ".join("null" if t is _NONE else {"int": "an integer", "float": "a number",
                                                                  "str": "a string", "list": "a list",
                                                                  "dict": "an object", "bool": "true/false"}[t.__name__]
                                      for t in kinds) for name, kinds in _META_TYPES.items()}
_META_COUNTS = ("dim", "num_docs", "num_vectors", "max_views", "mean_views")


def _check_rescore_record(path: Path, record: dict) -> None:
    """``rescore_store`` names a file in the folder, a float dtype and non-negative counts (one-line errors)."""
    expected = {"file": "a file name in the index folder", "dtype": "'float16' or 'float32'",
                "rows": "a non-negative integer", "dim": "a positive integer"}
    for key, what in expected.items():
        value = record.get(key)
        ok = {"file": isinstance(value, str) and value not in ("", ".", "..") and Path(value).name == value,
              "dtype": value in ("float16", "float32"),
              "rows": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
              "dim": isinstance(value, int) and not isinstance(value, bool) and value >= 1}[key]
        if not ok:
            raise ShardFormatError(f"{path}: field 'rescore_store.{key}': expected {what}, got {value!r}")


_FAISS_WHERE = re.compile(r"Error in .*? at \S+:\d+: (.*)$")
_FAISS_CHECK = re.compile(r"^Error: '.*?' failed: ")


def faiss_message(err: BaseException) -> str:
    """A Faiss exception's message on one line (Faiss appends the C++ file and line of the failed check)."""
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip()) or repr(err)
    match = _FAISS_WHERE.match(text)
    text = match.group(1) if match else text  # drop "Error in <C++ signature> at <file>:<line>: "
    return _FAISS_CHECK.sub("", text)  # drop "Error: '<C++ condition>' failed: "


def read_faiss_index(path: str | os.PathLike, io_flags: int = 0) -> faiss.Index:
    """Read a Faiss index file; a truncated, corrupt or foreign file is a one-line error naming it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: the Faiss index file is missing")
    try:
        return faiss.read_index(str(path), io_flags)
    except RuntimeError as err:
        raise ShardFormatError(f"{path}: not a readable Faiss index (truncated or corrupt?): "
                               f"{faiss_message(err)}") from None


def make_faiss_index(dim: int, factory: str, flag: str = "--index_factory") -> faiss.Index:
    """``faiss.index_factory`` for inner product; a string Faiss cannot parse (or that does not fit ``dim``)
    is a one-line error naming the flag and value."""
    try:
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as err:
        raise ConfigError(f"{flag} {factory!r}: Faiss cannot build it for {dim}-dim vectors: "
                          f"{faiss_message(err)}") from None


def train_faiss_index(index: faiss.Index, sample: np.ndarray, factory: str, flag: str = "--index_factory") -> None:
    """Train ``index`` on ``sample``; too few points for the factory (IVF lists, PQ centroids) is a one-line
    error naming the factory and the number of vectors available."""
    try:
        index.train(sample)
    except RuntimeError as err:
        raise ConfigError(f"{flag} {factory!r}: cannot train it on the {len(sample)} vectors available: "
                          f"{faiss_message(err)}; use a factory with fewer lists/centroids (or Flat / HNSW32, "
                          "which need no training)") from None


IVF_TRAININGS = ("flat", "two_level")  # --ivf_training: how an IVF index's coarse centroids are trained


def _split_cluster(members: np.ndarray, share: int, cp, seed: int) -> np.ndarray:
    """``share`` centroids of one first-level cluster's ``members`` (their mean, or the members themselves when
    there are no more of them than centroids, else k-means)."""
    if share == 1 or len(members) <= share:
        sub = members[:share] if len(members) >= share else members
        return sub.mean(axis=0, keepdims=True) if share == 1 else sub
    km = faiss.Kmeans(members.shape[1], share, niter=cp.niter, spherical=cp.spherical, seed=seed,
                      max_points_per_centroid=cp.max_points_per_centroid, min_points_per_centroid=1)
    km.train(members)
    return km.centroids


def second_level_centroids(x: np.ndarray, assign: np.ndarray, share: np.ndarray, cp, seed: int,
                           threads: int | None = None) -> list[np.ndarray]:
    """Each first-level cluster ``c`` split into ``share[c]`` centroids (cluster ``c``'s k-means seeded
    ``seed + 1 + c``), in cluster order. The clusters are independent: with ``threads`` > 1 (default: Faiss's
    OpenMP threads) they are split by that many threads at once (Faiss releases the GIL), each k-means on one
    OpenMP thread, the many small k-means' own loops being too short to spread; the centroids are the ones the
    serial loop gives (each k-means is seeded by its cluster, not by its order; test:
    ``tests/search/test_ivf_training.py``)."""
    from concurrent.futures import ThreadPoolExecutor

    threads = faiss.omp_get_max_threads() if threads is None else max(1, threads)
    order = np.argsort(assign, kind="stable")
    bounds = np.searchsorted(assign[order], np.arange(len(share) + 1))
    todo = [c for c in range(len(share)) if share[c] > 0]

    def split(c: int) -> np.ndarray:
        return _split_cluster(x[order[bounds[c]:bounds[c + 1]]], int(share[c]), cp, seed + 1 + c)

    if threads == 1 or len(todo) < 2:
        return [split(c) for c in tqdm(todo, desc="two-level k-means", unit="cluster", leave=False)]
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        with ThreadPoolExecutor(threads) as pool:
            return list(tqdm(pool.map(split, todo), total=len(todo), desc=f"two-level k-means ({threads} threads)",
                             unit="cluster", leave=False))
    finally:
        faiss.omp_set_num_threads(before)


def train_ivf_two_level(index: faiss.Index, sample: np.ndarray, factory: str, seed: int = 42,
                        threads: int | None = None) -> None:
    """Train an IVF index's ``nlist`` coarse centroids by two-level k-means, then the rest of the index.

    Flat k-means costs sample × nlist distance computations per iteration (467 h on one core for the nq mvr
    plan's 131,072 lists); here ``nc1 = round(sqrt(nlist))`` first-level centroids are trained on the sample,
    each sample vector goes to its nearest one, and each first-level cluster is split into a share of the
    ``nlist`` centroids proportional to its size (at least one): sample × 2·sqrt(nlist) per iteration. The
    centroids are then added to the index's quantiser (a flat or an HNSW one, ``IVF<n>_HNSW32``) and Faiss trains
    what remains (the SQ / PQ codes on the residuals). The idea and the rebalancing are Faiss's
    ``faiss.contrib.clustering.two_level_clustering``; this version also serves inner-product (spherical)
    indexes and never gives a first-level cluster zero centroids. The second level's k-means run ``threads`` at a
    time (:func:`second_level_centroids`). Refused for an IVF behind a pre-transform (``PCA64,IVF...``), whose
    sample would have to be transformed first."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None or isinstance(faiss.downcast_index(index), faiss.IndexPreTransform):
        raise ConfigError(f"--ivf_training two_level: {factory!r} is not a plain IVF index (IVF<n>,... or "
                          "IVF<n>_HNSW32,...)")
    nlist, dim = int(ivf.nlist), int(ivf.d)
    if len(sample) < nlist:
        raise ConfigError(f"--index_factory {factory!r}: cannot train {nlist} lists on the {len(sample)} vectors "
                          "available; raise --train_size or use fewer lists")
    cp = ivf.cp
    nc1 = max(1, min(nlist, int(round(math.sqrt(nlist)))))
    x = np.ascontiguousarray(sample, dtype=np.float32)
    km = faiss.Kmeans(dim, nc1, niter=cp.niter, spherical=cp.spherical, seed=seed,
                      max_points_per_centroid=max(cp.max_points_per_centroid, len(x) // nc1 + 1))
    km.train(x)
    assign = km.assign(x)[1]
    sizes = np.bincount(assign, minlength=nc1)
    # a share of the lists proportional to each cluster's size, at least one per non-empty cluster
    share = np.maximum((sizes > 0).astype(np.int64), np.floor(sizes * nlist / len(x)).astype(np.int64))
    order = np.argsort(-(sizes * nlist / len(x) - share))  # hand the remainder to the largest fractions
    i = 0
    while share.sum() < nlist:
        c = order[i % nc1]
        if share[c] < sizes[c]:
            share[c] += 1
        i += 1
    while share.sum() > nlist:  # only when many tiny clusters each got their one list
        c = int(np.argmax(share))
        share[c] -= 1
    centroids = second_level_centroids(x, assign, share, cp, seed, threads)
    cent = np.ascontiguousarray(np.concatenate(centroids)[:nlist], dtype=np.float32)
    if cp.spherical:
        faiss.normalize_L2(cent)
    if len(cent) != nlist:
        raise ConfigError(f"--ivf_training two_level: {factory!r}: {len(cent)} centroids for {nlist} lists "
                          "(too few distinct training vectors); raise --train_size")
    ivf.quantizer.reset()
    ivf.quantizer.add(cent)
    ivf.quantizer.is_trained = True
    train_faiss_index(index, x, factory)  # the quantiser holds nlist centroids: Faiss trains only the codes


def contiguous_docs(row_docids: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Document of each row → (docid of each document in order, document index of each row).

    Rows of one document must be contiguous and a document may appear once (a docid seen in two runs is a
    duplicate docid in the corpus).
    """
    if len(row_docids) == 0:
        return np.array([], dtype=object), np.array([], dtype=np.int64)
    starts = np.ones(len(row_docids), dtype=bool)
    starts[1:] = row_docids[1:] != row_docids[:-1]
    docs = row_docids[starts]
    uniq, counts = np.unique(docs.astype(str), return_counts=True)
    if (counts > 1).any():
        dups = uniq[counts > 1][:5].tolist()
        raise MultiViewError(f"{where}: duplicate docids {dups} (or a document's vectors are not contiguous)")
    return docs, np.cumsum(starts) - 1


def _shard_sizes(shards: Sequence[Path], infos: list, unsafe_pickle: bool = False) -> list[int]:
    """Vectors per shard: from the sidecar, else by reading the shard (one at a time)."""
    return [info.num_vectors if info else read_shard(p, unsafe_pickle)[0].shape[0] for p, info in zip(shards, infos)]


def _sample_for_training(shards: list[Path], sizes: list[int], size: int, seed: int, unsafe_pickle: bool = False
                         ) -> np.ndarray:
    """``size`` vectors drawn across ``shards`` in proportion to their ``sizes`` (:func:`_shard_sizes`)."""
    total = sum(sizes)
    rng = np.random.default_rng(seed)
    takes = [min(n, math.ceil(size * n / total)) for n in sizes]
    sample: np.ndarray | None = None  # filled in place: no second copy of the sample
    at = 0
    for path, n, take in zip(shards, sizes, takes):
        if n == 0:
            continue
        reps = read_shard(path, unsafe_pickle)[0]
        if sample is None:
            sample = np.empty((sum(takes), reps.shape[1]), dtype=np.float32)
        sample[at:at + take] = reps[np.sort(rng.choice(n, take, replace=False))]
        at += take
    return sample


def passage_shard_infos(paths: Sequence[str | os.PathLike], allow_partial: bool = False) -> tuple[list, str]:
    """The shards' sidecar infos (None for a sidecar-less shard) and the model that made them ("" if several or
    unknown), after checking that they are one set of passage shards of one vector dim (what every backend
    indexes)."""
    infos = check_shard_set(paths, allow_partial)
    if any(i is not None and i.is_query for i in infos):
        raise ShardFormatError("query shards cannot be indexed; pass passage shards")
    dims = {i.dim for i in infos if i is not None and i.num_vectors}
    if len(dims) > 1:
        raise ShardFormatError(f"shards disagree on the vector dim: {sorted(dims)}")
    models = {i.model_name for i in infos if i is not None}
    return infos, (models.pop() if len(models) == 1 else "")


def one_writer(build: Callable[..., IndexMeta]) -> Callable[..., IndexMeta]:
    """Run an index build (``build(shards, index_dir, ...)``) under ``<index_dir>.lock`` (:class:`OutputLock`):
    a second build of the same folder, by any backend, is refused in one line while the first runs, and touches
    nothing of it (its checks, temporary files and clean-up all happen inside the lock)."""

    @functools.wraps(build)
    def locked(shards, index_dir, *args, **kwargs) -> IndexMeta:
        with OutputLock(Path(index_dir).resolve()):
            return build(shards, index_dir, *args, **kwargs)

    return locked


@one_writer
def build_index(
    shards: list[str | os.PathLike],
    index_dir: str | os.PathLike,
    index_factory: str = DEFAULT_INDEX_FACTORY,
    aggregation: str | None = None,
    train_size: int = 262_144,
    use_gpu: bool = False,
    overwrite: bool = False,
    seed: int = 42,
    allow_partial: bool = False,
    unsafe_pickle: bool = False,
    doc_index_factory: str | None = None,
    rescore_store: str = "none",
    ivf_training: str = "flat",
    before_swap: Callable[[Path], None] | None = None,
) -> IndexMeta:
    """Write an index folder from encoded shards (see module docstring).

    ``index_factory`` is any ``faiss.index_factory`` string (``Flat``, ``HNSW32``, ``IVF4096,PQ64``, ...);
    indexes that need training are trained on a random sample of ``train_size`` vectors across shards.
    The shards must be complete sets from one model (:func:`~multiview_plugin.encoding.shard_sets.check_shard_set`;
    ``allow_partial`` accepts missing shards); ``unsafe_pickle`` loads them with plain pickle (trusted files only).
    Empty shards (more shards than documents) are valid and add nothing.
    ``doc_index_factory`` (``HNSW32``, ``Flat``: no training) also writes ``doc_index``, one vector per document
    (the normalised mean of its views): searchers take candidate documents from it and re-score them over all
    their views from ``index`` (which must reconstruct vectors: ``Flat``, ``SQfp16``, ``SQ8``, ``HNSW32`` ...).
    ``rescore_store`` (``fp16``, ``fp32``; default ``none``) also writes ``rescore_views.npy``, every view vector in
    row order at that precision (rows × dim × 2 or 4 bytes of disk): searchers memory-map it and re-score candidate
    documents from it instead of the index's own (for SQ8 / PQ lossy) codes. Refused for a ``Flat`` index, which
    already holds the exact vectors.
    ``ivf_training`` (``flat``, the default: Faiss's k-means over all ``nlist`` centroids; ``two_level``:
    :func:`train_ivf_two_level`, for 10⁴–10⁶ lists, where flat k-means dominates the build) says how an IVF
    index's coarse centroids are trained; pair it with an HNSW quantiser (``IVF131072_HNSW32,SQ8``) so the adds
    do not scan every centroid either (``bench/ivf_build.py``).
    ``before_swap`` is called with the finished folder while it is still beside ``index_dir`` (the build's
    temporary folder): an error it raises (a calibration below target) leaves ``index_dir`` as it was.
    """
    if ivf_training not in IVF_TRAININGS:
        raise ConfigError(f"--ivf_training {ivf_training!r}: expected one of {', '.join(IVF_TRAININGS)}")
    if ivf_training != "flat" and use_gpu:
        raise ConfigError("--ivf_training two_level trains on the CPU; drop --use_gpu (GPU k-means is flat and "
                          "fast) or use --ivf_training flat")
    if rescore_store not in RESCORE_STORES:
        raise ConfigError(f"--rescore_store {rescore_store!r}: expected one of {', '.join(RESCORE_STORES)}")
    store_dtype = RESCORE_STORES[rescore_store]
    paths = [Path(p) for p in shards]
    if not paths:
        raise ShardFormatError("no shards given")
    for p in paths:
        if not p.is_file():
            raise ShardFormatError(f"shard {p} does not exist")
    index_dir = Path(index_dir)
    # never replace a folder this tool did not write, nor one holding anything besides an index (or an input)
    refuse_output_over_input({"--index_dir": index_dir}, {"--passage_reps": paths}, folder_outputs=["--index_dir"])
    check_index_folder(index_dir, overwrite)

    infos, model_name = passage_shard_infos(paths, allow_partial)
    multi = any(i is not None and i.multi_vector for i in infos)

    index: faiss.Index | None = None
    doc_index: faiss.Index | None = None
    # Built beside the target so the final rename is atomic (same filesystem).
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(dir=index_dir.parent, prefix=f".{index_dir.name}.", suffix=".tmp"))
    seen = SeenIds()  # docids across shards, ~28 bytes each (not a set of strings)
    num_docs = num_vectors = 0
    views = _ViewCounts()
    presized: PresizedIVFAdds | None = None
    store: RescoreStoreWriter | None = None
    try:
        with (tmp_dir / DOCID_FILE).open("w", encoding="utf-8") as docid_out:
            for path in tqdm(paths, desc="index shards", unit="shard"):
                reps, lookup, info = read_shard(path, unsafe_pickle)
                shard_multi = shard_view_ids(path, lookup, info)  # without a sidecar: inferred, with a warning
                multi = multi or shard_multi
                row_docids = split_lookup(lookup, shard_multi)
                docs, row_doc = contiguous_docs(row_docids, str(path))
                if not shard_multi and len(docs) != len(row_docids):
                    repeated = row_docids[1:][row_doc[1:] == row_doc[:-1]][0]
                    raise ShardFormatError(f"{path}: docid {repeated!r} has several rows in a single-vector shard")
                _check_new_docids(seen, docs, row_doc, num_vectors, tmp_dir / DOCID_FILE, docid_out, shard_multi,
                                  path)
                if not len(reps):
                    continue  # an empty shard: nothing to add (its dim may be unknown)
                if index is None:
                    dim = reps.shape[1]
                    del reps  # the set-up below may read every shard again: hold one shard at a time, not two
                    index = make_faiss_index(dim, index_factory)
                    if ivf_training != "flat" and (faiss.try_extract_index_ivf(index) is None or isinstance(
                            faiss.downcast_index(index), faiss.IndexPreTransform)):
                        raise ConfigError(f"--ivf_training {ivf_training}: {index_factory!r} is not a plain IVF "
                                          "index (IVF<n>,... or IVF<n>_HNSW32,...); drop the flag")
                    if store_dtype is not None and isinstance(faiss.downcast_index(index), faiss.IndexFlat):
                        raise ConfigError(f"--rescore_store {rescore_store} with --index_factory {index_factory}: "
                                          "a Flat index holds the exact vectors and searches exactly; the store is "
                                          "for approximate indexes (IVF...,SQ8, PQ, HNSW)")
                    # vectors per shard, once, for the store's size and the training sample's proportions
                    sizes = (_shard_sizes(paths, infos, unsafe_pickle)
                             if store_dtype is not None or not index.is_trained else [])
                    if store_dtype is not None:
                        store = RescoreStoreWriter(tmp_dir / RESCORE_STORE_FILE, store_dtype, sum(sizes), dim)
                    if use_gpu:
                        index = _to_gpu(index)
                    if not index.is_trained:
                        sample = _sample_for_training(paths, sizes, train_size, seed, unsafe_pickle)
                        logger.info("training %s on %d vectors (%s k-means)", index_factory, len(sample),
                                    ivf_training)
                        if ivf_training == "two_level":
                            train_ivf_two_level(index, sample, index_factory, seed)
                        else:
                            train_faiss_index(index, sample, index_factory)
                        del sample
                    presized = PresizedIVFAdds.prepare(index, paths, tmp_dir / ASSIGN_FILE, unsafe_pickle)
                    if doc_index_factory:
                        doc_index = make_faiss_index(dim, doc_index_factory, "--doc_index_factory")
                        if not doc_index.is_trained:
                            raise ConfigError(f"--doc_index_factory {doc_index_factory} needs training; use one "
                                              "that does not (HNSW32, Flat)")
                    reps = read_shard(path, unsafe_pickle)[0]
                elif reps.shape[1] != index.d:
                    raise ShardFormatError(f"{path}: dim {reps.shape[1]} differs from {index.d}")
                for start in range(0, len(reps), ADD_CHUNK):  # bounded float32 copies of float16 shards
                    chunk = np.ascontiguousarray(reps[start:start + ADD_CHUNK], dtype=np.float32)
                    if presized is not None:
                        presized.add(chunk)
                    else:
                        index.add(chunk)
                    if store is not None:
                        store.add(chunk, path)
                if doc_index is not None and len(reps):
                    doc_index.add(document_means(reps, row_doc))
                docid_out.write("\n".join(lookup) + "\n" if lookup else "")
                num_docs += len(docs)
                num_vectors += len(lookup)
                views.add(np.bincount(row_doc))
        if presized is not None:
            presized.finish()
            presized.close()
        store_record = store.close() if store is not None else None
        if index is None:
            raise ShardFormatError(f"no vectors: all {len(paths)} shard(s) are empty")
        if use_gpu:
            index = faiss.index_gpu_to_cpu(index)
        faiss.write_index(index, str(tmp_dir / INDEX_FILE))
        extra = _merge_extra(infos)
        if extra.get(VIEW_INFO_KEY, {}).get("rows") and not concat_rows(paths, tmp_dir / INDEX_VIEWS_FILE, num_vectors):
            extra[VIEW_INFO_KEY]["rows"] = False  # a shard lacks its view rows: explanations omit what the view is
        if doc_index is not None:
            faiss.write_index(doc_index, str(tmp_dir / DOC_INDEX_FILE))
        meta = IndexMeta(
            dim=int(index.d), num_docs=num_docs, num_vectors=num_vectors, max_views=views.max,
            mean_views=num_vectors / num_docs if num_docs else 0.0,
            views_per_doc=views.first if views.uniform else "variable",
            aggregation=aggregation or DEFAULT_AGGREGATION.get(model_name, "max"), model_name=model_name,
            index_factory=index_factory, shards=[str(p) for p in paths], extra=extra, view_ids=multi,
            model_fingerprint=next((model_identity(i) for i in infos if i is not None and i.fingerprint), None),
            doc_index_factory=doc_index_factory if doc_index is not None else None, rescore_store=store_record)
        if not multi and meta.max_views > 1:
            raise ShardFormatError(f"{', '.join(map(str, paths))}: single-vector shards hold several rows for one "
                                   "docid")
        meta.files = {name: sampled_identity(tmp_dir / name) for name in FINGERPRINTED_FILES
                      if (tmp_dir / name).is_file()}
        (tmp_dir / META_FILE).write_text(json.dumps(asdict(meta), indent=2) + "\n", encoding="utf-8")
        if before_swap is not None:
            before_swap(tmp_dir)
            meta = IndexMeta.load(tmp_dir)  # what it recorded (a calibration's search defaults)
        # checked again: the folder may have changed while the index was built
        check_index_folder(index_dir, overwrite)
        swap_in_folder(tmp_dir, index_dir)  # the old index stays until the new one is complete
    finally:
        if presized is not None:
            presized.close()
        if store is not None:
            store.abort()
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir, ignore_errors=True)
    if store_record and meta.aggregation != "max":
        logger.warning("%s: the re-scoring store serves max aggregation; this index searches with %s by default, "
                       "which does not re-score: search with --aggregation max to use it", index_dir,
                       meta.aggregation)
    logger.info("index %s: %d documents, %d vectors (max %d views), %s%s", index_dir, meta.num_docs,
                meta.num_vectors, meta.max_views, index_factory,
                f", re-scoring store {RESCORE_STORE_FILE} ({store_dtype})" if store_record else "")
    return meta


class RescoreStoreWriter:
    """Writes ``rows`` × ``dim`` vectors, streamed in row order, into a ``.npy`` file (``np.load(mmap_mode="r")``
    reads it).

    The header is written first, sized from the known row count, then each chunk is appended with a plain
    sequential write (memory: one chunk; not a memory map, whose dirty pages would count against the builder).
    The file is written as ``.<name>.partial`` and renamed to its name by :meth:`close` only once every row is
    there; :meth:`abort` removes an unfinished one. A chunk past float16's range is an error, not silent infs.
    """

    def __init__(self, path: Path, dtype: str, rows: int, dim: int):
        self.path, self.dtype, self.rows, self.dim = path, np.dtype(dtype), rows, dim
        self.partial = path.with_name(f".{path.name}.partial")
        self.written = 0
        self._out = self.partial.open("wb")
        np.lib.format.write_array_header_1_0(self._out, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                         "fortran_order": False, "shape": (rows, dim)})

    def add(self, chunk: np.ndarray, source: Path) -> None:
        if self.written + len(chunk) > self.rows:
            raise MultiViewError(f"{source}: the shards hold more than the {self.rows} vectors counted before the "
                                 "build; did they change while the index was built?")
        coded = np.ascontiguousarray(chunk, dtype=self.dtype)
        if self.dtype == np.float16 and not np.isfinite(coded).all():
            raise ConfigError(f"{source}: vectors past float16's range (|x| > 65504) cannot go in an fp16 "
                              "re-scoring store; use --rescore_store fp32")
        self._out.write(coded.tobytes())
        self.written += len(chunk)

    def close(self) -> dict:
        """Finish the file (its rows must all be there) and return its ``multiview.json`` record."""
        if self.written != self.rows:
            raise MultiViewError(f"{self.path}: {self.written} vectors written, {self.rows} counted before the "
                                 "build; did the shards change while the index was built?")
        self._out.close()
        os.replace(self.partial, self.path)
        return {"file": self.path.name, "dtype": self.dtype.name, "rows": self.rows, "dim": self.dim}

    def abort(self) -> None:
        """Close and remove an unfinished file (nothing after :meth:`close`)."""
        self._out.close()
        self.partial.unlink(missing_ok=True)


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


class PresizedIVFAdds:
    """Adds to an IVF index whose inverted lists were sized to their final length first.

    Faiss grows each list by doubling (``std::vector``), so a list holds up to twice its codes and a growing list
    briefly holds both copies: a plain build's peak is up to ~2x the index it writes. A first pass over the shards
    (one at a time) assigns every vector to its list, counts them and writes the assignments (4 bytes per vector)
    to a temporary file; each list is then reserved at its count, and the adds reuse the assignments
    (``IndexIVF.add_core``), so the quantiser runs once, as in ``index.add``, and the index is the one ``add``
    builds, row for row. Only for an ``IndexIVF`` on ``ArrayInvertedLists`` (the CPU IVF indexes); others (a GPU
    index, a pre-transform such as ``PCA64,IVF...``) are added to as usual."""

    def __init__(self, index: faiss.IndexIVF, assignments: Path):
        self.index, self.path = index, assignments
        self._in = assignments.open("rb")

    @classmethod
    def prepare(cls, index: faiss.Index, shards: Sequence[Path], assignments: Path, unsafe_pickle: bool = False
                ) -> PresizedIVFAdds | None:
        if not isinstance(index, faiss.IndexIVF):
            return None
        lists = faiss.downcast_InvertedLists(index.invlists)
        if not isinstance(lists, faiss.ArrayInvertedLists):
            return None
        counts = np.zeros(index.nlist, dtype=np.int64)
        with assignments.open("wb") as out:
            for path in tqdm(shards, desc="index shards: IVF lists", unit="shard"):
                reps = read_shard(path, unsafe_pickle)[0]
                if len(reps) and reps.shape[1] != index.d:
                    raise ShardFormatError(f"{path}: dim {reps.shape[1]} differs from {index.d}")
                for start in range(0, len(reps), ADD_CHUNK):
                    chunk = np.ascontiguousarray(reps[start:start + ADD_CHUNK], dtype=np.float32)
                    assigned = index.quantizer.assign(chunk, 1).ravel()
                    counts += np.bincount(assigned[assigned >= 0], minlength=index.nlist)
                    assigned.astype(np.int32).tofile(out)
        for list_no in np.flatnonzero(counts).tolist():  # resize reserves; shrinking back keeps the capacity
            lists.resize(list_no, int(counts[list_no]))
            lists.resize(list_no, 0)
        logger.info("IVF lists sized for %d vectors", int(counts.sum()))
        return cls(index, assignments)

    def add(self, chunk: np.ndarray) -> None:
        assigned = np.fromfile(self._in, dtype=np.int32, count=len(chunk)).astype(np.int64)
        if len(assigned) != len(chunk):
            raise MultiViewError(f"{self.path}: the shards changed while the index was built")
        self.index.add_core(len(chunk), faiss.swig_ptr(chunk), None, faiss.swig_ptr(assigned))

    def finish(self) -> None:
        """After the last add: every assignment of the first pass must have been used (a shard that shrank between
        the passes would otherwise have put each later vector in another vector's list)."""
        if self._in.read(1):
            raise MultiViewError(f"{self.path}: the shards hold fewer vectors than the first pass assigned; did "
                                 "they change while the index was built?")

    def close(self) -> None:
        """Close and delete the assignments file (it must not end up in the index folder)."""
        self._in.close()
        self.path.unlink(missing_ok=True)


def document_means(reps: np.ndarray, row_doc: np.ndarray) -> np.ndarray:
    """One unit vector per document: the mean of its (contiguous) rows, normalised; float32, in chunks."""
    starts = np.flatnonzero(np.r_[True, row_doc[1:] != row_doc[:-1]])
    out = np.empty((len(starts), reps.shape[1]), dtype=np.float32)
    ends = np.r_[starts[1:], len(row_doc)]
    for lo in range(0, len(starts), ADD_CHUNK):
        hi = min(lo + ADD_CHUNK, len(starts))
        block = np.asarray(reps[starts[lo]:ends[hi - 1]], dtype=np.float32)
        sums = np.add.reduceat(block, starts[lo:hi] - starts[lo], axis=0)
        out[lo:hi] = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return out


def _check_new_docids(seen: SeenIds, docs: np.ndarray, row_doc: np.ndarray, row_offset: int, docid_file: Path,
                      docid_out, multi: bool, path: Path) -> None:
    """Record a shard's documents (by their first row); a docid already in an earlier shard is an error."""
    first_rows = np.flatnonzero(np.r_[True, row_doc[1:] != row_doc[:-1]]) + row_offset if len(row_doc) else []
    clashes = [(d, w) for d, r in zip(docs.tolist(), np.asarray(first_rows).tolist())
               if (w := seen.check_add(d, r)) is not None]
    if not clashes:
        return
    docid_out.flush()  # confirm hash matches against the docid lines written so far
    wanted = {w for _, w in clashes}
    with docid_file.open(encoding="utf-8") as f:
        earlier = {n: line.rstrip("\n") for n, line in enumerate(f) if n in wanted}
    dups = [d for d, w in clashes if w in earlier and split_lookup([earlier[w]], multi)[0] == d]
    if dups:
        raise MultiViewError(f"{path}: docids already in an earlier shard: {sorted(dups)[:5]}")


def _merge_extra(infos: list) -> dict:
    """Shard sidecar facts for the index: the model temperature (when all shards agree), summed counts."""
    extras = [i.extra for i in infos if i is not None and i.extra]
    out: dict = {}
    temps = {e.get("temperature") for e in extras} - {None}
    if len(temps) == 1:
        out["temperature"] = temps.pop()
    sentence_counts = [e["sentences"] for e in extras if "sentences" in e]
    if sentence_counts:
        out["sentences"] = {k: sum(c.get(k, 0) for c in sentence_counts) for k in sentence_counts[0]}
    views = merge_descriptions([i.extra.get(VIEW_INFO_KEY) if i is not None else None for i in infos])
    if views is not None:
        out[VIEW_INFO_KEY] = views
    corpus = input_record(infos)
    if corpus is not None:
        out[INPUT_KEY] = corpus
    return out


INPUT_KEY = "input"  # multiview.json extra: the corpus the shards were encoded from (see input_record)


def input_record(infos: list) -> dict | None:
    """What the shards' fingerprints record of their corpus, when they all agree: ``{"identity"`` (size and
    SHA-256 of its ends, :func:`~multiview_plugin.encoding.fingerprint.file_identity`), ``"separator"``
    (``--passage_field_separator``), ``"source"`` (its path when encoded)``}``; None when unknown."""
    records = {(i.fingerprint.get("input"), i.fingerprint.get("passage_field_separator"), i.source)
               for i in infos if i is not None and i.fingerprint and i.fingerprint.get("input")}
    if len({r[:2] for r in records}) != 1:
        return None
    identity, separator, source = sorted(records, key=str)[0]
    return {"identity": identity, "separator": separator, "source": source}


def recorded_input(meta: IndexMeta) -> dict | None:
    """The corpus the index was encoded from: recorded in ``multiview.json`` (indexes built since that field),
    else read from the fingerprints of its shards' sidecars when they are still where they were."""
    if meta.extra.get(INPUT_KEY):
        return meta.extra[INPUT_KEY]
    if not meta.shards or not all(Path(p).is_file() for p in meta.shards):
        return None
    try:
        return input_record([read_info(p) for p in meta.shards])
    except ShardFormatError:
        return None


def check_corpus_is_indexed(meta: IndexMeta, corpus_path: str, separator: str | None,
                            flag: str = "--corpus_path", index: str = "the index") -> None:
    """Refuse a corpus other than the one the index's vectors were encoded from (same docids, other texts
    would be written as negatives the model never ranked, or fused with dense hits of other texts), or another
    title/text separator (``separator`` None: not checked). ``flag`` names the corpus in the message, ``index``
    the index (a shard of a sharded search names its folder)."""
    recorded = recorded_input(meta)
    if recorded is None:
        logger.warning("%s records no input fingerprint (built before it was recorded, or from shards without "
                       "sidecars): cannot check that %s is the corpus it was encoded from", index, corpus_path)
        return
    identity = file_identity(corpus_path)
    if identity != recorded["identity"]:
        raise ConfigError(f"{flag} {corpus_path}: not the corpus {index} was encoded from "
                          f"({recorded['source']}: {recorded['identity']}; this file: {identity}); its passage "
                          "texts would not be the ones the index ranks. Pass the encoded corpus, or re-encode and "
                          "re-index")
    if separator is not None and recorded["separator"] is not None and recorded["separator"] != separator:
        raise ConfigError(f"--passage_field_separator {separator!r}: the index was encoded with "
                          f"{recorded['separator']!r}; the written passages would differ from the ranked ones")


def _to_gpu(index: faiss.Index) -> faiss.Index:
    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
        logger.warning("no GPU Faiss available (install faiss-gpu); building on CPU")
        return index
    return faiss.index_cpu_to_all_gpus(index)
