"""The re-scoring store: every view vector of an index, in row order, at fp16 or fp32 in ``rescore_views.npy``
(:class:`RescoreStoreWriter`: sequential writes, one chunk in memory), which searchers memory-map to re-score
candidate documents exactly where the index's own codes are lossy (SQ8, PQ).

A store larger than the page cache is read from disk at each search. :func:`advise_random_reads` and
:func:`prefetch_rows` keep those reads to the candidates' own pages, issued together: the kernel's default for a
memory map reads a window around every faulting page (``read_ahead_kb``, 8 MB on the disk where it was measured)
and one page fault at a time (bench/rescore_cold.log)."""

from __future__ import annotations

import ctypes
import functools
import mmap
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


RESIDENCY_SAMPLE = 16  # rows, evenly spaced in file order, whose first page is looked up first (mincore)


def _mapping(views: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """The ``mmap`` under a memory-mapped array (``np.load(mmap_mode=...)``, or a slice of one) and the address
    where the map starts; None for an array in memory."""
    base = views
    while base is not None and not isinstance(base, np.memmap):
        base = base.base if isinstance(base.base, np.ndarray) else None
    mm = getattr(base, "_mmap", None)
    if base is None or not isinstance(mm, mmap.mmap) or not hasattr(mm, "madvise"):
        return None
    first = np.frombuffer(mm, dtype=np.uint8, count=1)  # a view of the map's first byte: its address
    start = first.ctypes.data
    del first
    return mm, start


def advise_random_reads(views: np.ndarray) -> None:
    """Tells the kernel the store's pages are read at random: a page fault reads that page, not a read-ahead
    window around it. A no-op for an array in memory or where ``madvise`` is not available."""
    mapped = _mapping(views)
    if mapped is not None and hasattr(mmap, "MADV_RANDOM"):
        mapped[0].madvise(mmap.MADV_RANDOM)


def _row_runs(views: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte ranges ``[lo, hi)`` of the array's data covering ``rows`` (sorted; repeats allowed), one per run of
    adjacent rows."""
    breaks = np.flatnonzero(np.diff(rows) > 1) + 1
    first = np.concatenate([rows[:1], rows[breaks]])
    last = np.concatenate([rows[breaks - 1], rows[-1:]])
    row_bytes = views.strides[0]
    return first * row_bytes, (last + 1) * row_bytes


@functools.cache
def _mincore():  # noqa: ANN202 - a ctypes function, or None
    """The C library's ``mincore`` (the process's own symbols), None where there is none."""
    if os.name != "posix":
        return None
    fn = getattr(ctypes.CDLL(None, use_errno=True), "mincore", None)
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p], ctypes.c_int
    return fn


def _resident(address: int, page: int) -> bool | None:
    """Whether the page at ``address`` (page-aligned) is in memory; None where ``mincore`` cannot say."""
    mincore = _mincore()
    if mincore is None:
        return None
    vec = ctypes.create_string_buffer(1)
    if mincore(address, page, vec) != 0:
        return None
    return bool(vec.raw[0] & 1)


def prefetch_rows(views: np.ndarray, rows: np.ndarray) -> int:
    """Asks the kernel to read the pages of ``rows`` (sorted) of a memory-mapped store all at once, ahead of the
    reads (``MADV_WILLNEED`` per run of adjacent rows), so that a cold store is read at the disk's queue depth
    rather than one page fault at a time. Looks up the first page of up to :data:`RESIDENCY_SAMPLE` of the rows
    first and does nothing where all are in memory (a warm store: the advice would cost about as much as the
    re-scoring). Returns the number of runs advised (0: an array in memory, a warm store, or no ``madvise``)."""
    placed = _row0_in_map(views)
    if placed is None or len(rows) == 0:
        return 0
    mm, row0 = placed
    page, row_bytes, at = mmap.PAGESIZE, views.strides[0], views.ctypes.data
    sample = rows[np.linspace(0, len(rows) - 1, min(RESIDENCY_SAMPLE, len(rows))).astype(np.int64)]
    if all(_resident((at + int(r) * row_bytes) // page * page, page) is True for r in sample):
        return 0
    lo, hi = _row_runs(views, rows)
    for a, b in zip((row0 + lo) // page * page, row0 + hi):  # offsets in the map, from a page boundary
        mm.madvise(mmap.MADV_WILLNEED, int(a), int(b - a))
    return len(lo)


def _row0_in_map(views: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """The map under ``views`` and the offset of its row 0 in that map; None where nothing can be advised (an array
    in memory, rows not contiguous, no ``madvise``)."""
    mapped = _mapping(views)
    if mapped is None or not hasattr(mmap, "MADV_WILLNEED") or not views.flags.c_contiguous:
        return None
    mm, start = mapped
    return mm, views.ctypes.data - start
