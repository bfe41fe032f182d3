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

Then ``--check_vectors`` builds a real folder (``build_index``: ``IVF<n>_HNSW32,SQ8``, two-level k-means, fp16
store) and times ``MultiVectorSearcher.search_vectors`` (wall clock, one query at a time, ``--check_hits``) with its
store in memory, half of it (every other 256 KB of the file, set again before each query) and none of it, against
what the plans would price from the parts above: the search in memory + the share from disk x (cold - warm
re-scoring of the candidates the searcher re-scored).

    python bench/rescore_cold.py --json bench/rescore_cold.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from build_scaling import write_shards  # noqa: E402
from ivf_build import TRAIN_PER_LIST, nlist_for  # noqa: E402

from multiview_plugin.index.folder import RESCORE_STORE_FILE  # noqa: E402
from multiview_plugin.index.rescore import RescoreStoreWriter, _mapping, _mincore, advise_random_reads  # noqa: E402
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
    """The fraction of the file's pages in the page cache (the package's ``mincore`` over a fresh map of it)."""
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = ctypes.create_string_buffer(pages)
    with path.open("rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mm:
        view = np.frombuffer(mm, dtype=np.uint8, count=1)
        address = view.ctypes.data
        del view  # no exported buffer left when the map closes
        if _mincore()(address, size, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
    return float((np.frombuffer(vec.raw, dtype=np.uint8) & 1).sum()) / pages


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


def warm_times(path: Path, rows: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The same search with the store's pages in memory and its map held open, as a searcher holds it (fastest of
    7, interleaved, after a first pass): its scores, and its ms with the prefetch's residency look-up and without."""
    store = np.load(path, mmap_mode="r")
    advise_random_reads(store)
    sims = _row_sims(store, rows, q).max(axis=1)
    runs: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(7):
        for prefetch in (True, False):  # interleaved: neither way gets the later, warmer turns
            t = time.perf_counter()
            _row_sims(store, rows, q, prefetch=prefetch)
            runs[prefetch].append((time.perf_counter() - t) * 1000)
    return sims, min(runs[True]), min(runs[False])


CHUNK = 256 * 1024  # the check's half-resident store: every other CHUNK of the file


def set_share(path: Path, store: np.ndarray, share: float) -> float:
    """Leaves ``1 - share`` of the store's file in the page cache, spread evenly (share 0: all of it, 0.5: every
    other CHUNK, 1: none); the searcher's own map of it is emptied first (its mapped pages cannot be evicted).
    Returns the fraction in memory, checked with mincore."""
    if share > 0:
        mm, _ = _mapping(store)
        mm.madvise(mmap.MADV_DONTNEED)  # a shared read-only file map: its pages are read again on the next access
        evict(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no read-ahead: only the chunks read below
        size, step = path.stat().st_size, (1 if share == 0 else 2)
        if share < 1:
            for lo in range(0, size, CHUNK * step):
                os.pread(fd, CHUNK, lo)
    finally:
        os.close(fd)
    return resident_fraction(path)


def store_folder(work: Path, n: int, dim: int, queries: int, label: str):  # noqa: ANN201 - (searcher, queries)
    """A real folder in ``work`` (``build_index``: ``IVF<n>_HNSW32,SQ8``, two-level k-means, fp16 store) over
    ``n`` clustered synthetic vectors, 8 per document, its shards removed once built; its searcher, and
    ``queries`` unit queries near stored views."""
    from multiview_plugin.search import MultiVectorSearcher, build_index

    nlist = nlist_for(n)
    write_shards(work, n, dim, 8, 4)
    shards = sorted(str(p) for p in work.glob("c.*.pkl"))
    t = time.perf_counter()
    build_index(shards, work / "index", index_factory=f"IVF{nlist}_HNSW32,SQ8", train_size=TRAIN_PER_LIST * nlist,
                ivf_training="two_level", rescore_store="fp16")
    for shard in shards:  # the folder is all the searcher reads
        Path(shard).unlink()
    print(f"{label}: built {n:,} x {dim} IVF{nlist}_HNSW32,SQ8 + fp16 store in {time.perf_counter() - t:.0f} s",
          flush=True)
    searcher = MultiVectorSearcher(work / "index", None)
    rng = np.random.default_rng(2)
    q = np.asarray(searcher.store.rescore_views[rng.choice(n, queries, replace=False)], dtype=np.float32)
    q += rng.standard_normal(q.shape, dtype=np.float32) * 0.02
    return searcher, q / np.linalg.norm(q, axis=1, keepdims=True)


def check(n: int, hits: int, queries: int, dim: int, points: list[dict], work: Path) -> list[dict]:
    """A real folder searched by the searcher with its store in memory, half in memory and not in memory: measured
    ms/query beside the plans' pricing from the parts (the search in memory + share x (cold - warm re-scoring))."""
    searcher, q = store_folder(work, n, dim, queries, "check")
    store = searcher.store
    path = work / "index" / RESCORE_STORE_FILE
    seen: list[int] = []
    real = store.rescore_docs

    def counted(qq: np.ndarray, cand: np.ndarray, **kw) -> np.ndarray:
        seen.append(int((cand >= 0).sum()))
        return real(qq, cand, **kw)

    store.rescore_docs = counted
    rows, warm_ms, cands = [], None, None
    for share in (0.0, 0.5, 1.0):
        resident = set_share(path, store.rescore_views, share)
        searcher.search_vectors(q[:1], hits)  # warm-up (the index's own pages)
        times, seen[:] = [], []
        for i in range(queries):
            if share > 0:
                resident = min(resident, set_share(path, store.rescore_views, share))
            t = time.perf_counter()
            searcher.search_vectors(q[i:i + 1], hits)
            times.append((time.perf_counter() - t) * 1000)
        ms = statistics.median(times)
        if share == 0:
            warm_ms, cands = ms, sum(seen) / len(seen)
        cold = _at(points, cands, "random+prefetch")
        warm = _at(points, cands, "warm")
        predicted = warm_ms + share * (cold - warm)
        rows.append({"share_from_disk": share, "resident_fraction": round(resident, 3), "hits": hits,
                     "candidates_per_query": round(cands, 1), "ms_per_query": round(ms, 2),
                     "predicted_ms": round(predicted, 2), "ratio": round(ms / predicted, 2)})
        print(f"check: hits {hits}, store {1 - share:.0%} in memory (mincore: at least {resident:.1%}), "
              f"{cands:.0f} candidates re-scored: measured {ms:.2f} ms/query (median of {queries}); priced "
              f"{warm_ms:.2f} + {share:g} x ({cold:.2f} - {warm:.2f}) = {predicted:.2f} (x{ms / predicted:.2f})",
              flush=True)
    return rows


def _at(points: list[dict], docs: float, way: str) -> float:
    """The median ms of ``way`` at ``docs`` candidates, linear between the two measured counts around it."""
    xs = [p["candidates"] for p in points]
    ys = [p["ms"][way] for p in points]
    return float(np.interp(docs, xs, ys))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000, help="store rows (vectors); 8 per document")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--docs", type=int, nargs="+", default=[73, 200, 1600, 4000], help="candidates per query")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work_dir", default=None, help="where the store is written (a fresh folder, removed after)")
    ap.add_argument("--check_vectors", type=int, default=1_000_000, help="the check's folder (0: no check)")
    ap.add_argument("--check_hits", type=int, default=100)
    ap.add_argument("--check_queries", type=int, default=20)
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
                warm, with_look_up, without = warm_times(path, rows, q)
                times["warm"].append(with_look_up)
                times["warm, no look-up"].append(without)
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
        path.unlink()
        checks = check(args.check_vectors, args.check_hits, args.check_queries, args.dim, points, work) \
            if args.check_vectors else []
        if args.json:
            Path(args.json).write_text(json.dumps({
                "command": "python bench/rescore_cold.py " + " ".join(sys.argv[1:]), "rows": args.rows,
                "dim": args.dim, "views": views, "dtype": "float16", "repeats": args.repeats, "disk": disk,
                "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                "points": points, "checks": checks}, indent=1) + "\n")
    finally:
        shutil.rmtree(work)  # the bench's own fresh folder


if __name__ == "__main__":
    main()
