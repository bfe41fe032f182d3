"""A graph over a few representative views per document, against the graph over all of them (issue #38's mvr goal).

mvr k = 8 puts 8 near-duplicate views of each document into its HNSW graph, so a query's first 10 distinct
documents sit in its top ~25 views and the beam must be wide. A candidate generator with fewer rows per document
might walk a smaller graph: here each document's 8 views are clustered into ``r`` representatives (spherical
k-means within the document, farthest-first start, 8 iterations; r = 1 is the normalised mean of the unit-length
views, close to the searcher's document index), an ``HNSW32`` graph is built over the representatives, and a
query's first ``cand`` distinct documents among its top ``cand x r`` representative rows are re-scored exactly
over all 8 views (max-sim); r = 8 is the graph over the views themselves, re-scored the same way.

For each r: per beam ``ef`` (the beam is at least the rows fetched), the fewest candidates whose recall@10 of
exact max-over-views reaches ``--target`` on the first ``--tune`` questions, then the fastest of those settings;
recall and the median single-query time (1 thread, Faiss plus the numpy re-scoring, no searcher) on the other
questions. With ``--dpr FOLDER``: dpr's HNSW32 graph alone (Faiss only) at the narrowest beam reaching the
target on the same split, and each row's time over it.

    python bench/representative_views.py /tmp/real2/squad-mvr-k8 --dpr /tmp/real2/squad-dpr

Benches are not mirrored under tests/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import recall  # noqa: E402
from view_graph_anatomy import exact_docs, median_ms  # noqa: E402

from multiview_plugin.encoding.shards import read_shard  # noqa: E402

BEAMS = (16, 32, 48, 64, 96, 128, 192, 256)
CANDIDATES = (10, 20, 30, 50, 100)


def load(folder: Path, queries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(views (docs, V, dim) in docid order of the shards, query vectors, each view row's document)."""
    reps, lookup = [], []
    for path in sorted(folder.glob("corpus.*.pkl")):
        x, ids = read_shard(path)[:2]
        reps.append(np.asarray(x, dtype=np.float32))
        lookup += [str(i).split("#")[0] for i in ids]
    views = np.concatenate(reps)
    _, first, row_doc = np.unique(lookup, return_index=True, return_inverse=True)
    per_doc = len(views) // len(first)
    if not (np.diff(row_doc.reshape(-1, per_doc), axis=1) == 0).all():
        raise SystemExit(f"{folder}: expected {per_doc} contiguous views per document")
    q = np.asarray(read_shard(folder / "queries.pkl")[0], dtype=np.float32)[:queries]
    return views.reshape(-1, per_doc, views.shape[1]), np.ascontiguousarray(q), row_doc


def representatives(x: np.ndarray, r: int, iters: int = 8) -> np.ndarray:
    """(docs, r, dim) unit centroids of spherical k-means over each document's views, farthest-first start."""
    xn = x / np.linalg.norm(x, axis=2, keepdims=True)
    cents = [xn[:, 0]]
    for _ in range(1, r):
        near = np.max(np.stack([np.einsum("nvd,nd->nv", xn, c) for c in cents]), axis=0)
        cents.append(xn[np.arange(len(x)), near.argmin(axis=1)])
    c = np.stack(cents, axis=1)
    for _ in range(iters):
        assign = np.einsum("nvd,nrd->nvr", xn, c).argmax(axis=2)
        onehot = (assign[..., None] == np.arange(r)).astype(np.float32)  # (docs, V, r)
        sums = np.einsum("nvr,nvd->nrd", onehot, xn)
        c = np.where(onehot.sum(axis=1)[..., None] > 0, sums, c)
        c /= np.linalg.norm(c, axis=2, keepdims=True)
    return c


