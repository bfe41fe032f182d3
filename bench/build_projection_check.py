"""Do the plans' index-build projections hold out of sample? Measured here at sizes and dims the fit never saw.

Until this check the plans (``recipes/plan.py``) priced the fast IVF build (``IVF<n>_HNSW32,SQ8``, two-level
k-means) from ``bench/ivf_build.json``: the 5,000,000-vector build at dim 64, scaled by the exponents of N fitted over
1.25M-5M vectors and by dim. The dim rule was the weak link: the dim sweep (64-256 at 250,000 vectors) measured
dim^0.23, which the plans floored at linear (12x from dim 64 to bert-base's 768) because nothing had been measured
at 768. This bench builds the same index shape (``bench/ivf_build.py``'s ``build``: nlist = 2^round(log2(N/1000)),
39 x nlist training vectors, one Faiss thread, CPU seconds) at ``--points`` N:dim and

- measures the dim factor at the plans' dim directly: the build at dim 768 over the build at dim 64 at the same
  N (train and adds separately), at each N measured at both dims (``dim_factors`` in the JSON). It grows with N,
  so no single factor carries to the plans' sizes: the plans now price the build from ``bench/ivf_rates.py``'s
  rates, measured at their dim and lists;
- checks the projections against builds they were not made from: every point is predicted from
  ``bench/ivf_build.json`` by the plans' former rule (dim floored at linear), by the measured dim exponent (0.23,
  unfloored), and by the dim factor measured here at a smaller N (the largest below the point's: the factor
  carried to a size it was not measured at), and the predicted / measured ratio printed for each.

Clustered synthetic documents (8 views, 1,000 topics, ``tools/synthetic_vectors.py``), the same generator as
``bench/ivf_build.py``. Each point is built ``--repeats`` times, the repeats interleaved; the fastest build counts.

    nice -n 10 python bench/build_projection_check.py --json bench/build_projection_check.json \\
        > bench/build_projection_check.log 2>&1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "recipes"))

from ivf_build import build, single_thread_run  # noqa: E402  (bench/ivf_build.py: the index shape the plans build)
from plan import ivf_build as plan_ivf_build  # noqa: E402
from plan import ivf_build_seconds  # noqa: E402

from tools.synthetic_vectors import clustered_documents  # noqa: E402

POINTS = ["625000:64", "625000:768", "1250000:64", "1250000:768", "2500000:64", "2500000:768", "5000000:64",
          "10000000:64", "20000000:64"]
PLAN_DIM, BASE_DIM = 768, 64


def parse_point(text: str) -> tuple[int, int]:
    n, _, dim = text.partition(":")
    return int(n), int(dim)


def measure(points: list[tuple[int, int]], repeats: int, views: int, clusters: int, seed: int) -> dict:
    """{(n, dim): fastest build row} over ``repeats`` interleaved rounds."""
    best: dict[tuple[int, int], dict] = {}
    for rep in range(repeats):
        for n, dim in points:
            x = clustered_documents(n // views, views, dim, clusters=clusters, seed=seed).reshape(-1, dim)
            index, row = build("fast", x, seed)
            del index, x
            print(f"repeat {rep + 1}  N {n:>10,}  dim {dim:4d}  {row['factory']:22s} train {row['train_s']:7.2f} s"
                  f"  add {row['add_s']:8.2f} s  build {row['build_s']:8.2f} s  (CPU s, 1 thread)", flush=True)
            if (n, dim) not in best or row["build_s"] < best[(n, dim)]["build_s"]:
                best[(n, dim)] = row
    return best


def dim_factors(best: dict) -> dict[int, dict]:
    """Per N measured at both dims: the dim-768 build over the dim-64 build (train, add, build)."""
    out = {}
    for (n, dim), hi in sorted(best.items()):
        lo = best.get((n, BASE_DIM))
        if dim == PLAN_DIM and lo:
            out[n] = {part: round(hi[f"{part}_s"] / lo[f"{part}_s"], 3) for part in ("train", "add", "build")}
    return out


def predictions(bench: dict, n: int, dim: int, factors: dict[int, dict]) -> dict[str, float | None]:
    """Predicted one-core build seconds of (n, dim) by each rule, from bench/ivf_build.json's fast rows."""
    exp = bench["projection"]["fast"]["dim_exponent"]
    out = {"plans' rule before (dim floored at linear)": sum(ivf_build_seconds(bench, "fast", n, dim)),
           f"dim^{exp:.2f} as measured at dim <= 256": sum(ivf_build_seconds(bench, "fast", n, dim,
                                                                              dim_exponent=exp))}
    smaller = [m for m in factors if m < n]
    if dim == PLAN_DIM and smaller:
        f = factors[max(smaller)]
        out[f"dim factor measured here at N {max(smaller):,}"] = sum(
            ivf_build_seconds(bench, "fast", n, dim, dim_factor=f))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", nargs="+", default=POINTS, help="N:dim builds (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--views", type=int, default=8)
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ivf_build", default=str(ROOT / "bench" / "ivf_build.json"), help="the fit the plans read")
    ap.add_argument("--json")
    args = ap.parse_args()
    git = single_thread_run()
    points = [parse_point(p) for p in args.points]
    best = measure(points, args.repeats, args.views, args.clusters, args.seed)
    factors = dim_factors(best)
    bench = plan_ivf_build(Path(args.ivf_build))
    print("\ndim factor (dim 768 over dim 64, same N, same run):")
    for n, f in factors.items():
        print(f"  N {n:>10,}: train x{f['train']:.2f}  add x{f['add']:.2f}  build x{f['build']:.2f}")
    print("\npredicted / measured one-core build (CPU s), each point predicted from bench/ivf_build.json:")
    checks = []
    for (n, dim), row in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        for rule, pred in predictions(bench, n, dim, factors).items():
            checks.append({"vectors": n, "dim": dim, "measured_s": row["build_s"], "rule": rule,
                           "predicted_s": round(pred, 2), "ratio": round(pred / row["build_s"], 3)})
            print(f"  N {n:>10,}  dim {dim:4d}  measured {row['build_s']:8.2f}  predicted {pred:8.2f}  "
                  f"x{pred / row['build_s']:.2f}  ({rule})")
    print(f"# load average at end {tuple(round(v, 2) for v in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": "python bench/build_projection_check.py " + " ".join(sys.argv[1:]), "git": git,
            "rows": [dict(r, repeats=args.repeats) for r in best.values()],
            "dim_factors": {"from_dim": BASE_DIM, "to_dim": PLAN_DIM,
                            "by_vectors": {str(n): f for n, f in factors.items()}},
            "checks": checks}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
