"""Encoded shards: Tevatron's pickle ``(float ndarray [num_vectors, dim], list[str] lookup)`` plus a JSON sidecar.

A single-vector model writes exactly Tevatron's layout (one row per document, lookup = docid). A multi-vector
model writes one row per view, each document's rows contiguous, lookup ``docid#j`` (j = view index). The
sidecar ``<shard>.json`` records model, dim, views per document, dtype and counts; it is written last, so a
shard is complete only when both files exist and agree.

:class:`ShardWriter` streams: vectors go to a raw temporary file batch by batch (memory stays bounded by the
batch), and an interrupted encode resumes after the last flushed batch. The final pickle is written from a
memory map of that file with pickle protocol 5, then renamed into place.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import pickle
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from multiview_plugin.atomic import atomic_open
from multiview_plugin.errors import MultiViewError

logger = logging.getLogger(__name__)

VIEW_DELIMITER = "#"
SIDECAR_SUFFIX = ".json"


class ShardFormatError(MultiViewError, ValueError):
    """A shard file that is missing, incomplete or not in Tevatron's format."""


@dataclass
class ShardInfo:
    """The sidecar of a shard (``<shard>.json``)."""

    model_name: str
    dim: int
    views_per_doc: int | str  # an int when every document has that many, else "variable"
    dtype: str
    num_items: int  # documents (or queries)
    num_vectors: int
    is_query: bool = False
    max_views: int = 1
    shard_index: int = 0
    num_shards: int = 1
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    format: str = "tevatron-pickle"
    # whether lookups are ``docid#j``: a multi-vector model's shard keeps that layout even when every
    # document happens to have one view (None in sidecars written before this field: inferred from counts)
    view_ids: bool | None = None

    @property
    def multi_vector(self) -> bool:
        if self.view_ids is not None:
            return self.view_ids
        return self.max_views > 1 or self.views_per_doc == "variable"


def sidecar_path(shard: str | os.PathLike) -> Path:
    return Path(str(shard) + SIDECAR_SUFFIX)


def _atomic_write_text(path: Path, text: str) -> None:
    with atomic_open(path, fsync=True) as f:
        f.write(text)


def shard_is_complete(path: str | os.PathLike) -> bool:
    """True when the pickle and its sidecar both exist (the sidecar is written only after the pickle)."""
    return Path(path).is_file() and sidecar_path(path).is_file()


def read_info(path: str | os.PathLike) -> ShardInfo | None:
    side = sidecar_path(path)
    if not side.is_file():
        return None
    try:
        return ShardInfo(**json.loads(side.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError) as err:
        raise ShardFormatError(f"{side}: not a multiview_plugin shard sidecar ({err})") from err


def read_shard(path: str | os.PathLike) -> tuple[np.ndarray, list[str], ShardInfo | None]:
    """Load a shard: (float32 or float16 array, lookup, sidecar or None for plain Tevatron shards)."""
    path = Path(path)
    if not path.is_file():
        raise ShardFormatError(f"shard {path} does not exist")
    info = read_info(path)
    with path.open("rb") as f:
        try:
            obj = pickle.load(f)
        except Exception as err:  # truncated or foreign files
            raise ShardFormatError(f"{path}: cannot unpickle ({err}); incomplete or not a shard") from err
    if not (isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], np.ndarray)):
        raise ShardFormatError(f"{path}: expected Tevatron's (ndarray, lookup) 2-tuple")
    reps, lookup = obj
    lookup = [str(x) for x in lookup]
    if reps.ndim != 2 or reps.shape[0] != len(lookup):
        raise ShardFormatError(f"{path}: {reps.shape} vectors do not match {len(lookup)} lookup entries")
    if info is not None and (info.num_vectors != reps.shape[0] or info.dim != reps.shape[1]):
        raise ShardFormatError(f"{path}: sidecar says {info.num_vectors}x{info.dim}, file holds {reps.shape}")
    return reps, lookup, info


def split_lookup(lookup: list[str] | np.ndarray, multi_vector: bool) -> np.ndarray:
    """Docid of every row: ``docid#j`` → ``docid`` for multi-vector lookups (split at the last ``#``)."""
    arr = np.asarray(lookup, dtype=object)
    if not multi_vector:
        return arr
    return np.array([x.rsplit(VIEW_DELIMITER, 1)[0] for x in arr], dtype=object)


class _ReleasingWriter:
    """File wrapper for pickling a memory-mapped array: pickle protocol 5 hands the array's whole buffer to
    ``write`` at once; this writes it in chunks and drops each written chunk's pages from the process
    (``MADV_DONTNEED``), so peak memory stays bounded instead of growing with the shard."""

    CHUNK = 16 << 20

    def __init__(self, f, mm: np.memmap):
        self.f = f
        self.mmap = getattr(mm, "_mmap", None)
        self.nbytes = mm.nbytes

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        if view.nbytes != self.nbytes or self.mmap is None or not hasattr(self.mmap, "madvise"):
            return self.f.write(view)
        for start in range(0, view.nbytes, self.CHUNK):
            end = min(start + self.CHUNK, view.nbytes)
            self.f.write(view[start:end])
            page = mmap.PAGESIZE
            lo, hi = start // page * page, end // page * page
            if hi > lo:
                self.mmap.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        return view.nbytes


