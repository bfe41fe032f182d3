"""Re-scoring candidate documents from a float16 store: the searcher's way against numpy's gather, in one run.

``MultiVectorSearcher`` re-scores every candidate document over all its views (max aggregation over an
approximate index). From a float16 re-scoring store it used to gather the candidates' rows, cast them to float32
with numpy and multiply (``numpy_gather`` below, the code before this bench);
``bench/ivf_search_rates_numpy_rescoring.log`` measured that at 12.42-18.73 us per document of 8 views, most of a
search at 100 hits. numpy casts float16 one
element at a time and the float32 copy is a fresh allocation as large as the rows; the searcher now scores the
rows in file order, 1,024 at a time, cast by torch (``_row_sims``). Both run here on the same memory-mapped store,
pages read once beforehand, one thread, queries one at a time, CPU time; the scores must agree.

    OMP_NUM_THREADS=1 python bench/rescore_speed.py > bench/rescore_speed.log
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from multiview_plugin.search._searcher import _row_sims  # noqa: E402


def numpy_gather(store: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The searcher's re-scoring before: each row once (np.unique), gathered, cast to float32, multiplied."""
    uniq, inverse = np.unique(rows, return_inverse=True)
    block = np.asarray(store[uniq], dtype=np.float32)[inverse.reshape(-1)]
    return (block @ q).reshape(rows.shape)


def timed(fn, store: np.ndarray, rows: list[np.ndarray], q: np.ndarray) -> tuple[float, list[np.ndarray]]:
    fn(store, rows[0], q[0])  # warm-up
    start = time.process_time()
    out = [fn(store, r, qi).max(axis=1) for r, qi in zip(rows, q)]
    return 1000 * (time.process_time() - start) / len(rows), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--views", type=int, default=8)
    ap.add_argument("--widths", type=int, nargs="+", default=[73, 200, 800, 1600, 4000])
    ap.add_argument("--queries", type=int, default=100)
    args = ap.parse_args()
    import torch

    print(f"# {args.rows:,} float16 rows x {args.dim} (documents of {args.views} views), memory-mapped; "
          f"{args.queries} queries one at a time; torch {torch.__version__}, numpy {np.__version__}, "
          f"{torch.get_num_threads()} torch thread(s); load average {tuple(round(v, 2) for v in os.getloadavg())}",
          flush=True)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix=f"rescore_speed.{os.getpid()}.") as tmp:
        path = Path(tmp) / "store.npy"
        store = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(args.rows, args.dim))
        for lo in range(0, args.rows, 1 << 18):
            hi = min(args.rows, lo + (1 << 18))
            store[lo:hi] = rng.standard_normal((hi - lo, args.dim), dtype=np.float32)
        store.flush()
        del store
        store = np.load(path, mmap_mode="r")
        for lo in range(0, args.rows, 1 << 18):  # every page read once: both ways read from memory
            np.asarray(store[lo:lo + (1 << 18)]).sum()
        q = rng.standard_normal((args.queries, args.dim)).astype(np.float32)
        docs = args.rows // args.views
        print("candidates  numpy gather ms  torch blocks ms  ratio  GB/s of views (numpy, torch)  max |diff|")
        for width in args.widths:
            rows = [(rng.choice(docs, width, replace=False) * args.views)[:, None] + np.arange(args.views)
                    for _ in range(args.queries)]
            old_ms, old = timed(numpy_gather, store, rows, q)
            new_ms, new = timed(_row_sims, store, rows, q)
            diff = max(float(np.abs(a - b).max()) for a, b in zip(old, new))
            gb = width * args.views * args.dim * 2 / 1e6
            print(f"{width:10,}  {old_ms:15.3f}  {new_ms:15.3f}  {old_ms / new_ms:5.2f}x  "
                  f"{gb / old_ms:.2f}, {gb / new_ms:.2f}  {diff:.2e}", flush=True)
            if diff > 1e-3:
                print(f"error: the two ways disagree by {diff} at {width} candidates", file=sys.stderr)
                return 1
        del store
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
