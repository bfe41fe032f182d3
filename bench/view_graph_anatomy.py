"""Where a multi-vector HNSW query's time goes, against a single-vector one (issue #38's mvr-vs-dpr latency goal).

For each vector folder (``bench/real_vectors.py --method dpr|mvr-k8``: ``corpus.*.pkl`` and ``queries.pkl``):

* **views needed**: in the exact ranking of views by inner product, how many top views hold a query's first
  ``k`` distinct documents (mean, p50, p90, max over the queries): what a max-over-views search must fetch at least;
* **raw graph**: Faiss's ``IndexHNSWFlat`` alone (the HNSW32 index ``build_index`` wrote, efConstruction 40),
  one query at a time on 1 thread, at each beam ``ef`` (fetching ``ef`` rows): median ms and the document
  recall@k of exact max-over-views among the fetched rows' first ``k`` distinct documents;
* **searcher**: the same index through ``MultiVectorSearcher`` at ``overfetch`` chosen so that its fetch (and so
  its beam) is the same, one query at a time: median ms, the difference being the searcher's own per-call cost
  (aggregation, tie ordering, checks).

    python bench/view_graph_anatomy.py /tmp/real2/squad-dpr /tmp/real2/squad-mvr-k8 > bench/view_graph_anatomy.log

Benches are not mirrored under tests/.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from multiview_plugin.encoding.shards import read_shard  # noqa: E402
from multiview_plugin.search import MultiVectorSearcher, build_index  # noqa: E402
from multiview_plugin.search.aggregators import MaxAggregator  # noqa: E402

BEAMS = (16, 32, 40, 64, 80, 100, 128, 160)


def exact_docs(order: np.ndarray, row_doc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query, from the exact ranking of views: its first ``k`` distinct documents (exact max over views) and
    how many top views hold them."""
    docs, need = [], []
    for ranked in order:
        seen: list[int] = []
        for j, r in enumerate(ranked):
            if int(row_doc[r]) not in seen:
                seen.append(int(row_doc[r]))
            if len(seen) == k:
                need.append(j + 1)
                break
        docs.append(seen)
    return np.array(docs), np.array(need)


def doc_recall(scores: np.ndarray, rows: np.ndarray, row_doc: np.ndarray, exact: np.ndarray, k: int) -> float:
    """Recall@k of exact documents among the first ``k`` distinct documents of each query's fetched rows (the
    searcher's max aggregation of them)."""
    docs = np.where(rows >= 0, row_doc[np.maximum(rows, 0)], -1)
    found = MaxAggregator().aggregate(scores, docs, k)[0]
    return float(np.mean([len(set(f[f >= 0].tolist()) & set(t.tolist())) / k for f, t in zip(found, exact)]))


def median_ms(fn, queries: np.ndarray) -> float:
    times = []
    for x in queries:
        start = time.perf_counter()
        fn(x[None])
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--queries", type=int, default=800)
    args = p.parse_args()
    faiss.omp_set_num_threads(1)
    for folder in map(Path, args.folders):
        q = np.ascontiguousarray(np.asarray(read_shard(folder / "queries.pkl")[0], dtype=np.float32)[:args.queries])
        with tempfile.TemporaryDirectory(prefix="anatomy-") as work:
            index_dir = Path(work) / "hnsw"
            build_index(sorted(folder.glob("corpus.*.pkl")), index_dir, index_factory="HNSW32", aggregation="max")
            searcher = MultiVectorSearcher(index_dir, None)
            store = searcher.store
            index = faiss.downcast_index(store.index)
            views = index.reconstruct_n(0, index.ntotal)
            order = np.argsort(-(q @ views.T), axis=1)
            exact, need = exact_docs(order, store.row_doc, args.k)
            per_doc = index.ntotal / len(store.docids)
            print(f"{folder.name}: {len(store.docids)} documents, {index.ntotal} vectors ({per_doc:.2f} per document), "
                  f"{len(q)} queries, k={args.k}; views holding the first {args.k} distinct documents: mean "
                  f"{need.mean():.1f}, p50 {np.median(need):.0f}, p90 {np.percentile(need, 90):.0f}, max {need.max()}")
            for ef in BEAMS:
                index.hnsw.efSearch = ef
                raw = median_ms(lambda x, ef=ef, index=index: index.search(x, ef), q)
                rec = doc_recall(*index.search(q, ef), store.row_doc, exact, args.k)
                fetch_per_k = args.k * max(1.0, per_doc)
                searcher.store.approximate.overfetch = ef / fetch_per_k
                searcher.store.approximate.ef_search = ef
                ours = median_ms(lambda x, s=searcher: s.search_vectors(x, args.k), q)
                print(f"  beam {ef:4d}: raw HNSW {raw:.3f} ms, document recall@{args.k} {rec:.4f}; through the "
                      f"searcher {ours:.3f} ms (+{ours - raw:.3f})", flush=True)


if __name__ == "__main__":
    main()
