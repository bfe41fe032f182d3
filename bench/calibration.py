"""Build-time calibration (``driver.index --target_recall``) on data it never saw: held-out recall of exact top-10.

For each vector set, each index type is built with ``build_index`` and calibrated with ``calibrate_index``
(sampled corpus views as queries, target 0.98 of exact max-over-views top-10, 95% lower bound). Then *held-out*
queries are searched with the searcher's defaults — the calibrated ones, and the settings used before
calibration existed (overfetch 2, the index's efSearch, 200 document candidates) — and their document recall@10
against exact max-over-views is reported, with latency (batched, ms/query) and the calibration's own time.

Vector sets: four synthetic clustered distributions (``tools.synthetic_vectors``; view counts 1-12,
tight and wide spreads, dims 32-128; queries near a random view, held out) and, with ``--real DIR``, real
MiniLM vectors written by ``bench/real_vectors.py`` (queries: the data set's own encoded questions). Every index
records ``--aggregation max`` (dcsr's default, HasAns, is not what the calibration measures).

    python bench/calibration.py --real /tmp/real/squad /tmp/real/scifact \
        /work/runs/exp/squad-sel-mvr-residual-seed7/emb/mvr-residual-seed7 --json bench/calibration.json \
        > bench/calibration.log 2>&1

(the third folder: the SQuAD paragraphs' 8 mvr-residual views, as ``driver.encode`` wrote them for the run
``squad-sel-mvr-residual-seed7``; any folder with ``corpus.*.pkl`` and ``queries.pkl`` shards serves)

``IVF{nlist},SQ8+store:fp16`` is IVF+SQ8 whose candidates are re-scored from an fp16 copy of the views on disk
(``build_index(rescore_store="fp16")``, ``driver.index --rescore_store fp16``), beside plain IVF+SQ8::

    PYTHONPATH=$PWD TQDM_DISABLE=1 OMP_NUM_THREADS=1 python bench/calibration.py --indexes 'IVF{nlist},SQ8' \
        'IVF{nlist},SQ8+store:fp16' --samplers mixed --threads 1 --json bench/calibration_rescore_store.json \
        > bench/calibration_rescore_store.log 2>&1

``--samplers`` calibrates each index once per corpus-query sampler (``views``, ``midpoints``, ``mixed``); with
``--split_queries`` each real set is also calibrated on a seeded random half of its questions (what
``driver.index --calibration_query_reps`` does) and held out on the other half::

    python bench/calibration.py --synthetic --indexes HNSW32 --samplers views mixed --split_queries \
        --held_out 500 --real /work/runs/exp/squad-sel-mvr-residual-seed7/emb/mvr-residual-seed7 /tmp/real/squad \
        --json bench/calibration_query_split.json > bench/calibration_query_split.log 2>&1
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tools/

from multiview_plugin.encoding.shards import ShardInfo, ShardWriter, read_shard  # noqa: E402
from multiview_plugin.index.folder import META_FILE  # noqa: E402
from multiview_plugin.search import FaissStore, MultiVectorSearcher, build_index  # noqa: E402
from multiview_plugin.search.aggregators import MaxAggregator  # noqa: E402
from multiview_plugin.search.calibrate import (  # noqa: E402
    DEFAULT_SAMPLER,
    REFINE_STEPS,
    SAMPLERS,
    calibrate_index,
)
from tools.synthetic_vectors import clustered_documents, clustered_queries  # noqa: E402

# name: (docs, views lo-hi, dim, doc spread, view spread)
SYNTHETIC = {
    "syn-wide-1to12-d64": (5_000, (1, 12), 64, 1.0, 1.5),
    "syn-8views-d128": (5_000, (8, 8), 128, 1.0, 1.0),
    "syn-wider-1to10-d96": (5_000, (1, 10), 96, 1.2, 1.2),
    "syn-tight-1to2-d32": (5_000, (1, 2), 32, 0.4, 0.3),
}
# (factory, doc_index factory, re-scoring store); IVF{nlist},SQ8 and SQfp16+doc:HNSW32 are the types the full-scale
# plans build (recipes/plan.py: IVF+SQ8 for mvr and dcsr, SQfp16 views with document-vector candidates for dce);
# the last: IVF+SQ8 re-scoring its candidates from an fp16 copy of the views on disk (build_index(rescore_store=))
INDEXES = [("HNSW32", None, None), ("IVF{nlist},SQfp16", None, None), ("Flat", "HNSW32", None),
           ("IVF{nlist},SQ8", None, None), ("SQfp16", "HNSW32", None), ("IVF{nlist},SQ8", None, "fp16")]
# before calibration: overfetch 2, the index's stored efSearch, IVF's probe floor, 200 candidates (searched before
# the index is calibrated: afterwards unset settings would come from the calibration)
OLD = {"overfetch": 2.0, "doc_candidates": 2.0}
SPLIT_SEED = 23  # --split_queries: which half of a real set's questions calibrates


def write_synthetic(folder: Path, name: str, seed: int) -> tuple[list[Path], np.ndarray]:
    n, (lo, hi), dim, ds, vs = SYNTHETIC[name]
    docs = clustered_documents(n, hi, dim, clusters=500, seed=seed, doc_spread=ds, view_spread=vs)
    counts = np.random.default_rng(seed + 1).integers(lo, hi + 1, n)
    mask = np.arange(hi)[None] < counts[:, None]
    info = ShardInfo(model_name="synthetic", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                     shard_index=0, num_shards=1)
    w = ShardWriter(folder / "corpus.0.pkl", info, multi_vector=True)
    w.add([f"d{i}" for i in range(n)], docs, mask)
    w.close()
    return [folder / "corpus.0.pkl"], clustered_queries(docs, 300, seed=seed + 2)


def load_real(folder: Path, split: bool, n_held: int) -> tuple[list[Path], np.ndarray, np.ndarray | None]:
    """(shards, held-out queries, calibration queries): with ``split``, a seeded random half of the questions is
    the calibration split (for ``calibrate_index(queries=...)``) and the held-out queries come from the other half
    only; without it, the first ``n_held`` questions are held out and there is no calibration split."""
    q = np.asarray(read_shard(folder / "queries.pkl")[0], dtype=np.float32)
    if not split:
        return sorted(folder.glob("corpus.*.pkl")), q[:n_held], None
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(q))
    half = len(q) // 2
    return sorted(folder.glob("corpus.*.pkl")), q[np.sort(perm[half:])][:n_held], q[np.sort(perm[:half])]


def bench_sets(synthetic: list[str], real: list[str], work: Path) -> Iterator[tuple[int, str, Path | None, Path]]:
    """``(seed, name, real folder or None, empty work folder)`` of each set a bench runs: the synthetic sets by
    name, then the real vector folders (bench/real_vectors.py), numbered in that order."""
    sets = [(n, None) for n in synthetic] + [(Path(r).name, Path(r)) for r in real]
    for seed, (name, folder) in enumerate(sets):
        (work / name).mkdir()
        yield seed, name, folder, work / name


def exact_docs(shards: list[Path], q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    reps, lookup = [], []
    for s in shards:
        r, lk, _ = read_shard(s)
        reps.append(np.asarray(r, dtype=np.float32))
        lookup += lk
    flat = faiss.IndexFlatIP(reps[0].shape[1])
    flat.add(np.concatenate(reps))
    store = FaissStore.from_lookup(flat, lookup, True, "exact")
    return store.search(q, k, MaxAggregator())[0], store.docids, flat.ntotal


def held_out(searcher: MultiVectorSearcher, q: np.ndarray, exact: np.ndarray, k: int, repeats: int = 5
             ) -> tuple[float, float]:
    """Recall@k of exact on the held-out queries, and ms/query of one batch search of them (the median of
    ``repeats`` searches: a single batch of sub-millisecond queries moves by 2x between runs)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ids = searcher.search_vectors(q, k)[0]
        times.append(1000 * (time.perf_counter() - start) / len(q))
    ms = float(np.median(times))
    of = {d: i for i, d in enumerate(searcher.store.docids.tolist())}
    got = [[of[d] for d in row if d is not None] for row in ids.tolist()]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(got, exact.tolist())])), ms


