"""Build time of a full-scale IVF index: flat k-means + flat quantiser against two-level k-means + HNSW quantiser.

The nq mvr plan (168M view vectors, ``IVF131072,SQ8`` trained on 39 × 131,072 vectors) projected 467.5 h on one
core, almost all of it k-means (sample × nlist per iteration) and the adds (every vector scanned against every
centroid). This bench builds the same index shape — nlist = 2^round(log2(N / 1000)) lists, a training sample of
39 × nlist vectors, SQ8 codes — at several sizes N, single-threaded, two ways:

- ``flat``: ``IVF{nlist},SQ8``, Faiss's own training (flat spherical k-means) and adds (flat coarse quantiser);
- ``fast``: ``IVF{nlist}_HNSW32,SQ8`` trained with ``train_ivf_two_level`` (``driver.index --ivf_training
  two_level``: sqrt(nlist) first-level clusters, each split into its share of the lists) and added through the
  HNSW quantiser (``--index_factory IVF{nlist}_HNSW32,SQ8``);
- ``fast-pq``: the same with ``PQ{dim/8}`` codes (8 dims per sub-quantiser, as PQ96 at dim 768): the low-RAM option
  (built at the largest size only, for its recall and bytes per vector; its build time is not fitted);
- ``fast-fp16``: the same with ``SQfp16`` codes, for indexes searched without re-scoring (dcsr's HasAns
  aggregation never re-scores, so its index's own codes must keep the recall; largest size only).

Times are the process's CPU seconds (``time.process_time``, one Faiss thread): on a shared machine wall time
would count the other jobs. It fits build seconds = a · N^b over the sizes (least squares in log-log) per way,
measures the dim exponent at one size (``--dims`` at ``--dim_size``), and extrapolates to the nq mvr plan
(168,122,592 vectors, dim 768) on one core.

Recall on held-out queries (the largest size; the fast ways only: flat is the build baseline): clustered
synthetic documents (8 views, ``--clusters`` topics),
queries near a random view; the first half of the queries calibrates nprobe (the smallest of 1, 2, 4, ... whose
document recall@10 of exact max-over-views reaches 0.98), the second half is held out and reports recall at
that nprobe. Candidates: the documents of the top ``--depth`` vectors, re-scored from an fp16 copy of the views
(what ``--rescore_store fp16`` gives the searcher), and without re-scoring (SQ8 codes alone).

    nice -n 10 python bench/ivf_build.py --sizes 1250000 2500000 5000000 --dim 64 --dims 64 128 256 \\
        --dim_size 250000 --json bench/ivf_build.json > bench/ivf_build.log 2>&1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from multiview_plugin.index.faiss_build import train_ivf_two_level  # noqa: E402
from tools.synthetic_vectors import clustered_documents, clustered_queries  # noqa: E402

PLAN_VECTORS, PLAN_DIM = 21_015_324 * 8, 768  # the nq mvr plan: DPR's Wikipedia passages x 8 views x 768 dims
TRAIN_PER_LIST, VECTORS_PER_LIST = 39, 1000


def single_thread_run() -> str:
    """Sets one Faiss thread and prints a run's header line (commit, Faiss, CPU, load); returns the short commit."""
    faiss.omp_set_num_threads(1)
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent).stdout.strip()
    print(f"# git {git}; faiss {faiss.__version__}; {platform.processor() or platform.machine()}, {os.cpu_count()} "
          f"CPUs, faiss threads 1; load average at start {tuple(round(v, 2) for v in os.getloadavg())}", flush=True)
    return git


def nlist_for(n: int) -> int:
    return 1 << max(4, round(math.log2(n / VECTORS_PER_LIST)))


def factory_for(way: str, nlist: int, dim: int) -> str:
    if way == "flat":
        return f"IVF{nlist},SQ8"
    return f"IVF{nlist}_HNSW32," + {"fast": "SQ8", "fast-fp16": "SQfp16"}.get(way, f"PQ{dim // 8}")


def build(way: str, x: np.ndarray, seed: int) -> tuple[faiss.Index, dict]:
    n, dim = x.shape
    nlist = nlist_for(n)
    factory = factory_for(way, nlist, dim)
    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(seed)
    sample = x[np.sort(rng.choice(n, TRAIN_PER_LIST * nlist, replace=False))]
    start = time.process_time()
    if way == "flat":
        index.train(sample)
    else:
        train_ivf_two_level(index, sample, factory, seed)
    train_s = time.process_time() - start
    add_s = timed_adds(index, x)
    return index, {"way": way, "factory": factory, "vectors": n, "dim": dim, "nlist": nlist,
                   "train_size": len(sample), "train_s": round(train_s, 2), "add_s": round(add_s, 2),
                   "build_s": round(train_s + add_s, 2), "bytes_per_vector": round(_index_bytes(index) / n, 1)}


def timed_adds(index: faiss.Index, x: np.ndarray, chunk: int = 65_536) -> float:
    """CPU seconds of adding ``x`` to ``index`` in chunks of ``chunk`` rows."""
    start = time.process_time()
    for lo in range(0, len(x), chunk):
        index.add(x[lo:lo + chunk])
    return time.process_time() - start


