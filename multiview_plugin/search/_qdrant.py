"""A Qdrant backend for multi-vector indexes (``pip install 'multiview_plugin[qdrant]'``).

Data model: one Qdrant point per document. The point holds

* ``views``: the document's view vectors as a *multivector* compared with ``MAX_SIM`` (inner product). With one
  query vector, Qdrant's MAX_SIM (the ColBERT late-interaction sum over query vectors of the max over document
  vectors) is exactly max-over-views, the ``max`` aggregation of the Faiss searcher. No HNSW graph is built
  over it (``m=0``): it is only used to score candidates, or scanned in exact mode.
* ``doc``: one document-level vector, the normalised mean of the views, indexed with HNSW: approximate search
  takes its top ``max(doc_candidates × k, min_doc_candidates)`` documents as candidates (a ``prefetch``) and
  ranks them by MAX_SIM over all their views, the same two stages as the Faiss ``doc_index``.
* payload ``docid`` (a keyword payload index on servers); the point id is ``uuid5(namespace, docid)``, so
  re-ingesting a document overwrites its point instead of duplicating it.

The index folder holds ``multiview.json`` (``backend: "qdrant"`` and where the collection lives), the ``docid``
file (one line per view, as for Faiss: it fixes the order of documents and their view counts) and, for dcsr,
``views.npy``. The collection's own metadata records the shards' model identity, so a collection built from
another model's vectors is refused. Ingest streams shard by shard in bounded batches; it is idempotent
(deterministic ids) and resumable: points already present are skipped, and ``multiview.json`` is written last.

Embedded mode (``QdrantClient(path=...)`` or ``":memory:"``) is qdrant-client's local mode: exact brute force in
numpy, no HNSW (the prefetch is an exact top-C over the document vectors), for tests and small corpora.
"""

from __future__ import annotations

import json
import logging
import math
import os
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from multiview_plugin.data.seen_ids import SeenIds
from multiview_plugin.encoding.shard_sets import check_same_model, model_identity
from multiview_plugin.encoding.shards import ShardFormatError, read_shard, shard_view_ids, split_lookup
from multiview_plugin.encoding.view_info import INDEX_VIEWS_FILE, VIEW_INFO_KEY, concat_rows
from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.paths import refuse_output_over_input
from multiview_plugin.search._backend import SearchBackend
from multiview_plugin.search._index import (
    DEFAULT_AGGREGATION,
    DOC_INDEX_FILE,
    DOCID_FILE,
    INDEX_FILE,
    INDEX_FOLDER_FILES,
    META_FILE,
    IndexMeta,
    _check_new_docids,
    _merge_extra,
    contiguous_docs,
    document_means,
    passage_shard_infos,
)
from multiview_plugin.search.aggregators import Aggregator
from multiview_plugin.search.calibrate import MIN_DOC_CANDIDATES

logger = logging.getLogger(__name__)

BACKEND = "qdrant"
QDRANT_DIR = "qdrant"  # default embedded storage, inside the index folder
MEMORY = ":memory:"
VIEWS_VECTOR, DOC_VECTOR = "views", "doc"
MARKER = "multiview_plugin"  # key of the collection metadata written here
POINT_NAMESPACE = uuid.UUID("6f2d1c9e-3b0a-5c1e-9a55-6d7669657721")  # uuid5 namespace of point ids
INGEST_BATCH = 256  # documents per upsert
QUERY_BATCH = 64  # queries per query_batch_points call

_EMBEDDED: dict[str, Any] = {}  # one local client per storage folder (local mode locks the folder)


def require_qdrant() -> tuple[Any, Any]:
    """(``qdrant_client`` module, its ``models``); a one-line error when the extra is not installed."""
    try:
        import qdrant_client
        from qdrant_client import models
    except ImportError:
        raise ConfigError("the Qdrant backend needs qdrant-client: pip install 'multiview_plugin[qdrant]'") from None
    return qdrant_client, models


def point_id(docid: str) -> str:
    """The point id of a document: a UUID derived from its docid (stable across runs and machines)."""
    return str(uuid.uuid5(POINT_NAMESPACE, str(docid)))


