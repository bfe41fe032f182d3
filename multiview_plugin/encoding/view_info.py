"""What each vector of a shard or index stands for ("view j of document d is ...").

Two parts, versioned together (``VIEW_INFO_VERSION``):

* a small description in the shard sidecar's / index meta's ``extra["view_info"]`` (``VIEW_INFO_KEY``): the
  kind of view and the facts shared by all documents (``{"kind": "viewer", "labels": ["[VIE1]", ...]}``,
  ``{"kind": "layer", "labels": [6, 5, 4, 3]}``, ``{"kind": "token"}``, ``{"kind": "pseudo_query",
  "pseudo_queries": path}``, ``{"kind": "sentence", "rows": true}``), plus where the texts are (``corpus``,
  ``separator``);
* for views that differ per document (DCSR's sentences), one int32 row per vector in a side file, in vector
  order: ``<shard>.views.npy`` beside a shard, ``views.npy`` in an index folder, columns
  ``ROW_COLUMNS`` (sentence start and end character in the passage text, 1 if the sentence was cut short).

The rows are written while encoding, batch by batch, into ``<shard>.views.partial`` (fixed-size rows, so an
interrupted encode resumes by truncating to the shard's flushed rows) and become ``<shard>.views.npy`` before
the sidecar is written; an index reads them memory-mapped. Shards and indexes without this information (older
ones) load as before; explanations then omit what the view is.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from multiview_plugin.atomic import atomic_open
from multiview_plugin.encoding.shards import ShardFormatError

VIEW_INFO_VERSION = 1
VIEW_INFO_KEY = "view_info"  # the key in a sidecar's / index meta's ``extra``
ROW_COLUMNS = ("start", "end", "cut")
ROW_DTYPE = np.dtype(np.int32)
INDEX_VIEWS_FILE = "views.npy"


def shard_views_path(shard: str | os.PathLike) -> Path:
    return Path(str(shard) + ".views.npy")


class ViewRowWriter:
    """Streams per-vector rows beside a shard; resumable (truncated to ``rows_done`` on open)."""

    def __init__(self, shard: str | os.PathLike, rows_done: int):
        self.final = shard_views_path(shard)
        self.partial = Path(str(shard) + ".views.partial")
        width = len(ROW_COLUMNS) * ROW_DTYPE.itemsize
        have = self.partial.stat().st_size if self.partial.is_file() else 0
        if rows_done and have < rows_done * width and self.final.is_file():
            # killed after the rows were finalised but before the sidecar: take them back
            done = np.load(self.final, mmap_mode="r")
            if len(done) >= rows_done:
                self.partial.write_bytes(np.ascontiguousarray(done[:rows_done]).tobytes())
        if rows_done and (not self.partial.is_file() or self.partial.stat().st_size < rows_done * width):
            raise ShardFormatError(f"{self.partial}: view rows of the resumed shard are missing; rerun with "
                                   "--overwrite")
        if not rows_done:
            self.partial.unlink(missing_ok=True)
        self._f = self.partial.open("ab")
        self._f.truncate(rows_done * width)
        self.rows = rows_done

    def add(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=ROW_DTYPE)
        if rows.ndim != 2 or rows.shape[1] != len(ROW_COLUMNS):
            raise ValueError(f"view rows must be (N, {len(ROW_COLUMNS)}), got {rows.shape}")
        self._f.write(rows.tobytes())
        self.rows += len(rows)

    def flush(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self, expected_rows: int) -> Path:
        """Write ``<shard>.views.npy`` (atomically) from the streamed rows; must match the shard's vectors."""
        self.flush()
        self._f.close()
        if self.rows != expected_rows:
            raise ShardFormatError(f"{self.partial}: {self.rows} view rows for {expected_rows} vectors")
        raw = np.memmap(self.partial, dtype=ROW_DTYPE, mode="r", shape=(self.rows, len(ROW_COLUMNS))) \
            if self.rows else np.zeros((0, len(ROW_COLUMNS)), ROW_DTYPE)
        with atomic_open(self.final, "wb") as f:  # a temporary file of this run's, renamed into place
            np.save(f, np.asarray(raw))
        del raw
        self.partial.unlink(missing_ok=True)
        return self.final


def concat_rows(shards: Sequence[str | os.PathLike], out: str | os.PathLike, num_vectors: int) -> bool:
    """The shards' view rows, in shard order, into one ``.npy`` (streamed, memory: one shard's rows).

    Returns False (and writes nothing) when a shard has no rows file.
    """
    parts = [shard_views_path(s) for s in shards]
    if not all(p.is_file() for p in parts):
        return False
    merged = np.lib.format.open_memmap(out, mode="w+", dtype=ROW_DTYPE, shape=(num_vectors, len(ROW_COLUMNS)))
    pos = 0
    for part in parts:
        rows = np.load(part, mmap_mode="r")
        if pos + len(rows) > num_vectors:
            raise ShardFormatError(f"{part}: more view rows than the shards have vectors")
        merged[pos:pos + len(rows)] = rows
        pos += len(rows)
    if pos != num_vectors:
        raise ShardFormatError(f"view rows ({pos}) do not match the vectors ({num_vectors}) of the shards")
    merged.flush()
    del merged
    return True


def merge_descriptions(descriptions: Sequence[dict | None]) -> dict | None:
    """The index's view description from its shards': kept when every shard has the same one (texts may live
    in several corpus files: they are listed), else None (explanations then omit what the view is)."""
    if not descriptions or any(d is None for d in descriptions):
        return None
    first = {k: v for k, v in descriptions[0].items() if k != "corpus"}
    if any({k: v for k, v in d.items() if k != "corpus"} != first for d in descriptions[1:]):
        return None
    corpora = list(dict.fromkeys(c for d in descriptions for c in ([d["corpus"]] if d.get("corpus") else [])))
    return {**first, **({"corpus": corpora} if corpora else {})}
