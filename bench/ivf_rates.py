"""The fast IVF build's costs measured at the plans' dim and lists: per-vector add rates and training times.

``bench/ivf_build.py`` fitted the build at dim 64 over 1.25M-5M vectors (1,024-4,096 lists), and the plans carried
that fit to bert-base's dim 768 and 131,072 lists by exponents. ``bench/build_projection_check.log`` measured what
the carrying misses: at dim 768 the build costs 2.7-3.7x the dim-64 build (the plans' linear rule said 12x), a
ratio that grows with N. This bench measures the two parts of the build where the plans need them, so that only
the number of vectors is scaled, and that linearly:

- **adds** (``index.add``: the HNSW quantiser's walk over the lists' centroids, then the codes): the cost per added
  vector at ``--lists`` (the plans' 16,384 to 131,072 and below), for each code (SQ8, SQfp16, PQ dim/8). Each added
  vector is independent of the others, so adding N vectors costs N x this rate at the same lists (the inverted
  lists' appends are amortised). The plans' quantiser at 131,072 lists is trained on 39 x 131,072 vectors of dim
  768 (15.7 GB), more than this machine holds beside the rest, so the adds' quantisers are trained by the same
  two-level k-means on ``--per_list`` vectors per list, drawn apart from the added vectors; ``--check_lists``
  compares the rate over the plans' own 39-per-list quantiser where that fits. (Random vectors as centroids, the
  first version, were 0.90x and 1.31x the k-means rate at 2,048 and 16,384 lists:
  ``bench/ivf_rates_sampled_centroids.log``.);
- **training** (``train_ivf_two_level``: two-level k-means on 39 x nlist vectors, the quantiser's graph and the
  codes) at ``--train_lists``, fitted as a · nlist^b and checked against a FLOPs estimate (k-means costs
  iterations x sample x (first-level + second-level centroids) x dim x 2 FLOPs: nlist^1.5 as sample grows with
  nlist).

Then it predicts a real build (``--check_build``: N vectors at the dim, two-level k-means, the adds) from these
rates and builds it, to print predicted / measured. One Faiss thread, CPU seconds (``time.process_time``).
Clustered synthetic vectors (8 views per document, 1,000 topics), ``tools/synthetic_vectors.py``.

    nice -n 10 python bench/ivf_rates.py --json bench/ivf_rates.json > bench/ivf_rates.log 2>&1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import faiss
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ivf_build import TRAIN_PER_LIST, build, fit, nlist_for, single_thread_run, timed_adds  # noqa: E402

from multiview_plugin.index.faiss_build import train_ivf_two_level  # noqa: E402
from tools.synthetic_vectors import clustered_documents  # noqa: E402

CHUNK = 65_536


def vectors(n: int, dim: int, seed: int) -> np.ndarray:
    return clustered_documents(-(-n // 8), 8, dim, clusters=1000, seed=seed).reshape(-1, dim)[:n]


def sample_and_adds(n_sample: int, n_add: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A training sample and the vectors to add: apart, but of one set (the same topic centres)."""
    x = vectors(n_add + n_sample, dim, seed)
    return x[n_add:], x[:n_add]


def codes_for(dim: int) -> list[str]:
    return ["SQ8", "SQfp16", f"PQ{dim // 8}"]


def kmeans_centroids(sample: np.ndarray, nlist: int) -> tuple[np.ndarray, float]:
    """``nlist`` centroids by the plans' two-level k-means on ``sample``, and the CPU seconds it took."""
    dim = sample.shape[1]
    index = faiss.index_factory(dim, f"IVF{nlist},Flat", faiss.METRIC_INNER_PRODUCT)
    start = time.process_time()
    train_ivf_two_level(index, sample, f"IVF{nlist},Flat")
    seconds = time.process_time() - start
    return faiss.extract_index_ivf(index).quantizer.reconstruct_n(0, nlist), seconds


def index_over(centroids: np.ndarray, code: str, train: np.ndarray) -> tuple[faiss.Index, float]:
    """``IVF<n>_HNSW32,<code>`` whose quantiser holds ``centroids``, codes trained on ``train``; with the seconds
    the quantiser's graph took to build."""
    index = faiss.index_factory(centroids.shape[1], f"IVF{len(centroids)}_HNSW32,{code}", faiss.METRIC_INNER_PRODUCT)
    start = time.process_time()
    faiss.extract_index_ivf(index).quantizer.add(centroids)
    graph_s = time.process_time() - start
    index.train(train)  # the quantiser already holds nlist centroids: Faiss trains the codes only
    return index, graph_s


def add_rates(lists: list[int], dim: int, n_add: int, per_list: int, seed: int) -> list[dict]:
    """us per added vector at each number of lists and code, over centroids of two-level k-means on ``per_list``
    vectors per list."""
    rows = []
    for nlist in lists:
        sample, adds = sample_and_adds(per_list * nlist, n_add, dim, seed)
        cent, kmeans_s = kmeans_centroids(sample, nlist)
        del sample
        for code in codes_for(dim):
            index, graph_s = index_over(cent, code, adds[:CHUNK])
            add_s = timed_adds(index, adds)
            us = round(1e6 * add_s / len(adds), 2)
            rows.append({"lists": nlist, "dim": dim, "code": code, "centroids": f"two-level k-means, {per_list}/list",
                         "added": len(adds), "add_s": round(add_s, 2), "us_per_vector": us,
                         "graph_s": round(graph_s, 2), "kmeans_s": round(kmeans_s, 2)})
            print(f"adds   lists {nlist:>7,}  dim {dim}  {code:7s} centroids: k-means on {per_list}/list "
                  f"({kmeans_s:.1f} s)  {len(adds):,} added in {add_s:7.2f} s = {us:6.2f} "
                  f"us/vector (quantiser graph {graph_s:.1f} s)", flush=True)
            del index
    return rows


