"""Making and training the Faiss index of a build: ``index_factory`` strings for inner product, one-line errors
for what Faiss refuses, the training sample drawn across shards, and two-level k-means for IVF indexes with many
lists (:func:`train_ivf_two_level`)."""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

from multiview_plugin.encoding.shards import ShardFormatError, read_shard
from multiview_plugin.errors import ConfigError

logger = logging.getLogger(__name__)


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


def hnsw_graphs(index: faiss.Index | None, quantisers: bool = True) -> list:
    """Every HNSW graph of a Faiss index: the index itself (``HNSW32``, ``HNSW32,SQ8``), an IVF index's HNSW
    quantiser (``IVF4096_HNSW32,SQ8``; left out with ``quantisers=False``: its beam does not search the rows), also
    behind a pre-transform (``PCA64,HNSW32``) or a refinement; [] for none (``Flat``, ``IVF1024,Flat``). Each is a
    downcast view: keep ``index`` alive while using it."""
    if index is None:
        return []
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexHNSW):
        return [index]
    if isinstance(index, faiss.IndexPreTransform):
        return hnsw_graphs(index.index, quantisers)
    if isinstance(index, faiss.IndexRefine):
        return hnsw_graphs(index.base_index, quantisers)
    ivf = faiss.try_extract_index_ivf(index) if quantisers else None
    return hnsw_graphs(ivf.quantizer) if ivf is not None else []


def set_hnsw_construction(indexes: list[faiss.Index | None], ef_construction: int, factories: str) -> None:
    """Build every HNSW graph of ``indexes`` with the construction beam ``ef_construction`` (Faiss's
    ``efConstruction``, stored in the index file); set before anything is added or trained (an IVF index's HNSW
    quantiser is built when its centroids are trained). ``indexes`` without any HNSW graph is a one-line error
    naming ``factories``."""
    graphs = [g for index in indexes for g in hnsw_graphs(index)]
    if not graphs:
        raise ConfigError(f"--hnsw_ef_construction {ef_construction}: {factories} has no HNSW graph (HNSW32, "
                          "HNSW32,SQ8, IVF4096_HNSW32,... have one); drop the flag")
    for graph in graphs:
        graph.hnsw.efConstruction = ef_construction


def construction_beam(indexes: list[faiss.Index | None]) -> int | None:
    """The narrowest construction beam of the HNSW graphs in ``indexes`` (None: no graph)."""
    beams = [int(g.hnsw.efConstruction) for index in indexes for g in hnsw_graphs(index)]
    return min(beams) if beams else None


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
    ``tests/index/test_faiss_build.py``)."""
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


def shard_sizes(shards: Sequence[Path], infos: list, unsafe_pickle: bool = False) -> list[int]:
    """Vectors per shard: from the sidecar, else by reading the shard (one at a time)."""
    return [info.num_vectors if info else read_shard(p, unsafe_pickle)[0].shape[0] for p, info in zip(shards, infos)]


def sample_for_training(shards: list[Path], sizes: list[int], size: int, seed: int, unsafe_pickle: bool = False
                         ) -> np.ndarray:
    """``size`` vectors drawn across ``shards`` in proportion to their ``sizes`` (:func:`shard_sizes`)."""
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


def to_gpu(index: faiss.Index) -> faiss.Index:
    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
        logger.warning("no GPU Faiss available (install faiss-gpu); building on CPU")
        return index
    return faiss.index_cpu_to_all_gpus(index)