def searcher(graph: faiss.IndexHNSWFlat, x: np.ndarray, block_doc: np.ndarray, r: int, cand: int, k: int):
    """One query's top-k documents: first ``cand`` distinct documents of the top ``cand x r`` rows, re-scored."""
    def search(query: np.ndarray) -> np.ndarray:
        _, rows = graph.search(query, cand * r)
        rows = rows[0][rows[0] >= 0]
        docs = np.array(list(dict.fromkeys((rows // r).tolist()))[:cand])
        best = (x[docs] @ query[0]).max(axis=1)
        return block_doc[docs[np.argsort(-best)[:k]]]
    return search


def tune_row(x: np.ndarray, block_doc: np.ndarray, r: int, q: np.ndarray, exact: np.ndarray, args) -> dict | None:
    """The fastest (beam, candidates) reaching the target on the tuning questions, measured on the others."""
    rows = representatives(x, r) if r < x.shape[1] else x
    graph = faiss.IndexHNSWFlat(x.shape[2], 32, faiss.METRIC_INNER_PRODUCT)
    graph.add(np.ascontiguousarray(rows.reshape(-1, x.shape[2])))
    tune, held = slice(0, args.tune), slice(args.tune, None)
    picks = []
    for ef in BEAMS:
        for cand in CANDIDATES:
            graph.hnsw.efSearch = max(ef, cand * r)
            if graph.hnsw.efSearch != ef:  # the rows fetched widen the beam: the setting is another beam's
                continue
            fn = searcher(graph, x, block_doc, r, cand, args.k)
            if recall([fn(v[None]) for v in q[tune]], exact[tune]) >= args.target:
                picks.append((median_ms(fn, q[tune]), ef, cand))
                break
    if not picks:
        return None
    _, ef, cand = min(picks)
    graph.hnsw.efSearch = ef
    fn = searcher(graph, x, block_doc, r, cand, args.k)
    return {"r": r, "rows": len(x) * r, "ef": ef, "cand": cand,
            "recall": recall([fn(v[None]) for v in q[held]], exact[held]), "ms": median_ms(fn, q[held])}


def dpr_row(folder: Path, args) -> dict:
    """dpr's graph alone at the narrowest beam reaching the target on the tuning questions."""
    x, q, _ = load(folder, args.queries)
    flat = x[:, 0]
    exact = np.argsort(-(q @ flat.T), axis=1)[:, :args.k]
    graph = faiss.IndexHNSWFlat(flat.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    graph.add(np.ascontiguousarray(flat))
    tune, held = slice(0, args.tune), slice(args.tune, None)
    for ef in BEAMS:
        graph.hnsw.efSearch = ef
        if recall(list(graph.search(q[tune], args.k)[1]), exact[tune]) >= args.target:
            break
    return {"ef": ef, "recall": recall(list(graph.search(q[held], args.k)[1]), exact[held]),
            "ms": median_ms(lambda v: graph.search(v, args.k), q[held])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, help="an mvr vector folder (bench/real_vectors.py --method mvr-k8)")
    p.add_argument("--dpr", type=Path, help="the dpr vector folder of the same corpus")
    p.add_argument("--r", type=int, nargs="+", default=[1, 2, 3, 8])
    p.add_argument("--target", type=float, default=0.99)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--queries", type=int, default=800)
    p.add_argument("--tune", type=int, default=200)
    args = p.parse_args()
    faiss.omp_set_num_threads(1)
    x, q, row_doc = load(args.folder, args.queries)
    views = x.reshape(-1, x.shape[2])
    exact, need = exact_docs(np.argsort(-(q @ views.T), axis=1), row_doc, args.k)
    block_doc = row_doc.reshape(len(x), -1)[:, 0]
    print(f"{args.folder.name}: {len(x)} documents x {x.shape[1]} views, {len(q)} questions (tuned on the first "
          f"{args.tune}, measured on the other {len(q) - args.tune}), target recall@{args.k} {args.target}")
    dpr = dpr_row(args.dpr, args) if args.dpr else None
    if dpr:
        print(f"  dpr HNSW32 alone: beam {dpr['ef']}, recall@{args.k} {dpr['recall']:.4f}, {dpr['ms']:.3f} ms/query")
    for r in args.r:
        row = tune_row(x, block_doc, r, q, exact, args)
        if row is None:
            print(f"  r={r}: no beam <= {BEAMS[-1]} with <= {CANDIDATES[-1]} candidates reached {args.target}")
            continue
        ratio = f", {row['ms'] / dpr['ms']:.2f}x dpr's graph" if dpr else ""
        print(f"  r={r} ({row['rows']} graph rows): beam {row['ef']}, {row['cand']} candidates re-scored, recall@"
              f"{args.k} {row['recall']:.4f}, {row['ms']:.3f} ms/query{ratio}", flush=True)


if __name__ == "__main__":
    main()
