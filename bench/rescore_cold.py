"""Re-scoring from a store that is not in memory: what the searcher's reads of a cold re-scoring store cost.

A full-scale re-scoring store exceeds a node's memory (nq mvr: 258 GB), so a search reads its candidates' rows from
disk. This bench writes a store with the real writer (:class:`RescoreStoreWriter`, fp16, 8 views per document),
drops its pages from the page cache before every timed search (``posix_fadvise(DONTNEED)``, checked with
``mincore``: the bench stops if more than 1% of the store is still in memory) and times the searcher's per-query
re-scoring (:func:`_row_sims`, which ``rescore_docs`` calls for a store) of C random candidate documents, four ways
in one run, on the same candidates:

- ``read-around``: the memory map as ``np.load`` leaves it, the way the searcher read before: a page fault reads a
  window of ``read_ahead_kb`` around its page, one fault at a time;
- ``random``: ``MADV_RANDOM`` (:func:`advise_random_reads`, which ``open_rescore_store`` now calls): a fault reads
  its own page;
- ``random+prefetch``: the searcher now: ``MADV_RANDOM`` and every candidate's pages asked for at once
  (:func:`prefetch_rows`, ``MADV_WILLNEED``) before the reads;
- warm: the same search again with the pages in memory and the map held open (as a searcher holds it; fastest of
  7, the two interleaved), with and without the prefetch's residency look-up (what the look-up costs a warm store).

Scores must be equal across the ways (the bench stops otherwise). Median of ``--repeats`` (fresh candidates each).

    python bench/rescore_cold.py --json bench/rescore_cold.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from multiview_plugin.index.rescore import RescoreStoreWriter, advise_random_reads  # noqa: E402
from multiview_plugin.search._searcher import _row_sims  # noqa: E402

WAYS = ("read-around", "random", "random+prefetch")


def write_store(path: Path, rows: int, dim: int, seed: int) -> None:
    writer = RescoreStoreWriter(path, "float16", rows, dim)
    rng = np.random.default_rng(seed)
    for lo in range(0, rows, 65536):
        chunk = rng.standard_normal((min(65536, rows - lo), dim), dtype=np.float32)
        writer.add(chunk / np.linalg.norm(chunk, axis=1, keepdims=True), path)
    writer.close()
    os.sync()


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_fraction(path: Path) -> float:
    """The fraction of the file's pages in the page cache (``mincore`` over a fresh map of it)."""
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    with path.open("rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mm:
        view = np.frombuffer(mm, dtype=np.uint8, count=1)
        address = view.ctypes.data
        del view  # no exported buffer left when the map closes
        if ctypes.CDLL(None, use_errno=True).mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
    return float((np.frombuffer(vec, dtype=np.uint8) & 1).sum()) / pages


def disk_of(path: Path) -> dict:
    dev = os.stat(path).st_dev
    sys_dev = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    queue = sys_dev / "queue"
    if not queue.is_dir():  # a partition: its disk's queue
        queue = sys_dev.resolve().parent / "queue"
    read = {k: (queue / k).read_text().strip() for k in ("read_ahead_kb", "rotational", "nr_requests")
            if (queue / k).is_file()}
    return {"device": sys_dev.resolve().name, **read}


def timed(path: Path, way: str, rows: np.ndarray, q: np.ndarray) -> tuple[float, np.ndarray]:
    """One search of a cold store, opened fresh, read ``way``."""
    evict(path)
    left = resident_fraction(path)
    if left > 0.01:
        sys.exit(f"{path}: {left:.1%} of the store still in memory after eviction; cannot time a cold read")
    store = np.load(path, mmap_mode="r")
    if way != "read-around":
        advise_random_reads(store)
    t = time.perf_counter()
    sims = _row_sims(store, rows, q, prefetch=way == "random+prefetch").max(axis=1)
    ms = (time.perf_counter() - t) * 1000
    del store
    return ms, sims


def warm_times(path: Path, rows: np.ndarray, q: np.ndarray, times: dict) -> tuple[np.ndarray, list, list]:
    """The same search with the store's pages in memory and its map held open, as a searcher holds it (fastest of
    7, interleaved, after a first pass), with the prefetch's residency look-up and without it."""
    store = np.load(path, mmap_mode="r")
    advise_random_reads(store)
    sims = _row_sims(store, rows, q).max(axis=1)
    runs: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(7):
        for prefetch in (True, False):  # interleaved: neither way gets the later, warmer turns
            t = time.perf_counter()
            _row_sims(store, rows, q, prefetch=prefetch)
            runs[prefetch].append((time.perf_counter() - t) * 1000)
    best = {way: min(v) for way, v in runs.items()}
    return sims, [*times["warm"], best[True]], [*times["warm, no look-up"], best[False]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000, help="store rows (vectors); 8 per document")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--docs", type=int, nargs="+", default=[73, 200, 1600, 4000], help="candidates per query")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work_dir", default=None, help="where the store is written (a fresh folder, removed after)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    views = 8
    work = Path(tempfile.mkdtemp(prefix="rescore-cold-", dir=args.work_dir))
    path = work / "rescore_views.npy"
    try:
        t = time.perf_counter()
        write_store(path, args.rows, args.dim, seed=0)
        disk = disk_of(path)
        print(f"# store: {args.rows:,} rows x {args.dim} fp16 ({path.stat().st_size / 1e9:.2f} GB), {views} views per "
              f"document, written in {time.perf_counter() - t:.0f} s; disk {disk}; RAM "
              f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB; {platform.processor()}",
              flush=True)
        rng = np.random.default_rng(1)
        points = []
        for c in args.docs:
            times: dict[str, list[float]] = {w: [] for w in (*WAYS, "warm", "warm, no look-up")}
            for rep in range(args.repeats):
                docs = np.sort(rng.choice(args.rows // views, c, replace=False))
                rows = docs[:, None] * views + np.arange(views)
                q = rng.standard_normal(args.dim).astype(np.float32)
                sims = {}
                for way in WAYS:
                    ms, sims[way] = timed(path, way, rows, q)
                    times[way].append(ms)
                warm, times["warm"], times["warm, no look-up"] = warm_times(path, rows, q, times)
                for way, s in [*sims.items(), ("warm", warm)]:
                    if not np.array_equal(s, sims["read-around"]):
                        sys.exit(f"scores differ: {way} vs read-around at {c} candidates")
                print(f"repeat {rep + 1} candidates {c:,}: " + ", ".join(f"{w} {v[-1]:.1f} ms"
                                                                       for w, v in times.items()), flush=True)
            med = {w: statistics.median(v) for w, v in times.items()}
            points.append({"candidates": c, "views": views, "ms": med,
                           "us_per_doc": {w: v * 1000 / c for w, v in med.items()}})
        print()
        print("candidates  read-around ms  random ms  random+prefetch ms  us/doc cold  warm ms  warm no look-up ms  "
              "cold: read-around / now  random / now")
        for p in points:
            m = p["ms"]
            print(f"{p['candidates']:>10,}  {m['read-around']:>14.1f}  {m['random']:>9.1f}  "
                  f"{m['random+prefetch']:>18.1f}  {p['us_per_doc']['random+prefetch']:>11.1f}  {m['warm']:>7.2f}  "
                  f"{m['warm, no look-up']:>18.2f}  {m['read-around'] / m['random+prefetch']:>22.1f}x  "
                  f"{m['random'] / m['random+prefetch']:>11.1f}x")
        if args.json:
            Path(args.json).write_text(json.dumps({
                "command": "python bench/rescore_cold.py " + " ".join(sys.argv[1:]), "rows": args.rows,
                "dim": args.dim, "views": views, "dtype": "float16", "repeats": args.repeats, "disk": disk,
                "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                "points": points}, indent=1) + "\n")
    finally:
        path.unlink(missing_ok=True)
        work.rmdir()


if __name__ == "__main__":
    main()
