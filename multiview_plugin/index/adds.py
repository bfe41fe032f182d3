"""Adding a build's vectors: documents and their contiguous rows, one normalised mean vector per document (the
document index), and IVF adds into inverted lists sized first (:class:`PresizedIVFAdds`: no growth headroom)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

from multiview_plugin.data.seen_ids import SeenIds
from multiview_plugin.encoding.shards import ShardFormatError, read_shard, split_lookup
from multiview_plugin.errors import MultiViewError

logger = logging.getLogger(__name__)

ADD_CHUNK = 65_536  # vectors per index.add
ASSIGN_FILE = ".ivf_lists.int32"  # in the build's temporary folder: each vector's IVF list, from the first pass


def contiguous_docs(row_docids: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Document of each row → (docid of each document in order, document index of each row).

    Rows of one document must be contiguous and a document may appear once (a docid seen in two runs is a
    duplicate docid in the corpus).
    """
    if len(row_docids) == 0:
        return np.array([], dtype=object), np.array([], dtype=np.int64)
    starts = np.ones(len(row_docids), dtype=bool)
    starts[1:] = row_docids[1:] != row_docids[:-1]
    docs = row_docids[starts]
    uniq, counts = np.unique(docs.astype(str), return_counts=True)
    if (counts > 1).any():
        dups = uniq[counts > 1][:5].tolist()
        raise MultiViewError(f"{where}: duplicate docids {dups} (or a document's vectors are not contiguous)")
    return docs, np.cumsum(starts) - 1


class PresizedIVFAdds:
    """Adds to an IVF index whose inverted lists were sized to their final length first.

    Faiss grows each list by doubling (``std::vector``), so a list holds up to twice its codes and a growing list
    briefly holds both copies: a plain build's peak is up to ~2x the index it writes. A first pass over the shards
    (one at a time) assigns every vector to its list, counts them and writes the assignments (4 bytes per vector)
    to a temporary file; each list is then reserved at its count, and the adds reuse the assignments
    (``IndexIVF.add_core``), so the quantiser runs once, as in ``index.add``, and the index is the one ``add``
    builds, row for row. Only for an ``IndexIVF`` on ``ArrayInvertedLists`` (the CPU IVF indexes); others (a GPU
    index, a pre-transform such as ``PCA64,IVF...``) are added to as usual."""

    def __init__(self, index: faiss.IndexIVF, assignments: Path):
        self.index, self.path = index, assignments
        self._in = assignments.open("rb")

    @classmethod
    def prepare(cls, index: faiss.Index, shards: Sequence[Path], assignments: Path, unsafe_pickle: bool = False
                ) -> PresizedIVFAdds | None:
        if not isinstance(index, faiss.IndexIVF):
            return None
        lists = faiss.downcast_InvertedLists(index.invlists)
        if not isinstance(lists, faiss.ArrayInvertedLists):
            return None
        counts = np.zeros(index.nlist, dtype=np.int64)
        with assignments.open("wb") as out:
            for path in tqdm(shards, desc="index shards: IVF lists", unit="shard"):
                reps = read_shard(path, unsafe_pickle)[0]
                if len(reps) and reps.shape[1] != index.d:
                    raise ShardFormatError(f"{path}: dim {reps.shape[1]} differs from {index.d}")
                for start in range(0, len(reps), ADD_CHUNK):
                    chunk = np.ascontiguousarray(reps[start:start + ADD_CHUNK], dtype=np.float32)
                    assigned = index.quantizer.assign(chunk, 1).ravel()
                    counts += np.bincount(assigned[assigned >= 0], minlength=index.nlist)
                    assigned.astype(np.int32).tofile(out)
        for list_no in np.flatnonzero(counts).tolist():  # resize reserves; shrinking back keeps the capacity
            lists.resize(list_no, int(counts[list_no]))
            lists.resize(list_no, 0)
        logger.info("IVF lists sized for %d vectors", int(counts.sum()))
        return cls(index, assignments)

    def add(self, chunk: np.ndarray) -> None:
        assigned = np.fromfile(self._in, dtype=np.int32, count=len(chunk)).astype(np.int64)
        if len(assigned) != len(chunk):
            raise MultiViewError(f"{self.path}: the shards changed while the index was built")
        self.index.add_core(len(chunk), faiss.swig_ptr(chunk), None, faiss.swig_ptr(assigned))

    def finish(self) -> None:
        """After the last add: every assignment of the first pass must have been used (a shard that shrank between
        the passes would otherwise have put each later vector in another vector's list)."""
        if self._in.read(1):
            raise MultiViewError(f"{self.path}: the shards hold fewer vectors than the first pass assigned; did "
                                 "they change while the index was built?")

    def close(self) -> None:
        """Close and delete the assignments file (it must not end up in the index folder)."""
        self._in.close()
        self.path.unlink(missing_ok=True)


def document_means(reps: np.ndarray, row_doc: np.ndarray) -> np.ndarray:
    """One unit vector per document: the mean of its (contiguous) rows, normalised; float32, in chunks."""
    starts = np.flatnonzero(np.r_[True, row_doc[1:] != row_doc[:-1]])
    out = np.empty((len(starts), reps.shape[1]), dtype=np.float32)
    ends = np.r_[starts[1:], len(row_doc)]
    for lo in range(0, len(starts), ADD_CHUNK):
        hi = min(lo + ADD_CHUNK, len(starts))
        block = np.asarray(reps[starts[lo]:ends[hi - 1]], dtype=np.float32)
        sums = np.add.reduceat(block, starts[lo:hi] - starts[lo], axis=0)
        out[lo:hi] = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return out


def check_new_docids(seen: SeenIds, docs: np.ndarray, row_doc: np.ndarray, row_offset: int, docid_file: Path,
                      docid_out, multi: bool, path: Path) -> None:
    """Record a shard's documents (by their first row); a docid already in an earlier shard is an error."""
    first_rows = np.flatnonzero(np.r_[True, row_doc[1:] != row_doc[:-1]]) + row_offset if len(row_doc) else []
    clashes = [(d, w) for d, r in zip(docs.tolist(), np.asarray(first_rows).tolist())
               if (w := seen.check_add(d, r)) is not None]
    if not clashes:
        return
    docid_out.flush()  # confirm hash matches against the docid lines written so far
    wanted = {w for _, w in clashes}
    with docid_file.open(encoding="utf-8") as f:
        earlier = {n: line.rstrip("\n") for n, line in enumerate(f) if n in wanted}
    dups = [d for d, w in clashes if w in earlier and split_lookup([earlier[w]], multi)[0] == d]
    if dups:
        raise MultiViewError(f"{path}: docids already in an earlier shard: {sorted(dups)[:5]}")
