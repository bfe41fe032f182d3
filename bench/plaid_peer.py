"""ColBERT's PLAID engine beside the project (issue #38 item 4): fast-plaid, the engine of PyLate's PLAID index.

fast-plaid 1.7 pins torch 2.11 (this project runs torch 2.13, on which it segfaults), so it runs in its own
virtualenv, on the very token vectors ``bench/peers.py --export_colbert DIR`` wrote for its ColBERT peer (MiniLM's
token states projected to 128-d by a fixed random matrix, L2-normalised; stored as float16): one folder per corpus
with the document and query token vectors, the exact MaxSim top-10 of every query and its judgments.

Per corpus: build a PLAID index (``FastPlaid.create``: k-means centroids and ``--nbits`` residual codes, on the
CPU), its bytes on disk and build seconds; then tune the search (``n_ivf_probe``, ``n_full_scores``, smallest first)
on the first ``split`` queries until the recall of exact MaxSim's top-10 reaches 0.99 + ``--tune_margin`` (PLAID
scores from its compressed residuals, not exact MaxSim, so near-ties at rank 10 may swap however wide it searches:
then the tuning stops where wider searches stop helping, it is timed at the cheapest setting within 0.001 of the
best recall it reached, and its row says ``"reached": false``), and on the other queries
report that recall, single-query latency p50 / p95 (wall and CPU, one process, 1 thread and ``--threads``) and R@1
(a relevant document first) / nDCG@10 from the judgments, with every query's ranking. Prints one JSON row per corpus
and writes them with ``--json``. ``bench/peers.py --plaid_python .venv-plaid/bin/python`` runs it in its own run,
beside the other methods (a ``colbert-plaid`` row):

    python3 -m venv .venv-plaid && .venv-plaid/bin/pip install torch==2.11.0 fast-plaid==1.7.0.2110
    .venv-plaid/bin/python bench/plaid_peer.py --export DIR --json plaid.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from peers import sweep  # bench/peers.py: the tuning rule every approximate index of the table follows

# (n_ivf_probe, n_full_scores), cheapest first; fast-plaid's default is (8, 4096)
GRID = ((1, 256), (2, 256), (2, 512), (4, 512), (4, 1024), (8, 1024), (8, 4096), (16, 4096), (32, 8192))


def split_rows(vectors: np.ndarray, lengths: np.ndarray) -> list[torch.Tensor]:
    starts = np.concatenate([[0], np.cumsum(lengths)])
    return [torch.from_numpy(vectors[a:b].astype(np.float32)) for a, b in zip(starts[:-1], starts[1:])]


def recall(found: list[list[int]], exact: np.ndarray) -> float:
    return float(np.mean([len(set(f[:len(e)]) & set(e.tolist())) / len(e) for f, e in zip(found, exact)]))


def ndcg10(ranked: list[int], judged: dict[str, int]) -> float:
    gains = [judged.get(str(d), 0) for d in ranked[:10]]
    ideal = sorted(judged.values(), reverse=True)[:10]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def latencies(fn, queries: list[torch.Tensor], threads: int) -> dict:
    torch.set_num_threads(threads)
    wall, cpu = [], []
    for q in queries:
        a, b = time.perf_counter(), time.process_time()
        fn(q)
        wall.append(1e3 * (time.perf_counter() - a))
        cpu.append(1e3 * (time.process_time() - b))
    return {"p50": float(np.percentile(wall, 50)), "p95": float(np.percentile(wall, 95)),
            "cpu_p50": float(np.percentile(cpu, 50))}


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run(folder: Path, args, work: Path) -> dict:
    from fast_plaid import search

    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    docs = split_rows(np.load(folder / "doc_vectors.npy"), np.load(folder / "doc_lengths.npy"))
    queries = split_rows(np.load(folder / "query_vectors.npy"), np.load(folder / "query_lengths.npy"))
    exact, split = np.load(folder / "exact_top10.npy"), meta["split"]
    index_dir = work / folder.name
    torch.set_num_threads(args.threads)
    plaid = search.FastPlaid(index=str(index_dir), device="cpu")
    start = time.perf_counter()
    plaid.create(documents_embeddings=docs, nbits=args.nbits, kmeans_niters=args.kmeans_niters, seed=0)
    build_s = time.perf_counter() - start

    def top(qs: list[torch.Tensor], probe: int, full: int) -> list[list[int]]:
        """Batched (tuning, rankings): one call over ``qs``."""
        hits = plaid.search(queries_embeddings=qs, top_k=meta["k"], n_ivf_probe=probe, n_full_scores=full,
                            show_progress=False)
        return [[d for d, _ in h] for h in hits]

    def one(q: torch.Tensor, probe: int, full: int) -> None:
        """A single query, one process (the latency a serving loop sees)."""
        plaid.search(queries_embeddings=[q], top_k=meta["k"], n_ivf_probe=probe, n_full_scores=full,
                     show_progress=False, batch_size=1, n_processes=1)

    # PLAID re-ranks from compressed residuals: its scores are not exact MaxSim, so near-ties at rank 10 may swap
    # however wide it searches. Below the target, it is timed at the cheapest setting of its plateau (within 0.001
    # of the best recall it reached) and says so
    tune = slice(0, min(split, args.tune_queries))
    chosen, reached, tuned = sweep(GRID, lambda setting: recall(top(queries[tune], *setting), exact[tune]),
                                   args.tune_margin, plateau=True)
    row = {"method": f"colbert PLAID (fast-plaid, nbits {args.nbits})", "docs": len(docs),
           "vectors": int(sum(len(d) for d in docs)), "plaid_bytes": folder_bytes(index_dir), "plaid_build_s": build_s}
    held = queries[split:]
    ranked = top(queries, *chosen)
    judged = meta["relevant"]
    lat = {f"t{t}": latencies(lambda q: one(q, *chosen), held[:args.latency_queries], t) for t in (1, args.threads)}
    return {**row, "plaid": {"n_ivf_probe": chosen[0], "n_full_scores": chosen[1], "reached": reached,
                             "tuning_recalls": tuned,
                             "recall": recall(ranked[split:], exact[split:]), **lat},
            "ranked": ranked,
            "r@1": float(np.mean([judged[i].get(str(r[0]), 0) > 0 for i, r in enumerate(ranked)])),
            "nDCG@10": float(np.mean([ndcg10(r, judged[i]) for i, r in enumerate(ranked)]))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--export", required=True, help="the folder bench/peers.py --export_colbert wrote")
    parser.add_argument("--nbits", type=int, default=4, help="residual bits per dimension (fast-plaid's default)")
    parser.add_argument("--kmeans_niters", type=int, default=4)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--tune_margin", type=float, default=0.005)
    parser.add_argument("--latency_queries", type=int, default=100)
    parser.add_argument("--tune_queries", type=int, default=100, help="at most this many of the tuning queries")
    parser.add_argument("--json", help="also write the rows here, by corpus")
    parser.add_argument("--only", help="only this corpus folder of --export")
    args = parser.parse_args(argv)
    import fast_plaid

    print(f"# fast-plaid {getattr(fast_plaid, '__version__', '1.7')}; torch {torch.__version__}; threads "
          f"{args.threads}; load at start {os.getloadavg()}", flush=True)
    rows = {}
    work = Path(tempfile.mkdtemp(prefix=f"plaid-{os.getpid()}-"))
    try:
        for folder in sorted(p for p in Path(args.export).iterdir() if (p / "meta.json").exists()
                             and args.only in (None, p.name)):
            start = time.perf_counter()
            rows[folder.name] = run(folder, args, work)
            shown = {k: v for k, v in rows[folder.name].items() if k != "ranked"}
            print(f"# {folder.name} done in {time.perf_counter() - start:.0f} s; load {os.getloadavg()}; "
                  + json.dumps(shown), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
