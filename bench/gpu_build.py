"""GPU Faiss beside the CPU build (issue #38 item 5): ``build_index(use_gpu=)`` and a GPU search, in one run.

Synthetic clustered vectors (``bench/build_scaling.py``'s shards) are indexed twice with the same factory and flat
k-means (``--ivf_training flat``; two-level k-means trains on the CPU): ``use_gpu=False`` and ``use_gpu=True``
(``driver.index --use_gpu``), each build timed (wall). Each built index is then searched with raw Faiss at
``--nprobe`` on held-out queries drawn near the vectors: the CPU build on the CPU, the GPU build on the CPU and on
the GPU (``index_cpu_to_all_gpus``), each timed (wall, whole batch) with its recall@k of the exact top-k vectors
(``IndexFlatIP``). The acceptance: the GPU build's recall within 0.005 of the CPU build's. Without a GPU Faiss
(faiss-cpu, or no GPU seen) the GPU rows print "not measured" and only the CPU build runs.

    python bench/gpu_build.py --vectors 1000000 --factory IVF4096,Flat --json gpu_build.json > gpu_build.log

Benches are not mirrored under tests/.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from build_scaling import write_shards  # noqa: E402
from peers import recall  # noqa: E402

from multiview_plugin.encoding.shards import read_shard  # noqa: E402
from multiview_plugin.index.build import build_index  # noqa: E402
from multiview_plugin.index.faiss_build import read_faiss_index  # noqa: E402
from multiview_plugin.index.folder import INDEX_FILE  # noqa: E402


def gpus() -> int:
    """GPUs this Faiss can use (0 for faiss-cpu)."""
    return faiss.get_num_gpus() if hasattr(faiss, "StandardGpuResources") else 0


def searched(index: faiss.Index, q: np.ndarray, k: int, nprobe: int, exact: np.ndarray, on_gpu: bool) -> dict:
    """Whole-batch search at ``nprobe``: wall seconds (best of 3) and recall@k of the exact top-k rows."""
    space = faiss.GpuParameterSpace() if on_gpu else faiss.ParameterSpace()
    space.set_index_parameter(index, "nprobe", nprobe)
    times, rows = [], None
    for _ in range(3):
        start = time.perf_counter()
        _, rows = index.search(q, k)
        times.append(time.perf_counter() - start)
    return {"search_s": min(times), "queries_per_s": len(q) / min(times), "recall": recall(rows, exact)}


def build(shards: Path, out: Path, factory: str, use_gpu: bool, train_size: int) -> tuple[faiss.Index, float]:
    start = time.perf_counter()
    build_index(sorted(shards.glob("c.*.pkl")), out, index_factory=factory, ivf_training="flat", use_gpu=use_gpu,
                train_size=train_size)
    return read_faiss_index(out / INDEX_FILE), time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vectors", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--factory", default="IVF1024,Flat")
    ap.add_argument("--train_size", type=int, default=262_144)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--nprobe", type=int, default=16)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    n_gpus = gpus()
    print(f"# command: python bench/gpu_build.py {' '.join(sys.argv[1:])}")
    print(f"# faiss {faiss.__version__}, {faiss.omp_get_max_threads()} OpenMP threads, GPUs seen by Faiss: {n_gpus}; "
          f"{args.vectors:,} synthetic vectors x {args.dim}, {args.factory}, flat k-means", flush=True)
    rows: dict = {}
    with tempfile.TemporaryDirectory(prefix="gpu-build-") as work:
        work = Path(work)
        write_shards(work, args.vectors, args.dim, 8, 4)
        base = np.ascontiguousarray(np.concatenate([read_shard(p)[0] for p in sorted(work.glob("c.*.pkl"))]),
                                    dtype=np.float32)
        rng = np.random.default_rng(1)
        q = base[rng.choice(len(base), args.queries, replace=False)]
        q = np.ascontiguousarray(q + 0.1 * rng.standard_normal(q.shape).astype(np.float32))
        flat = faiss.IndexFlatIP(args.dim)
        flat.add(base)
        exact = flat.search(q, args.k)[1]
        for device in ("cpu", "gpu"):
            if device == "gpu" and not n_gpus:
                print("gpu build: not measured (no GPU Faiss: install faiss-gpu on a machine with a GPU)")
                continue
            index, build_s = build(work, work / device, args.factory, device == "gpu", args.train_size)
            row = {"build_s": build_s, "cpu_search": searched(index, q, args.k, args.nprobe, exact, False)}
            if device == "gpu":
                gpu_index = faiss.index_cpu_to_all_gpus(index)
                row["gpu_search"] = searched(gpu_index, q, args.k, args.nprobe, exact, True)
            rows[device] = row
            print(f"{device} build: {build_s:.1f} s; searched on the CPU: recall@{args.k} "
                  f"{row['cpu_search']['recall']:.4f}, {row['cpu_search']['queries_per_s']:,.0f} queries/s"
                  + (f"; on the GPU: recall@{args.k} {row['gpu_search']['recall']:.4f}, "
                     f"{row['gpu_search']['queries_per_s']:,.0f} queries/s" if device == "gpu" else ""), flush=True)
    if "gpu" in rows:
        diff = rows["gpu"]["cpu_search"]["recall"] - rows["cpu"]["cpu_search"]["recall"]
        print(f"gpu build / cpu build time: {rows['gpu']['build_s'] / rows['cpu']['build_s']:.3f}; recall "
              f"difference {diff:+.4f} ({'within' if abs(diff) <= 0.005 else 'NOT within'} 0.005)")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": f"python bench/gpu_build.py {' '.join(sys.argv[1:])}",
                                               "gpus": n_gpus, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
