"""The two engines a Qdrant index folder can live in, behind one small interface (:class:`Collection`).

* ``client`` (``pip install 'multiview_plugin[qdrant]'``): qdrant-client. With ``--qdrant_url`` it talks to a
  Qdrant server or cluster over REST; without, it is qdrant-client's *local mode*, a pure-Python stand-in for the
  server (numpy brute force, points in SQLite, no HNSW) in a storage folder.
* ``edge`` (``pip install 'multiview_plugin[qdrant-edge]'``): qdrant-edge-py, Qdrant's own Rust engine (segments,
  HNSW graphs, write-ahead log) run in the process as one *edge shard* per collection, in
  ``STORAGE/<collection>/``. The collection's metadata, which qdrant-client keeps in the collection config, is
  the file ``multiview_plugin.json`` inside that folder.

Every failure of a connection or a storage folder is one :class:`~multiview_plugin.errors.MultiViewError` line
naming the URL or folder and what was expected (connection refused, a timeout, an HTTP server that is not Qdrant,
a rejected API key, a storage folder that is not Qdrant's, a folder another process holds); clients are closed
explicitly at exit (:func:`close_all`, registered with :mod:`atexit`), so none is left for the interpreter's
teardown.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from multiview_plugin.atomic import atomic_open
from multiview_plugin.errors import ConfigError, MultiViewError

logger = logging.getLogger(__name__)

ENGINES = ("client", "edge")
MEMORY = ":memory:"
VIEWS_VECTOR, DOC_VECTOR = "views", "doc"
MARKER = "multiview_plugin"  # key of the collection metadata written here
EDGE_MARKER_FILE = "multiview_plugin.json"  # edge: the collection's metadata, inside its shard folder
EDGE_CONFIG_FILE = "edge_config.json"
LOCAL_META_FILE = "meta.json"  # qdrant-client local mode's storage description
DEFAULT_TIMEOUT = 10  # whole seconds a server may take to answer one request
# edge: segments larger than this (KB of vectors) get their HNSW graph when optimised; None: Qdrant's default
# (small collections are then scanned exactly). Tests lower it to exercise the graph on tiny data.
EDGE_INDEXING_THRESHOLD_KB: int | None = None

_OPEN: dict[str, Any] = {}  # key -> open qdrant-client client or edge shard (one per storage folder / URL)
_atexit_registered = False


class QdrantServerError(MultiViewError):
    """A Qdrant server (``--qdrant_url``) could not be reached, is not Qdrant, or refused the request."""


def require_qdrant() -> tuple[Any, Any]:
    """(``qdrant_client`` module, its ``models``); a one-line error when the extra is not installed."""
    try:
        import qdrant_client
        from qdrant_client import models
    except ImportError:
        raise ConfigError("the Qdrant backend needs qdrant-client: pip install 'multiview_plugin[qdrant]'") from None
    return qdrant_client, models


def require_edge() -> Any:
    """The ``qdrant_edge`` module; a one-line error when the extra is not installed."""
    try:
        import qdrant_edge
    except ImportError:
        raise ConfigError("--qdrant_engine edge needs qdrant-edge-py: pip install 'multiview_plugin[qdrant-edge]'"
                          ) from None
    return qdrant_edge


def check_url(url: str) -> str:
    """``url`` if it can name a Qdrant REST endpoint (http or https, a host, a port in 1..65535), else one line."""
    what = f"--qdrant_url {url!r}"
    if not isinstance(url, str) or not url.strip() or any(c.isspace() or ord(c) < 32 for c in url):
        raise ConfigError(f"{what}: expected a URL such as http://host:6333")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as err:
        raise ConfigError(f"{what}: not a valid URL ({err}); expected e.g. http://host:6333") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{what}: scheme {parts.scheme or '(none)'!r}; expected http:// or https:// (Qdrant's REST "
                          "API, e.g. http://host:6333)")
    if not parts.hostname:
        raise ConfigError(f"{what}: no host; expected e.g. http://host:6333")
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"{what}: port {port} is not in 1..65535")
    return url


def describe_server_error(err: BaseException, url: str, timeout: int | None) -> QdrantServerError | None:
    """The one-line error for a failed request to the server at ``url`` (None if ``err`` is not one)."""
    import httpx
    import pydantic
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    where = f"--qdrant_url {url}"
    expected = "expected a Qdrant server's REST API (e.g. http://host:6333)"
    if isinstance(err, UnexpectedResponse):
        code = err.status_code
        if code in (401, 403):
            return QdrantServerError(f"{where}: the server refused the request (HTTP {code} {err.reason_phrase}): "
                                     "expected a valid API key in $QDRANT_API_KEY")
        if code == 404:
            return QdrantServerError(f"{where}: HTTP 404 Not Found for Qdrant's API: not a Qdrant server; {expected}")
        text = " ".join(err.content.decode("utf-8", "replace").split())[:200]
        return QdrantServerError(f"{where}: HTTP {code} {err.reason_phrase} ({text}); {expected}")
    source = err.source if isinstance(err, ResponseHandlingException) else err
    if isinstance(source, httpx.TimeoutException):
        return QdrantServerError(f"{where}: no answer within {timeout or DEFAULT_TIMEOUT:g} s (timeout; raise it with "
                                 f"--qdrant_timeout); {expected}")
    if isinstance(source, (httpx.ConnectError, ConnectionError)):
        return QdrantServerError(f"{where}: cannot connect ({' '.join(str(source).split())}); {expected}: is it "
                                 "running and reachable?")
    if isinstance(source, (httpx.HTTPError, httpx.InvalidURL)):
        return QdrantServerError(f"{where}: {type(source).__name__} ({' '.join(str(source).split())}); {expected}")
    if isinstance(source, (pydantic.ValidationError, ValueError)):  # an answer, but not Qdrant's
        return QdrantServerError(f"{where}: the answer is not a Qdrant server's; {expected}")
    return None


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(close_all)
        _atexit_registered = True


def close_all(key: str | None = None) -> None:
    """Close the open client or edge shard of ``key`` (a resolved storage folder, ``:memory:`` or a URL; all with
    None), releasing its folder lock."""
    for k in list(_OPEN) if key is None else [key]:
        handle = _OPEN.pop(k, None)
        if handle is None:
            continue
        try:
            handle.close()
        except Exception as err:  # closing is best effort: never hide the run's outcome behind it
            logger.debug("closing %s: %s", k, err)


def storage_key(path: str | os.PathLike) -> str:
    return MEMORY if str(path) == MEMORY else str(Path(path).resolve())


def _check_local_storage(folder: Path) -> None:
    """A one-line error unless ``folder`` is absent, empty of ``meta.json``, or qdrant-client local storage."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"Qdrant storage {folder} is a file; expected a folder (--qdrant_path)")
    meta = folder / LOCAL_META_FILE
    if not meta.exists():
        return
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"{meta}: not qdrant-client local storage (not readable JSON: "
                          f"{' '.join(str(err).split())[:120]}); choose another --qdrant_path") from None
    ok = (isinstance(data, dict) and isinstance(data.get("collections"), dict)
          and isinstance(data.get("aliases"), dict)
          and all(isinstance(v, dict) for v in data["collections"].values()))
    if not ok:
        raise ConfigError(f"{meta}: not qdrant-client local storage (expected an object with 'collections' and "
                          "'aliases' objects); choose another --qdrant_path")


