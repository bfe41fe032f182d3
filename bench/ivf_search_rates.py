"""The fast IVF index's search costs measured at the plans' dim and lists, and checked on a real index folder.

The plans priced an IVF search by carrying ``bench/ann.json`` (dim 128, 1,024 lists, a flat coarse quantiser) to
dim 768 and 131,072 lists with the rule d · (nprobe · vectors per list + nlist): the nlist term, a scan of every
centroid, was 94% of the nq mvr figure. The plans' index has an HNSW coarse quantiser, which walks a graph of the
centroids instead. This bench measures the three parts of a query of ``MultiVectorSearcher`` over
``IVF<n>_HNSW32,SQ8`` with a re-scoring store, one Faiss thread, CPU time per query, queries one at a time:

- **coarse**: the HNSW quantiser's search for ``nprobe`` lists at ``--lists`` (centroids by the plans' two-level
  k-means on ``--per_list`` vectors per list, as ``bench/ivf_rates.py``), per nprobe in ``--nprobes``;
- **scan**: us per code (``--scan_codes``: SQ8, SQfp16) scanned in the probed lists (Faiss's own count of codes
  compared), the slope of the query time over the codes scanned at several nprobe on ``--scan_vectors`` vectors
  in ``--scan_lists`` lists, fetching each of ``--fetches`` vectors (the searcher's depth at 10 and 100 hits x 8
  views x over-fetch 2, and a deeper one), with the per-query rest at that depth (the intercept: the result heap,
  the call);
- **re-scoring**: us per candidate document (all its views, float16 from the memory-mapped store, page cache
  warm) of the searcher's ``rescore_docs``, and the per-call rest.

Then ``--check_vectors`` builds a real folder (``build_index``: ``IVF<n>_HNSW32,SQ8``, two-level k-means,
``rescore_store`` fp16) and searches it with the searcher's default knobs at each of ``--check_hits``; the query
time predicted from the three rates (with the nprobe, codes scanned and candidates that search used) is printed
beside the measured one, and the searcher's own rest (aggregation and ranking: the query time less the index's
search and the re-scoring calls, each timed on their own) is measured at each fetch depth. Clustered synthetic
vectors (8 views per document, 1,000 topics).

    OMP_NUM_THREADS=1 nice -n 10 python bench/ivf_search_rates.py --json bench/ivf_search_rates.json \
        > bench/ivf_search_rates.log 2>&1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "recipes"))

from build_scaling import write_shards  # noqa: E402
from ivf_build import TRAIN_PER_LIST, fit, nlist_for, single_thread_run  # noqa: E402
from ivf_rates import index_over, kmeans_centroids, vectors  # noqa: E402
from plan import search_fetch, search_parts  # noqa: E402  (recipes/plan.py: how the plans price the parts)

from tools.synthetic_vectors import clustered_documents, clustered_queries  # noqa: E402

VIEWS = 8


def per_query_ms(search, q: np.ndarray) -> float:
    """CPU ms per query of ``search(one_query)`` over the rows of ``q``, one at a time (after one warm-up)."""
    search(q[:1])
    start = time.process_time()
    for i in range(len(q)):
        search(q[i:i + 1])
    return 1000 * (time.process_time() - start) / len(q)


def queries_for(n: int, dim: int, seed: int) -> np.ndarray:
    """Queries near documents of the same topics as every set here (the topic centres come from ``seed``)."""
    docs = clustered_documents(max(n, 1000), VIEWS, dim, clusters=1000, seed=seed)
    return clustered_queries(docs, n, seed=seed + 1)


def coarse_rates(lists: list[int], nprobes: list[int], dim: int, per_list: int, q: np.ndarray,
                 seed: int) -> list[dict]:
    """ms per query of the HNSW quantiser's search for nprobe lists (Faiss's default efSearch, raised to nprobe)."""
    rows = []
    for nlist in lists:
        cent, _ = kmeans_centroids(vectors(per_list * nlist, dim, seed), nlist)
        quantiser = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
        quantiser.add(cent)
        for nprobe in [p for p in nprobes if p <= nlist]:
            ms = per_query_ms(lambda x, p=nprobe, qz=quantiser: qz.search(x, p), q)
            rows.append({"lists": nlist, "nprobe": nprobe, "ms_per_query": round(ms, 4)})
            print(f"coarse  lists {nlist:>7,}  nprobe {nprobe:>4}  {ms:7.3f} ms/query", flush=True)
    return rows


def scan_rate(n: int, nlist: int, nprobes: list[int], fetches: list[int], codes: list[str], dim: int,
              q: np.ndarray, seed: int) -> list[dict]:
    """Per code and fetch depth: us per code scanned (the slope of ms/query over the codes Faiss compared, at
    several nprobe) and the per-query rest (the intercept: the result heap of that depth, the call)."""
    x = vectors(n, dim, seed)
    cent, _ = kmeans_centroids(x[::max(1, n // (TRAIN_PER_LIST * nlist))], nlist)
    out = []
    for code in codes:
        index, _ = index_over(cent, code, x[:65_536])
        index.add(x)
        out += _scan_points(index, code, n, nprobes, fetches, q)
    return out


def _scan_points(index: faiss.Index, code: str, n: int, nprobes: list[int], fetches: list[int],
                 q: np.ndarray) -> list[dict]:
    ivf = faiss.extract_index_ivf(index)
    nlist, dim = ivf.nlist, ivf.d
    out = []
    for fetch in fetches:
        points = []
        for nprobe in nprobes:
            ivf.nprobe = nprobe
            faiss.cvar.indexIVF_stats.reset()
            ms = per_query_ms(lambda z, f=fetch: index.search(z, f), q)
            codes = faiss.cvar.indexIVF_stats.ndis / (len(q) + 1)  # + the warm-up query
            points.append({"nprobe": nprobe, "codes_per_query": round(codes), "ms_per_query": round(ms, 4)})
            print(f"scan    {code:6s} {n:,} vectors in {nlist} lists  nprobe {nprobe:>3}  fetch {fetch:>5}  "
                  f"{codes:9,.0f} codes scanned  {ms:7.3f} ms/query", flush=True)
        slope, intercept = np.polyfit([p["codes_per_query"] for p in points], [p["ms_per_query"] for p in points], 1)
        print(f"scan    {code:6s} fetch {fetch:>5}: {1000 * slope:.4f} us per code scanned (dim {dim}), intercept "
              f"{intercept:.3f} ms", flush=True)
        out.append({"code": code, "vectors": n, "lists": nlist, "fetch": fetch, "points": points,
                    "us_per_code": round(1000 * slope, 5), "intercept_ms": round(float(intercept), 4)})
    return out


def rescore_rate(searcher, q: np.ndarray, widths: list[int], seed: int) -> dict:
    """ms per query of the searcher's ``rescore_docs`` over ``widths`` random candidate documents (all their views
    from the fp16 store, read once beforehand so that its pages are in memory), and the us per document fitted."""
    store = searcher.store
    views = store.rescore_views
    for lo in range(0, len(views), 1 << 18):  # warm: every page of the store read once
        np.asarray(views[lo:lo + (1 << 18)]).sum()
    rng = np.random.default_rng(seed)
    n_docs = len(store.docids)
    points = []
    for width in widths:
        cand = [rng.choice(n_docs, width, replace=False)[None, :] for _ in range(len(q))]
        store.rescore_docs(q[:1], cand[0])  # warm-up
        start = time.process_time()
        for i in range(len(q)):
            store.rescore_docs(q[i:i + 1], cand[i])
        ms = 1000 * (time.process_time() - start) / len(q)
        points.append({"candidates": width, "ms_per_query": round(ms, 4)})
        print(f"rescore {width:>5} candidate documents x {VIEWS} views  {ms:7.3f} ms/query "
              f"({1000 * ms / width:.2f} us per document)", flush=True)
    slope, intercept = np.polyfit([p["candidates"] for p in points], [p["ms_per_query"] for p in points], 1)
    print(f"rescore fitted: {1000 * slope:.3f} us per candidate document, intercept {intercept:.3f} ms (the plans "
          "interpolate between the widths measured instead)", flush=True)
    return {"points": points, "us_per_doc": round(1000 * slope, 4), "intercept_ms": round(float(intercept), 4)}


def check(n: int, hits: list[int], dim: int, q: np.ndarray, coarse: list[dict], scan: list[dict], widths: list[int],
          seed: int) -> tuple[dict, list[dict]]:
    """A real folder searched by the searcher at each number of hits: measured ms/query against the rates'."""
    from multiview_plugin.search import MultiVectorSearcher, build_index

    nlist = nlist_for(n)
    with tempfile.TemporaryDirectory(prefix=f"ivf_search_rates.{os.getpid()}.", dir=os.environ.get("TMPDIR")) as tmp:
        write_shards(Path(tmp), n, dim, VIEWS, 4)
        start = time.process_time()
        build_index(sorted(str(p) for p in Path(tmp).glob("c.*.pkl")), Path(tmp) / "index",
                    index_factory=f"IVF{nlist}_HNSW32,SQ8", train_size=TRAIN_PER_LIST * nlist,
                    ivf_training="two_level", rescore_store="fp16")
        print(f"check   built {n:,} x {dim} IVF{nlist}_HNSW32,SQ8 + fp16 store in {time.process_time() - start:.1f} "
              "CPU s", flush=True)
        searcher = MultiVectorSearcher(Path(tmp) / "index", None)
        rescore = rescore_rate(searcher, q, widths, seed)
        store = searcher.store
        seen: list[tuple[int, float]] = []  # (candidates, CPU s) of each re-scoring call
        real = store.rescore_docs

        def counted(qq: np.ndarray, cand: np.ndarray, **kw) -> np.ndarray:
            start = time.process_time()
            out = real(qq, cand, **kw)
            seen.append((cand.shape[1], time.process_time() - start))
            return out

        store.rescore_docs = counted
        rates = {"coarse": coarse, "scan": scan, "rescore": rescore}
        rows = [check_row(searcher, q, k, seen, rates) for k in hits]
        for row in rows:
            row.update(vectors=n, lists=nlist)
        del searcher, store
    return rescore, rows


