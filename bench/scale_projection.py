"""Project the costs measured by ``bench/ann.py`` to full corpora (Wikipedia 21M, MS MARCO 8.8M passages).

Reads the JSON ``bench/ann.py`` wrote (per index: bytes per vector, build seconds, latency per query at the
fastest setting reaching the recall target, measured at N₀ vectors of dim d₀ on one CPU thread) and scales
each cost to N vectors of dim d with these rules:

- RAM per vector = code(d) + measured overhead, where code(d) is the vector's stored bytes (Flat 4d, SQfp16 2d,
  SQ8 d, PQm m·d/d₀: sub-quantisers kept at the same width; a document index adds 4d / views) and the overhead
  (HNSW links, IVF ids, the searcher's 8-byte row → document map) is the measured bytes minus code(d₀).
- Disk = RAM minus the 8-byte map, plus the docid file (``docid#j`` lines).
- Build time: per-vector add time × N × d/d₀; × log N / log N₀ for HNSW (insertion walks the graph); IVF:
  (adds + training on the fixed-size sample) × nlist/nlist₀, nlist ∝ N with a flat coarse quantiser (at
  10⁵ lists a real build would use an HNSW coarse quantiser, ``IVF131072_HNSW32,SQ8``: not measured here).
- Latency (single thread): Flat ∝ N·d; HNSW and ``+doc:HNSW32`` (document index + re-scoring) ∝ d · log N;
  IVF ∝ d · (nprobe · vectors per list + nlist), nlist ∝ N, same nprobe.

GPU costs are not measured here (no GPU was available); the column says so unless measured.

    python bench/scale_projection.py --costs bench/ann.json
"""

from __future__ import annotations

import argparse
import json
import math
import re

CORPORA = {"Wikipedia (DPR) 21M × 8 × 768": (21_015_324, 8, 768),
           "MS MARCO 8.8M × 8 × 768": (8_841_823, 8, 768)}


def code_bytes(factory: str, dim: int, dim0: int) -> float:
    if "PQ" in factory:
        m = int(re.search(r"PQ(\d+)", factory).group(1))
        return m * dim / dim0
    if "SQ8" in factory:
        return dim
    if "SQfp16" in factory:
        return 2 * dim
    return 4 * dim  # Flat and HNSW with flat storage


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000:
            return f"{n:.0f} {unit}"
        n /= 1000
    return f"{n:.0f} PB"


def human_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 172_800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def pick_per_index(rows: list[dict], system: str, target: float) -> list[dict]:
    """Per index: the fastest batched setting at recall ≥ target, else the most accurate one (flagged)."""
    out = []
    for index in dict.fromkeys(r["index"] for r in rows if r["system"] == system):
        mine = [r for r in rows if r["system"] == system and r["index"] == index]
        ok = [r for r in mine if r["recall"] >= target]
        best = min(ok, key=lambda r: r["batched_ms"]) if ok else max(mine, key=lambda r: r["recall"])
        out.append({**best, "meets_target": bool(ok)})
    return out


def project(row: dict, n_vectors: int, dim: int, measured: dict, min_train_per_list: int = 0) -> dict:
    """Costs of ``row``'s index at ``n_vectors`` of ``dim``. IVF trains on ``measured["train_size"]`` vectors, or
    on ``min_train_per_list`` per list when that is more (Faiss warns below 39 per centroid); k-means time then
    grows with the sample as well as with nlist, and ``train_size`` / ``train_bytes`` (the float32 sample) say
    what the build needs."""
    n0, d0 = row["vectors"], measured["dim"]
    factory = row["index"]
    main, _, doc = factory.partition("+doc:")

    def code(d: int) -> float:  # a document index adds one float32 vector per document
        return code_bytes(main, d, d0) + (4 * d / measured["views"] if doc else 0.0)

    overhead = row["memory_bytes"] / n0 - code(d0)
    per_vector = code(dim) + overhead
    lines = n_vectors * (len(str(n_vectors)) + 3)  # "docid#j\n"
    train = row.get("train_s", 0.0) * dim / d0  # k-means on a fixed-size sample (not per vector)
    build = (row["build_s"] - row.get("train_s", 0.0)) / n0 * n_vectors * dim / d0
    latency = row["single_ms"] * dim / d0
    extra = {"nlist": 0, "train_size": 0, "train_bytes": 0.0}  # no k-means
    if factory.startswith("HNSW") or doc:
        # HNSW walks ∝ log N; with a document index, re-scoring its candidates does not grow with N at all
        build *= math.log(n_vectors) / math.log(n0)
        latency *= math.log(n_vectors) / math.log(n0)
    elif factory.startswith("IVF"):
        vpl = measured["vectors_per_list"]
        nlist0 = int(re.search(r"IVF(\d+)", factory).group(1))
        nlist = 1 << max(4, round(math.log2(n_vectors / vpl)))
        nprobe = row["value"] if row["param"] == "nprobe" and row["value"] else nlist0
        sample0 = measured.get("train_size") or 0
        train_size = max(sample0, min_train_per_list * nlist)
        train *= train_size / sample0 if sample0 else 1.0  # k-means: ∝ sample × lists
        build = (build + train) * nlist / nlist0  # assignments to (and k-means over) nlist lists
        latency *= (nprobe * vpl + nlist) / (nprobe * vpl + nlist0)
        factory = factory.replace(f"IVF{nlist0}", f"IVF{nlist}")
        extra = {"nlist": nlist, "train_size": train_size, "train_bytes": 4.0 * train_size * dim}
    else:
        latency *= n_vectors / n0
    return {"index": factory, "ram": n_vectors * per_vector, "disk": n_vectors * (per_vector - 8) + lines,
            "build": build, "latency_ms": latency, **extra}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--costs", default="bench/ann.json", help="the JSON bench/ann.py wrote")
    p.add_argument("--target", type=float, help="recall target (default: the one bench/ann.py used)")
    args = p.parse_args()
    with open(args.costs, encoding="utf-8") as f:
        measured = json.load(f)
    margs = measured["args"]
    target = args.target or margs["target"]
    print(f"measured by bench/ann.py: {margs['docs']} clustered synthetic documents × {margs['views']} views "
          f"(MVR) / × 1 (DPR), dim {margs['dim']}, recall@{margs['k']} target {target}, 1 CPU thread "
          f"(faiss threads {margs['threads']})")
    for corpus, (n_docs, views, dim) in CORPORA.items():
        print(f"\n**{corpus}** (projected; CPU single-thread latency, GPU: not measured here)\n")
        print("| system | index (setting) | recall@k measured | RAM | disk | build (1 core) | "
              "ms/query (1 core) | GPU |")
        print("|---|---|---|---|---|---|---|---|")
        for system, vpd in (("mvr", views), ("dpr", 1)):
            for row in pick_per_index(measured["rows"], system, target):
                proj = project(row, n_docs * vpd, dim, {**margs, "dim": margs["dim"]})
                setting = "exact" if row["param"] == "exact" else f"{row['param']} {row['value']:g}"
                flag = "" if row["meets_target"] else " (below target)"
                print(f"| {system} | {proj['index']} ({setting}) | {row['recall']:.4f}{flag} | "
                      f"{human_bytes(proj['ram'])} | {human_bytes(proj['disk'])} | {human_seconds(proj['build'])} | "
                      f"{proj['latency_ms']:.1f} | not measured |")


if __name__ == "__main__":
    main()
