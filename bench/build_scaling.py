"""Thread scaling of the index build (``build_index``, the plans' fast IVF way), measured at each thread count.

The plans (``recipes/plan.py``) divide the one-core build time by the speed-up measured here at the cores they
are given, never more than the largest thread count measured (beyond it: "not measured", no extrapolation).
Each thread count builds the same index from the same shards in a fresh process (``OMP_NUM_THREADS`` set before
Faiss loads), ``--repeats`` times interleaved with the other counts; the fastest wall time of each is kept (on a
shared machine the slower ones measure the other jobs). Phases: the whole ``build_index`` call (wall), and
inside it the training (two-level k-means and the SQ8 codes) and the adds, from the build's log lines.

    nice -n 10 python bench/build_scaling.py --threads 1 2 --vectors 1000000 --dim 768 \
        --json bench/build_scaling_768.json > bench/build_scaling_768.log 2>&1

(the plans read ``bench/build_scaling_768.json``, at their dim; ``bench/build_scaling.log`` is the same at dim 64.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository root: tools/ (the synthetic vectors)


def write_shards(folder: Path, vectors: int, dim: int, views: int, shards: int) -> None:
    import numpy as np

    from multiview_plugin.encoding.shards import ShardInfo, ShardWriter
    from tools.synthetic_vectors import clustered_documents

    docs = vectors // views
    reps = clustered_documents(docs, views, dim, clusters=1000, seed=0)
    per = -(-docs // shards)
    for s in range(shards):
        a, b = s * per, min(docs, (s + 1) * per)
        info = ShardInfo(model_name="syn", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                         shard_index=s, num_shards=shards)
        w = ShardWriter(folder / f"c.{s}.pkl", info, multi_vector=True)
        w.add([f"d{i}" for i in range(a, b)], reps[a:b], np.ones((b - a, views), bool))
        w.close()


def one_build(shards: str, out: str, factory: str, train_size: int) -> dict:
    """Runs in the child: one build, timed (wall), with its training and add times."""
    import faiss

    from multiview_plugin.index import build as _index

    times = {}
    real_train = _index.train_ivf_two_level

    def timed_train(*a, **k):
        start = time.perf_counter()
        real_train(*a, **k)
        times["train_s"] = time.perf_counter() - start

    _index.train_ivf_two_level = timed_train
    start = time.perf_counter()
    _index.build_index(sorted(str(p) for p in Path(shards).glob("c.*.pkl")), out, index_factory=factory,
                       train_size=train_size, ivf_training="two_level")
    wall = time.perf_counter() - start
    return {"threads": faiss.omp_get_max_threads(), "wall_s": wall, "train_s": times.get("train_s"),
            "rest_s": wall - times.get("train_s", 0.0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--vectors", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--views", type=int, default=8)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--factory", default="IVF1024_HNSW32,SQ8")
    ap.add_argument("--train_size", type=int, default=65_536)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=3, metavar=("SHARDS", "OUT", "JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        row = one_build(args.child[0], args.child[1], args.factory, args.train_size)
        Path(args.child[2]).write_text(json.dumps(row), encoding="utf-8")
        return 0
    cpu = next((line.split(":", 1)[1].strip() for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name")), "?")
    print(f"# command: python bench/build_scaling.py {' '.join(sys.argv[1:])}")
    print(f"# hardware: {cpu}, {os.cpu_count()} cores visible; build_index "
          f"{args.factory} --ivf_training two_level --train_size {args.train_size} on {args.vectors:,} synthetic "
          f"vectors x {args.dim} dims ({args.views} views per document, {args.shards} shards); fastest of "
          f"{args.repeats} per thread count, interleaved; load average at start {os.getloadavg()}", flush=True)
    rows: dict[int, list[dict]] = {t: [] for t in args.threads}
    with tempfile.TemporaryDirectory(prefix=f"build_scaling.{os.getpid()}.") as tmp:
        write_shards(Path(tmp), args.vectors, args.dim, args.views, args.shards)
        for r in range(args.repeats):
            for t in args.threads:
                out, result = Path(tmp) / f"idx.{t}.{r}", Path(tmp) / f"row.{t}.{r}.json"
                env = {**os.environ, "OMP_NUM_THREADS": str(t), "TQDM_DISABLE": "1"}
                subprocess.run([sys.executable, __file__, "--factory", args.factory, "--train_size",
                                str(args.train_size), "--child", tmp, str(out), str(result)], env=env, check=True)
                row = json.loads(result.read_text(encoding="utf-8"))
                row["load"] = round(os.getloadavg()[0], 2)
                rows[t].append(row)
                print(f"repeat {r + 1} threads {t}: build {row['wall_s']:.1f} s (train {row['train_s']:.1f} s, "
                      f"adds and the rest {row['rest_s']:.1f} s); load average {row['load']}", flush=True)
    best = {t: min(rs, key=lambda x: x["wall_s"]) for t, rs in rows.items()}
    base = best[min(best)]["wall_s"] * min(best)
    print("\nthreads  build s  train s  rest s  speed-up over 1 thread")
    curve = []
    for t, row in sorted(best.items()):
        speedup = base / row["wall_s"]
        curve.append({"threads": t, "wall_s": round(row["wall_s"], 3), "train_s": round(row["train_s"], 3),
                      "rest_s": round(row["rest_s"], 3), "speedup": round(speedup, 3), "load": row["load"]})
        print(f"{t:7d}  {row['wall_s']:7.1f}  {row['train_s']:7.1f}  {row['rest_s']:6.1f}  {speedup:.2f}x")
    print(f"# load average at end {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": f"python bench/build_scaling.py {' '.join(sys.argv[1:])}", "hardware": cpu,
            "cores_visible": os.cpu_count(), "factory": args.factory, "vectors": args.vectors, "dim": args.dim,
            "curve": curve, "all": {str(t): rs for t, rs in rows.items()}}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