@dataclass
class QdrantSettings:
    """Where a collection lives and how it was created (recorded in ``multiview.json`` under ``qdrant``).

    ``path``: embedded storage folder (relative paths are relative to the index folder), ``":memory:"``, or None
    with ``url`` (a Qdrant server or cluster; the API key comes from ``$QDRANT_API_KEY``).
    """

    collection: str
    path: str | None = None
    url: str | None = None
    shard_number: int | None = None
    replication_factor: int | None = None
    on_disk: bool = False
    hnsw_m: int = 16
    ef_construct: int = 100

    @property
    def embedded(self) -> bool:
        return self.url is None

    def where(self, index_dir: Path | None = None) -> str:
        if self.url:
            return f"collection {self.collection!r} at {self.url}"
        return f"collection {self.collection!r} in {self.storage(index_dir)}"

    def storage(self, index_dir: Path | None) -> str:
        if self.path is None or self.path == MEMORY:
            return MEMORY
        p = Path(self.path)
        return str(p if p.is_absolute() or index_dir is None else Path(index_dir) / p)

    def connect(self, index_dir: Path | None = None) -> Any:
        qdrant_client, _ = require_qdrant()
        if self.url:
            return qdrant_client.QdrantClient(url=self.url, api_key=os.environ.get("QDRANT_API_KEY") or None)
        where = self.storage(index_dir)
        key = where if where == MEMORY else str(Path(where).resolve())
        client = _EMBEDDED.get(key)
        if client is None or getattr(client, "closed", False) or getattr(client._client, "closed", False):
            client = qdrant_client.QdrantClient(MEMORY) if where == MEMORY else qdrant_client.QdrantClient(path=where)
            _EMBEDDED[key] = client
        return client


def close_embedded(path: str | os.PathLike | None = None) -> None:
    """Close the cached embedded client of ``path`` (all of them with None), releasing its folder lock."""
    keys = list(_EMBEDDED) if path is None else [str(Path(path).resolve()) if str(path) != MEMORY else MEMORY]
    for key in keys:
        client = _EMBEDDED.pop(key, None)
        if client is not None:
            client.close()


def _collection_marker(client: Any, name: str) -> dict | None:
    metadata = client.get_collection(name).config.metadata or {}
    return metadata.get(MARKER)


def _upsert(client: Any, collection: str, points: list) -> None:
    """One bounded batch, acknowledged before the next (``wait=True``)."""
    client.upsert(collection, points=points, wait=True)


def _create_collection(client: Any, settings: QdrantSettings, dim: int, marker: dict) -> None:
    _, models = require_qdrant()
    views = models.VectorParams(
        size=dim, distance=models.Distance.DOT, on_disk=settings.on_disk or None,
        multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
        hnsw_config=models.HnswConfigDiff(m=0))  # scored, never searched by graph
    doc = models.VectorParams(size=dim, distance=models.Distance.DOT, on_disk=settings.on_disk or None,
                              hnsw_config=models.HnswConfigDiff(m=settings.hnsw_m, ef_construct=settings.ef_construct))
    client.create_collection(settings.collection, vectors_config={VIEWS_VECTOR: views, DOC_VECTOR: doc},
                             shard_number=settings.shard_number, replication_factor=settings.replication_factor,
                             on_disk_payload=settings.on_disk or None, metadata={MARKER: marker})
    if not settings.embedded:  # local mode has no payload indexes (and warns)
        client.create_payload_index(settings.collection, "docid", models.PayloadSchemaType.KEYWORD, wait=True)


def _open_collection(client: Any, settings: QdrantSettings, dim: int, identity: dict, where_shards: str,
                     overwrite: bool, index_dir: Path) -> int:
    """Create the collection, or reopen one this tool built from the same model (resume); returns the points
    already in it. A collection not made here is never touched; one of another model is refused."""
    name, where = settings.collection, settings.where(index_dir)
    marker = {"model": identity, "dim": dim, "complete": False}
    if not client.collection_exists(name):
        _create_collection(client, settings, dim, marker)
        return 0
    found = _collection_marker(client, name)
    if found is None:
        raise ConfigError(f"{where} exists and was not created by multiview_plugin; it is left untouched: choose "
                          "another --qdrant_collection")
    if overwrite:
        logger.info("--overwrite: deleting %s", where)
        client.delete_collection(name)
        _create_collection(client, settings, dim, marker)
        return 0
    try:
        check_same_model((where, found.get("model") or {}), (where_shards, identity))
    except ShardFormatError as e:
        raise ConfigError(f"{e} (the collection was built from the other model: pass --overwrite to rebuild it, "
                          "or another --qdrant_collection)") from None
    if found.get("dim") != dim:
        raise ConfigError(f"{where} holds {found.get('dim')}-dim vectors, the shards {dim}: pass --overwrite or "
                          "another --qdrant_collection")
    present = client.count(name, exact=True).count
    logger.info("resuming: %s already holds %d documents; they are skipped", where, present)
    return present


