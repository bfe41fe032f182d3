"""What an HNSW graph's construction beam (``--hnsw_ef_construction``) buys: build time, bytes, and the recall its
search reaches, on the clustered synthetic set where HNSW32 at Faiss's default beam (40) stays below 0.99 of exact
top-10 at every over-fetch (``bench/peers.log``'s 1M-document section: 0.938 for dpr at overfetch 256).

The same documents and queries as ``bench/peers.py``'s synthetic part (``synthetic_shards``: 384-d vectors around
1,000 topic centres, ``--views`` per document, queries near a random view), indexed through the project's
``build_index`` (``IndexConfig.hnsw_ef_construction``) and searched by ``MultiVectorSearcher``; for each beam
the over-fetch is tuned as the peers bench tunes it (the cheapest setting whose recall on the first ``--split``
queries reaches 0.99 + 0.005, else the widest) and timed on the held-out queries, 1 and 2 threads. One index in
memory at a time; the build uses every core Faiss sees.

    python bench/hnsw_construction.py --docs 1000000 --ef_construction 40 80 200 \
        --json bench/hnsw_construction.json > bench/hnsw_construction.log
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))  # the peers bench's synthetic set and tuning rule

from peers import OVERFETCH_GRID, K, folder_bytes, synthetic_shards, timed, tune  # noqa: E402


def beam_row(shards: list[Path], q: np.ndarray, exact: np.ndarray, split: int, ef: int, work: Path,
             factory: str, threads: int) -> dict:
    """One beam: build, bytes, the over-fetch sweep's tuning recalls, the chosen setting timed on held-out."""
    from multiview_plugin.search import MultiVectorSearcher, build_index

    index_dir = work / f"hnsw-ef{ef}"
    start = time.perf_counter()
    build_index(shards, index_dir, index_factory=factory, hnsw_ef_construction=ef)
    row = {"ef_construction": ef, "build_s": time.perf_counter() - start, "bytes": folder_bytes(index_dir)}
    searcher = MultiVectorSearcher(index_dir, None)
    row.update(tune(searcher, "overfetch", OVERFETCH_GRID, q, exact, split, threads))
    row["tuning_recalls"] = dict(zip(OVERFETCH_GRID, row["tuning_recalls"]))
    searcher = None  # before the next build: one index in memory at a time
    gc.collect()
    shutil.rmtree(index_dir, ignore_errors=True)
    return row


def line(r: dict, dpr_p50: float | None) -> str:
    setting = f"overfetch {r['overfetch']}" + ("" if r["reached"] else " (widest tried, below 0.99)")
    ratio = f"{r['t1']['cpu_p50'] / dpr_p50:.2f}" if dpr_p50 else "-"
    return (f"| {r['ef_construction']} | {r['build_s']:.1f} | {r['bytes'] / 2**20:.1f} | {setting} | "
            f"{r['recall']:.4f} | {r['t1']['p50']:.3f} | {r['t1']['p95']:.3f} | {r['t1']['cpu_p50']:.3f} | "
            f"{r['t2']['p50']:.3f} | {ratio} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=1_000_000)
    p.add_argument("--views", type=int, default=1, help="Vectors per document (1: dpr's shape).")
    p.add_argument("--queries", type=int, default=400)
    p.add_argument("--split", type=int, default=200, help="Tuning queries (the rest are held out and timed).")
    p.add_argument("--ef_construction", type=int, nargs="+", default=[40, 80, 200])
    p.add_argument("--factory", default="HNSW32")
    p.add_argument("--threads", type=int, default=2, help="The second thread count timed (besides 1).")
    p.add_argument("--json", help="Also write the rows here.")
    args = p.parse_args(argv)
    from multiview_plugin.search import MultiVectorSearcher, build_index

    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=BENCH).stdout
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, git {git.strip()}; "
          f"{os.cpu_count()} CPU cores; load average at start {os.getloadavg()}")
    print(f"# command: python bench/hnsw_construction.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"# {args.docs:,} synthetic documents x {args.views} vector(s) of 384-d (1,000 topic centres, seed 0), "
          f"{args.queries} queries near a random view; over-fetch tuned on the first {args.split}, recall and "
          f"latency on the other {args.queries - args.split}; {args.factory} built by build_index", flush=True)
    with tempfile.TemporaryDirectory(prefix="hnsw-construction-") as tmp:
        work = Path(tmp)
        shards, q = synthetic_shards("hnsw", args.views, args.docs, args.queries, work)
        start = time.perf_counter()
        build_index(shards, work / "flat", index_factory="Flat")
        flat = MultiVectorSearcher(work / "flat", None)
        exact, _ = flat.search_vectors(q, K)
        flat_row = {"build_s": time.perf_counter() - start, "bytes": folder_bytes(work / "flat"),
                    **timed(flat, q[args.split:], args.threads)}
        del flat
        gc.collect()
        shutil.rmtree(work / "flat")
        print(f"# exact (Flat): {flat_row['bytes'] / 2**20:.1f} MiB, CPU p50 {flat_row['t1']['cpu_p50']:.3f} ms",
              flush=True)
        rows = []
        for ef in args.ef_construction:
            rows.append(beam_row(shards, q, exact, args.split, ef, work, args.factory, args.threads))
            r = rows[-1]
            print(f"# efConstruction {ef}: build {r['build_s']:.1f} s; tuning recall by overfetch "
                  f"{json.dumps({str(k): round(v, 4) for k, v in r['tuning_recalls'].items()})}; load average "
                  f"{os.getloadavg()}", flush=True)
    print(f"\n| efConstruction | build s | index MiB | setting | recall@{K} | p50 ms 1 thr | p95 ms 1 thr | "
          f"CPU p50 ms 1 thr | p50 ms {args.threads} thr | CPU p50 / exact's |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(line(r, flat_row["t1"]["cpu_p50"]))
    print(f"# load average at end {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"exact": flat_row, "rows": rows, "docs": args.docs,
                                               "views": args.views, "factory": args.factory}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
