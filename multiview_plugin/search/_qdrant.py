"""A Qdrant backend for multi-vector indexes (``pip install 'multiview_plugin[qdrant]'``, or ``[qdrant-edge]``).

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
``views.npy``. The collection's own metadata records the shards' model identity and the identity of every shard
ingested, so a collection built from another model's vectors, or from other shards (an edited corpus), is
refused. Ingest streams shard by shard in bounded batches; it is idempotent (deterministic ids) and resumable over
the same shards: points already present are skipped, and ``multiview.json`` is written last.

Engines (``search/_qdrant_engines.py``): ``client`` is qdrant-client, talking to a server (``url``) or running its
local mode (numpy brute force, no HNSW: tests and small corpora); ``edge`` is qdrant-edge, Qdrant's own Rust
engine run in the process on a storage folder (HNSW on the document vectors once a segment passes Qdrant's
indexing threshold).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import uuid
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from multiview_plugin.atomic import atomic_open
from multiview_plugin.data.seen_ids import SeenIds
from multiview_plugin.encoding.fingerprint import file_identity
from multiview_plugin.encoding.shard_sets import check_same_model, model_identity
from multiview_plugin.encoding.shards import (
    ShardFormatError,
    ShardInfo,
    read_shard,
    shard_view_ids,
    split_lookup,
)
from multiview_plugin.encoding.view_info import INDEX_VIEWS_FILE, VIEW_INFO_KEY, concat_rows
from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.index.adds import check_new_docids, contiguous_docs, document_means
from multiview_plugin.index.folder import (
    DOC_INDEX_FILE,
    DOCID_FILE,
    INDEX_FILE,
    META_FILE,
    check_index_folder,
    one_writer,
)
from multiview_plugin.index.meta import (
    DEFAULT_AGGREGATION,
    MAX_EF_CONSTRUCTION,
    IndexMeta,
    check_shard_paths,
    merge_extra,
    passage_shard_infos,
)
from multiview_plugin.paths import OutputLock, refuse_output_over_input
from multiview_plugin.search._backend import MIN_DOC_CANDIDATES, SearchBackend
from multiview_plugin.search._qdrant_engines import (
    ENGINES,
    MARKER,
    MEMORY,
    ClientCollection,
    Collection,
    EdgeCollection,
    close_all,
    require_qdrant,
    vectors_digest,
)
from multiview_plugin.search.aggregators import Aggregator

logger = logging.getLogger(__name__)

__all__ = ["MARKER", "MEMORY", "QdrantSettings", "QdrantStore", "build_qdrant_index", "close_embedded",
           "open_qdrant_store", "point_id", "require_qdrant", "shard_identities"]

BACKEND = "qdrant"
QDRANT_DIR = "qdrant"  # default embedded storage, inside the index folder
POINT_NAMESPACE = uuid.UUID("6f2d1c9e-3b0a-5c1e-9a55-6d7669657721")  # uuid5 namespace of point ids
INGEST_BATCH = 256  # documents per upsert
QDRANT_MIN_EF_CONSTRUCT = 4  # Qdrant refuses a smaller HNSW ef_construct (--hnsw_ef_construction)
QUERY_BATCH = 64  # queries per query_batch call
PROBES = 32  # documents whose vectors' digests the collection record keeps, checked when a folder is opened


# a collection name is one plain name: it becomes a folder under the storage path (edge engine, local mode) and a
# URL path segment on a server; Qdrant itself refuses <>:"/\|?* and names over 255 characters
_COLLECTION_NAME = re.compile(r"[^<>:\"/\\|?*\x00-\x1f\x7f]{1,255}")
# temporary files of interrupted ingests of this tool (their run ids differ): an index folder holding only these and
# the storage folder is an interrupted build that resumes
_OWN_TEMPORARY = re.compile(r"\.(docid|multiview\.json)(\.\d+\.[0-9a-f]+)?\.tmp")


def check_collection_name(name: object, where: str = "--qdrant_collection") -> str:
    """``name`` when it is a plain collection name (no path separator, not ``.`` / ``..``, none of the characters
    Qdrant refuses); else one line naming ``where``. A name such as ``../escaped`` would put an embedded collection
    outside its storage folder."""
    if (not isinstance(name, str) or name.strip(".") == "" or name != name.strip()
            or not _COLLECTION_NAME.fullmatch(name)):
        raise ConfigError(f"{where} {name!r}: expected a plain collection name (1-255 characters, no path separator, "
                          'not "." or "..", none of <>:"/\\|?* or control characters)')
    return name


def run_temporary(folder: Path, name: str) -> Path:
    """A temporary file for ``name`` in ``folder`` that only this run uses (pid and a random part)."""
    return folder / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def point_id(docid: str) -> str:
    """The point id of a document: a UUID derived from its docid (stable across runs and machines)."""
    return str(uuid.uuid5(POINT_NAMESPACE, str(docid)))


@dataclass
class QdrantSettings:
    """Where a collection lives and how it was created (recorded in ``multiview.json`` under ``qdrant``).

    ``path``: embedded storage folder (relative paths are relative to the index folder), ``":memory:"``, or None
    with ``url`` (a Qdrant server or cluster; the API key comes from ``$QDRANT_API_KEY``). ``engine``: ``client``
    (qdrant-client: a server, or its local mode on ``path``) or ``edge`` (qdrant-edge, Qdrant's engine in the
    process, on ``path``).
    """

    collection: str
    path: str | None = None
    url: str | None = None
    shard_number: int | None = None
    replication_factor: int | None = None
    on_disk: bool = False
    hnsw_m: int = 16
    ef_construct: int = 100
    engine: str = "client"

    @classmethod
    def from_record(cls, record: Any, where: str) -> QdrantSettings:
        """The settings a ``multiview.json`` records; anything malformed is one line naming ``where``."""
        if not isinstance(record, dict):
            raise ConfigError(f"{where}: field 'qdrant': expected an object naming the collection, got {record!r}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(record) - names)
        if unknown:
            raise ConfigError(f"{where}: field 'qdrant.{unknown[0]}' is unknown (written by a newer version?)")
        if not isinstance(record.get("collection"), str) or not record["collection"]:
            raise ConfigError(f"{where}: field 'qdrant.collection': expected a collection name, got "
                              f"{record.get('collection')!r}")
        for name in ("path", "url"):
            if record.get(name) is not None and not isinstance(record[name], str):
                raise ConfigError(f"{where}: field 'qdrant.{name}': expected a string, got {record[name]!r}")
        check_collection_name(record["collection"], f"{where}: field 'qdrant.collection'")
        if record.get("engine", "client") not in ENGINES:
            raise ConfigError(f"{where}: field 'qdrant.engine': expected one of {', '.join(ENGINES)}, got "
                              f"{record.get('engine')!r}")
        if record.get("url") is None and record.get("path") is None:
            raise ConfigError(f"{where}: field 'qdrant': names neither a storage 'path' nor a server 'url'")
        return cls(**record)

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

    def connect(self, index_dir: Path | None = None, timeout: int | None = None) -> Collection:
        """The collection (which may not exist yet) through this settings' engine; a server is asked first whether
        it answers as Qdrant does (one line otherwise)."""
        if self.engine not in ENGINES:
            raise ConfigError(f"Qdrant engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.engine == "edge":
            if self.url:
                raise ConfigError("--qdrant_engine edge runs Qdrant's engine in this process on a storage folder; "
                                  "it does not take --qdrant_url (a server is reached with the client engine)")
            return EdgeCollection(self.collection, self.storage(index_dir))
        if self.url:
            return ClientCollection(self.collection, url=self.url, timeout=timeout)
        return ClientCollection(self.collection, path=self.storage(index_dir))


def close_embedded(path: str | os.PathLike | None = None) -> None:
    """Close every open Qdrant client and edge shard (``path``: only that storage folder's), releasing locks."""
    if path is None:
        close_all()
        return
    from multiview_plugin.search._qdrant_engines import storage_key

    close_all(storage_key(path))


def shard_identities(paths: list[Path], infos: list[ShardInfo | None]) -> list[str]:
    """What each shard is, for resume checks: its sidecar's fingerprint and counts (an edited corpus encodes to
    another input identity), or, for a shard without a fingerprint, the shard file's own identity."""
    out = []
    for path, info in zip(paths, infos):
        if info is not None and info.fingerprint:
            out.append(json.dumps({"fingerprint": info.fingerprint, "num_items": info.num_items,
                                   "num_vectors": info.num_vectors}, sort_keys=True))
        else:
            out.append(json.dumps({"file": file_identity(path)}))
    return out


def _open_collection(coll: Collection, settings: QdrantSettings, dim: int, identity: dict, shard_ids: list[str],
                     where_shards: str, overwrite: bool) -> int:
    """Create the collection, or reopen one this tool built from the same model and the same shards (resume);
    returns the points already in it. A collection not made here is never touched; one of another model, or of
    other shards, is refused."""
    where = coll.where
    marker = {"model": identity, "dim": dim, "complete": False, "shards": shard_ids}
    create = dict(on_disk=settings.on_disk, hnsw_m=settings.hnsw_m, ef_construct=settings.ef_construct,
                  shard_number=settings.shard_number, replication_factor=settings.replication_factor)
    if not coll.exists():
        coll.create(dim, marker, **create)
        return 0
    found = coll.marker()
    if found is None:
        raise ConfigError(f"{where} exists and was not created by multiview_plugin; it is left untouched: choose "
                          "another --qdrant_collection")
    if overwrite:
        logger.info("--overwrite: deleting %s", where)
        coll.delete()
        coll.create(dim, marker, **create)
        return 0
    try:
        check_same_model((where, found.get("model") or {}), (where_shards, identity))
    except ShardFormatError as e:
        raise ConfigError(f"{e} (the collection was built from the other model: pass --overwrite to rebuild it, "
                          "or another --qdrant_collection)") from None
    if found.get("dim") != dim:
        raise ConfigError(f"{where} holds {found.get('dim')}-dim vectors, the shards {dim}: pass --overwrite or "
                          "another --qdrant_collection")
    recorded = found.get("shards")
    if recorded != shard_ids:
        if not isinstance(recorded, list):
            why = "records no shard identities (built by an older version), so resuming it cannot be checked"
        elif len(recorded) != len(shard_ids):
            why = f"was ingested from {len(recorded)} shard(s), not these {len(shard_ids)}"
        else:
            i = next(i for i, (a, b) in enumerate(zip(recorded, shard_ids)) if a != b)
            why = (f"was ingested from another shard {i} than {where_shards if i == 0 else 'the one given'} "
                   "(re-encoded since: an edited corpus or other settings)")
        raise ConfigError(f"{where} {why}: resuming would keep its old vectors; pass --overwrite to rebuild it, or "
                          "another --qdrant_collection")
    present = coll.count()
    logger.info("resuming: %s already holds %d documents; they are skipped", where, present)
    return present


def _upsert(coll: Collection, points: list) -> None:
    """One bounded batch, acknowledged before the next."""
    coll.upsert(points)


def _relative_path(path: str | os.PathLike, index_dir: Path) -> str:
    p = Path(path).resolve()
    try:
        return str(p.relative_to(index_dir.resolve()))
    except ValueError:
        return str(p)


@one_writer
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
    engine: str = "client",
    timeout: int | None = None,
) -> IndexMeta:
    """Ingest encoded passage shards into a Qdrant collection and write the index folder (module docstring).

    ``qdrant_url`` targets a server or cluster (``shard_number`` / ``replication_factor`` / ``on_disk`` apply when
    the collection is created; ``timeout``: seconds per request); otherwise embedded storage at ``qdrant_path``
    (default ``INDEX_DIR/qdrant``; ``":memory:"`` lives as long as the process), run by ``engine``: ``client``
    (qdrant-client's local mode) or ``edge`` (Qdrant's engine, qdrant-edge). ``collection`` defaults to the index
    folder's name. Rerunning after an interruption resumes over the same shards; ``overwrite`` rebuilds (deleting
    only a collection built here). A server that cannot be reached, or is not Qdrant, is reported before the index
    folder is created.
    """
    if engine not in ENGINES:
        raise ConfigError(f"--qdrant_engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "client":
        require_qdrant()
    paths = check_shard_paths(shards)
    if batch_size < 1:
        raise ConfigError(f"the ingest batch size must be >= 1, got {batch_size}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1):
        raise ConfigError(f"--qdrant_timeout must be a whole number of seconds >= 1, got {timeout!r}")
    if not QDRANT_MIN_EF_CONSTRUCT <= ef_construct <= MAX_EF_CONSTRUCTION:
        raise ConfigError(f"--hnsw_ef_construction with --backend qdrant must be >= {QDRANT_MIN_EF_CONSTRUCT} and "
                          f"<= {MAX_EF_CONSTRUCTION}, got {ef_construct}")
    index_dir = Path(index_dir)
    name = check_collection_name(collection if collection is not None else index_dir.resolve().name,
                                 "--qdrant_collection" if collection is not None else
                                 "the collection name (default: the --index_dir folder name; pass --qdrant_collection)")
    refuse_output_over_input({"--index_dir": index_dir}, {"--passage_reps": paths}, folder_outputs=["--index_dir"])
    # the Faiss backend's rule: resuming an interrupted build is fine, someone's folder (e.g. a Pyserini index) is not;
    # this runs under the index folder's lock (one_writer), so temporary files found here are of killed runs
    stale = [p.name for p in index_dir.iterdir() if _OWN_TEMPORARY.fullmatch(p.name)] if index_dir.is_dir() else []
    check_index_folder(index_dir, overwrite, resumable=(QDRANT_DIR, INDEX_VIEWS_FILE, *stale))
    infos, model_name = passage_shard_infos(paths, allow_partial)
    aggregation = aggregation or DEFAULT_AGGREGATION.get(model_name, "max")
    if aggregation != "max":
        raise ConfigError(f"the Qdrant backend ranks documents by max over their views (MAX_SIM); {aggregation} "
                          "aggregation needs the collection's top vectors: pass --aggregation max or use Faiss")
    known = next((i for i in infos if i is not None), None)
    identity = model_identity(known) if known is not None else {}
    multi = any(i is not None and i.multi_vector for i in infos)
    shard_ids = shard_identities(paths, infos)

    if qdrant_url:
        if engine == "edge":
            raise ConfigError("--qdrant_engine edge runs Qdrant's engine in this process on a storage folder; it "
                              "does not take --qdrant_url")
        settings = QdrantSettings(name, None, qdrant_url, shard_number, replication_factor,
                                  on_disk, hnsw_m, ef_construct, engine)
    else:
        if shard_number or replication_factor:
            logger.warning("--qdrant_shards / --qdrant_replication apply to a server or cluster (--qdrant_url); "
                           "embedded storage has one shard")
        path = MEMORY if str(qdrant_path) == MEMORY else _relative_path(qdrant_path or index_dir / QDRANT_DIR,
                                                                       index_dir)
        settings = QdrantSettings(name, path, None, None, None, on_disk, hnsw_m, ef_construct,
                                  engine)
    created_dir = not index_dir.exists()
    if settings.url:  # a server that is unreachable or not Qdrant: one line, and no folder made
        coll = settings.connect(index_dir, timeout)
        coll.exists()
    index_dir.mkdir(parents=True, exist_ok=True)
    tmp_docids = run_temporary(index_dir, DOCID_FILE)  # this run's own: cleaned up below, nobody else's
    storage_lock = None
    try:
        if not settings.url:
            storage_lock = _lock_outside_storage(settings, index_dir)
            coll = settings.connect(index_dir, timeout)
        if overwrite:  # files an earlier build of either backend wrote here; nothing else is removed
            for name in (META_FILE, INDEX_FILE, DOC_INDEX_FILE, DOCID_FILE, INDEX_VIEWS_FILE):
                (index_dir / name).unlink(missing_ok=True)
        meta = _ingest(paths, index_dir, coll, settings, infos, identity, shard_ids, multi, model_name, aggregation,
                       overwrite, unsafe_pickle, batch_size, tmp_docids)
    except BaseException:
        tmp_docids.unlink(missing_ok=True)
        if created_dir and index_dir.is_dir() and not any(index_dir.iterdir()):
            index_dir.rmdir()  # this run made it, and left nothing in it
        raise
    finally:
        if storage_lock is not None:
            storage_lock.release()
    tmp_docids.unlink(missing_ok=True)
    return meta


def _lock_outside_storage(settings: QdrantSettings, index_dir: Path) -> OutputLock | None:
    """Embedded storage outside the index folder may be shared by several index folders: one writer of a
    collection at a time (``STORAGE/<collection>.lock``). Storage inside the index folder is covered by its lock."""
    storage = settings.storage(index_dir)
    if storage == MEMORY:
        return None
    storage_path = Path(storage).resolve()
    if storage_path.is_relative_to(index_dir.resolve()):
        return None
    return OutputLock(storage_path / settings.collection).acquire()


def _ingest(paths: list[Path], index_dir: Path, coll: Collection, settings: QdrantSettings, infos: list,
            identity: dict, shard_ids: list[str], multi: bool, model_name: str, aggregation: str, overwrite: bool,
            unsafe_pickle: bool, batch_size: int, tmp_docids: Path) -> IndexMeta:
    where = coll.where
    known = next((i for i in infos if i is not None), None)
    seen = SeenIds()
    num_docs = num_vectors = skipped = 0
    view_counts: list[np.ndarray] = []
    dim: int | None = next((i.dim for i in infos if i is not None and i.num_vectors), None)
    opened = False
    present = 0
    probes: list[tuple[str, str]] = []  # (point id, digest of its vectors): the first document of every batch
    with tmp_docids.open("w", encoding="utf-8") as docid_out:
        for path in tqdm(paths, desc="qdrant ingest", unit="shard"):
            reps, lookup, info = read_shard(path, unsafe_pickle)
            shard_multi = shard_view_ids(path, lookup, info)  # without a sidecar: inferred, with a warning
            multi = multi or shard_multi
            docs, row_doc = contiguous_docs(split_lookup(lookup, shard_multi), str(path))
            check_new_docids(seen, docs, row_doc, num_vectors, tmp_docids, docid_out, shard_multi, path)
            if not len(reps):
                continue
            if dim is None:
                dim = int(reps.shape[1])
            elif reps.shape[1] != dim:
                raise ShardFormatError(f"{path}: dim {reps.shape[1]} differs from {dim}")
            if not opened:
                present = _open_collection(coll, settings, dim, identity, shard_ids, str(path), overwrite)
                opened = True
            starts = np.flatnonzero(np.r_[True, row_doc[1:] != row_doc[:-1]])
            ends = np.r_[starts[1:], len(row_doc)]
            for lo in range(0, len(docs), batch_size):
                hi = min(lo + batch_size, len(docs))
                ids = [point_id(d) for d in docs[lo:hi].tolist()]
                have = coll.present(ids) if present else set()
                base = int(starts[lo])
                block = np.asarray(reps[base:int(ends[hi - 1])], dtype=np.float32)
                means = document_means(block, row_doc[base:int(ends[hi - 1])])
                points = [(pid, block[int(starts[j]) - base:int(ends[j]) - base], means[j - lo],
                           {"docid": str(docs[j]), "views": int(ends[j] - starts[j])})
                          for j, pid in zip(range(lo, hi), ids) if pid not in have]
                first = int(starts[lo]) - base, int(ends[lo]) - base
                probes.append((ids[0], vectors_digest(block[first[0]:first[1]], means[0])))
                skipped += (hi - lo) - len(points)
                if points:
                    _upsert(coll, points)
            docid_out.write("\n".join(lookup) + "\n" if lookup else "")
            num_docs += len(docs)
            num_vectors += len(lookup)
            view_counts.append(np.bincount(row_doc))
    if not opened:
        raise ShardFormatError(f"no vectors: all {len(paths)} shard(s) are empty")
    coll.finish()
    count = coll.count()
    if count != num_docs:
        raise MultiViewError(f"{where} holds {count} documents but the shards have {num_docs}: it holds "
                             "documents of another shard set; rebuild it with --overwrite")
    keep = np.unique(np.linspace(0, len(probes) - 1, min(PROBES, len(probes))).astype(int))
    probe = dict(probes[i] for i in keep)
    _check_probes(coll, probe, where)  # what was written reads back as it was sent
    coll.set_marker({"model": identity, "dim": dim, "complete": True, "num_docs": num_docs, "shards": shard_ids,
                     "probe": probe})
    counts = np.concatenate(view_counts)
    os.replace(tmp_docids, index_dir / DOCID_FILE)
    extra = merge_extra(infos)
    if extra.get(VIEW_INFO_KEY, {}).get("rows") and not concat_rows(paths, index_dir / INDEX_VIEWS_FILE,
                                                                     num_vectors):
        extra[VIEW_INFO_KEY]["rows"] = False
    meta = IndexMeta(
        dim=int(dim), num_docs=num_docs, num_vectors=num_vectors, max_views=int(counts.max()),
        mean_views=float(counts.mean()),
        views_per_doc=int(counts[0]) if (counts == counts[0]).all() else "variable",
        aggregation=aggregation, model_name=model_name, index_factory=BACKEND, shards=[str(p) for p in paths],
        extra=extra, view_ids=multi, model_fingerprint=identity if known is not None and known.fingerprint else None,
        backend=BACKEND, qdrant=asdict(settings))
    if not multi and meta.max_views > 1:
        raise ShardFormatError("single-vector shards hold several rows for one docid")
    with atomic_open(index_dir / META_FILE) as f:  # last: the folder is complete (a temporary file of this run's)
        f.write(json.dumps(asdict(meta), indent=2) + "\n")
    logger.info("qdrant index %s: %d documents, %d vectors (max %d views) in %s; %d already present (resumed)",
                index_dir, num_docs, num_vectors, meta.max_views, where, skipped)
    return meta


def _check_probes(coll: Collection, probe: dict[str, str], where: str) -> None:
    """Refuse a collection whose probe documents' vectors do not read back as ingested (damaged storage)."""
    if not probe:
        return
    found = coll.vectors(list(probe))
    for pid, digest in probe.items():
        if pid not in found:
            raise ConfigError(f"{where}: point {pid} (a document that was ingested) is missing: the storage is damaged "
                              "or was changed; rebuild the index with --overwrite")
        if vectors_digest(*found[pid]) != digest:
            raise ConfigError(f"{where}: the vectors of point {pid} differ from those ingested: the storage is damaged "
                              "or was changed; rebuild the index with --overwrite")


QDRANT_SEARCH_KNOBS = {"doc_candidates": "doc_candidates", "min_doc_candidates": "min_doc_candidates",
                       "ef_search": "hnsw_ef"}  # search_defaults' name → the QdrantStore attribute


class QdrantStore(SearchBackend):
    """Search a Qdrant collection built by :func:`build_qdrant_index` (max over views).

    ``exact``: score every document by MAX_SIM over all its views (a full scan; equals the Faiss Flat searcher).
    Otherwise candidates are the top ``max(doc_candidates × k, min_doc_candidates)`` documents by the document
    vector (HNSW with ``hnsw_ef``, at least the candidate count, where the engine has a graph), re-scored by MAX_SIM
    over all their views. Failure mode: a document whose views' mean is far from the query while one view is close
    falls outside the candidates (``bench/qdrant.py``, ``bench/qdrant_edge.py`` measure the recall kept).
    ``calibrated_k``: the depth the candidate count was calibrated for; a search deeper than it logs once that
    its recall was not calibrated (calibration at k = 10 does not carry to k = 100: calibrate at that depth).
    """

    def __init__(self, collection: Collection, settings: QdrantSettings, docids: np.ndarray, row_doc: np.ndarray,
                 dim: int, exact: bool = False, doc_candidates: float = 2.0, min_doc_candidates: int = 200,
                 hnsw_ef: int | None = None, query_batch: int = QUERY_BATCH, calibrated_k: int | None = None):
        if doc_candidates <= 0:
            raise ConfigError(f"doc_candidates must be > 0, got {doc_candidates}")
        self.collection, self.settings = collection, settings
        self.docids = docids
        self.row_doc = row_doc.astype(np.int64)
        counts = np.bincount(self.row_doc, minlength=len(docids))
        self.doc_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.doc_views = counts.astype(np.int64)
        self.mean_views = max(1.0, len(row_doc) / max(1, len(docids)))
        self._dim = dim
        self.exact, self.doc_candidates, self.min_doc_candidates = exact, doc_candidates, min_doc_candidates
        self.hnsw_ef, self.query_batch = hnsw_ef, query_batch
        self.calibrated_k = calibrated_k
        self._warned_depth = False
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
        self.calibrated_k = None  # a knob set by hand or by calibration: an older calibration's depth no longer applies

    def candidates(self, k: int) -> int:
        return min(len(self.docids), max(k, self.min_doc_candidates, math.ceil(self.doc_candidates * k)))

    def search(self, q_reps: np.ndarray, k: int, aggregator: Aggregator) -> tuple[np.ndarray, np.ndarray]:
        if not aggregator.exact_with_distinct_k:
            raise ConfigError(f"the Qdrant backend ranks by max over views (MAX_SIM), not {aggregator.name} "
                              "aggregation: search with --aggregation max, or build a Faiss index")
        q_reps = np.ascontiguousarray(q_reps, dtype=np.float32)
        if q_reps.ndim != 2 or q_reps.shape[1] != self.dim:
            raise ConfigError(f"query vectors have shape {q_reps.shape}, the index expects (N, {self.dim})")
        if (not self.exact and self.calibrated_k is not None and k > self.calibrated_k
                and self.candidates(k) < len(self.docids) and not self._warned_depth):
            self._warned_depth = True
            logger.warning("%s: its candidate count (%d at depth %d) was calibrated for recall@%d; at depth %d its "
                           "recall is not calibrated and is lower (calibrate for this depth: driver.index --calibrate "
                           "DIR --calibration_k %d, or search with --qdrant_exact)", self.collection.where,
                           self.candidates(k), k, self.calibrated_k, k, k)
        if self._doc_of is None:
            self._doc_of = {d: i for i, d in enumerate(self.docids.tolist())}
        out_doc = np.full((len(q_reps), k), -1, dtype=np.int64)
        out_score = np.full((len(q_reps), k), -np.inf, dtype=np.float32)
        depth = self.candidates(k)
        for lo in range(0, len(q_reps), self.query_batch):
            responses = self.collection.query(q_reps[lo:lo + self.query_batch], k, self.exact, depth, self.hnsw_ef)
            for i, hits in enumerate(responses, start=lo):
                for rank, (docid, score) in enumerate(hits[:k]):
                    doc = self._doc_of.get(docid)
                    if doc is None:
                        raise MultiViewError(f"{self.collection.where} returned docid {docid!r}, which the index "
                                             "folder's docid file does not list: rebuild the index")
                    out_doc[i, rank], out_score[i, rank] = doc, score
        short = int(((out_doc >= 0).sum(axis=1) < min(k, len(self.docids))).sum())
        if short:
            logger.warning("%d of %d queries got fewer than %d documents from %s", short, len(q_reps), k,
                           self.collection.where)
        return out_doc, out_score

    def doc_vectors(self, doc: int) -> np.ndarray:
        views = self.collection.views(point_id(self.docids[doc]))
        if views is None:
            raise MultiViewError(f"{self.collection.where} has no point for docid {self.docids[doc]!r}")
        return views.reshape(-1, self.dim)


def open_qdrant_store(index_dir: str | os.PathLike, meta: IndexMeta, exact: bool = False,
                      doc_candidates: float | None = None, ef_search: int | None = None,
                      url: str | None = None, timeout: int | None = None) -> QdrantStore:
    """The :class:`QdrantStore` of an index folder whose ``multiview.json`` says ``backend: qdrant``;
    ``url`` overrides the recorded server address (a moved cluster), ``timeout`` its seconds per request."""
    index_dir = Path(index_dir)
    settings = QdrantSettings.from_record(meta.qdrant, str(index_dir / META_FILE))
    if url:
        settings.url, settings.path = url, None
        if settings.engine == "edge":
            raise ConfigError(f"{index_dir} lives in a qdrant-edge shard ({settings.storage(index_dir)}); "
                              "--qdrant_url reaches a server, which it is not on")
    if timeout is not None and not settings.url:
        raise ConfigError(f"--qdrant_timeout applies to a server; {index_dir} keeps its collection in embedded storage")
    coll = settings.connect(index_dir, timeout)
    if not coll.exists():
        raise ConfigError(f"{index_dir}: its {coll.where} does not exist (moved or deleted?)")
    marker = coll.marker() or {}
    coll.open()
    if not marker.get("complete") or marker.get("num_docs") != meta.num_docs:
        raise ConfigError(f"{index_dir}: {coll.where} is not the complete collection this folder "
                          f"describes ({marker.get('num_docs')} documents recorded, {meta.num_docs} expected): "
                          "rerun the index build")
    if settings.embedded:  # cheap here; a server's exact count scans its shards
        count = coll.count()
        if count != meta.num_docs:
            raise ConfigError(f"{index_dir}: {coll.where} holds {count} documents, the folder describes "
                              f"{meta.num_docs}: the storage is damaged or was changed; rebuild the index with "
                              "--overwrite")
    probe = marker.get("probe")
    _check_probes(coll, probe if isinstance(probe, dict) else {}, f"{index_dir}: {coll.where}")
    lookup = (index_dir / DOCID_FILE).read_text(encoding="utf-8").splitlines()
    docids, row_doc = contiguous_docs(split_lookup(lookup, meta.multi_vector), str(index_dir / DOCID_FILE))
    defaults = meta.search_defaults or {}
    calibration = meta.calibration or {}
    return QdrantStore(coll, settings, docids, row_doc, meta.dim, exact=exact,
                       doc_candidates=doc_candidates if doc_candidates is not None
                       else defaults.get("doc_candidates", 2.0),
                       min_doc_candidates=defaults.get("min_doc_candidates", 200),
                       hnsw_ef=ef_search if ef_search is not None else defaults.get("ef_search"),
                       calibrated_k=calibration.get("k") if defaults.get("min_doc_candidates") else None)