def open_local_client(where: str) -> Any:
    """qdrant-client local mode on ``where`` (a folder or ``:memory:``), shared within the process."""
    qdrant_client, _ = require_qdrant()
    key = storage_key(where)
    client = _OPEN.get(key)
    if client is not None and not getattr(client._client, "closed", False) and not getattr(
            client._client, "_closed", False):
        return client
    if where != MEMORY:
        _check_local_storage(Path(where))
    try:
        client = qdrant_client.QdrantClient(MEMORY) if where == MEMORY else qdrant_client.QdrantClient(path=where)
    except RuntimeError as err:
        if "already accessed" in str(err):
            raise ConfigError(f"Qdrant storage {where} is in use by another process (qdrant-client's local mode "
                              "locks its folder): wait for it to finish, or use a Qdrant server (--qdrant_url) for "
                              "concurrent access") from None
        raise ConfigError(f"Qdrant storage {where}: cannot be opened ({' '.join(str(err).split())[:200]})") from None
    except Exception as err:  # a damaged storage folder: its meta.json or SQLite files (third-party loader)
        raise ConfigError(f"Qdrant storage {where}: not readable qdrant-client local storage ({type(err).__name__}: "
                          f"{' '.join(str(err).split())[:160]}); choose another --qdrant_path") from None
    _OPEN[key] = client
    _register_atexit()
    return client


