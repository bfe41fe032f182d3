"""A batch search on more than one thread: queries per second of ``MultiVectorSearcher.search_vectors`` over a real
folder (``IVF<n>_HNSW32,SQ8``, fp16 re-scoring store in memory) at each Faiss thread count, with the re-scoring of
the batch's queries on one thread (as the searcher did before) and spread over the same threads (now:
``FaissStore.rescore_threads`` None, Faiss's count), in one run. Results must be identical across the ways (the
bench stops otherwise). Wall clock, fastest of ``--repeats``.

    python bench/search_threads.py --json bench/search_threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rescore_cold import store_folder  # noqa: E402


def timed(searcher, q: np.ndarray, hits: int, repeats: int) -> tuple[float, np.ndarray]:
    best, docs = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        docs, _ = searcher.search_vectors(q, hits)
        best = min(best, time.perf_counter() - t)
    return best, docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vectors", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--hits", type=int, default=100)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work_dir", default=None, help="where the folder is built (a fresh folder, removed after)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="search-threads-", dir=args.work_dir))
    try:
        searcher, q = store_folder(work, args.vectors, args.dim, args.queries, "folder")
        print(f"# {args.queries} queries at {args.hits} hits, one batch; {platform.processor() or 'CPU'}, "
              f"{os.cpu_count()} cores visible; torch threads {torch.get_num_threads()}", flush=True)
        timed(searcher, q, args.hits, 1)  # warm: the store's and the index's pages in memory
        rows, reference = [], None
        for threads in args.threads:
            faiss.omp_set_num_threads(threads)
            for way, rescore_threads in (("re-scoring on one thread", 1), ("re-scoring spread", None)):
                searcher.store.rescore_threads = rescore_threads
                s, docs = timed(searcher, q, args.hits, args.repeats)
                if reference is None:
                    reference = docs
                elif not np.array_equal(docs, reference):
                    sys.exit(f"results differ at {threads} threads, {way}")
                rows.append({"threads": threads, "way": way, "s": round(s, 3),
                             "queries_per_s": round(args.queries / s, 1)})
                print(f"threads {threads}, {way}: {s:.3f} s, {args.queries / s:.1f} queries/s", flush=True)
        base = next(r for r in rows if r["threads"] == args.threads[0] and r["way"] == "re-scoring on one thread")
        print()
        print("threads  way                         queries/s  over 1 thread")
        for r in rows:
            print(f"{r['threads']:>7}  {r['way']:<26}  {r['queries_per_s']:>9.1f}  "
                  f"{r['queries_per_s'] / base['queries_per_s']:.2f}x")
        if args.json:
            Path(args.json).write_text(json.dumps({
                "command": "python bench/search_threads.py " + " ".join(sys.argv[1:]), "vectors": args.vectors,
                "dim": args.dim, "queries": args.queries, "hits": args.hits, "cpu_count": os.cpu_count(),
                "torch_threads": torch.get_num_threads(), "rows": rows}, indent=1) + "\n")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
