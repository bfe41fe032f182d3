"""Ray-sharded search against single-process Faiss on the same vectors: throughput, latency, their ratios.

Builds, from clustered synthetic multi-view vectors (tools/synthetic_vectors.py), K encoded shards,
one Flat index over all of them and one Flat index per shard (``build_index``, as ``driver.index`` does), then
searches the same query batches (a) with one ``MultiVectorSearcher`` over the whole index in this process
(Faiss with ``--threads`` threads) and (b) with a ``ShardedSearcher`` whose K shards are Ray actors (one Faiss
thread each) on a one-machine Ray instance with K logical CPUs; checks that (b) returns exactly (a)'s ranking,
and prints queries per second, per-batch latency (median, p95) and the ratios sharded / single, from one run;
also the single process with one Faiss thread (a control: OpenMP threads that wait on each other at every
barrier lose most on a machine shared with other jobs).

One machine, not a cluster: on a 2-core box the K actors share those cores with each other, the driver and the
object store, so the ratio measures the fan-out's overhead (serialising queries and hits, K searches and a merge
per batch) rather than a speed-up; a cluster of K machines gives each shard its own cores and memory.

    nice -n 10 python bench/ray_search.py --docs 250000 --views 4 --dim 64 --shards 4 --queries 2000 \
        --batch 100 --k 100 --json bench/ray_search.json > bench/ray_search.log 2>&1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tools/

from multiview_plugin.encoding.shards import ShardInfo, ShardWriter  # noqa: E402
from multiview_plugin.search import MultiVectorSearcher, build_index  # noqa: E402
from multiview_plugin.search.sharded import ShardedSearcher  # noqa: E402
from tools.synthetic_vectors import clustered_documents, clustered_queries  # noqa: E402


def write_shards(folder: Path, docs: np.ndarray, shards: int) -> list[Path]:
    bounds = np.linspace(0, len(docs), shards + 1).astype(int)
    mask = np.ones(docs.shape[:2], dtype=bool)
    paths = []
    for s in range(shards):
        info = ShardInfo(model_name="synthetic", dim=0, views_per_doc=0, dtype="float32", num_items=0,
                         num_vectors=0, shard_index=s, num_shards=shards, source="synthetic")
        path = folder / f"corpus.{s}.pkl"
        w = ShardWriter(path, info, multi_vector=True)
        a, b = bounds[s], bounds[s + 1]
        w.add([f"d{i}" for i in range(a, b)], docs[a:b], mask[a:b])
        w.close()
        paths.append(path)
    return paths


def timed_batches(search, queries: np.ndarray, batch: int) -> tuple[list[float], tuple[np.ndarray, np.ndarray]]:
    """Per-batch seconds and the concatenated results."""
    times, ids, scores = [], [], []
    for i in range(0, len(queries), batch):
        start = time.perf_counter()
        d, s = search(queries[i:i + batch])
        times.append(time.perf_counter() - start)
        ids.append(d)
        scores.append(s)
    return times, (np.concatenate(ids), np.concatenate(scores))


def summary(times: list[float], n_queries: int) -> dict:
    ordered = sorted(times)
    return {"qps": round(n_queries / sum(times), 1), "batch_ms_median": round(1000 * statistics.median(times), 2),
            "batch_ms_p95": round(1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
            "total_s": round(sum(times), 2)}


LOAD = os.getloadavg()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=250_000, help="documents")
    p.add_argument("--views", type=int, default=4, help="vectors per document (docs x views >= 1M for the record)")
    p.add_argument("--dim", type=int, default=64, help="vector dim")
    p.add_argument("--shards", type=int, default=4, help="shard indexes = Ray actors")
    p.add_argument("--queries", type=int, default=2000, help="queries")
    p.add_argument("--batch", type=int, default=100, help="queries per search call (one fan-out)")
    p.add_argument("--k", type=int, default=100, help="documents per query")
    p.add_argument("--threads", type=int, default=2, help="Faiss threads of the single-process search")
    p.add_argument("--workdir", help="where to write shards and indexes (default: a temporary folder)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import ray

    print(f"$ {' '.join([sys.executable.rsplit('/', 1)[-1], *sys.argv])}", flush=True)
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; {os.cpu_count()} CPU cores shared with other "
          f"jobs (load average {' '.join(f'{x:.2f}' for x in LOAD)}); ray {ray.__version__}, faiss {faiss.__version__}",
          flush=True)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        root = Path(tmp)
        docs = clustered_documents(args.docs, args.views, args.dim, seed=0)
        queries = clustered_queries(docs, args.queries, seed=1)
        start = time.perf_counter()
        paths = write_shards(root, docs, args.shards)
        del docs
        build_index([str(x) for x in paths], root / "all")
        dirs = []
        for s, path in enumerate(paths):
            build_index([str(path)], root / f"shard{s}", allow_partial=True)
            dirs.append(str(root / f"shard{s}"))
        print(f"{args.docs} docs x {args.views} views = {args.docs * args.views} vectors, dim {args.dim}, "
              f"{args.shards} Flat shards; built in {time.perf_counter() - start:.1f} s", flush=True)

        single = MultiVectorSearcher(root / "all")
        single.search_vectors(queries[:args.batch], args.k)  # warm-up
        faiss.omp_set_num_threads(args.threads)
        t_single, res_single = timed_batches(lambda q: single.search_vectors(q, args.k), queries, args.batch)
        # control: one Faiss thread (OpenMP's threads wait on each other, which costs most on a loaded machine)
        faiss.omp_set_num_threads(1)
        t_one, res_one = timed_batches(lambda q: single.search_vectors(q, args.k), queries, args.batch)
        single = None  # free the whole index before the actors load the shards

        ray.init(num_cpus=args.shards, include_dashboard=False, configure_logging=False, log_to_driver=False)
        start = time.perf_counter()
        with ShardedSearcher(dirs, ray_address="local", threads=1) as sharded:
            ready_s = time.perf_counter() - start
            sharded.search_vectors(queries[:args.batch], args.k)  # warm-up
            t_ray, res_ray = timed_batches(lambda q: sharded.search_vectors(q, args.k), queries, args.batch)
        ray.shutdown()
    identical = all(r[0].tolist() == res_single[0].tolist() and np.array_equal(r[1], res_single[1])
                    for r in (res_ray, res_one))
    one, ray_row = summary(t_single, args.queries), summary(t_ray, args.queries)
    one_thread = summary(t_one, args.queries)
    ratios = {"qps_ray_over_single": round(ray_row["qps"] / one["qps"], 3),
              "median_latency_ray_over_single": round(ray_row["batch_ms_median"] / one["batch_ms_median"], 3),
              "qps_ray_over_single_1_thread": round(ray_row["qps"] / one_thread["qps"], 3)}
    for row, threads in ((one, args.threads), (one_thread, 1)):
        name = f"single process Faiss Flat ({threads} thread{'s' if threads > 1 else ''}):"
        print(f"{name:43s}{row['qps']:9.1f} queries/s, batch of {args.batch}: "
              f"median {row['batch_ms_median']:.1f} ms, p95 {row['batch_ms_p95']:.1f} ms", flush=True)
    print(f"Ray, {args.shards} shard actors (1 thread each):  {ray_row['qps']:9.1f} queries/s, batch of {args.batch}: "
          f"median {ray_row['batch_ms_median']:.1f} ms, p95 {ray_row['batch_ms_p95']:.1f} ms "
          f"(actors ready in {ready_s:.1f} s)", flush=True)
    print(f"ratio Ray / single ({args.threads} threads): throughput {ratios['qps_ray_over_single']:.3f}x, median batch "
          f"latency {ratios['median_latency_ray_over_single']:.3f}x; Ray / single (1 thread): throughput "
          f"{ratios['qps_ray_over_single_1_thread']:.3f}x; rankings identical: {identical}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": "python bench/ray_search.py " + " ".join(sys.argv[1:]), "docs": args.docs,
            "views": args.views, "vectors": args.docs * args.views, "dim": args.dim, "shards": args.shards,
            "queries": args.queries, "batch": args.batch, "k": args.k, "cpu_cores": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in LOAD],
            "single": {"threads": args.threads, **one}, "single_1_thread": {"threads": 1, **one_thread},
            "ray": {"actors": args.shards, "threads_per_actor": 1, "actors_ready_s": round(ready_s, 1), **ray_row},
            "ratios": ratios, "identical_rankings": identical}, indent=1) + "\n")
    if not identical:
        raise SystemExit("error: the Ray-sharded ranking differs from the single index's")


if __name__ == "__main__":
    main()