def trained(nlist: int, dim: int, seed: int, n_add: int = 0) -> tuple[faiss.Index, dict, np.ndarray]:
    """An ``IVF<nlist>_HNSW32,SQ8`` trained the plans' way on 39 x nlist vectors: (index, its training row,
    ``n_add`` other vectors of the same set to add)."""
    sample, adds = sample_and_adds(TRAIN_PER_LIST * nlist, n_add, dim, seed)
    index = faiss.index_factory(dim, f"IVF{nlist}_HNSW32,SQ8", faiss.METRIC_INNER_PRODUCT)
    start = time.process_time()
    train_ivf_two_level(index, sample, f"IVF{nlist}_HNSW32,SQ8")
    train_s = time.process_time() - start
    # k-means FLOPs: iterations x sample x (first level sqrt(nlist) + second level, each vector against its own
    # cluster's share: nlist / sqrt(nlist) on average) x dim x 2
    flops = 2 * faiss.extract_index_ivf(index).cp.niter * len(sample) * 2 * math.sqrt(nlist) * dim
    row = {"lists": nlist, "dim": dim, "train_size": len(sample), "train_s": round(train_s, 2),
           "kmeans_gflop": round(flops / 1e9, 1), "gflops_achieved": round(flops / 1e9 / train_s, 1)}
    print(f"train  lists {nlist:>7,}  dim {dim}  sample {len(sample):>9,}  two-level k-means + graph + SQ8 "
          f"{train_s:7.2f} s  (k-means ~{row['kmeans_gflop']:.0f} GFLOP: {row['gflops_achieved']:.1f} GFLOP/s)",
          flush=True)
    return index, row, adds


def check_centroids(lists: list[int], dim: int, n_add: int, per_list: int, seed: int,
                    rates: list[dict]) -> list[dict]:
    """Adds through the plans' own quantiser (two-level k-means on 39 vectors per list) against the rate over
    centroids trained on ``per_list`` vectors per list, at the same lists (SQ8)."""
    rows = []
    for nlist in lists:
        index, _, adds = trained(nlist, dim, seed, n_add)
        us = 1e6 * timed_adds(index, adds) / n_add
        fewer = next(r["us_per_vector"] for r in rates if r["lists"] == nlist and r["code"] == "SQ8")
        rows.append({"lists": nlist, "dim": dim, "code": "SQ8", "added": n_add,
                     "centroids": f"two-level k-means, {TRAIN_PER_LIST}/list", "us_per_vector": round(us, 2),
                     f"us_per_vector_{per_list}_per_list": fewer})
        print(f"check  lists {nlist:>7,}  dim {dim}  SQ8     centroids: k-means on {TRAIN_PER_LIST}/list {n_add:,} "
              f"added: {us:6.2f} us/vector; on {per_list}/list {fewer:6.2f} ({per_list}/list over "
              f"{TRAIN_PER_LIST}/list {fewer / us:.2f})", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--lists", type=int, nargs="+", default=[2048, 16384, 65536, 131072])
    ap.add_argument("--adds", type=int, default=200_000, help="vectors added per measurement")
    ap.add_argument("--per_list", type=int, default=10, help="k-means vectors per list of the adds' quantisers")
    ap.add_argument("--train_lists", type=int, nargs="+", default=[2048, 8192, 16384, 32768])
    ap.add_argument("--check_lists", type=int, nargs="+", default=[2048, 16384, 65536])
    ap.add_argument("--check_build", type=int, default=2_500_000, help="a real build of this many vectors (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    git = single_thread_run()
    rates = add_rates(args.lists, args.dim, args.adds, args.per_list, args.seed)
    train_rows = [trained(nlist, args.dim, args.seed)[1] for nlist in args.train_lists]
    a, b = fit([r["lists"] for r in train_rows], [r["train_s"] for r in train_rows])
    print(f"training fitted: {a:.3g} * nlist^{b:.2f} CPU s (FLOPs estimate: nlist^1.50)", flush=True)
    checks = check_centroids(args.check_lists, args.dim, args.adds, args.per_list, args.seed, rates)
    build_check = None
    if args.check_build:
        n = args.check_build
        nlist = nlist_for(n)
        rate = next((r["us_per_vector"] for r in rates if r["lists"] == nlist and r["code"] == "SQ8"), None)
        train = next((r["train_s"] for r in train_rows if r["lists"] == nlist), a * nlist ** b)
        _, row = build("fast", vectors(n, args.dim, args.seed), args.seed)
        if rate is not None:
            pred = train + n * rate / 1e6
            build_check = {**row, "predicted_s": round(pred, 2), "ratio": round(pred / row["build_s"], 3)}
            print(f"build  {n:,} x {args.dim} {row['factory']} measured {row['build_s']:.2f} s (train "
                  f"{row['train_s']:.2f} + adds {row['add_s']:.2f}); predicted from the rates {pred:.2f} s "
                  f"(x{pred / row['build_s']:.2f})", flush=True)
    print(f"# load average at end {tuple(round(v, 2) for v in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": "python bench/ivf_rates.py " + " ".join(sys.argv[1:]), "git": git, "dim": args.dim,
            "add_rates": rates, "train": train_rows, "train_fit": {"a": a, "b": round(b, 3)},
            "centroid_checks": checks, "build_check": build_check}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
