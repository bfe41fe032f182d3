"""Approximate search for multi-view documents: document recall@k vs exact max-sim, latency, memory, build time.

Clustered synthetic unit vectors (``tools.synthetic_vectors``: topic centres, documents near a
centre, views near their document, queries near one view of a document), not real MiniLM vectors: encoding
a million passages' views costs hours on 2 CPU cores. MVR = ``--docs`` documents × ``--views`` vectors; DPR =
the same documents with one vector each (the mean of its views, normalised). Each index type is built once per
system and searched through ``FaissStore`` (the searcher's core, with its fetch / widen / re-score rule) over a
sweep of its search parameter:

- HNSW: ``overfetch`` (efSearch = the fetch depth, overfetch × k × views);
- IVF: ``nprobe`` (``overfetch`` 1; nprobe 0 = the searcher's default, raised with the fetch depth);
- ``Flat+doc:HNSW32`` / ``SQfp16+doc:HNSW32`` (MVR only): candidates from an HNSW32 index over the documents'
  normalised view means (``--doc_index_factory``), re-scored over all views from float32 / fp16 storage:
  ``doc_candidates`` × k candidates;
- Flat: exact (the reference and the exact latency).

Document recall@k = |approximate top-k documents ∩ exact max-sim top-k| / k, averaged over queries. Latency is
per query, median of ``--repeats`` runs: batched (all queries at once) and single (one query per call).
Memory is the serialized index plus the searcher's 8-byte row → document map. Prints the Pareto table (per
system and index: configurations no other one beats on both recall and batched latency) and the defaults it
recommends, and writes a JSON of per-vector costs that ``bench/scale_projection.py`` projects to full corpora.

    nohup python bench/ann.py --docs 125000 --views 8 --dim 128 > bench/ann.log 2>&1 &
    nohup python bench/ann.py --doc_spread 1 --view_spread 1 --json bench/ann_hard.json > bench/ann_hard.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tools/

from search_overhead import timed  # noqa: E402 (bench/ is the script's folder)

from multiview_plugin.index.adds import document_means  # noqa: E402
from multiview_plugin.search import ApproximateSearch, FaissStore, MaxAggregator  # noqa: E402
from tools.synthetic_vectors import clustered_documents, clustered_queries  # noqa: E402

HNSW_OVERFETCH = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
DOC_CANDIDATES = (1.0, 1.5, 2.0, 4.0, 8.0)
DOC_SEPARATOR = "+doc:"  # "SQfp16+doc:HNSW32": vectors in SQfp16, candidates from an HNSW32 over document means
IVF_NPROBE = (0, 8, 16, 32, 64, 128, 256)  # 0: the searcher's default (probes raised with the fetch depth)


@dataclass
class Row:
    system: str
    index: str
    param: str
    value: float
    recall: float
    batched_ms: float
    single_ms: float
    memory_bytes: int
    build_s: float
    vectors: int
    train_s: float = 0.0


def doc_recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found.tolist(), exact.tolist())]))


def build(factory: str, vectors: np.ndarray, train_size: int, seed: int) -> tuple[faiss.Index, float, float]:
    """(index, train seconds, total build seconds)."""
    start = time.perf_counter()
    index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        rng = np.random.default_rng(seed)
        sample = vectors[np.sort(rng.choice(len(vectors), min(train_size, len(vectors)), replace=False))]
        index.train(np.ascontiguousarray(sample))
    train_s = time.perf_counter() - start
    for i in range(0, len(vectors), 1 << 16):
        index.add(vectors[i:i + (1 << 16)])
    return index, train_s, time.perf_counter() - start


def sweep(factory: str) -> tuple[str, tuple[float, ...]]:
    if DOC_SEPARATOR in factory:
        return "doc_candidates", DOC_CANDIDATES
    if factory.startswith("HNSW"):
        return "overfetch", HNSW_OVERFETCH
    if factory.startswith("IVF"):
        return "nprobe", IVF_NPROBE
    return "exact", (1.0,)


def measure(system: str, factory: str, vectors: np.ndarray, views: int, queries: np.ndarray, exact: np.ndarray,
            args: argparse.Namespace) -> list[Row]:
    main_factory, _, doc_factory = factory.partition(DOC_SEPARATOR)
    if doc_factory and views == 1:
        return []  # a document index is DPR's index itself
    index, train_s, build_s = build(main_factory, vectors, args.train_size, args.seed)
    memory = int(faiss.serialize_index(index).nbytes) + 8 * index.ntotal
    n_docs = len(vectors) // views
    doc_index = None
    if doc_factory:
        start = time.perf_counter()
        doc_index = faiss.index_factory(vectors.shape[1], doc_factory, faiss.METRIC_INNER_PRODUCT)
        doc_index.add(document_means(vectors, np.repeat(np.arange(n_docs), views)))
        build_s += time.perf_counter() - start
        memory += int(faiss.serialize_index(doc_index).nbytes)
    lookup = [f"{d}#{j}" for d in range(n_docs) for j in range(views)] if views > 1 else list(map(str, range(n_docs)))
    param, values = sweep(factory)
    rows = []
    agg = MaxAggregator()
    single = queries[: args.single_queries]
    for value in values:
        # IVF sweeps nprobe itself (no floor from the fetch depth); value 0 = the searcher's default floor
        options = ({"overfetch": value} if param == "overfetch" else
                   {"doc_candidates": value, "min_doc_candidates": 0} if param == "doc_candidates" else
                   {"overfetch": 1.0, "nprobe": int(value), "probe_factor": 0.0} if value else {"overfetch": 1.0})
        store = FaissStore.from_lookup(index, lookup, views > 1, factory, ApproximateSearch(**options), doc_index)
        found = store.search(queries, args.k, agg)[0]
        batched = timed(lambda s=store: s.search(queries, args.k, agg), args.repeats) / len(queries)
        one = timed(lambda s=store: [s.search(q[None], args.k, agg) for q in single], args.repeats) / len(single)
        rows.append(Row(system, factory, param, value, doc_recall(found, exact), 1000 * batched, 1000 * one,
                        memory, build_s, index.ntotal, train_s))
        print(f"  {system:>4} {factory:<16} {param}={value:<6g} recall@{args.k} {rows[-1].recall:.4f}  "
              f"{rows[-1].batched_ms:.3f} ms/q batched, {rows[-1].single_ms:.3f} ms/q single", flush=True)
        if rows[-1].recall >= 0.999 and param != "exact" and value:
            break  # higher settings only cost time
    return rows


def pareto(rows: list[Row]) -> list[Row]:
    return [r for r in rows if not any(o.recall >= r.recall and o.batched_ms < r.batched_ms for o in rows)]


def fastest(rows: list[Row], system: str, target: float) -> Row | None:
    ok = [r for r in rows if r.system == system and r.recall >= target and r.param != "exact"]
    return min(ok, key=lambda r: r.batched_ms) if ok else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=125_000, help="documents (MVR vectors = docs x views)")
    p.add_argument("--views", type=int, default=8, help="MVR vectors per document (k)")
    p.add_argument("--dim", type=int, default=128, help="vector dim (768 for BERT-base: slower, same shape)")
    p.add_argument("--clusters", type=int, default=1000, help="topic centres of the synthetic corpus")
    p.add_argument("--doc_spread", type=float, default=0.6, help="documents' spread around their centre (1 = as "
                   "far as the centre from the origin; larger = closer to uniform random, harder for ANN)")
    p.add_argument("--view_spread", type=float, default=0.5, help="views' spread around their document")
    p.add_argument("--queries", type=int, default=200, help="queries (recall and batched latency)")
    p.add_argument("--single_queries", type=int, default=30, help="queries timed one at a time")
    p.add_argument("--k", type=int, default=100, help="documents per query (recall@k)")
    p.add_argument("--vectors_per_list", type=int, default=1000, help="IVF lists = vectors / this (a power of "
                   "2): MVR's 8x vectors get 8x the lists, so the same nprobe scans the same number of vectors")
    p.add_argument("--indexes", nargs="+", default=["Flat", "HNSW32", "IVF{nlist},SQ8", "IVF{nlist},SQfp16",
                                                    "Flat+doc:HNSW32", "SQfp16+doc:HNSW32"],
                   help="faiss.index_factory strings; {nlist} is replaced per system (see --vectors_per_list); "
                   "also e.g. HNSW32_SQfp16, IVF{nlist},PQ16 (PQ training is slow here)")
    p.add_argument("--train_size", type=int, default=65_536, help="vectors sampled to train IVF/PQ")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats (median)")
    p.add_argument("--threads", type=int, default=1, help="faiss threads")
    p.add_argument("--target", type=float, default=0.99, help="recall@k relative to exact required")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="bench/ann.json", help="per-vector costs for bench/scale_projection.py")
    args = p.parse_args()
    faiss.omp_set_num_threads(args.threads)
    wall = time.perf_counter()

    docs = clustered_documents(args.docs, args.views, args.dim, clusters=args.clusters, seed=args.seed,
                               doc_spread=args.doc_spread, view_spread=args.view_spread)
    queries = clustered_queries(docs, args.queries, seed=args.seed + 1)
    dpr = docs.mean(axis=1)
    dpr /= np.linalg.norm(dpr, axis=1, keepdims=True)
    systems = {"mvr": (docs.reshape(-1, args.dim), args.views), "dpr": (dpr, 1)}
    print(f"clustered synthetic vectors (doc spread {args.doc_spread}, view spread {args.view_spread}): "
          f"{args.docs} documents, MVR {args.views} views "
          f"({args.docs * args.views} vectors) / DPR 1 (mean of views), dim {args.dim}, {args.clusters} clusters; "
          f"{args.queries} queries, k={args.k}, faiss threads {args.threads}, median of {args.repeats}", flush=True)
    del docs
    rows: list[Row] = []
    for system, (vectors, views) in systems.items():
        flat = faiss.IndexFlatIP(args.dim)
        flat.add(vectors)
        lookup = [f"{d}#{j}" for d in range(len(vectors) // views) for j in range(views)] if views > 1 else \
            list(map(str, range(len(vectors))))
        exact = FaissStore.from_lookup(flat, lookup, views > 1, "exact").search(queries, args.k, MaxAggregator())[0]
        del flat, lookup
        for factory in args.indexes:
            nlist = 1 << max(4, round(np.log2(len(vectors) / args.vectors_per_list)))
            rows += measure(system, factory.format(nlist=nlist), vectors, views, queries, exact, args)

    print(f"\nPareto table (per system and index: no other setting has >= recall and lower batched latency); "
          f"recall@{args.k} of documents vs exact max-sim")
    print(f"| system | index | search setting | doc recall@{args.k} | ms/query batched | ms/query single | "
          "memory MiB | bytes/vector | build s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for system in systems:
        for factory in dict.fromkeys(r.index for r in rows if r.system == system):
            for r in pareto([r for r in rows if r.system == system and r.index == factory]):
                print(f"| {r.system} | {r.index} | {r.param} {r.value:g} | {r.recall:.4f} | {r.batched_ms:.3f} | "
                      f"{r.single_ms:.3f} | {r.memory_bytes / 2**20:.0f} | {r.memory_bytes / r.vectors:.0f} | "
                      f"{r.build_s:.0f} |")

    print(f"\nRecommended (fastest batched setting with doc recall@{args.k} >= {args.target} of exact):")
    picks = {}
    for system in systems:
        best = fastest(rows, system, args.target)
        picks[system] = best
        if best is None:
            print(f"  {system}: no approximate setting reached {args.target}")
            continue
        print(f"  {system}: {best.index} with {best.param} {best.value:g}: recall {best.recall:.4f}, "
              f"{best.batched_ms:.3f} ms/query batched, {best.single_ms:.3f} single, "
              f"{best.memory_bytes / 2**20:.0f} MiB, build {best.build_s:.0f} s")
    mvr, dpr_best = picks.get("mvr"), picks.get("dpr")
    if mvr and dpr_best:
        at_same = fastest(rows, "dpr", mvr.recall) or dpr_best
        print(f"  MVR / DPR latency at recall >= {args.target}: batched {mvr.batched_ms / dpr_best.batched_ms:.2f}x, "
              f"single {mvr.single_ms / dpr_best.single_ms:.2f}x (DPR at MVR's recall {mvr.recall:.4f}: "
              f"{at_same.index} {at_same.param} {at_same.value:g}, batched "
              f"{mvr.batched_ms / at_same.batched_ms:.2f}x)")
    flat_rows = {r.system: r for r in rows if r.param == "exact"}
    if "mvr" in flat_rows and "dpr" in flat_rows:
        print(f"  exact (Flat) MVR / DPR batched latency: "
              f"{flat_rows['mvr'].batched_ms / flat_rows['dpr'].batched_ms:.2f}x")
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump({"args": vars(args), "rows": [asdict(r) for r in rows],
                   "picks": {k: asdict(v) if v else None for k, v in picks.items()}}, f, indent=1)
    print(f"\nwall {time.perf_counter() - wall:.0f} s; per-vector costs written to {args.json}")


if __name__ == "__main__":
    main()
