"""Encoded shards: Tevatron's pickle ``(float ndarray [num_vectors, dim], list[str] lookup)`` plus a JSON sidecar.

A single-vector model writes exactly Tevatron's layout (one row per document, lookup = docid). A multi-vector
model writes one row per view, each document's rows contiguous, lookup ``docid#j`` (j = view index). The
sidecar ``<shard>.json`` records model, dim, views per document, dtype and counts; it is written last, so a
shard is complete only when both files exist and agree.

:class:`ShardWriter` streams: vectors go to a raw temporary file batch by batch (memory stays bounded by the
batch), and an interrupted encode resumes after the last flushed batch. The final pickle is written from a
memory map of that file with pickle protocol 5, then renamed into place.

Resume and skip are guarded by a fingerprint (:mod:`multiview_plugin.encoding.fingerprint`) kept in the resume
state and in the sidecar: a run with another model, dtype, length, shard or input refuses to continue or skip.
Shards are read with a restricted unpickler (:func:`load_shard_pickle`) that builds only numpy arrays, lists and
strings, so a crafted pickle cannot run code; plain ``pickle`` only when the caller asks (``unsafe_pickle``).
"""

from __future__ import annotations

import codecs
import contextlib
import glob
import json
import logging
import mmap
import os
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from multiview_plugin.atomic import atomic_open, with_path
from multiview_plugin.data.readers import MAX_ID_CHARS
from multiview_plugin.encoding.fingerprint import describe_differences
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
    # what determined the bytes (model, dtype, lengths, shard, input; see encoding/fingerprint.py); None in
    # sidecars written before this field and in plain Tevatron shards
    fingerprint: dict[str, Any] | None = None
    model_path: str | None = None  # the model folder, for people (the fingerprint hashes its weights)

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


def partial_paths(path: str | os.PathLike) -> list[Path]:
    """The files an unfinished encode of ``path`` leaves: raw vectors, lookup lines, resume state, and the
    temporary files of interrupted atomic writes."""
    path = Path(path)
    named = [path.with_name(f"{path.name}.{part}.partial") for part in ("vectors", "lookup", "state", "views")]
    return named + sorted(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))


def remove_shard(path: str | os.PathLike) -> None:
    """Delete a shard, its sidecar and every partial file (``--overwrite``: nothing of an old run survives)."""
    for p in (Path(path), sidecar_path(path), Path(f"{path}.views.npy"), *partial_paths(path)):
        p.unlink(missing_ok=True)


def check_fingerprint(path: str | os.PathLike, recorded: dict[str, Any] | None, current: dict[str, Any],
                      what: str) -> None:
    """Refuse to reuse ``what`` (a finished shard or an interrupted run) of ``path`` made differently."""
    if recorded is None:
        raise ShardFormatError(f"{path}: cannot {what}: it records no fingerprint (written by an older version), "
                               "so it may come from another model or input; pass --overwrite to encode afresh")
    differences = describe_differences(recorded, current)
    if differences:
        raise ShardFormatError(f"{path}: cannot {what}: it was made with a different {differences}; "
                               "pass --overwrite to encode afresh (or use another --encode_output_path)")


def shard_is_complete(path: str | os.PathLike) -> bool:
    """True when the pickle and its sidecar both exist (the sidecar is written only after the pickle)."""
    return Path(path).is_file() and sidecar_path(path).is_file()


