"""Qdrant's own engine (qdrant-edge, in the process) beside qdrant-client's embedded mode and Faiss, on the same
multi-view vectors: ingest/build time, search time per query, recall of exact max-over-views top-k, all measured in
one run, and the ratios to Faiss Flat.

Rows per set: Faiss ``Flat`` (exact, max aggregation: the reference and the ratios' denominator); for each Qdrant
engine (``client``: qdrant-client's local mode, a pure-Python stand-in for the server; ``edge``: qdrant-edge-py,
Qdrant's Rust engine) the exact mode (MAX_SIM over every document's views) and the prefetch mode (top document
vectors re-ranked by MAX_SIM over their views) with the candidate count calibrated at k = 10 and, separately, at
k = 100 (``--calibration_k``), each measured at k = 10 and k = 100 on held-out queries. ``edge+hnsw`` lowers
Qdrant's indexing threshold so the document vectors get their HNSW graph even on these small sets (with Qdrant's
default threshold a collection this small is scanned, not searched by graph).

    python bench/real_vectors.py scifact --out /tmp/real/scifact --max_passages 1000
    python bench/qdrant_engines.py --real /tmp/real/scifact --json bench/qdrant_engines.json > bench/qdrant_engines.log

No Qdrant server ran: these are in-process engines only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
from calibration import SYNTHETIC, bench_sets, exact_docs, load_real, write_synthetic  # bench/ is the script's folder

from multiview_plugin.search import MultiVectorSearcher, build_index
from multiview_plugin.search import _qdrant_engines as engines
from multiview_plugin.search._qdrant import build_qdrant_index, close_embedded
from multiview_plugin.search.calibrate import calibrate_index

DEPTHS = (10, 100)


def recall(searcher: MultiVectorSearcher, q: np.ndarray, exact: np.ndarray, k: int) -> tuple[float, float]:
    start = time.perf_counter()
    ids = searcher.search_vectors(q, k)[0]
    ms = 1000 * (time.perf_counter() - start) / len(q)
    of = {d: i for i, d in enumerate(searcher.store.docids.tolist())}
    got = [[of[d] for d in row if d is not None] for row in ids.tolist()]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(got, exact[:, :k].tolist())])), ms


def disk_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2 ** 20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--real", nargs="*", default=[], help="folders from bench/real_vectors.py")
    p.add_argument("--synthetic", nargs="*", default=["syn-wide-1to12-d64"])
    p.add_argument("--synthetic_docs", type=int, default=5000)
    p.add_argument("--queries", type=int, default=100, help="held-out queries")
    p.add_argument("--calibration_queries", type=int, default=100)
    p.add_argument("--client_queries", type=int, default=30, help="held-out queries for qdrant-client's local "
                   "mode (about 0.1 s each there)")
    p.add_argument("--json", default="bench/qdrant_engines.json")
    args = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    faiss.omp_set_num_threads(1)
    from importlib.metadata import version

    import qdrant_client
    import qdrant_edge  # noqa: F401

    header = {"qdrant-client": qdrant_client.__version__ if hasattr(qdrant_client, "__version__")
              else version("qdrant-client"), "qdrant-edge-py": version("qdrant-edge-py"),
              "faiss": faiss.__version__, "python": platform.python_version(), "faiss_threads": 1,
              "cpus": os.cpu_count(), "edge_search_threads": "qdrant-edge default (from the CPU count)"}
    print("# " + json.dumps(header), flush=True)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="qdrant-edge-bench-"))
    try:
        for seed, name, real, folder in bench_sets(args.synthetic, args.real, work):
            if real:
                shards, q, _ = load_real(real, False, args.queries)
            else:
                n, views, dim, ds, vs = SYNTHETIC[name]
                SYNTHETIC[name] = (args.synthetic_docs, views, dim, ds, vs)
                shards, q = write_synthetic(folder, name, 3000 + seed)
            q = q[:args.queries]
            exact, _, ntotal = exact_docs(shards, q, max(DEPTHS))
            base: dict[str, float] = {}
            systems = [("faiss Flat", None, None, True), ("client exact", "client", None, True),
                       ("edge exact", "edge", None, True)]
            systems += [(f"{e} prefetch cal@{k}", e, k, False) for e in ("client", "edge", "edge+hnsw") for k in DEPTHS]
            for label, engine, cal_k, exact_mode in systems:
                index_dir = folder / label.replace(" ", "_").replace("@", "").replace("+", "_")
                engines.EDGE_INDEXING_THRESHOLD_KB = 1 if engine == "edge+hnsw" else None
                start = time.perf_counter()
                if engine is None:
                    meta = build_index(shards, index_dir, aggregation="max")
                else:
                    meta = build_qdrant_index(shards, index_dir, aggregation="max",
                                              engine="edge" if engine.startswith("edge") else "client")
                build_s = time.perf_counter() - start
                record = None
                if cal_k is not None:
                    start = time.perf_counter()
                    record = calibrate_index(index_dir, 0.98, n_queries=args.calibration_queries, k=cal_k)
                    cal_s = time.perf_counter() - start
                searcher = MultiVectorSearcher(index_dir, exact=exact_mode)
                nq = args.client_queries if engine == "client" else len(q)
                row = {"set": name, "system": label, "docs": meta.num_docs, "vectors": ntotal,
                       "build_or_ingest_s": round(build_s, 3), "disk_mb": round(disk_mb(index_dir), 1),
                       "queries": nq, "calibrated_at_k": cal_k,
                       "calibrated": record["settings"] if record else None,
                       "calibration_s": round(cal_s, 1) if record else None}
                if engine and engine.startswith("edge"):
                    row["hnsw_indexed_vectors"] = searcher.store.collection.indexed_vectors()
                if engine is None:
                    base["build"] = build_s
                row["build_ratio_to_faiss"] = round(build_s / base["build"], 1) if base.get("build") else None
                for k in DEPTHS:
                    searcher.store.calibrated_k = None  # measuring the uncalibrated depth on purpose
                    rec, ms = recall(searcher, q[:nq], exact[:nq], k)
                    if engine is None:
                        base[f"ms@{k}"] = ms
                    row[f"recall@{k}"] = round(rec, 4)
                    row[f"ms_per_query@{k}"] = round(ms, 3)
                    row[f"search_ratio_to_faiss@{k}"] = round(ms / base[f"ms@{k}"], 1)
                    if engine and engine.startswith("edge") and not exact_mode:
                        row[f"candidates@{k}"] = searcher.store.candidates(k)
                rows.append(row)
                print(f"{name:18s} {label:24s} {meta.num_docs:5d} docs {ntotal:6d} vec  ingest {build_s:7.2f}s "
                      f"(x{row['build_ratio_to_faiss']})  "
                      + "  ".join(f"R@{k} {row[f'recall@{k}']:.4f} {row[f'ms_per_query@{k}']:7.2f} ms/q "
                                  f"(x{row[f'search_ratio_to_faiss@{k}']})" for k in DEPTHS)
                      + (f"  cal@{cal_k} {json.dumps(record['settings'])}" if record else "")
                      + (f"  hnsw {row['hnsw_indexed_vectors']}" if "hnsw_indexed_vectors" in row else ""),
                      flush=True)
                del searcher
                close_embedded()
                shutil.rmtree(index_dir)
    finally:
        engines.EDGE_INDEXING_THRESHOLD_KB = None
        close_embedded()
        shutil.rmtree(work, ignore_errors=True)
    command = "python " + " ".join(sys.argv)
    Path(args.json).write_text(json.dumps({"command": command, "versions": header, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