def open_server_client(url: str, timeout: int | None) -> Any:
    """A qdrant-client for the server at ``url``, checked to answer as Qdrant does (before anything is written)."""
    qdrant_client, _ = require_qdrant()
    check_url(url)
    key = f"url:{url}"
    client = _OPEN.get(key)
    if client is not None:
        return client
    client = qdrant_client.QdrantClient(url=url, api_key=os.environ.get("QDRANT_API_KEY") or None,
                                        timeout=int(timeout or DEFAULT_TIMEOUT), check_compatibility=False)
    _OPEN[key] = client
    _register_atexit()
    try:
        info = client.info()
    except Exception as err:
        described = describe_server_error(err, url, timeout)
        if described is None:
            raise
        raise described from None
    if "qdrant" not in str(getattr(info, "title", "")).lower():
        raise QdrantServerError(f"--qdrant_url {url}: the server calls itself {getattr(info, 'title', None)!r}, "
                                "not Qdrant; expected a Qdrant server's REST API (e.g. http://host:6333)")
    return client


class Collection(ABC):
    """The operations the backend needs on one collection; ``where`` names it in messages."""

    name: str
    where: str

    @abstractmethod
    def exists(self) -> bool: ...

    @abstractmethod
    def open(self) -> None:
        """Open the existing collection now (a lock held elsewhere is reported here, before any work)."""

    @abstractmethod
    def marker(self) -> dict | None:
        """This tool's metadata of the existing collection; None when it was not created here."""

    @abstractmethod
    def create(self, dim: int, marker: dict, on_disk: bool, hnsw_m: int, ef_construct: int,
               shard_number: int | None = None, replication_factor: int | None = None) -> None: ...

    @abstractmethod
    def delete(self) -> None: ...

    @abstractmethod
    def count(self) -> int: ...

    @abstractmethod
    def present(self, ids: list[str]) -> set[str]:
        """Which of the point ids exist."""

    @abstractmethod
    def upsert(self, points: list[tuple[str, np.ndarray, np.ndarray, dict]]) -> None:
        """(id, views (n, dim), document vector (dim,), payload) points, acknowledged before returning."""

    @abstractmethod
    def set_marker(self, marker: dict) -> None: ...

    @abstractmethod
    def finish(self) -> None:
        """After ingest: make the collection durable and searchable at its best (edge: build its indexes)."""

    @abstractmethod
    def query(self, q: np.ndarray, k: int, exact: bool, depth: int, hnsw_ef: int | None
              ) -> list[list[tuple[str, float]]]:
        """Per query: (docid, score) of the top k by MAX_SIM over the views; ``exact``: over every document, else
        over the top ``depth`` documents by the document vector."""

    @abstractmethod
    def views(self, pid: str) -> np.ndarray | None:
        """The view vectors of a point, None if it does not exist."""

    @abstractmethod
    def vectors(self, ids: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """{id: (views, document vector)} of the points that exist among ``ids``."""

    def storage_dirs(self) -> list[Path]:
        """The folders holding this collection on this machine (for size reports); none for a server."""
        return []


def _pair(vector: Any) -> tuple[np.ndarray, np.ndarray]:
    """(views, document vector) of a retrieved point's named vectors (empty arrays where one is missing)."""
    vector = vector if isinstance(vector, dict) else {}
    return (np.asarray(vector.get(VIEWS_VECTOR, []), dtype=np.float32),
            np.asarray(vector.get(DOC_VECTOR, []), dtype=np.float32))


def vectors_digest(views: np.ndarray, doc: np.ndarray) -> str:
    """A short digest of a point's vectors as float32 bytes (probes of a collection's integrity)."""
    import hashlib

    h = hashlib.sha256(np.ascontiguousarray(views, dtype=np.float32).tobytes())
    h.update(b"|")
    h.update(np.ascontiguousarray(doc, dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


class ClientCollection(Collection):
    """A collection through qdrant-client: a server (``url``) or local mode (``path``, ``:memory:``)."""

    def __init__(self, name: str, url: str | None = None, path: str | None = None, timeout: int | None = None,
                 client: Any = None):
        self.name, self.url, self.path, self.timeout = name, url, path, timeout
        self.server = url is not None
        self.where = f"collection {name!r} at {url}" if url else f"collection {name!r} in {path}"
        if client is not None:
            self.client = client
        else:
            self.client = open_server_client(url, timeout) if url else open_local_client(path)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            described = describe_server_error(err, self.url, self.timeout) if self.server else None
            if described is None:
                raise
            raise described from None

    def exists(self) -> bool:
        return bool(self._call(self.client.collection_exists, self.name))

    def open(self) -> None:  # the client opened (and locked) its storage, or reached its server, when made
        pass

    def marker(self) -> dict | None:
        metadata = self._call(self.client.get_collection, self.name).config.metadata or {}
        found = metadata.get(MARKER)
        return found if isinstance(found, dict) else None

    def create(self, dim: int, marker: dict, on_disk: bool, hnsw_m: int, ef_construct: int,
               shard_number: int | None = None, replication_factor: int | None = None) -> None:
        _, models = require_qdrant()
        views = models.VectorParams(
            size=dim, distance=models.Distance.DOT, on_disk=on_disk or None,
            multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
            hnsw_config=models.HnswConfigDiff(m=0))  # scored, never searched by graph
        doc = models.VectorParams(size=dim, distance=models.Distance.DOT, on_disk=on_disk or None,
                                  hnsw_config=models.HnswConfigDiff(m=hnsw_m, ef_construct=ef_construct))
        self._call(self.client.create_collection, self.name, vectors_config={VIEWS_VECTOR: views, DOC_VECTOR: doc},
                   shard_number=shard_number, replication_factor=replication_factor,
                   on_disk_payload=on_disk or None, metadata={MARKER: marker})
        if self.server:  # local mode has no payload indexes (and warns)
            self._call(self.client.create_payload_index, self.name, "docid", models.PayloadSchemaType.KEYWORD,
                       wait=True)

    def delete(self) -> None:
        self._call(self.client.delete_collection, self.name)

    def count(self) -> int:
        return int(self._call(self.client.count, self.name, exact=True).count)

    def present(self, ids: list[str]) -> set[str]:
        found = self._call(self.client.retrieve, self.name, ids, with_payload=False, with_vectors=False)
        return {str(r.id) for r in found}

    def upsert(self, points: list[tuple[str, np.ndarray, np.ndarray, dict]]) -> None:
        _, models = require_qdrant()
        structs = [models.PointStruct(id=pid, vector={VIEWS_VECTOR: views.tolist(), DOC_VECTOR: mean.tolist()},
                                      payload=payload) for pid, views, mean, payload in points]
        self._call(self.client.upsert, self.name, points=structs, wait=True)

    def set_marker(self, marker: dict) -> None:
        self._call(self.client.update_collection, self.name, metadata={MARKER: marker})

    def finish(self) -> None:  # every upsert was acknowledged (wait=True); the server indexes by itself
        pass

    def query(self, q: np.ndarray, k: int, exact: bool, depth: int, hnsw_ef: int | None
              ) -> list[list[tuple[str, float]]]:
        _, models = require_qdrant()
        requests = []
        for vec in q.tolist():
            if exact:
                requests.append(models.QueryRequest(
                    query=[vec], using=VIEWS_VECTOR, limit=k, with_payload=["docid"],
                    params=models.SearchParams(exact=True) if self.server else None))
                continue
            # local mode is brute force and warns about search params
            params = models.SearchParams(hnsw_ef=max(hnsw_ef or 0, depth)) if self.server else None
            requests.append(models.QueryRequest(
                prefetch=models.Prefetch(query=vec, using=DOC_VECTOR, limit=depth, params=params),
                query=[vec], using=VIEWS_VECTOR, limit=k, with_payload=["docid"]))
        responses = self._call(self.client.query_batch_points, self.name, requests)
        return [[(p.payload["docid"], float(p.score)) for p in r.points] for r in responses]

    def views(self, pid: str) -> np.ndarray | None:
        records = self._call(self.client.retrieve, self.name, [pid], with_payload=False, with_vectors=[VIEWS_VECTOR])
        return np.asarray(records[0].vector[VIEWS_VECTOR], dtype=np.float32) if records else None

    def vectors(self, ids: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        records = self._call(self.client.retrieve, self.name, ids, with_payload=False, with_vectors=True)
        return {str(r.id): _pair(r.vector) for r in records}

    def storage_dirs(self) -> list[Path]:
        return [] if self.server or self.path in (None, MEMORY) else [Path(self.path)]


def _passes_through(err: BaseException) -> bool:
    """Interrupts and exits pass; everything else the engine raises, a Rust panic included (pyo3's
    ``PanicException`` derives from BaseException), is a damaged or unreadable shard."""
    return isinstance(err, (KeyboardInterrupt, SystemExit, GeneratorExit, MultiViewError))


def _edge_error(err: BaseException, folder: Path, doing: str) -> ConfigError:
    text = " ".join(str(err).split())
    if "WouldBlock" in text or "lock" in text.lower():
        return ConfigError(f"Qdrant edge shard {folder} is in use by another process (its write-ahead log is "
                           "locked): wait for it to finish; one process at a time can open an edge shard")
    return ConfigError(f"Qdrant edge shard {folder}: cannot {doing} ({type(err).__name__}: {text[:200]}); expected "
                       "a folder written by qdrant-edge (edge_config.json, segments/, wal/) and intact: rebuild the "
                       "index with --overwrite")


class EdgeCollection(Collection):
    """A collection as one qdrant-edge shard in ``STORAGE/<name>/`` (Qdrant's engine, in the process)."""

    def __init__(self, name: str, storage: str):
        require_edge()
        if storage == MEMORY:
            raise ConfigError("--qdrant_engine edge keeps its shard in a folder: give --qdrant_path DIR (or none: "
                              "INDEX_DIR/qdrant), not :memory:")
        self.name, self.storage = name, Path(storage)
        if self.storage.exists() and not self.storage.is_dir():
            raise ConfigError(f"Qdrant storage {self.storage} is a file; expected a folder (--qdrant_path)")
        self.folder = self.storage / name
        self.where = f"collection {name!r} (qdrant-edge shard {self.folder})"
        self.marker_file = self.folder / EDGE_MARKER_FILE
        self._shard: Any = None

    @property
    def shard(self) -> Any:
        if self._shard is None:
            key = storage_key(self.folder)
            shard = _OPEN.get(key)
            if shard is None:
                edge = require_edge()
                if not (self.folder / EDGE_CONFIG_FILE).is_file():
                    raise ConfigError(f"{self.folder}: {EDGE_CONFIG_FILE} is missing; expected a qdrant-edge shard "
                                      "folder (rebuild the index with --overwrite)")
                try:
                    shard = edge.EdgeShard.load(str(self.folder))
                except BaseException as err:
                    if _passes_through(err):
                        raise
                    raise _edge_error(err, self.folder, "load it") from None
                _OPEN[key] = shard
                _register_atexit()
            self._shard = shard
        return self._shard

    def _call(self, doing: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except BaseException as err:
            if _passes_through(err):
                raise
            raise _edge_error(err, self.folder, doing) from None

    def exists(self) -> bool:
        return self.folder.exists()

    def open(self) -> None:
        self.shard  # noqa: B018 (loads the shard, taking its write-ahead log's lock)

    def marker(self) -> dict | None:
        if not self.marker_file.is_file():
            return None
        try:
            found = json.loads(self.marker_file.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError) as err:
            raise ConfigError(f"{self.marker_file}: not readable JSON ({' '.join(str(err).split())[:120]}); "
                              "expected this tool's collection record") from None
        found = found.get(MARKER) if isinstance(found, dict) else None
        return found if isinstance(found, dict) else None

    def create(self, dim: int, marker: dict, on_disk: bool, hnsw_m: int, ef_construct: int,
               shard_number: int | None = None, replication_factor: int | None = None) -> None:
        edge = require_edge()
        scan = 10_000  # Qdrant's default full_scan_threshold (KB): below it a segment is scanned, not searched by graph
        views = edge.EdgeVectorParams(
            size=dim, distance=edge.Distance.Dot, on_disk=on_disk or None,
            multivector_config=edge.MultiVectorConfig(comparator=edge.MultiVectorComparator.MaxSim),
            hnsw_config=edge.HnswIndexConfig(m=0, ef_construct=ef_construct, full_scan_threshold=scan))
        doc = edge.EdgeVectorParams(size=dim, distance=edge.Distance.Dot, on_disk=on_disk or None,
                                    hnsw_config=edge.HnswIndexConfig(m=hnsw_m, ef_construct=ef_construct,
                                                                     full_scan_threshold=scan))
        optimizers = (edge.EdgeOptimizersConfig(indexing_threshold=EDGE_INDEXING_THRESHOLD_KB)
                      if EDGE_INDEXING_THRESHOLD_KB is not None else None)
        config = edge.EdgeConfig(vectors={VIEWS_VECTOR: views, DOC_VECTOR: doc}, on_disk_payload=on_disk or None,
                                 optimizers=optimizers)
        try:
            shard = edge.EdgeShard.create(str(self.folder), config)
        except BaseException as err:
            if _passes_through(err):
                raise
            raise _edge_error(err, self.folder, "create it") from None
        _OPEN[storage_key(self.folder)] = shard
        _register_atexit()
        self._shard = shard
        self.set_marker(marker)

    def delete(self) -> None:
        close_all(storage_key(self.folder))
        self._shard = None
        shutil.rmtree(self.folder)

    def count(self) -> int:
        edge = require_edge()
        return int(self._call("count its points", self.shard.count, edge.CountRequest(exact=True)))

    def present(self, ids: list[str]) -> set[str]:
        return {str(r.id) for r in self._call("read its points", self.shard.retrieve, ids, False, False)}

    def upsert(self, points: list[tuple[str, np.ndarray, np.ndarray, dict]]) -> None:
        edge = require_edge()
        structs = [edge.Point(pid, {VIEWS_VECTOR: views.tolist(), DOC_VECTOR: mean.tolist()}, payload)
                   for pid, views, mean, payload in points]
        self._call("write points", self.shard.update, edge.UpdateOperation.upsert_points(structs))

    def set_marker(self, marker: dict) -> None:
        with atomic_open(self.marker_file) as f:  # a temporary file named for this run, renamed into place
            f.write(json.dumps({MARKER: marker}, indent=2) + "\n")

    def finish(self) -> None:
        self._call("optimise it", self.shard.optimize)  # builds the HNSW of segments past the indexing threshold
        self._call("flush it", self.shard.flush)

    def query(self, q: np.ndarray, k: int, exact: bool, depth: int, hnsw_ef: int | None
              ) -> list[list[tuple[str, float]]]:
        edge = require_edge()
        requests = []
        for vec in q.tolist():
            if exact:
                requests.append(edge.QueryRequest(limit=k, query=edge.Query.Nearest([vec], using=VIEWS_VECTOR),
                                                  with_payload=["docid"], params=edge.SearchParams(exact=True)))
                continue
            prefetch = edge.Prefetch(limit=depth, query=edge.Query.Nearest(vec, using=DOC_VECTOR),
                                     params=edge.SearchParams(hnsw_ef=max(hnsw_ef or 0, depth)))
            requests.append(edge.QueryRequest(limit=k, prefetches=[prefetch],
                                              query=edge.Query.Nearest([vec], using=VIEWS_VECTOR),
                                              with_payload=["docid"]))
        responses = self._call("search it", self.shard.query_batch, edge.QueryBatchRequest(requests))
        return [[(p.payload["docid"], float(p.score)) for p in r] for r in responses]

    def views(self, pid: str) -> np.ndarray | None:
        records = self._call("read its points", self.shard.retrieve, [pid], False, [VIEWS_VECTOR])
        return np.asarray(records[0].vector[VIEWS_VECTOR], dtype=np.float32) if records else None

    def vectors(self, ids: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        records = self._call("read its points", self.shard.retrieve, ids, False, True)
        return {str(r.id): _pair(r.vector) for r in records}

    def storage_dirs(self) -> list[Path]:
        return [self.folder]

    def indexed_vectors(self) -> int:
        """Vectors Qdrant has put in an HNSW graph (0: every segment is still scanned exactly)."""
        return int(self._call("describe it", self.shard.info).indexed_vectors_count)