def _index_bytes(index: faiss.Index) -> int:
    return int(faiss.serialize_index(index).nbytes)


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(a, b) of y = a · x^b by least squares in log-log."""
    b, log_a = np.polyfit(np.log(xs), np.log(ys), 1)
    return float(math.exp(log_a)), float(b)


def exact_docs(flat: faiss.Index, q: np.ndarray, views: int, k: int) -> np.ndarray:
    """Exact top-k documents under max over views: documents in order of their best view."""
    _, ids = flat.search(q, k * views * 4)
    out = []
    for row in ids:
        seen = list(dict.fromkeys((row // views).tolist()))
        assert len(seen) >= k
        out.append(seen[:k])
    return np.asarray(out)


def search_docs(index: faiss.Index, q: np.ndarray, store: np.ndarray | None, views: int, k: int,
                depth: int) -> np.ndarray:
    """Top-k documents from the index's top ``depth`` vectors; with ``store`` (docs × views × dim, fp16) the
    candidate documents are re-scored exactly over all their views."""
    ids = index.search(q, depth)[1]
    out = []
    for qi, row in enumerate(ids):
        docs = np.asarray(list(dict.fromkeys((row[row >= 0] // views).tolist())))
        if store is None:
            out.append((docs[:k].tolist() + [-1] * k)[:k])
            continue
        s = (store[docs].astype(np.float32) @ q[qi]).max(axis=1)
        out.append((docs[np.argsort(-s, kind="stable")][:k].tolist() + [-1] * k)[:k])
    return np.asarray(out)


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found.tolist(), exact.tolist())]))


def calibrated(index: faiss.Index, qc, ec, qh, eh, store, views, k, depth, target) -> dict:
    ivf = faiss.extract_index_ivf(index)
    probes = [p for p in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if p <= ivf.nlist]
    hnsw = faiss.downcast_index(ivf.quantizer)
    for p in probes:
        ivf.nprobe = p
        if isinstance(hnsw, faiss.IndexHNSW):
            hnsw.hnsw.efSearch = max(16, 2 * p)
        rc = recall(search_docs(index, qc, store, views, k, depth), ec)
        if rc >= target or p == probes[-1]:
            start = time.process_time()
            found = search_docs(index, qh, store, views, k, depth)
            ms = 1000 * (time.process_time() - start) / len(qh)
            return {"nprobe": p, "calibration_recall": round(rc, 4), "held_out_recall": round(recall(found, eh), 4),
                    "reached": rc >= target, "ms_per_query": round(ms, 3)}
    raise AssertionError("unreachable")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_250_000, 2_500_000, 5_000_000])
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--dims", type=int, nargs="*", default=[64, 128, 256], help="dim sweep (fast way) at --dim_size")
    p.add_argument("--dim_size", type=int, default=250_000)
    p.add_argument("--views", type=int, default=8)
    p.add_argument("--clusters", type=int, default=1000)
    p.add_argument("--ways", nargs="+", default=["flat", "fast", "fast-fp16"],
                   choices=["flat", "fast", "fast-pq", "fast-fp16"])
    p.add_argument("--queries", type=int, default=400, help="half calibrate, half are held out")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--depth", type=int, default=100, help="vectors fetched per query before re-scoring")
    p.add_argument("--pq_depth", type=int, default=1000, help="fast-pq: vectors fetched per query (PQ codes "
                   "rank candidates coarsely, so more are re-scored)")
    p.add_argument("--target", type=float, default=0.98)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="bench/ivf_build.json")
    args = p.parse_args()
    faiss.omp_set_num_threads(args.threads)
    command = "python bench/ivf_build.py " + " ".join(sys.argv[1:])
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# command: {command}\n# git {git}; faiss {faiss.__version__}; {platform.processor() or platform.machine()}"
          f", {os.cpu_count()} CPUs (shared), faiss threads {args.threads}; load average {os.getloadavg()}",
          flush=True)
    rows, recalls = [], []

    def dump(rows: list, dim_rows: list, recalls: list, projection: dict) -> None:
        Path(args.json).write_text(json.dumps({"command": command, "git": git, "threads": args.threads,
                                               "complete": bool(projection), "rows": rows, "dim_rows": dim_rows,
                                               "recall": recalls, "projection": projection}, indent=1) + "\n",
                                   encoding="utf-8")

    for n in args.sizes:
        docs = clustered_documents(n // args.views, args.views, args.dim, clusters=args.clusters, seed=args.seed)
        x = docs.reshape(-1, args.dim)
        largest = n == max(args.sizes)
        if largest:
            q = clustered_queries(docs, args.queries, seed=args.seed + 1)
            flat = faiss.IndexFlatIP(args.dim)
            flat.add(x)
            exact = exact_docs(flat, q, args.views, args.k)
            del flat
            half = len(q) // 2
            store = docs.astype(np.float16)
        for way in [w for w in args.ways if largest or w in ("flat", "fast")]:  # others: recall, bytes at the largest
            index, row = build(way, x, args.seed)
            rows.append(row)
            print(f"N {n:>10,}  dim {args.dim}  {row['factory']:26s} train {row['train_s']:8.1f} s (sample "
                  f"{row['train_size']:,})  add {row['add_s']:8.1f} s  build {row['build_s']:8.1f} s  "
                  f"{row['bytes_per_vector']} B/vector", flush=True)
            if largest:  # flat: the build baseline only; fast-pq is searched re-scored, fast-fp16 by its codes alone
                modes = {"flat": (), "fast": (True, False), "fast-pq": (True,), "fast-fp16": (False,)}[way]
                for rescore in modes:
                    depth = args.pq_depth if way == "fast-pq" else args.depth
                    r = calibrated(index, q[:half], exact[:half], q[half:], exact[half:], store if rescore else None,
                                   args.views, args.k, depth, args.target)
                    r = {"way": way, "factory": row["factory"], "vectors": n, "rescore_store": "fp16" if rescore
                         else None, "k": args.k, "depth": depth, "target": args.target,
                         "queries_calibration": half, "queries_held_out": len(q) - half, **r}
                    recalls.append(r)
                    print(f"    recall@{args.k} {'re-scored fp16' if rescore else 'codes alone   '}: nprobe "
                          f"{r['nprobe']:>3}  calibration {r['calibration_recall']:.4f}  held-out "
                          f"{r['held_out_recall']:.4f}  {r['ms_per_query']:.2f} ms/query", flush=True)
                    dump(rows, [], recalls, {})
            dump(rows, [], recalls, {})  # partial results survive an interrupted run
            del index
        del docs, x
    dim_rows = []
    for d in args.dims:
        docs = clustered_documents(args.dim_size // args.views, args.views, d, clusters=args.clusters, seed=args.seed)
        index, row = build("fast", docs.reshape(-1, d), args.seed)
        dim_rows.append(row)
        dump(rows, dim_rows, recalls, {})
        print(f"dim sweep: N {args.dim_size:,}  dim {d:4d}  {row['factory']:26s} train {row['train_s']:8.1f} s  "
              f"add {row['add_s']:8.1f} s  build {row['build_s']:8.1f} s", flush=True)
        del index, docs
    fits = {}
    for way in args.ways:
        mine = [r for r in rows if r["way"] == way]
        if len(mine) >= 2:
            fits[way] = {part: fit([r["vectors"] for r in mine], [r[f"{part}_s"] for r in mine])
                         for part in ("train", "add", "build")}
    dim_b = fit([r["dim"] for r in dim_rows], [r["build_s"] for r in dim_rows])[1] if len(dim_rows) >= 2 else 1.0
    print(f"\nfitted build seconds = a * N^b (sizes {', '.join(f'{n:,}' for n in args.sizes)}; dim {args.dim}; "
          f"1 thread):")
    projection = {}
    for way, f in fits.items():
        largest_row = max((r for r in rows if r["way"] == way), key=lambda r: r["vectors"])
        # extrapolate from the largest measured size with the measured exponents (train and add separately)
        scale_n = PLAN_VECTORS / largest_row["vectors"]
        scale_d = (PLAN_DIM / args.dim) ** dim_b
        train_h = largest_row["train_s"] * scale_n ** f["train"][1] * scale_d / 3600
        add_h = largest_row["add_s"] * scale_n ** f["add"][1] * scale_d / 3600
        projection[way] = {"train_exponent": round(f["train"][1], 3), "add_exponent": round(f["add"][1], 3),
                           "build_exponent": round(f["build"][1], 3), "dim_exponent": round(dim_b, 3),
                           "from_vectors": largest_row["vectors"], "train_h_1core": round(train_h, 2),
                           "add_h_1core": round(add_h, 2), "build_h_1core": round(train_h + add_h, 2),
                           "plan_vectors": PLAN_VECTORS, "plan_dim": PLAN_DIM, "plan_nlist": nlist_for(PLAN_VECTORS)}
        print(f"  {way:8s} train N^{f['train'][1]:.2f}, add N^{f['add'][1]:.2f}, build N^{f['build'][1]:.2f}  ->  "
              f"nq mvr plan ({PLAN_VECTORS:,} x {PLAN_DIM}, {factory_for(way, nlist_for(PLAN_VECTORS), PLAN_DIM)}), "
              f"dim^{dim_b:.2f}: train {train_h:.1f} h + add {add_h:.1f} h = {train_h + add_h:.1f} h on 1 core")
    if "flat" in projection and "fast" in projection:
        big = max(args.sizes)
        a = next(r for r in rows if r["way"] == "flat" and r["vectors"] == big)
        b = next(r for r in rows if r["way"] == "fast" and r["vectors"] == big)
        print(f"  measured at {big:,}: flat / fast build time {a['build_s'] / b['build_s']:.2f}x (same run)")
    dump(rows, dim_rows, recalls, projection)


if __name__ == "__main__":
    main()
