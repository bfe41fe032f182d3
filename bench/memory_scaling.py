"""Peak memory of the corpus reader's duplicate-docid check and of index building, for N and 10×N documents.

Each measurement runs in a fresh subprocess and reports its peak RSS (VmHWM) minus the RSS after imports:

1. reader: stream a synthetic corpus jsonl through ``iter_corpus`` (the encode driver's reader, with its
   duplicate check: 64-bit hashes, ``multiview_plugin.data.seen_ids``), beside the previous check (a dict of
   docid strings → line) on the same file.
2. index: ``build_index`` (Flat) over synthetic float16 shards of a fixed size (N documents: ``--shards`` shards;
   10×N: 10× the shards), beside the peak of adding the same number of vectors straight to a Faiss Flat index
   (the index itself, which must grow with the corpus, and Faiss's growth by doubling): the difference is
   the builder's own memory.
3. ``--ivf_vectors N`` (instead of 1 and 2): ``build_index`` with a compressed index of the kind the full-scale
   recipes build (``IVF<nlist>,SQ8``, ``recipes/plan.py``; nlist = N / 4096 so it grows with the corpus, dim 64
   to keep the CPU low) over synthetic float16 shards of ``--ivf_shard_vectors`` vectors, at N and 2N vectors.
   Reported: the peak, the index's own bytes (the written file: codes, ids and the quantiser), the builder's
   own memory (peak minus the index), and the peak of Faiss alone training the same factory on a sample of the
   same size and adding the same number of vectors (its inverted lists grow by doubling, which a file's size
   does not show).

    python bench/memory_scaling.py --docs 1000000 --index_docs 20000
    python bench/memory_scaling.py --ivf_vectors 2000000   # log: bench/build_rss.log
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def status_kb(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key))


def child(kind: str, n: int, work: Path, shards: int, views: int, dim: int) -> dict:
    import numpy as np

    from multiview_plugin.data.readers import _iter_raw_corpus, iter_corpus
    from multiview_plugin.search import build_index

    if kind in ("reader", "reader_dict"):
        path = work / f"corpus{n}.jsonl"
        if not path.exists():
            with path.open("w") as f:
                for i in range(n):
                    f.write(json.dumps({"docid": f"msmarco_passage_{i:08d}", "text": "a short passage"}) + "\n")
        base = status_kb("VmRSS:")
        if kind == "reader":
            count = sum(1 for _ in iter_corpus(path))
        else:  # the previous check: every docid string kept in a dict
            seen: dict[str, int] = {}
            count = 0
            for lineno, docid, _, _ in _iter_raw_corpus(path):
                if docid in seen:
                    raise SystemExit("duplicate")
                seen[docid] = lineno
                count += 1
        return {"kind": kind, "docs": count, "peak_mb": (status_kb("VmHWM:") - base) / 1024}
    if kind == "faiss_only":  # the same vectors added straight to a Flat index: Faiss's own peak
        import faiss

        index = faiss.IndexFlatIP(dim)
        base = status_kb("VmRSS:")
        rng = np.random.default_rng(0)
        for start in range(0, n * views, 65_536):
            index.add(rng.standard_normal((min(65_536, n * views - start), dim), dtype=np.float32))
        return {"kind": kind, "docs": n, "peak_mb": (status_kb("VmHWM:") - base) / 1024}
    paths = write_shards(work / f"{n}", shards, n // shards, views, dim)
    base = status_kb("VmRSS:")
    meta = build_index(paths, work / f"index{n}", overwrite=True)
    index_mb = meta.num_vectors * dim * 4 / 2**20
    return {"kind": kind, "docs": meta.num_docs, "shards": len(paths), "peak_mb": (status_kb("VmHWM:") - base) / 1024,
            "index_mb": index_mb}


IVF_VECTORS_PER_LIST = 4096  # nlist = vectors / 4096 (a power of two): grows with the corpus, as the recipes'


def ivf_factory(n_vectors: int) -> str:
    return f"IVF{2 ** max(4, round(math.log2(n_vectors / IVF_VECTORS_PER_LIST)))},SQ8"


def write_shards(folder: Path, count: int, docs: int, views: int, dim: int) -> list[Path]:
    """One set of ``count`` synthetic float16 shards of ``docs`` documents x ``views`` views (kept if present)."""
    import numpy as np

    from multiview_plugin.encoding.shards import ShardInfo, ShardWriter

    rng = np.random.default_rng(0)
    paths = []
    for s in range(count):
        path = folder / f"corpus.{s}.pkl"
        if not path.exists():
            info = ShardInfo(model_name="mvr", dim=0, views_per_doc=0, dtype="float16", num_items=0, num_vectors=0,
                             shard_index=s, num_shards=count)
            writer = ShardWriter(path, info, multi_vector=True)
            for start in range(0, docs, 4096):
                ids = [f"s{s}d{i}" for i in range(start, min(docs, start + 4096))]
                writer.add(ids, rng.standard_normal((len(ids), views, dim), dtype=np.float32))
            writer.close()
        paths.append(path)
    return paths


def ivf_child(kind: str, n_vectors: int, work: Path, shard_vectors: int, dim: int, threads: int) -> dict:
    import time

    import faiss
    import numpy as np

    from multiview_plugin.search import build_index

    faiss.omp_set_num_threads(threads)
    factory = ivf_factory(n_vectors)
    base = status_kb("VmRSS:")
    start = time.perf_counter()
    if kind == "ivf":
        paths = sorted((work / "ivf_shards").glob("corpus.*.pkl"))
        meta = build_index(paths, work / "ivf_index", index_factory=factory, aggregation="max", overwrite=True)
        peak = status_kb("VmHWM:") - base
        index_file = work / "ivf_index" / "index"
        index = faiss.read_index(str(index_file))
        ivf = faiss.extract_index_ivf(index)
        return {"kind": kind, "factory": factory, "vectors": meta.num_vectors, "docs": meta.num_docs,
                "shards": len(paths), "peak_mb": peak / 1024, "index_file_mb": index_file.stat().st_size / 2**20,
                "codes_mb": index.ntotal * ivf.code_size / 2**20, "build_s": time.perf_counter() - start}
    # Faiss alone: the same factory trained on a sample of the builder's size, then the same number of adds
    from multiview_plugin.index.adds import ADD_CHUNK

    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(1)
    index.train(rng.standard_normal((262_144, dim), dtype=np.float32))
    for lo in range(0, n_vectors, ADD_CHUNK):
        index.add(rng.standard_normal((min(ADD_CHUNK, n_vectors - lo), dim), dtype=np.float32))
    return {"kind": kind, "factory": factory, "vectors": int(index.ntotal), "peak_mb": (status_kb("VmHWM:") - base)
            / 1024, "build_s": time.perf_counter() - start}


def run_child(args: argparse.Namespace, kind: str, n: int, shards: int, work: str) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--docs", str(n), "--shards", str(shards), "--work", work,
           "--views", str(args.views), "--dim", str(args.dim), "--threads", str(args.threads),
           "--ivf_shard_vectors", str(args.ivf_shard_vectors)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{kind} at {n}: exit {out.returncode}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=1_000_000, help="N for the reader")
    p.add_argument("--index_docs", type=int, default=20_000, help="N for the index (its vectors are bigger)")
    p.add_argument("--shards", type=int, default=2, help="shards for the index at N (10x N: 10x shards)")
    p.add_argument("--views", type=int, default=8)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--ivf_vectors", type=int, help="only the compressed-index build (3.), at N and 2N vectors")
    p.add_argument("--ivf_shard_vectors", type=int, default=250_000, help="vectors per synthetic shard (3.)")
    p.add_argument("--ivf_dim", type=int, default=64, help="dim of the synthetic vectors (3.)")
    p.add_argument("--threads", type=int, default=1, help="Faiss threads (3.)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child in ("ivf", "ivf_faiss_only"):
        print(json.dumps(ivf_child(args.child, args.docs, Path(args.work), args.ivf_shard_vectors, args.dim,
                                   args.threads)))
        return
    if args.child:
        print(json.dumps(child(args.child, args.docs, Path(args.work), args.shards, args.views, args.dim)))
        return
    if args.ivf_vectors:
        ivf_main(args)
        return
    with tempfile.TemporaryDirectory() as work:
        reader = {(kind, n): run_child(args, kind, n, 1, work)
                  for n in (args.docs, 10 * args.docs) for kind in ("reader", "reader_dict")}
        n_index = args.index_docs
        index = {n: run_child(args, "index", n, args.shards * (n // n_index), work)
                 for n in (n_index, 10 * n_index)}
        faiss_only = {n: run_child(args, "faiss_only", n, 1, work) for n in (n_index, 10 * n_index)}
    print("duplicate-docid check while streaming a corpus (peak RSS above the post-import RSS):")
    print("| docs | hashed (ours) MiB | dict of docids (before) MiB |")
    print("|---|---|---|")
    for n in (args.docs, 10 * args.docs):
        print(f"| {n:,} | {reader[('reader', n)]['peak_mb']:.0f} | {reader[('reader_dict', n)]['peak_mb']:.0f} |")
    growth = {kind: (reader[(kind, 10 * args.docs)]["peak_mb"] - reader[(kind, args.docs)]["peak_mb"]) * 2**20
              / (9 * args.docs) for kind in ("reader", "reader_dict")}
    print(f"growth per extra doc: ours {growth['reader']:.0f} B, dict {growth['reader_dict']:.0f} B")
    print(f"\nbuild_index (Flat) over float16 shards of {n_index // args.shards:,} docs x {args.views} views x "
          f"dim {args.dim}:")
    print("| docs | shards | peak MiB | Flat index MiB | Faiss alone (same adds) peak MiB | builder's own MiB |")
    print("|---|---|---|---|---|---|")
    for n, r in index.items():
        own = r["peak_mb"] - faiss_only[n]["peak_mb"]
        print(f"| {r['docs']:,} | {r['shards']} | {r['peak_mb']:.0f} | {r['index_mb']:.0f} | "
              f"{faiss_only[n]['peak_mb']:.0f} | {own:.0f} |")


def ivf_main(args: argparse.Namespace) -> None:
    sizes = (args.ivf_vectors, 2 * args.ivf_vectors)
    args.dim = args.ivf_dim
    rows = {}
    with tempfile.TemporaryDirectory() as work:
        for n in sizes:  # each size its own shard set (a shard set is complete), deleted after
            write_shards(Path(work) / "ivf_shards", n // args.ivf_shard_vectors, args.ivf_shard_vectors // args.views,
                         args.views, args.dim)
            rows[n] = (run_child(args, "ivf", n, 0, work), run_child(args, "ivf_faiss_only", n, 0, work))
            shutil.rmtree(Path(work) / "ivf_shards")
    print(f"build_index over float16 shards of {args.ivf_shard_vectors:,} vectors ({args.views} views x dim "
          f"{args.dim}), {args.threads} Faiss thread(s); peak RSS above the post-import RSS, MiB:")
    print("| vectors | docs | shards | factory | peak | index file | builder's own (peak - index) | "
          "Faiss alone (same train + adds) peak | builder over Faiss alone | build s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        r, f = rows[n]
        print(f"| {r['vectors']:,} | {r['docs']:,} | {r['shards']} | {r['factory']} | {r['peak_mb']:.0f} | "
              f"{r['index_file_mb']:.0f} | {r['peak_mb'] - r['index_file_mb']:.0f} | {f['peak_mb']:.0f} | "
              f"{r['peak_mb'] - f['peak_mb']:.0f} | {r['build_s']:.0f} |")
    (small, _), (big, _) = rows[sizes[0]], rows[sizes[1]]
    own = [r["peak_mb"] - r["index_file_mb"] for r in (small, big)]
    ratio = {key: big[key] / small[key] for key in ("peak_mb", "index_file_mb")}
    print(f"2x the vectors: peak {ratio['peak_mb']:.2f}x, index {ratio['index_file_mb']:.2f}x, builder's own "
          f"{own[1] - own[0]:+.0f} MiB")
    print(json.dumps({"rows": [rows[n][0] for n in sizes], "faiss_alone": [rows[n][1] for n in sizes]}))


if __name__ == "__main__":
    main()
