"""The re-scoring store: every view vector of an index, in row order, at fp16 or fp32 in ``rescore_views.npy``
(:class:`RescoreStoreWriter`: sequential writes, one chunk in memory), which searchers memory-map to re-score
candidate documents exactly where the index's own codes are lossy (SQ8, PQ)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from multiview_plugin.errors import ConfigError, MultiViewError

RESCORE_STORES = {"none": None, "fp16": "float16", "fp32": "float32"}  # --rescore_store: the file's dtype


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