def _label(factory: str, doc_factory: str | None, store: str | None = None) -> str:
    return factory + (f"+doc:{doc_factory}" if doc_factory else "") + (f"+store:{store}" if store else "")


def gmean(pairs: list[tuple[dict, dict]]) -> float:
    """Geometric mean of the second row's ms/query over the first's."""
    return float(np.exp(np.mean([np.log(b["ms_per_query"] / a["ms_per_query"]) for a, b in pairs])))


def refine_summary(rows: list[dict]) -> list[str]:
    """Refined calibrations against the grid's (``refine_steps`` 0) of the same set, index and queries: how often the
    settings changed, the held-out recall they keep, and the geometric mean of the ms/query ratios."""
    grid = {(r["set"], r["index"], r["calibrated_on"]): r for r in rows if r["refine_steps"] == 0}
    out = []
    for steps in sorted({r["refine_steps"] for r in rows} - {0}):
        pairs = [(grid[(r["set"], r["index"], r["calibrated_on"])], r) for r in rows if r["refine_steps"] == steps]
        changed = [(a, b) for a, b in pairs if a["settings"] != b["settings"]]
        same = [(a, b) for a, b in pairs if a["settings"] == b["settings"]]
        if not changed:
            out.append(f"refine {steps}: no calibration changed")
            continue
        noise = f", {gmean(same):.3f} where they did not (timing noise)" if same else ""
        out.append(f"refine {steps} against the grid's values: settings changed in {len(changed)} of {len(pairs)} "
                   f"calibrations; held-out recall there {min(b['held_out_recall'] for _, b in changed):.4f} at the "
                   f"lowest (grid: {min(a['held_out_recall'] for a, _ in changed):.4f}); ms/query ratio, geometric "
                   f"mean: {gmean(changed):.3f} where the settings changed{noise}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--real", nargs="*", default=[], help="folders from bench/real_vectors.py")
    p.add_argument("--synthetic", nargs="*", default=list(SYNTHETIC), choices=list(SYNTHETIC))
    p.add_argument("--target", type=float, default=0.98)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default="bench/calibration.json")
    p.add_argument("--samplers", nargs="+", default=[DEFAULT_SAMPLER], choices=SAMPLERS,
                   help="calibrate each index once per sampler of corpus queries (calibrate_index's sampler)")
    p.add_argument("--split_queries", action="store_true", help="real sets: calibrate also on a seeded random "
                   "half of the questions (driver.index --calibration_query_reps); held-out queries come from the "
                   "other half")
    p.add_argument("--indexes", nargs="*", default=[], help="only these index types, e.g. HNSW32 "
                   "'IVF{nlist},SQ8' 'SQfp16+doc:HNSW32' 'IVF{nlist},SQ8+store:fp16' (default: all)")
    p.add_argument("--held_out", type=int, default=300, help="held-out queries per set")
    p.add_argument("--refine_steps", type=int, nargs="+", default=[REFINE_STEPS], help="calibrate each index once per "
                   "value: bisections per knob between the grid's steps (0: the grid's values only)")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    faiss.omp_set_num_threads(args.threads)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="calib-"))
    try:
        for seed, name, real, folder in bench_sets(args.synthetic, args.real, work):
            if real:
                shards, q, calib_q = load_real(real, args.split_queries, args.held_out)
            else:
                (shards, q), calib_q = write_synthetic(folder, name, 1000 + seed), None
            exact, _, ntotal = exact_docs(shards, q, args.k)
            for factory, doc_factory, store in [i for i in INDEXES if not args.indexes or _label(*i) in args.indexes]:
                factory = factory.format(nlist=max(16, 2 ** int(np.log2(max(1, ntotal // 1000)))))
                label = _label(factory, doc_factory, store)
                index_dir = folder / label.replace(",", "_").replace(":", "_")
                start = time.perf_counter()
                build_index(shards, index_dir, index_factory=factory, doc_index_factory=doc_factory, aggregation="max",
                            rescore_store=store or "none")
                build_s = time.perf_counter() - start
                built_meta = (index_dir / META_FILE).read_text()  # each calibration starts from the build's settings
                # before calibrating: a searcher given the old settings would still inherit recorded ones
                old_rec, old_ms = held_out(MultiVectorSearcher(index_dir, **OLD), q, exact, args.k)
                modes = [(m, None) for m in args.samplers] + ([("query_reps", calib_q)] if calib_q is not None else [])
                for (mode, given), steps in [(m, s) for m in modes for s in args.refine_steps]:
                    (index_dir / META_FILE).write_text(built_meta)  # not the previous calibration's efSearch
                    start = time.perf_counter()
                    record = calibrate_index(index_dir, args.target, k=args.k, queries=given,
                                             sampler=mode if given is None else DEFAULT_SAMPLER,
                                             queries_from="calibration half of queries.pkl" if given is not None
                                             else None, refine_steps=steps)
                    calib_s = time.perf_counter() - start
                    rec, ms = held_out(MultiVectorSearcher(index_dir), q, exact, args.k)
                    row = {"set": name, "index": label, "vectors": ntotal, "calibrated_on": mode,
                           "build_s": round(build_s, 1), "calibration_s": round(calib_s, 1),
                           "settings": record["settings"], "calibration_recall": record["recall"],
                           "calibration_recall_lower95": record["recall_lower95"], "reached": record["reached"],
                           "within_doc_cosine": record.get("within_doc_cosine"),
                           "held_out_recall": round(rec, 4), "ms_per_query": round(ms, 3),
                           "before_calibration_recall": round(old_rec, 4), "before_ms_per_query": round(old_ms, 3),
                           "queries": len(q), "k": args.k, "refine_steps": steps}
                    rows.append(row)
                    print(f"{name:22s} {label:22s} {ntotal:7d} vec  {mode:10s} refine {steps} calibrated "
                          f"{json.dumps(record['settings']):42s} sample {record['recall']:.4f} "
                          f"(lb {record['recall_lower95']:.4f})  held-out {rec:.4f} {ms:7.3f} ms/q | before "
                          f"{old_rec:.4f} {old_ms:7.3f} ms/q | build {build_s:.1f}s calib {calib_s:.1f}s", flush=True)
                shutil.rmtree(index_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for mode, steps in dict.fromkeys((r["calibrated_on"], r["refine_steps"]) for r in rows):
        held = [r["held_out_recall"] for r in rows if (r["calibrated_on"], r["refine_steps"]) == (mode, steps)]
        print(f"held-out recall@{args.k}, calibrated on {mode}, refine {steps}: min {min(held):.4f}, "
              f"{sum(h >= args.target for h in held)}/{len(held)} at or above {args.target}")
    if 0 in args.refine_steps and len(args.refine_steps) > 1:
        print(*refine_summary(rows), sep="\n")
    Path(args.json).write_text(json.dumps({"command": "python bench/calibration.py " + " ".join(sys.argv[1:]),
                                           "target": args.target, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