class ShardWriter:
    """Stream (docid, view vectors) batches into a shard; resumable; atomic at the end.

    Parameters
    ----------
    path : the final ``.pkl`` path.
    info : the sidecar (dim and counts are filled in as rows arrive).
    multi_vector : write ``docid#j`` lookups (one row per view) instead of plain docids.
    """

    def __init__(self, path: str | os.PathLike, info: ShardInfo, multi_vector: bool):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.info = info
        self.multi_vector = multi_vector
        self.info.view_ids = multi_vector
        self.dtype = np.dtype(info.dtype)
        self._vec_path = self.path.with_name(self.path.name + ".vectors.partial")
        self._ids_path = self.path.with_name(self.path.name + ".lookup.partial")
        self._state_path = self.path.with_name(self.path.name + ".state.partial")
        self.docs_done = 0
        self.rows_done = 0
        self.view_counts: set[int] = set()
        self._resume()
        self._vec = self._vec_path.open("ab")
        self._ids = self._ids_path.open("ab")

    def _resume(self) -> None:
        if not self._state_path.is_file():
            for p in (self._vec_path, self._ids_path):
                p.unlink(missing_ok=True)
            return
        state = json.loads(self._state_path.read_text())
        self.docs_done, self.rows_done = state["docs"], state["rows"]
        self.info.dim = state["dim"]
        self.view_counts = set(state["view_counts"])
        self.info.extra = {**state.get("extra", {}), **self.info.extra}
        # drop anything written after the last recorded flush
        with self._vec_path.open("r+b") as f:
            f.truncate(self.rows_done * self.info.dim * self.dtype.itemsize)
        with self._ids_path.open("r+b") as f:
            f.truncate(state["ids_bytes"])
        logger.info("resuming %s after %d items (%d vectors)", self.path, self.docs_done, self.rows_done)

    def add(self, ids: list[str], reps: np.ndarray, mask: np.ndarray | None = None) -> None:
        """Append a batch: ``reps`` (B, K, D) (or (B, D)) and a (B, K) view mask."""
        if reps.ndim == 2:
            reps = reps[:, None, :]
        if mask is None:
            mask = np.ones(reps.shape[:2], dtype=bool)
        if self.info.dim == 0:
            self.info.dim = int(reps.shape[-1])
        elif reps.shape[-1] != self.info.dim:
            raise ShardFormatError(f"vector dim changed from {self.info.dim} to {reps.shape[-1]}")
        counts = mask.sum(axis=1)
        if (counts == 0).any():
            bad = [d for d, c in zip(ids, counts) if c == 0]
            raise ShardFormatError(f"documents without any vector: {bad[:5]}")
        rows = np.ascontiguousarray(reps[mask], dtype=self.dtype)  # row-major: each doc's views contiguous
        if self.multi_vector:
            lines = [f"{d}{VIEW_DELIMITER}{j}" for d, c in zip(ids, counts.tolist()) for j in range(c)]
        else:
            if counts.max() > 1:
                raise ShardFormatError("a single-vector shard received several vectors per document")
            lines = list(ids)
        self._vec.write(rows.tobytes())
        self._ids.write(("\n".join(lines) + "\n").encode("utf-8"))
        self.docs_done += len(ids)
        self.rows_done += rows.shape[0]
        self.view_counts.update(int(c) for c in np.unique(counts))

    def checkpoint(self) -> None:
        """Make everything added so far survive a crash (the next writer resumes after it)."""
        self._vec.flush()
        self._ids.flush()
        os.fsync(self._vec.fileno())
        os.fsync(self._ids.fileno())
        state = {"docs": self.docs_done, "rows": self.rows_done, "dim": self.info.dim,
                 "ids_bytes": self._ids.tell(), "view_counts": sorted(self.view_counts), "extra": self.info.extra}
        _atomic_write_text(self._state_path, json.dumps(state))

    def close(self) -> ShardInfo:
        """Write the final pickle (atomically) and then the sidecar; remove the partial files."""
        self.checkpoint()
        self._vec.close()
        self._ids.close()
        dim = self.info.dim
        lookup = self._ids_path.read_text(encoding="utf-8").splitlines()
        with atomic_open(self.path, "wb", fsync=True) as f:
            if self.rows_done:
                # Copy-on-write map: writable, so the pickle is byte-identical to pickling an ordinary array.
                mm = np.memmap(self._vec_path, dtype=self.dtype, mode="c", shape=(self.rows_done, dim))
                pickle.dump((np.asarray(mm), lookup), _ReleasingWriter(f, mm), protocol=5)
                del mm
            else:
                pickle.dump((np.zeros((0, dim), dtype=self.dtype), lookup), f, protocol=5)
        counts = sorted(self.view_counts)
        self.info.num_items = self.docs_done
        self.info.num_vectors = self.rows_done
        self.info.max_views = counts[-1] if counts else 0
        self.info.views_per_doc = counts[0] if len(counts) == 1 else ("variable" if counts else 0)
        _atomic_write_text(sidecar_path(self.path), json.dumps(asdict(self.info), indent=2) + "\n")
        for p in (self._vec_path, self._ids_path, self._state_path):
            p.unlink(missing_ok=True)
        return self.info
