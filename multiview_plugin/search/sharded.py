"""Sharded search: K index folders searched as one, in this process or as Ray actors spread over a cluster.

Each shard is an index folder that ``multiview_plugin.driver.index`` built from part of the encoded shards
(e.g. ``--passage_reps 'emb/corpus.0.pkl' --allow_partial``). :class:`ShardedSearcher` sends every query batch
to all shards, each returns its top-k documents, and the per-shard lists are merged by score into the top-k.

Exactness. A document's views never span shards, so for max aggregation the merge of the per-shard top-k is the
top-k of one index over all shards. For exact (Flat) shards the ranking is that of one Flat index built from the
shards, rank for rank and score for score, ties included: every search path orders equal scores by docid
(:func:`~multiview_plugin.search._backend.order_ties`), the shards and the merge alike.
Approximate shards (HNSW, IVF, PQ/SQ) are each searched with their own calibrated settings
(``multiview.json`` ``search_defaults``); each shard keeps its calibrated recall, and a document of the merged
top-k is missed only where its own shard missed it. Aggregations that normalise over the whole collection's top
vectors (``hasans``) are not decomposable over shards and are refused, as is the Qdrant backend (a Qdrant
cluster shards by itself).

Ray (``ray_address``): the shards are served by actors (``shards_per_actor`` each) spread over the nodes
(``SPREAD``), each holding its shards' indexes in memory; the index folders must be reachable at the same paths
from every node. Before any actor is created the cluster's CPUs are compared with actors x ``cpus_per_actor``
(one line saying what is needed, at once). A lost actor (process killed, node lost) is restarted by Ray and the
call retried by Ray (``max_restarts`` / ``max_task_retries``, :func:`~multiview_plugin.ray_runtime.actor_options`):
results are identical; when it cannot come back the search stops with one line naming the lost shard, never
returning fewer hits.

Also the shard set is checked: every index was made by the same model (fingerprint), with the same dim, and the
encoded shards they were built from (``multiview.json`` ``shards``, where their sidecars are still readable)
form complete sets without duplicates (:func:`~multiview_plugin.encoding.shard_sets.check_shard_set`); where
they cannot be read, the indexes' own ``docid`` files must name every document once. One index listed twice (the
same folder, or a copy: the same recorded ``docid`` file) is refused either way.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from multiview_plugin.data.seen_ids import SeenIds
from multiview_plugin.encoding.fingerprint import model_fingerprint
from multiview_plugin.encoding.shard_sets import check_same_model, check_shard_set
from multiview_plugin.encoding.shards import split_lookup
from multiview_plugin.errors import ConfigError
from multiview_plugin.index.folder import DOCID_FILE, META_FILE
from multiview_plugin.index.meta import IndexMeta
from multiview_plugin.progress import progress_bar
from multiview_plugin.ray_runtime import DEFAULT_MAX_RESTARTS, DEFAULT_SEARCH_TIMEOUT, WorkerActor, check_ray_number
from multiview_plugin.search._searcher import DEFAULT_QUERY_BATCH_SIZE, Hit, MultiVectorSearcher, merge_topk
from multiview_plugin.search.aggregators import AGGREGATORS, get_aggregator

logger = logging.getLogger(__name__)


def parse_index_list(value: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Index folders from a comma-separated string (``a,b,c``), ``@FILE`` (one folder per line, relative to the
    file's folder) or a sequence."""
    if isinstance(value, (str, os.PathLike)):
        text = str(value)
        if text.startswith("@"):
            listing = Path(text[1:])
            try:
                lines = listing.read_text(encoding="utf-8").splitlines()
            except OSError as err:
                raise ConfigError(f"--index {text}: cannot read the index list ({err.strerror})") from None
            dirs = [str(listing.parent / line.strip()) for line in lines if line.strip() and not line.startswith("#")]
        else:
            dirs = [part.strip() for part in text.split(",") if part.strip()]
    else:
        dirs = [str(v) for v in value]
    if not dirs:
        raise ConfigError(f"--index {value!r}: no index folders given")
    duplicates = sorted({d for d in dirs if dirs.count(d) > 1})
    if duplicates:
        raise ConfigError(f"--index: {duplicates[0]} is given twice (its documents would be counted twice)")
    return dirs


