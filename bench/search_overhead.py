"""Multi-vector search overhead vs raw Faiss, and MVR (k views) vs DPR query latency, on the same vectors.

Ours = MultiVectorSearcher's core (FaissStore.search: Faiss search at the over-fetched depth k·K plus the
vectorised max aggregation and, if needed, widening). Raw = ``faiss.IndexFlatIP.search`` at that same depth
on the same index. DPR = one vector per document (the first view) searched at depth k.

    python bench/search_overhead.py --docs 20000 --views 8 --dim 384 --queries 1000 --k 100
"""

from __future__ import annotations

import argparse
import statistics
import time

import faiss
import numpy as np

from multiview_plugin.search import FaissStore, MaxAggregator


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=20000, help="documents")
    p.add_argument("--views", type=int, default=8, help="vectors per document (MVR k)")
    p.add_argument("--dim", type=int, default=384, help="vector dim (MiniLM: 384)")
    p.add_argument("--queries", type=int, default=1000, help="queries per timed batch")
    p.add_argument("--k", type=int, default=100, help="documents per query")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats (median reported)")
    p.add_argument("--threads", type=int, default=0, help="faiss threads (0 = faiss default)")
    args = p.parse_args()
    if args.threads:
        faiss.omp_set_num_threads(args.threads)

    rng = np.random.default_rng(0)
    reps = rng.standard_normal((args.docs, args.views, args.dim), dtype=np.float32)
    reps /= np.linalg.norm(reps, axis=-1, keepdims=True)
    queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=-1, keepdims=True)

    index = faiss.IndexFlatIP(args.dim)
    index.add(reps.reshape(-1, args.dim))
    lookup = [f"d{i}#{j}" for i in range(args.docs) for j in range(args.views)]
    store = FaissStore.from_lookup(index, lookup, True, "bench")
    agg = MaxAggregator()
    depth = args.k * args.views

    raw = timed(lambda: index.search(queries, depth), args.repeats)
    ours = timed(lambda: store.search(queries, args.k, agg), args.repeats)

    dpr_index = faiss.IndexFlatIP(args.dim)
    dpr_index.add(np.ascontiguousarray(reps[:, 0]))
    dpr_store = FaissStore.from_lookup(dpr_index, [f"d{i}" for i in range(args.docs)], False, "bench")
    dpr = timed(lambda: dpr_store.search(queries, args.k, agg), args.repeats)

    nq = args.queries
    print(f"{args.docs} docs x {args.views} views, dim {args.dim}, {nq} queries, k={args.k}, "
          f"faiss threads {faiss.omp_get_max_threads()}, median of {args.repeats}")
    print(f"raw faiss IndexFlatIP.search at depth k*K={depth}: {1000 * raw / nq:.3f} ms/query")
    print(f"ours (search + max aggregation):          {1000 * ours / nq:.3f} ms/query")
    print(f"ours / raw faiss: {ours / raw:.3f}x (target <= 1.2x)")
    print(f"DPR (1 vector/doc, depth k):              {1000 * dpr / nq:.3f} ms/query")
    print(f"MVR-k={args.views} / DPR query latency: {ours / dpr:.2f}x")


if __name__ == "__main__":
    main()
