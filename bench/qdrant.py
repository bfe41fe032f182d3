"""Qdrant (embedded) beside Faiss on the same multi-view vectors: recall@10 of exact max-over-views, latency,
ingest/build time, memory.

Rows: Faiss ``Flat`` (exact), Faiss ``Flat`` + ``doc:HNSW32`` candidates (calibrated), Qdrant exact (MAX_SIM over
every document's views) and Qdrant candidates (top document vectors re-scored by MAX_SIM; calibrated). Qdrant
runs in embedded mode (qdrant-client's local mode: numpy brute force, SQLite storage, one process): its latency
and ingest time are those of that mode, not of a Qdrant server, which builds HNSW over the document vectors.
Memory: the peak RSS a fresh process adds by opening the index and searching the queries (Linux ``VmHWM``,
reset after the imports), and the size on disk. Held-out queries: synthetic ones
near a random view, or the data set's own encoded questions (``bench/real_vectors.py``).

    python bench/qdrant.py --real /tmp/real/squad --json bench/qdrant.json > bench/qdrant.log 2>&1
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
from calibration import bench_sets, exact_docs, held_out, load_real, write_synthetic  # bench/ is the script's folder

from multiview_plugin.search import MultiVectorSearcher, build_index
from multiview_plugin.search._qdrant import build_qdrant_index, close_embedded
from multiview_plugin.search.calibrate import calibrate_index

SEARCH_SNIPPET = """
import sys, numpy as np
from multiview_plugin.search import MultiVectorSearcher
from multiview_plugin.search._qdrant import require_qdrant
require_qdrant()
def kb(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field))
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current RSS, after the imports
base = kb("VmRSS")
s = MultiVectorSearcher(sys.argv[1], exact=sys.argv[2] == "exact")
s.search_vectors(np.load(sys.argv[3]), 10)
print(kb("VmHWM") - base)
"""


def search_peak_rss_mb(index_dir: Path, mode: str, queries: Path) -> float:
    """Peak RSS a fresh process adds by opening the index and searching the queries (MB)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", SEARCH_SNIPPET, str(index_dir), mode, str(queries)],
                         capture_output=True, text=True, check=True).stdout.split()[-1]
    return int(out) / 1024


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--real", nargs="*", default=[], help="folders from bench/real_vectors.py")
    p.add_argument("--synthetic", nargs="*", default=["syn-wide-1to12-d64"])
    p.add_argument("--synthetic_docs", type=int, default=2000, help="documents of each synthetic set (embedded "
                   "Qdrant ingests through SQLite, one row per point)")
    p.add_argument("--queries", type=int, default=50, help="held-out queries (embedded Qdrant: ~0.1-0.3 s each)")
    p.add_argument("--calibration_queries", type=int, default=50)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--json", default="bench/qdrant.json")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    faiss.omp_set_num_threads(1)
    import calibration

    rows = []
    work = Path(tempfile.mkdtemp(prefix="qdrant-bench-"))
    try:
        for seed, name, real, folder in bench_sets(args.synthetic, args.real, work):
            if real:
                shards, q, _ = load_real(real, False, args.queries)
            else:
                n, views, dim, ds, vs = calibration.SYNTHETIC[name]
                calibration.SYNTHETIC[name] = (args.synthetic_docs, views, dim, ds, vs)
                shards, q = write_synthetic(folder, name, 2000 + seed)
            q = q[:args.queries]
            exact, _, ntotal = exact_docs(shards, q, args.k)
            for label, backend, options in (("faiss Flat", "faiss", {}),
                                            ("faiss Flat+doc:HNSW32", "faiss", {"doc_index_factory": "HNSW32"}),
                                            ("qdrant exact", "qdrant", {"exact": True}),
                                            ("qdrant candidates", "qdrant", {})):
                index_dir = folder / label.replace(" ", "_").replace(":", "_").replace("+", "_")
                start = time.perf_counter()
                if backend == "faiss":
                    meta = build_index(shards, index_dir, doc_index_factory=options.get("doc_index_factory"),
                                       aggregation="max")
                else:
                    meta = build_qdrant_index(shards, index_dir, aggregation="max")
                build_s = time.perf_counter() - start
                record = None if options.get("exact") else calibrate_index(
                    index_dir, 0.98, n_queries=args.calibration_queries, k=args.k)
                close_embedded()  # the subprocess opens the embedded storage itself
                np.save(folder / "q.npy", q)
                peak = search_peak_rss_mb(index_dir, "exact" if options.get("exact") else "default", folder / "q.npy")
                searcher = MultiVectorSearcher(index_dir, exact=options.get("exact", False))
                rec, ms = held_out(searcher, q, exact, args.k)
                row = {"set": name, "system": label, "docs": meta.num_docs, "vectors": ntotal,
                       "build_or_ingest_s": round(build_s, 2), "recall": round(rec, 4), "ms_per_query": round(ms, 2),
                       "search_peak_rss_mb": round(peak, 1),
                       "disk_mb": round(disk_bytes(index_dir) / 2 ** 20, 1),
                       "calibrated": record["settings"] if record else None, "queries": len(q), "k": args.k}
                rows.append(row)
                print(f"{name:20s} {label:24s} {meta.num_docs:6d} docs {ntotal:7d} vec  recall@{args.k} {rec:.4f}  "
                      f"{ms:8.2f} ms/q  build/ingest {build_s:7.1f}s  search peak RSS {peak:7.1f} MB  disk "
                      f"{row['disk_mb']:7.1f} MB  {json.dumps(row['calibrated']) if record else ''}", flush=True)
                del searcher
                close_embedded()
                shutil.rmtree(index_dir)
    finally:
        close_embedded()
        shutil.rmtree(work, ignore_errors=True)
    Path(args.json).write_text(json.dumps({"command": "python bench/qdrant.py " + (
        ("--real " + " ".join(args.real)) if args.real else ""), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