def check_distinct_folders(index_dirs: Sequence[str], metas: Sequence[IndexMeta]) -> None:
    """Refuse one index listed twice under two names: the same folder (through links), or a copy (its recorded
    ``docid`` file identity, size and sampled SHA-256, is another listed index's)."""
    seen: dict[str, str] = {}
    for folder, meta in zip(index_dirs, metas):
        keys = [f"path {os.path.realpath(folder)}"]
        recorded = (meta.files or {}).get(DOCID_FILE)
        if recorded is not None:
            keys.append(f"docid file {recorded}")
        for key in keys:
            if key in seen:
                raise ConfigError(f"--index: {folder} and {seen[key]} are the same index (same {key.split(' ')[0]}"
                                  f"{' identity' if key.startswith('docid') else ''}): its documents would be "
                                  "counted twice; list each shard index once")
            seen[key] = folder


def check_documents_once(index_dirs: Sequence[str], metas: Sequence[IndexMeta], chunk: int = 65_536) -> None:
    """Refuse a document in two shard indexes, read from the indexes' own ``docid`` files (streamed; memory ~28
    bytes per document, :class:`~multiview_plugin.data.seen_ids.SeenIds`): the check for when the encoded shards
    the indexes were built from cannot be read."""
    seen = SeenIds()
    for i, (folder, meta) in enumerate(zip(index_dirs, metas)):
        path = Path(folder) / DOCID_FILE
        for n, doc in _documents(path, meta.multi_vector, chunk):
            first = seen.check_add(doc, i * _LINES + n)
            if first is None:
                continue
            j, line = divmod(first, _LINES)  # a hash match: confirm it against the document first seen there
            earlier = next(d for m, d in _documents(Path(index_dirs[j]) / DOCID_FILE, metas[j].multi_vector, chunk)
                           if m == line)
            if earlier == doc:
                raise ConfigError(f"--index: document {doc!r} is in {index_dirs[j]} and in {folder} (their docid "
                                  "files): the shard indexes overlap, so its hits would be counted twice; list "
                                  "shard indexes built from disjoint encoded shards")


_LINES = 1 << 40  # docid-file lines per index in SeenIds' "where" (index number x _LINES + line)


def _documents(path: Path, multi: bool, chunk: int):
    """(line number, docid) of the first line of every document of an index's ``docid`` file."""
    previous = None
    try:
        with path.open(encoding="utf-8") as f:
            n = 0
            while lines := [line.rstrip("\n") for line in itertools.islice(f, chunk)]:
                for k, doc in enumerate(split_lookup(lines, multi).tolist() if multi else lines):
                    if doc != previous:
                        yield n + k, doc
                    previous = doc
                n += len(lines)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the index's docid file ({err.strerror})") from None