def check_row(searcher, q: np.ndarray, k: int, seen: list, rates: dict) -> dict:
    """The searcher's ms/query at ``k`` hits beside the plans' pricing of its parts (``search_parts`` at the
    nprobe, codes and candidates this search used); its own rest (aggregation, ranking: the query time less the
    index's search at the same nprobe and fetch and less the re-scoring calls) measured too."""
    store = searcher.store
    ivf = store.approximate._ivf
    seen.clear()
    faiss.cvar.indexIVF_stats.reset()
    ms = per_query_ms(lambda z: searcher.search_vectors(z, k), q)
    nprobe, n_calls = int(ivf.nprobe), len(q) + 1  # + the warm-up query
    codes = faiss.cvar.indexIVF_stats.ndis / n_calls
    cands = sum(c for c, _ in seen) / n_calls
    rescore_ms = 1000 * sum(t for _, t in seen) / n_calls
    fetch = search_fetch(k, VIEWS, max_aggregation=True)  # the searcher's first fetch
    index_ms = per_query_ms(lambda z: store.index.search(z, fetch), q)  # nprobe stays as the search set it
    own = ms - index_ms - rescore_ms
    row = {"hits": k, "fetch": fetch, "nprobe": nprobe, "codes_per_query": round(codes),
           "candidates_per_query": round(cands, 1), "ms_per_query": round(ms, 3), "index_search_ms": round(index_ms, 3),
           "rescore_calls_ms": round(rescore_ms, 3), "searcher_rest_ms": round(own, 3)}
    parts = search_parts(rates, "SQ8", ivf.nlist, nprobe, fetch, codes, cands)
    mine = (f"the search's own: index {index_ms:.3f} + re-scoring {rescore_ms:.3f} + the searcher's rest {own:.3f} "
            "ms")
    if parts is None:
        print(f"check   hits {k:>3}: measured {ms:.3f} ms/query; the parts measured do not reach nprobe {nprobe}, "
              f"fetch {fetch} or {cands:.0f} candidates; {mine}", flush=True)
        return row
    pred = sum(parts.values())
    print(f"check   hits {k:>3}: nprobe {nprobe}, {codes:,.0f} codes scanned, {cands:.0f} candidates re-scored: "
          f"measured {ms:.3f} ms/query; predicted from the parts {pred:.3f} (coarse {parts['coarse_ms']:.3f} + scan "
          f"{parts['scan_ms']:.3f} + re-scoring {parts['rescore_ms']:.3f}; x{pred / ms:.2f}); {mine} "
          f"(parts + rest x{(pred + own) / ms:.2f})", flush=True)
    return {**row, **{key: round(v, 3) for key, v in parts.items()}, "predicted_ms": round(pred, 3),
            "ratio": round(pred / ms, 3), "ratio_with_rest": round((pred + own) / ms, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--lists", type=int, nargs="+", default=[2048, 16384, 65536, 131072])
    ap.add_argument("--nprobes", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--per_list", type=int, default=10, help="k-means vectors per list of the coarse quantisers")
    ap.add_argument("--scan_vectors", type=int, default=524_288)
    ap.add_argument("--scan_lists", type=int, default=256)
    ap.add_argument("--scan_nprobes", type=int, nargs="+", default=[2, 8, 32])
    ap.add_argument("--fetches", type=int, nargs="+", default=[160, 1600, 4000],
                    help="vectors fetched per query in the scan measurement (the searcher's at 10 and 100 hits)")
    ap.add_argument("--scan_codes", nargs="+", default=["SQ8", "SQfp16"])
    ap.add_argument("--check_vectors", type=int, default=2_000_000)
    ap.add_argument("--check_hits", type=int, nargs="+", default=[10, 100, 250])
    ap.add_argument("--rescore_widths", type=int, nargs="+", default=[200, 800, 1600, 4000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    git = single_thread_run()
    q = queries_for(args.queries, args.dim, args.seed)  # the indexed sets' topics
    coarse = coarse_rates(args.lists, args.nprobes, args.dim, args.per_list, q, args.seed)
    for nlist in args.lists:
        mine = [r for r in coarse if r["lists"] == nlist]
        a, b = fit([r["nprobe"] for r in mine], [r["ms_per_query"] for r in mine])
        print(f"coarse  lists {nlist:>7,}: {a:.3g} * nprobe^{b:.2f} ms", flush=True)
    scan = scan_rate(args.scan_vectors, args.scan_lists, args.scan_nprobes, args.fetches, args.scan_codes, args.dim,
                     q, args.seed)
    rescore, checks = check(args.check_vectors, args.check_hits, args.dim, q, coarse, scan, args.rescore_widths,
                            args.seed)
    print(f"# load average at end {tuple(round(v, 2) for v in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": "python bench/ivf_search_rates.py " + " ".join(sys.argv[1:]), "git": git, "dim": args.dim,
            "views": VIEWS, "coarse": coarse, "scan": scan, "rescore": rescore, "checks": checks}, indent=1) + "\n",
            encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
