"""A duplicate-id check whose memory is ~28 bytes per id instead of a Python set/dict of strings (~120).

Ids are kept as 64-bit hashes in a sorted numpy array (8 bytes) with where each was first seen (8 bytes),
plus a dict of recent ones merged in when it reaches 1/8 of the array (amortised O(n log n)). A hash match is
only a *candidate* duplicate: the caller confirms it against the id stored at the recorded place (a line, a
row), so a 64-bit collision never raises a false error. (Two different ids with one hash share an entry; a
later true duplicate of the second would then be confirmed against the first and missed: ~n²/2⁶⁵ odds,
1e-5 at 21M ids.) Hashes are Python's ``hash`` (SipHash, salted per process: fine within one run).
"""

from __future__ import annotations

import numpy as np

_MASK = (1 << 64) - 1


class SeenIds:
    """``check_add(id, where)``: None for a new id (recorded at ``where``), else where it was first seen."""

    def __init__(self, min_buffer: int = 65_536):
        self.min_buffer = min_buffer
        self._keys = np.empty(0, dtype=np.uint64)
        self._where = np.empty(0, dtype=np.int64)
        self._recent: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._keys) + len(self._recent)

    @property
    def nbytes(self) -> int:
        """Bytes of the sorted arrays (the recent dict adds up to ~1/8 of the ids at ~100 bytes each)."""
        return self._keys.nbytes + self._where.nbytes

    def check_add(self, key: str, where: int) -> int | None:
        h = hash(key) & _MASK
        first = self._recent.get(h)
        if first is None and len(self._keys):
            i = int(np.searchsorted(self._keys, np.uint64(h)))
            if i < len(self._keys) and int(self._keys[i]) == h:
                first = int(self._where[i])
        if first is not None:
            return first
        self._recent[h] = where
        if len(self._recent) >= max(self.min_buffer, len(self._keys) // 8):
            self._merge()
        return None

    def _merge(self) -> None:
        keys = np.fromiter(self._recent.keys(), dtype=np.uint64, count=len(self._recent))
        where = np.fromiter(self._recent.values(), dtype=np.int64, count=len(self._recent))
        order = np.argsort(keys)
        keys, where = keys[order], where[order]
        # insert the sorted batch into the sorted arrays: one new copy of each (no full-size argsort temporaries)
        at = np.searchsorted(self._keys, keys)
        self._keys = np.insert(self._keys, at, keys)
        self._where = np.insert(self._where, at, where)
        self._recent = {}