def _relative_path(path: str | os.PathLike, index_dir: Path) -> str:
    p = Path(path).resolve()
    try:
        return str(p.relative_to(index_dir.resolve()))
    except ValueError:
        return str(p)


def build_qdrant_index(
    shards: list[str | os.PathLike],
    index_dir: str | os.PathLike,
    qdrant_path: str | os.PathLike | None = None,
    qdrant_url: str | None = None,
    collection: str | None = None,
    shard_number: int | None = None,
    replication_factor: int | None = None,
    on_disk: bool = False,
    aggregation: str | None = None,
    overwrite: bool = False,
    allow_partial: bool = False,
    unsafe_pickle: bool = False,
    batch_size: int = INGEST_BATCH,
    hnsw_m: int = 16,
    ef_construct: int = 100,
) -> IndexMeta:
    """Ingest encoded passage shards into a Qdrant collection and write the index folder (module docstring).

    ``qdrant_url`` targets a server or cluster (``shard_number`` / ``replication_factor`` / ``on_disk`` apply when
    the collection is created); otherwise embedded storage at ``qdrant_path`` (default ``INDEX_DIR/qdrant``;
    ``":memory:"`` lives as long as the process). ``collection`` defaults to the index folder's name.
    Rerunning after an interruption resumes; ``overwrite`` rebuilds (deleting only a collection built here).
    """
    require_qdrant()
    _, models = require_qdrant()
    paths = [Path(p) for p in shards]
    if not paths:
        raise ShardFormatError("no shards given")
    for p in paths:
        if not p.is_file():
            raise ShardFormatError(f"shard {p} does not exist")
    if batch_size < 1:
        raise ConfigError(f"the ingest batch size must be >= 1, got {batch_size}")
    index_dir = Path(index_dir)
    refuse_output_over_input({"--index_dir": index_dir}, {"--passage_reps": paths}, folder_outputs=["--index_dir"])
    if (index_dir / META_FILE).exists() and not overwrite:
        raise ConfigError(f"{index_dir} already holds an index (pass overwrite=True / --overwrite)")
    if index_dir.is_dir():  # resuming is fine; a folder holding anything this tool did not write is not
        own = {*INDEX_FOLDER_FILES, QDRANT_DIR, f".{DOCID_FILE}.tmp", f".{META_FILE}.tmp"}
        foreign = sorted(p.name for p in index_dir.iterdir() if p.name not in own)
        if foreign:
            raise ConfigError(f"{index_dir} holds {', '.join(foreign[:3])}, which this tool did not write; choose a "
                              "new or empty --index_dir")
    infos, model_name = passage_shard_infos(paths, allow_partial)
    aggregation = aggregation or DEFAULT_AGGREGATION.get(model_name, "max")
    if aggregation != "max":
        raise ConfigError(f"the Qdrant backend ranks documents by max over their views (MAX_SIM); {aggregation} "
                          "aggregation needs the collection's top vectors: pass --aggregation max or use Faiss")
    known = next((i for i in infos if i is not None), None)
    identity = model_identity(known) if known is not None else {}
    multi = any(i is not None and i.multi_vector for i in infos)

    if qdrant_url:
        settings = QdrantSettings(collection or index_dir.name, None, qdrant_url, shard_number, replication_factor,
                                  on_disk, hnsw_m, ef_construct)
    else:
        if shard_number or replication_factor:
            logger.warning("--qdrant_shards / --qdrant_replication apply to a server or cluster (--qdrant_url); "
                           "embedded storage has one shard")
        path = MEMORY if str(qdrant_path) == MEMORY else _relative_path(qdrant_path or index_dir / QDRANT_DIR,
                                                                       index_dir)
        settings = QdrantSettings(collection or index_dir.name, path, None, None, None, on_disk, hnsw_m, ef_construct)
    index_dir.mkdir(parents=True, exist_ok=True)
    if overwrite:  # files an earlier build of either backend wrote here; nothing else is removed
        for name in (META_FILE, INDEX_FILE, DOC_INDEX_FILE, DOCID_FILE, INDEX_VIEWS_FILE):
            (index_dir / name).unlink(missing_ok=True)
    client = settings.connect(index_dir)
    where = settings.where(index_dir)

    seen = SeenIds()
    num_docs = num_vectors = skipped = 0
    view_counts: list[np.ndarray] = []
    dim: int | None = next((i.dim for i in infos if i is not None and i.num_vectors), None)
    opened = False
    tmp_docids = index_dir / f".{DOCID_FILE}.tmp"
    try:
        with tmp_docids.open("w", encoding="utf-8") as docid_out:
            for path in tqdm(paths, desc="qdrant ingest", unit="shard"):
                reps, lookup, info = read_shard(path, unsafe_pickle)
                shard_multi = shard_view_ids(path, lookup, info)  # without a sidecar: inferred, with a warning
                multi = multi or shard_multi
                docs, row_doc = contiguous_docs(split_lookup(lookup, shard_multi), str(path))
                _check_new_docids(seen, docs, row_doc, num_vectors, tmp_docids, docid_out, shard_multi, path)
                if not len(reps):
                    continue
                if dim is None:
                    dim = int(reps.shape[1])
                elif reps.shape[1] != dim:
                    raise ShardFormatError(f"{path}: dim {reps.shape[1]} differs from {dim}")
                if not opened:
                    present = _open_collection(client, settings, dim, identity, str(path), overwrite, index_dir)
                    opened = True
                starts = np.flatnonzero(np.r_[True, row_doc[1:] != row_doc[:-1]])
                ends = np.r_[starts[1:], len(row_doc)]
                for lo in range(0, len(docs), batch_size):
                    hi = min(lo + batch_size, len(docs))
                    ids = [point_id(d) for d in docs[lo:hi].tolist()]
                    have = ({str(r.id) for r in client.retrieve(settings.collection, ids, with_payload=False,
                                                                  with_vectors=False)} if present else set())
                    base = int(starts[lo])
                    block = np.asarray(reps[base:int(ends[hi - 1])], dtype=np.float32)
                    means = document_means(block, row_doc[base:int(ends[hi - 1])])
                    points = [models.PointStruct(
                        id=pid, vector={VIEWS_VECTOR: block[int(starts[j]) - base:int(ends[j]) - base].tolist(),
                                        DOC_VECTOR: means[j - lo].tolist()},
                        payload={"docid": str(docs[j]), "views": int(ends[j] - starts[j])})
                        for j, pid in zip(range(lo, hi), ids) if pid not in have]
                    skipped += (hi - lo) - len(points)
                    if points:
                        _upsert(client, settings.collection, points)
                docid_out.write("\n".join(lookup) + "\n" if lookup else "")
                num_docs += len(docs)
                num_vectors += len(lookup)
                view_counts.append(np.bincount(row_doc))
        if not opened:
            raise ShardFormatError(f"no vectors: all {len(paths)} shard(s) are empty")
        count = client.count(settings.collection, exact=True).count
        if count != num_docs:
            raise MultiViewError(f"{where} holds {count} documents but the shards have {num_docs}: it holds "
                                 "documents of another shard set; rebuild it with --overwrite")
        client.update_collection(settings.collection, metadata={MARKER: {"model": identity, "dim": dim,
                                                                          "complete": True, "num_docs": num_docs}})
        counts = np.concatenate(view_counts)
        os.replace(tmp_docids, index_dir / DOCID_FILE)
        extra = _merge_extra(infos)
        if extra.get(VIEW_INFO_KEY, {}).get("rows") and not concat_rows(paths, index_dir / INDEX_VIEWS_FILE,
                                                                         num_vectors):
            extra[VIEW_INFO_KEY]["rows"] = False
        meta = IndexMeta(
            dim=int(dim), num_docs=num_docs, num_vectors=num_vectors, max_views=int(counts.max()),
            mean_views=float(counts.mean()),
            views_per_doc=int(counts[0]) if (counts == counts[0]).all() else "variable",
            aggregation=aggregation, model_name=model_name, index_factory=BACKEND, shards=[str(p) for p in paths],
            extra=extra, view_ids=multi, model_fingerprint=identity if known is not None and known.fingerprint
            else None, backend=BACKEND, qdrant=asdict(settings))
        if not multi and meta.max_views > 1:
            raise ShardFormatError("single-vector shards hold several rows for one docid")
        tmp_meta = index_dir / f".{META_FILE}.tmp"
        tmp_meta.write_text(json.dumps(asdict(meta), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp_meta, index_dir / META_FILE)  # last: the folder is complete
    finally:
        tmp_docids.unlink(missing_ok=True)
    logger.info("qdrant index %s: %d documents, %d vectors (max %d views) in %s; %d already present (resumed)",
                index_dir, num_docs, num_vectors, meta.max_views, where, skipped)
    return meta


QDRANT_SEARCH_KNOBS = {"doc_candidates": "doc_candidates", "min_doc_candidates": "min_doc_candidates",
                       "ef_search": "hnsw_ef"}  # search_defaults' name → the QdrantStore attribute


class QdrantStore(SearchBackend):
    """Search a Qdrant collection built by :func:`build_qdrant_index` (max over views).

    ``exact``: score every document by MAX_SIM over all its views (a full scan; equals the Faiss Flat searcher).
    Otherwise candidates are the top ``max(doc_candidates × k, min_doc_candidates)`` documents by the document
    vector (HNSW with ``hnsw_ef``, at least the candidate count, on a server), re-scored by MAX_SIM over all
    their views. Failure mode: a document whose views' mean is far from the query while one view is close
    falls outside the candidates (``bench/qdrant.py`` measures the recall kept).
    """

    def __init__(self, client: Any, settings: QdrantSettings, docids: np.ndarray, row_doc: np.ndarray, dim: int,
                 exact: bool = False, doc_candidates: float = 2.0, min_doc_candidates: int = 200,
                 hnsw_ef: int | None = None, query_batch: int = QUERY_BATCH):
        if doc_candidates <= 0:
            raise ConfigError(f"doc_candidates must be > 0, got {doc_candidates}")
        self.client, self.settings = client, settings
        self.docids = docids
        self.row_doc = row_doc.astype(np.int64)
        counts = np.bincount(self.row_doc, minlength=len(docids))
        self.doc_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.doc_views = counts.astype(np.int64)
        self.mean_views = max(1.0, len(row_doc) / max(1, len(docids)))
        self._dim = dim
        self.exact, self.doc_candidates, self.min_doc_candidates = exact, doc_candidates, min_doc_candidates
        self.hnsw_ef, self.query_batch = hnsw_ef, query_batch
        self._doc_of: dict[str, int] | None = None

    kind = "qdrant"

    @property
    def dim(self) -> int:
        return self._dim

    def calibration_grid(self) -> tuple[str, dict[str, Any]] | None:
        """``qdrant``: the candidate floor (``min_doc_candidates``); None in exact mode."""
        return None if self.exact else ("qdrant", {"min_doc_candidates": MIN_DOC_CANDIDATES})

    def set_search_knob(self, name: str, value: Any) -> None:
        """``doc_candidates``, ``min_doc_candidates``, ``ef_search`` (the prefetch's ``hnsw_ef``)."""
        if name not in QDRANT_SEARCH_KNOBS:
            raise ConfigError(f"the Qdrant backend has no search knob {name!r}; known: "
                              f"{', '.join(QDRANT_SEARCH_KNOBS)}")
        setattr(self, QDRANT_SEARCH_KNOBS[name], value)

    def candidates(self, k: int) -> int:
        return min(len(self.docids), max(k, self.min_doc_candidates, math.ceil(self.doc_candidates * k)))

    def _requests(self, q: np.ndarray, k: int) -> list:
        _, models = require_qdrant()
        server = not self.settings.embedded  # local mode is brute force and warns about search params
        out = []
        for vec in q.tolist():
            if self.exact:
                out.append(models.QueryRequest(query=[vec], using=VIEWS_VECTOR, limit=k, with_payload=["docid"],
                                               params=models.SearchParams(exact=True) if server else None))
                continue
            depth = self.candidates(k)
            params = models.SearchParams(hnsw_ef=max(self.hnsw_ef or 0, depth)) if server else None
            out.append(models.QueryRequest(
                prefetch=models.Prefetch(query=vec, using=DOC_VECTOR, limit=depth, params=params),
                query=[vec], using=VIEWS_VECTOR, limit=k, with_payload=["docid"]))
        return out

    def search(self, q_reps: np.ndarray, k: int, aggregator: Aggregator) -> tuple[np.ndarray, np.ndarray]:
        if not aggregator.exact_with_distinct_k:
            raise ConfigError(f"the Qdrant backend ranks by max over views (MAX_SIM), not {aggregator.name} "
                              "aggregation: search with --aggregation max, or build a Faiss index")
        q_reps = np.ascontiguousarray(q_reps, dtype=np.float32)
        if q_reps.ndim != 2 or q_reps.shape[1] != self.dim:
            raise ConfigError(f"query vectors have shape {q_reps.shape}, the index expects (N, {self.dim})")
        if self._doc_of is None:
            self._doc_of = {d: i for i, d in enumerate(self.docids.tolist())}
        out_doc = np.full((len(q_reps), k), -1, dtype=np.int64)
        out_score = np.full((len(q_reps), k), -np.inf, dtype=np.float32)
        for lo in range(0, len(q_reps), self.query_batch):
            responses = self.client.query_batch_points(self.settings.collection,
                                                       self._requests(q_reps[lo:lo + self.query_batch], k))
            for i, response in enumerate(responses, start=lo):
                for rank, point in enumerate(response.points[:k]):
                    doc = self._doc_of.get(point.payload["docid"])
                    if doc is None:
                        raise MultiViewError(f"{self.settings.where()} returned docid {point.payload['docid']!r}, "
                                             "which the index folder's docid file does not list: rebuild the index")
                    out_doc[i, rank], out_score[i, rank] = doc, point.score
        short = int(((out_doc >= 0).sum(axis=1) < min(k, len(self.docids))).sum())
        if short:
            logger.warning("%d of %d queries got fewer than %d documents from %s", short, len(q_reps), k,
                           self.settings.where())
        return out_doc, out_score

    def doc_vectors(self, doc: int) -> np.ndarray:
        records = self.client.retrieve(self.settings.collection, [point_id(self.docids[doc])],
                                       with_payload=False, with_vectors=[VIEWS_VECTOR])
        if not records:
            raise MultiViewError(f"{self.settings.where()} has no point for docid {self.docids[doc]!r}")
        return np.asarray(records[0].vector[VIEWS_VECTOR], dtype=np.float32).reshape(-1, self.dim)


def open_qdrant_store(index_dir: str | os.PathLike, meta: IndexMeta, exact: bool = False,
                      doc_candidates: float | None = None, ef_search: int | None = None,
                      url: str | None = None) -> QdrantStore:
    """The :class:`QdrantStore` of an index folder whose ``multiview.json`` says ``backend: qdrant``;
    ``url`` overrides the recorded server address (a moved cluster)."""
    index_dir = Path(index_dir)
    settings = QdrantSettings(**(meta.qdrant or {}))
    if url:
        settings.url, settings.path = url, None
    client = settings.connect(index_dir)
    if not client.collection_exists(settings.collection):
        raise ConfigError(f"{index_dir}: its {settings.where(index_dir)} does not exist (moved or deleted?)")
    marker = _collection_marker(client, settings.collection) or {}
    if not marker.get("complete") or marker.get("num_docs") != meta.num_docs:
        raise ConfigError(f"{index_dir}: {settings.where(index_dir)} is not the complete collection this folder "
                          f"describes ({marker.get('num_docs')} documents recorded, {meta.num_docs} expected): "
                          "rerun the index build")
    lookup = (index_dir / DOCID_FILE).read_text(encoding="utf-8").splitlines()
    docids, row_doc = contiguous_docs(split_lookup(lookup, meta.multi_vector), str(index_dir / DOCID_FILE))
    defaults = meta.search_defaults or {}
    return QdrantStore(client, settings, docids, row_doc, meta.dim, exact=exact,
                       doc_candidates=doc_candidates if doc_candidates is not None
                       else defaults.get("doc_candidates", 2.0),
                       min_doc_candidates=defaults.get("min_doc_candidates", 200),
                       hnsw_ef=ef_search if ef_search is not None else defaults.get("ef_search"))