class ShardServer(WorkerActor):
    """A Ray actor serving some shard index folders (each a :class:`MultiVectorSearcher` without encoder).

    An error while opening them is kept and raised by every call, so it reaches the caller as itself."""

    def __init__(self, index_dirs: Sequence[str], options: dict[str, Any], threads: int):
        self.error: BaseException | None = None
        try:
            import faiss

            if threads > 0:
                faiss.omp_set_num_threads(threads)
            self.searchers = [MultiVectorSearcher(d, None, **options) for d in index_dirs]
        except Exception as err:  # noqa: BLE001 - re-raised by every call
            self.error = err

    def search(self, q_reps: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        self.ping()
        return [s.search_vectors(q_reps, k) for s in self.searchers]


class ShardedSearcher:
    """Search K shard index folders as one index, Pyserini style (``search`` / ``batch_search``).

    Parameters
    ----------
    index_dirs : the shard folders, in the order one index over all of them would hold them (a list, ``a,b,c``
        or ``@FILE``).
    query_encoder : a saved model folder or loaded encoder for query strings (run in this process); None to
        search with vectors only.
    ray_address : None: the shards are searched in this process, one after another. Else a Ray address
        (``auto``, ``host:port``, ``ray://host:10001``, ``local``; see
        :func:`multiview_plugin.ray_runtime.ray_session`): the shards are served by Ray actors spread over the
        cluster's nodes.
    shards_per_actor, cpus_per_actor, threads : Ray: shard folders per actor, CPUs each actor reserves, Faiss
        threads in each actor.
    max_restarts, timeout : Ray: how often a lost actor is restarted (and its call retried), and the seconds a
        call may take (or a lost actor may take to come back) before the search stops naming the lost shard.
    aggregation, nprobe, ef_search, overfetch, rescore, doc_candidates : as :class:`MultiVectorSearcher`, applied
        to every shard (None: each shard's own recorded/calibrated setting).
    allow_partial : accept shard indexes whose encoded shards do not form complete sets.

    Examples
    --------
    >>> with ShardedSearcher("idx/s0,idx/s1,idx/s2", "runs/mvr", ray_address="auto") as searcher:  # doctest: +SKIP
    ...     hits = searcher.search("who won super bowl 50?", k=10)
    """

    def __init__(self, index_dirs: str | os.PathLike | Sequence[str | os.PathLike], query_encoder: Any = None, *,
                 ray_address: str | None = None, shards_per_actor: int = 1, cpus_per_actor: float = 1.0,
                 threads: int = 1, max_restarts: int = DEFAULT_MAX_RESTARTS, timeout: float = DEFAULT_SEARCH_TIMEOUT,
                 aggregation: str | None = None,
                 nprobe: int | None = None, ef_search: int | None = None, overfetch: float | None = None,
                 rescore: bool | None = None, doc_candidates: float | None = None, allow_partial: bool = False,
                 device: str | None = None, query_batch_size: int = DEFAULT_QUERY_BATCH_SIZE):
        check_sharded_ray_options(shards_per_actor, cpus_per_actor, max_restarts, timeout)
        self.index_dirs = parse_index_list(index_dirs)
        self.metas = [IndexMeta.load(d) for d in self.index_dirs]
        self.meta = self.metas[0]
        self.aggregation = self._check_shards(aggregation, allow_partial)
        self.aggregator = get_aggregator(self.aggregation)
        self.options = {"aggregation": aggregation, "nprobe": nprobe, "ef_search": ef_search,
                        "overfetch": overfetch, "rescore": rescore, "doc_candidates": doc_candidates}
        self.ray_address = ray_address
        self.max_restarts, self.timeout = max_restarts, timeout
        self.query_batch_size = query_batch_size
        self._stack = ExitStack()
        self._local: list[MultiVectorSearcher] = []
        self.actors: list[Any] = []
        self.actor_shards: list[list[str]] = []
        try:
            if ray_address is None:
                self._local = [MultiVectorSearcher(d, None, **self.options) for d in self.index_dirs]
            else:
                self._start_actors(ray_address, shards_per_actor, cpus_per_actor, threads)
            self.encoder = self._load_encoder(query_encoder, device)
        except BaseException:
            self.close()
            raise

    # -- set-up -------------------------------------------------------------------------------------------------
    def _check_shards(self, aggregation: str | None, allow_partial: bool) -> str:
        where = [str(Path(d) / META_FILE) for d in self.index_dirs]
        for path, meta in zip(where, self.metas):
            if meta.backend != "faiss":
                raise ConfigError(f"{path}: a {meta.backend} index; sharded search serves Faiss index folders (a "
                                  "Qdrant collection is sharded by its own cluster: search it as one --index)")
            if meta.dim != self.meta.dim:
                raise ConfigError(f"{path}: {meta.dim}-dim vectors, but {where[0]} holds {self.meta.dim}-dim ones")
            if meta.model_fingerprint is not None and self.meta.model_fingerprint is not None:
                check_same_model((where[0], self.meta.model_fingerprint), (path, meta.model_fingerprint))
            chosen = aggregation or meta.aggregation
            if chosen not in AGGREGATORS:
                raise ConfigError(f"{path}: unknown aggregation {chosen!r}; known: {', '.join(sorted(AGGREGATORS))}")
            if not get_aggregator(chosen).exact_with_distinct_k:
                raise ConfigError(f"{path}: {chosen} aggregation normalises over the whole collection's top vectors, "
                                  "so per-shard top-k lists cannot be merged; search shards with --aggregation max "
                                  "or build one index")
        unknown = [path for path, meta in zip(where, self.metas) if meta.model_fingerprint is None]
        if unknown:
            logger.warning("%d shard indexes record no model fingerprint (e.g. %s): cannot check that one model made "
                           "them all", len(unknown), unknown[0])
        check_distinct_folders(self.index_dirs, self.metas)
        encoded = [s for meta in self.metas for s in meta.shards]
        missing = [s for s in encoded if not Path(s).is_file()]
        if encoded and not missing:
            check_shard_set(encoded, allow_partial)  # foreign, duplicate or missing encoded shards
        else:  # the indexes' own records: every docid in one index only
            logger.info("checking the shard indexes' docid files for documents in two of them (%s)",
                        f"{missing[0]}, recorded in an index's {META_FILE}, is not readable from here" if missing
                        else f"no encoded shards are recorded in {META_FILE}")
            check_documents_once(self.index_dirs, self.metas)
        return aggregation or self.meta.aggregation

    def _start_actors(self, address: str, shards_per_actor: int, cpus_per_actor: float, threads: int) -> None:
        from multiview_plugin.ray_runtime import actor_options, check_resources, get_result, ray_session

        absolute = [os.path.abspath(d) for d in self.index_dirs]  # actors run elsewhere: no relative paths
        self.actor_shards = [absolute[i:i + shards_per_actor] for i in range(0, len(absolute), shards_per_actor)]
        options = actor_options(num_cpus=cpus_per_actor, num_gpus=0, max_restarts=self.max_restarts)
        ray = self._stack.enter_context(ray_session(address))
        check_resources(ray, len(self.actor_shards), cpus_per_actor, 0, "shard actors",
                        "--ray_cpus_per_actor, raise --ray_shards_per_actor")
        remote = ray.remote(ShardServer).options(**options)
        self.actors = [remote.remote(group, self.options, threads) for group in self.actor_shards]
        refs = [actor.ping.remote() for actor in self.actors]
        for i, ref in enumerate(refs):  # every shard is open (or its error is raised) before searching
            get_result(ref, self._what(i), self.timeout, retry=self.actors[i].ping.remote)
        logger.info("sharded search: %d shards on %d Ray actors", len(self.index_dirs), len(self.actors))

    def _load_encoder(self, query_encoder: Any, device: str | None) -> Any:
        if query_encoder is None:
            return None
        import torch

        from multiview_plugin.modeling.base import MultiViewEncoder
        from multiview_plugin.modeling.persistence import load_encoder

        encoder = query_encoder if isinstance(query_encoder, MultiViewEncoder) else load_encoder(query_encoder)
        if self.meta.model_fingerprint is not None:
            check_same_model((str(Path(self.index_dirs[0]) / META_FILE), self.meta.model_fingerprint),
                             (str(query_encoder) if encoder is not query_encoder else "the query encoder",
                              model_fingerprint(encoder)))
        return encoder.to(torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))).eval()

    def _what(self, actor: int) -> str:
        shards = self.actor_shards[actor]
        return f"shard index {shards[0]}" if len(shards) == 1 else f"shard indexes {', '.join(shards)}"

    # -- searching ----------------------------------------------------------------------------------------------
    @property
    def num_docs(self) -> int:
        return sum(m.num_docs for m in self.metas)

    @property
    def dim(self) -> int:
        return self.meta.dim

    def placement(self) -> dict[str, str]:
        """Ray: each shard folder's node id (where its actor runs now)."""
        from multiview_plugin.ray_runtime import get_result

        out = {}
        for i, actor in enumerate(self.actors):
            out.update(dict.fromkeys(self.actor_shards[i], get_result(actor.node.remote(), self._what(i),
                                                                      self.timeout, retry=actor.node.remote)))
        return out

    def search_vectors(self, q_reps: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """(docids (Q, k) object array, None padded; scores (Q, k)), merged over all shards."""
        if k < 1:
            raise ConfigError(f"k must be a positive number of documents per query, got {k}")
        q_reps = np.ascontiguousarray(q_reps, dtype=np.float32)
        if q_reps.ndim != 2 or q_reps.shape[1] != self.dim:
            raise ConfigError(f"query vectors have shape {q_reps.shape}, the shard indexes expect (N, {self.dim})")
        if not self.actors:
            return merge_topk([s.search_vectors(q_reps, k) for s in self._local], k)
        from multiview_plugin.ray_runtime import get_result, require_ray

        ray = require_ray()
        q_ref = ray.put(q_reps)
        refs = [actor.search.remote(q_ref, k) for actor in self.actors]  # fan out first, then collect
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        for i, ref in enumerate(refs):  # a call lost with its actor is retried by Ray once the actor is back,
            again = self.actors[i].search.remote  # and by us while Ray calls the actor temporarily unavailable
            parts.extend(get_result(ref, self._what(i), self.timeout, retry=lambda a=again: a(q_ref, k)))
        return merge_topk(parts, k)

    def search_batched(self, q_reps: np.ndarray, k: int, batch_size: int | None = None,
                       progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search_vectors` over ``batch_size`` queries at a time (None / <= 0: all at once)."""
        step = batch_size if batch_size and batch_size > 0 else max(1, len(q_reps))
        starts = progress_bar(range(0, len(q_reps), step), desc="search", unit="batch", enabled=progress)
        parts = [self.search_vectors(q_reps[i:i + step], k) for i in starts]
        if not parts:
            return np.empty((0, k), dtype=object), np.empty((0, k), dtype=np.float32)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def encode(self, queries: Sequence[str]) -> np.ndarray:
        if self.encoder is None:
            raise ConfigError("this searcher has no query encoder: pass query_encoder= or search with vectors")
        return self.encoder.encode_queries(list(queries), self.query_batch_size)

    def search(self, query: str | np.ndarray, k: int = 10) -> list[Hit]:
        """Top-k documents over all shards (Pyserini's ``search``)."""
        q = self.encode([query]) if isinstance(query, str) else np.asarray(query, dtype=np.float32).reshape(1, -1)
        return _hits(*self.search_vectors(q, k))[0]

    def batch_search(self, queries: Sequence[str] | np.ndarray, q_ids: Sequence[str], k: int = 10,
                     threads: int = 1) -> dict[str, list[Hit]]:
        """Pyserini's ``batch_search``: {qid: hits}. ``threads`` is accepted for its signature (each shard
        searches with the threads it was given)."""
        if len(queries) != len(q_ids):
            raise ConfigError(f"{len(queries)} queries but {len(q_ids)} query ids")
        q = queries if isinstance(queries, np.ndarray) else self.encode(list(queries))
        return dict(zip(q_ids, _hits(*self.search_vectors(q, k))))

    def close(self) -> None:
        """Stop the actors (and the Ray connection this searcher opened)."""
        if self.actors:
            from multiview_plugin.ray_runtime import require_ray

            ray = require_ray()
            for actor in self.actors:
                ray.kill(actor)
            self.actors = []
        self._stack.close()

    def __enter__(self) -> ShardedSearcher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def check_sharded_ray_options(shards_per_actor: int, cpus_per_actor: float, max_restarts: int,
                              timeout: float) -> None:
    """The Ray options of a sharded search, before anything starts: finite and in range (one line each)."""
    check_ray_number(shards_per_actor, "--ray_shards_per_actor", minimum=1, inclusive=True)
    check_ray_number(cpus_per_actor, "--ray_cpus_per_actor")
    check_ray_number(max_restarts, "--ray_max_restarts", inclusive=True)
    check_ray_number(timeout, "--ray_timeout")


def _hits(docids: np.ndarray, scores: np.ndarray) -> list[list[Hit]]:
    return [[Hit(d, float(s)) for d, s in zip(row_d, row_s) if d is not None]
            for row_d, row_s in zip(docids.tolist(), scores.tolist())]