def written_by_encode(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` is one encode wrote: a shard whose sidecar is ours, or the final pickle of an
    interrupted encode (killed after renaming it into place, before writing the sidecar: its resume state is
    still beside it). A file with neither (a user's file, a plain Tevatron pickle) is not."""
    if sidecar_path(path).is_file():
        read_info(path)  # a sidecar that is not ours is a one-line error
        return True
    return partial_paths(path)[2].is_file()


def read_info(path: str | os.PathLike) -> ShardInfo | None:
    side = sidecar_path(path)
    if not side.is_file():
        return None
    try:
        return ShardInfo(**json.loads(side.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as err:  # bad JSON or UTF-8, not an object, fields not ShardInfo's
        raise ShardFormatError(f"{side}: not a multiview_plugin shard sidecar ({err})") from err


# Everything a Tevatron shard (or ours) needs to unpickle: numpy arrays (protocols 2-5), dtypes, numpy scalars
# (numeric ids) and protocol 2's bytes encoding. Nothing here can run code or touch files.
_NUMPY_CORE = getattr(np, "_core", None) or np.core
_SAFE_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): codecs.encode,
    **{(f"numpy.{core}.multiarray", "_reconstruct"): _NUMPY_CORE.multiarray._reconstruct for core in ("core", "_core")},
    **{(f"numpy.{core}.multiarray", "scalar"): _NUMPY_CORE.multiarray.scalar for core in ("core", "_core")},
    **{(f"numpy.{core}.numeric", "_frombuffer"): _NUMPY_CORE.numeric._frombuffer for core in ("core", "_core")},
}


class UnsafePickleError(ShardFormatError):
    """A shard pickle that asks for anything beyond arrays, lists and strings (it could run code)."""


class _ShardUnpickler(pickle.Unpickler):
    """Builds only what a shard holds; any other class or function in the stream is refused before it loads."""

    def __init__(self, file, path: Path):
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _SAFE_GLOBALS[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"{self.path}: refusing to unpickle {module}.{name}: a shard holds only (ndarray, list of ids); "
                "this file could run code. If you trust it, pass --allow_unsafe_pickle") from None


def load_shard_pickle(path: Path, unsafe_pickle: bool = False) -> Any:
    """Unpickle a shard file: restricted to arrays, lists and strings unless ``unsafe_pickle``."""
    with path.open("rb") as f:
        try:
            return pickle.load(f) if unsafe_pickle else _ShardUnpickler(f, path).load()
        except UnsafePickleError:
            raise
        except Exception as err:  # truncated or foreign files
            raise ShardFormatError(f"{path}: cannot unpickle ({err}); incomplete or not a shard") from err


def read_shard(path: str | os.PathLike, unsafe_pickle: bool = False
               ) -> tuple[np.ndarray, list[str], ShardInfo | None]:
    """Load a shard: (float32 or float16 array, lookup, sidecar or None for plain Tevatron shards).

    ``unsafe_pickle`` uses plain :func:`pickle.load` (runs whatever the file says: trusted files only).
    """
    path = Path(path)
    if not path.is_file():
        raise ShardFormatError(f"shard {path} does not exist")
    info = read_info(path)
    obj = load_shard_pickle(path, unsafe_pickle)
    if not (isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], np.ndarray)):
        raise ShardFormatError(f"{path}: expected Tevatron's (ndarray, lookup) 2-tuple")
    reps, lookup = obj
    if reps.dtype.kind != "f":
        raise ShardFormatError(f"{path}: vectors must be floats, got dtype {reps.dtype}")
    if reps.ndim != 2 or (reps.shape[0] and not reps.shape[1]):
        raise ShardFormatError(f"{path}: vectors must be a 2-d array of non-empty rows, got shape {reps.shape}")
    lookup = _checked_lookup(path, lookup, reps.shape[0])
    if info is not None and (info.num_vectors != reps.shape[0] or (reps.shape[0] and info.dim != reps.shape[1])):
        raise ShardFormatError(f"{path}: sidecar says {info.num_vectors}x{info.dim}, file holds {reps.shape}")
    check_finite_rows(reps, lookup, str(path))
    return reps, lookup, info


# ids are strings or integers; an integer id has at most this many digits (str() of longer ints is refused by
# Python itself past 4300 digits, and no corpus numbers its documents beyond 10^18)
_MAX_INT_ID = 10**18


def _checked_lookup(path: Path, lookup: Any, rows: int) -> list[str]:
    """The lookup as a list of strings, after checking its type and length against the vector rows *before*
    converting anything: a small crafted pickle can reference one long string (or a list of them) many times,
    which ``str()`` would expand to gigabytes."""
    if isinstance(lookup, np.ndarray):
        if lookup.ndim != 1:
            raise ShardFormatError(f"{path}: the lookup must be a 1-d list of ids, got an array of shape "
                                   f"{lookup.shape}")
        if lookup.dtype.kind not in "iuUO":
            raise ShardFormatError(f"{path}: the lookup must hold string or integer ids, got dtype {lookup.dtype}")
    elif not isinstance(lookup, (list, tuple)):
        raise ShardFormatError(f"{path}: the lookup must be a list or array of ids, got {type(lookup).__name__}")
    if len(lookup) != rows:
        raise ShardFormatError(f"{path}: {rows} vector rows do not match {len(lookup)} lookup entries")
    if isinstance(lookup, np.ndarray) and lookup.dtype.kind == "U" and lookup.dtype.itemsize // 4 > MAX_ID_CHARS:
        longest = int(np.argmax(np.char.str_len(lookup)))
        _refuse_long_id(path, longest, len(lookup[longest]))
    if isinstance(lookup, np.ndarray) and lookup.dtype.kind in "iuU":
        return lookup.astype(str).tolist()  # the array's bytes are in the file: no expansion possible
    items = lookup.tolist() if isinstance(lookup, np.ndarray) else lookup
    kinds = set(map(type, items))
    strings = all(issubclass(t, str) for t in kinds)
    if not strings and not all(issubclass(t, (str, int, np.integer)) and not issubclass(t, bool) for t in kinds):
        bad = next(t for t in kinds if not issubclass(t, (str, int, np.integer)) or issubclass(t, bool))
        raise ShardFormatError(f"{path}: lookup ids must be strings or integers, got {bad.__name__}")
    if not strings:
        ints = [x for x in items if not isinstance(x, str)]
        if max(map(abs, ints)) >= _MAX_INT_ID:
            raise ShardFormatError(f"{path}: an integer id in the lookup has more than 18 digits")
    lengths = [len(x) if isinstance(x, str) else 0 for x in items]
    if lengths and max(lengths) > MAX_ID_CHARS:
        longest = int(np.argmax(lengths))
        _refuse_long_id(path, longest, lengths[longest])
    chars = sum(lengths)
    limit = 4 * path.stat().st_size + 4096  # stored ids take at least one byte per character in the file
    if chars > limit:
        raise ShardFormatError(f"{path}: its {len(items)} lookup ids hold {chars} characters, more than its "
                               f"{path.stat().st_size} bytes can store: ids repeated by reference (a crafted "
                               "pickle that expands when loaded); refusing it")
    ids = list(items) if kinds <= {str} else [str(x) for x in items]
    _check_ids(path, ids)
    return ids


def _refuse_long_id(path: Path, row: int, length: int) -> None:
    if length > MAX_ID_CHARS:
        raise ShardFormatError(f"{path}: lookup row {row}: an id of {length} characters, longer than the "
                               f"{MAX_ID_CHARS} an id may have (ids are single tokens); refusing the shard")


def _check_ids(path: Path, ids: list[str]) -> None:
    """Ids go to line-based files (docid files, runs): refuse empty ones and ones with whitespace or control
    characters. One pass in C over the joined ids; the per-id check runs only when that pass finds something."""
    if not ids:
        return
    if not min(map(len, ids)):
        raise ShardFormatError(f"{path}: lookup row {ids.index('')} has an empty id")
    joined = " ".join(ids)
    if joined.isprintable() and joined.count(" ") == len(ids) - 1:
        return
    from multiview_plugin.data.readers import id_problem

    for row, value in enumerate(ids):
        problem = id_problem(value)
        if problem:
            raise ShardFormatError(f"{path}: lookup row {row}: id {problem}")


class NonFiniteVectorsError(ShardFormatError):
    """Vectors holding NaN or infinite values: they would drop out of every ranking without a word."""


_FINITE_CHUNK = 65_536  # rows checked at once (bounds the boolean temporary)


def nonfinite_rows(reps: np.ndarray) -> np.ndarray:
    """Indices of the rows of a 2-d array with any NaN or infinite value (checked in chunks of rows)."""
    if len(reps) <= _FINITE_CHUNK and np.isfinite(reps).all():  # the common case in one call (a query, a batch)
        return np.zeros(0, dtype=np.int64)
    bad = [lo + np.flatnonzero(~np.isfinite(reps[lo:lo + _FINITE_CHUNK]).all(axis=1))
           for lo in range(0, len(reps), _FINITE_CHUNK)]
    return np.concatenate(bad) if bad else np.zeros(0, dtype=np.int64)


def check_finite_rows(reps: np.ndarray, ids: list[str] | np.ndarray, where: str, what: str = "row") -> None:
    """Refuse rows with NaN or infinite values, naming ``where`` (a file), the first bad rows and their ids."""
    if reps.dtype.kind != "f":
        return
    bad = nonfinite_rows(reps)
    if len(bad):
        shown = ", ".join(f"{what} {int(r)} ({ids[int(r)]!r})" for r in bad[:3])
        raise NonFiniteVectorsError(f"{where}: {len(bad)} of {len(reps)} vectors hold NaN or infinite values, "
                                    f"e.g. {shown}; re-encode them (a model run in float16 can overflow)")


# --------------------------------------------------------------------------- shards without a sidecar
# The one rule every driver (index, search with --passage_reps/--shard_search/--query_reps/--encoded_queries,
# and through the index folder mine_negatives, analyze and explanations) applies to a shard whose ``.json``
# sidecar is missing (a plain Tevatron pickle): docs/data-formats.md "Shards", docs/reliability.md.

_MAX_VIEW_DIGITS = 9  # a view index past 10^9 is not one


def _is_view_index(text: str) -> bool:
    """``j`` of ``docid#j``: a canonical non-negative decimal (``0``, ``1``, ``12``; not ``01``, ``+1``, ``²``)."""
    return (0 < len(text) <= _MAX_VIEW_DIGITS and text.isascii() and text.isdigit()
            and (text == "0" or text[0] != "0"))


@dataclass(frozen=True)
class InferredLayout:
    """What a lookup without a sidecar says about its rows (:func:`infer_view_ids`)."""

    multi_vector: bool
    min_views: int = 1
    max_views: int = 1

    def describe(self) -> str:
        if not self.multi_vector:
            return "single-vector (one row per docid; no id holds '#')"
        views = (f"{self.min_views}" if self.min_views == self.max_views
                 else f"{self.min_views} to {self.max_views}")
        return f"multi-vector (every id is docid#j, {views} view(s) per document)"


def infer_view_ids(path: str | os.PathLike, lookup: Sequence[str]) -> InferredLayout | None:
    """How the rows of a shard without a sidecar are read, from its lookup ids alone (None: empty lookup):

    * no id contains ``#``: single-vector, one row per docid (Tevatron's layout);
    * every id is ``docid#j`` and j counts 0, 1, 2, ... over each docid's contiguous rows: multi-vector, the
      layout encode writes for multi-vector models (split at the last ``#``, as :func:`split_lookup`);
    * anything else (some ids with ``#`` and some without, or view indexes that do not count from 0) is
      refused with :class:`ShardFormatError` naming the first row that breaks the pattern: which rows belong
      to one document cannot be told (docids may not contain ``#``).
    """
    if not len(lookup):
        return None
    parts = [x.rpartition(VIEW_DELIMITER) for x in lookup]
    if not any(sep for _, sep, _ in parts):
        return InferredLayout(False)
    bad = next((row for row, (head, sep, tail) in enumerate(parts) if not (sep and head and _is_view_index(tail))),
               None)
    if bad is None:
        heads = np.array([head for head, _, _ in parts], dtype=object)
        views = np.array([int(tail) for _, _, tail in parts], dtype=np.int64)
        rows = np.arange(len(heads))
        starts = np.r_[True, heads[1:] != heads[:-1]]
        expected = rows - np.maximum.accumulate(np.where(starts, rows, 0))
        wrong = np.flatnonzero(views != expected)
        if not len(wrong):
            counts = np.diff(np.r_[np.flatnonzero(starts), len(heads)])
            return InferredLayout(True, int(counts.min()), int(counts.max()))
        bad = int(wrong[0])
    raise ShardFormatError(
        f"{path}: no sidecar ({sidecar_path(path).name}), and its lookup ids are neither all plain docids nor all "
        f"docid#j (view j = 0, 1, ... of a document): row {bad} is {lookup[bad]!r}, so which rows belong to one "
        "document cannot be told (docids may not contain '#'); re-encode it with multiview_plugin.driver.encode, "
        "which writes a sidecar")


def shard_view_ids(path: str | os.PathLike, lookup: Sequence[str], info: ShardInfo | None, *,
                   is_query: bool = False, checked_against: str | None = None) -> bool:
    """Whether a shard's lookup ids are ``docid#j`` (one row per view): the rule every driver reads shards by.

    With a sidecar, what it records. Without one (a plain Tevatron pickle), inferred from the lookup ids by
    :func:`infer_view_ids` (an ambiguous lookup is a one-line error), with a WARNING naming the file and the
    checks that could not be made: for passages, the model fingerprint and the completeness of the shard set;
    for queries (``is_query``: always one row per query id), the model fingerprint against ``checked_against``
    (the passages or index they are searched against). A query lookup of ``docid#j`` ids with several rows per
    docid is a multi-vector passage shard, and refused.
    """
    if info is not None:
        return False if is_query else info.multi_vector
    side = sidecar_path(path).name
    if is_query:
        try:
            layout = infer_view_ids(path, lookup)
        except ShardFormatError:
            layout = None  # query ids with '#' in them: still one row per query
        if layout is not None and layout.max_views > 1:
            raise ShardFormatError(f"{path}: given as queries, but its ids are docid#j with up to {layout.max_views} "
                                   "rows per docid: a multi-vector passage shard (pass it as --passage_reps)")
        logger.warning("%s: no sidecar (%s; a plain Tevatron pickle): the model that encoded these queries is "
                       "unknown, so its fingerprint cannot be checked against %s; queries of another model would "
                       "score nonsense", path, side, checked_against or "the passages'")
        return False
    layout = infer_view_ids(path, lookup)
    logger.warning("%s: no sidecar (%s; a plain Tevatron pickle): its model fingerprint and whether its shard set "
                   "is complete cannot be checked; read as %s, inferred from its lookup ids", path, side,
                   layout.describe() if layout is not None else "empty")
    return layout.multi_vector if layout is not None else False


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
        self._vec_path, self._ids_path, self._state_path = partial_paths(self.path)[:3]
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
        try:
            state = json.loads(self._state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise ShardFormatError(f"{self._state_path}: unreadable resume state ({err}); pass --overwrite") from err
        if self.info.fingerprint is not None:
            check_fingerprint(self.path, state.get("fingerprint"), self.info.fingerprint, "resume the interrupted "
                              "encode")
        self.docs_done, self.rows_done = state["docs"], state["rows"]
        self.info.dim = state["dim"]
        self.view_counts = set(state["view_counts"])
        self.info.extra = {**state.get("extra", {}), **self.info.extra}
        # drop anything written after the last recorded flush (files shorter than recorded: data was lost)
        for part, size in ((self._vec_path, self.rows_done * self.info.dim * self.dtype.itemsize),
                           (self._ids_path, state["ids_bytes"])):
            if not part.is_file() or part.stat().st_size < size:
                raise ShardFormatError(f"{part}: shorter than its resume state records; pass --overwrite")
            with part.open("r+b") as f:
                f.truncate(size)
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
        self._refuse_nonfinite(ids, counts, reps[mask], rows)
        if self.multi_vector:
            lines = [f"{d}{VIEW_DELIMITER}{j}" for d, c in zip(ids, counts.tolist()) for j in range(c)]
        else:
            if counts.max() > 1:
                raise ShardFormatError("a single-vector shard received several vectors per document")
            lines = list(ids)
        with self._naming_errors():
            self._vec.write(rows.tobytes())
            self._ids.write(("\n".join(lines) + "\n").encode("utf-8"))
        self.docs_done += len(ids)
        self.rows_done += rows.shape[0]
        self.view_counts.update(int(c) for c in np.unique(counts))

    def _refuse_nonfinite(self, ids: list[str], counts: np.ndarray, computed: np.ndarray, rows: np.ndarray) -> None:
        """A batch with NaN or infinite vectors is not written (they would vanish from every ranking): the
        error names the items; vectors finite as computed but not in the stored dtype overflowed it."""
        bad = nonfinite_rows(rows)
        if not len(bad):
            return
        row_item = np.repeat(np.arange(len(ids)), counts)
        items = [ids[i] for i in np.unique(row_item[bad])]
        what = "queries" if self.info.is_query else "documents"
        overflow = not len(nonfinite_rows(computed))
        cause = (f"they are finite in float32 but overflow {self.dtype} (|x| > {np.finfo(self.dtype).max:.0f}): "
                 "encode without --fp16" if overflow else "the model produced NaN or infinite values (e.g. fp16 "
                 "overflow inside the model, or broken weights)")
        raise NonFiniteVectorsError(f"{self.path}: refusing to write non-finite vectors of {len(items)} {what} "
                                    f"{items[:5]}: {cause}")

    @contextlib.contextmanager
    def _naming_errors(self) -> Iterator[None]:
        """A failed write (full disk, lost mount) names the shard's partial files."""
        try:
            yield
        except OSError as err:
            named = with_path(err, self._vec_path)
            if named is err:
                raise
            raise named from err

    def checkpoint(self) -> None:
        """Make everything added so far survive a crash (the next writer resumes after it)."""
        with self._naming_errors():
            self._vec.flush()
            self._ids.flush()
            os.fsync(self._vec.fileno())
            os.fsync(self._ids.fileno())
        state = {"docs": self.docs_done, "rows": self.rows_done, "dim": self.info.dim,
                 "ids_bytes": self._ids.tell(), "view_counts": sorted(self.view_counts), "extra": self.info.extra,
                 "fingerprint": self.info.fingerprint}
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
        for p in partial_paths(self.path):
            p.unlink(missing_ok=True)
        return self.info
