"""Peak memory of the corpus reader's duplicate-docid check and of index building, for N and 10×N documents.

Each measurement runs in a fresh subprocess and reports its peak RSS (VmHWM) minus the RSS after imports:

1. reader: stream a synthetic corpus jsonl through ``iter_corpus`` (the encode driver's reader, with its
   duplicate check: 64-bit hashes, ``multiview_plugin.data.seen_ids``), beside the previous check (a dict of
   docid strings → line) on the same file.
2. index: ``build_index`` (Flat) over synthetic float16 shards of a fixed size (N documents: ``--shards`` shards;
   10×N: 10× the shards), beside the peak of adding the same number of vectors straight to a Faiss Flat index
   (the index itself, which must grow with the corpus, and Faiss's growth by doubling): the difference is
   the builder's own memory.

    python bench/memory_scaling.py --docs 1000000 --index_docs 20000
"""

from __future__ import annotations

import argparse
import json
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
    from multiview_plugin.encoding.shards import ShardInfo, ShardWriter
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
    per_shard = n // shards
    paths = []
    rng = np.random.default_rng(0)
    for s in range(shards):
        path = work / f"{n}" / f"corpus.{s}.pkl"
        if not path.exists():
            info = ShardInfo(model_name="mvr", dim=0, views_per_doc=0, dtype="float16", num_items=0, num_vectors=0)
            writer = ShardWriter(path, info, multi_vector=True)
            for start in range(0, per_shard, 4096):
                ids = [f"s{s}d{i}" for i in range(start, min(per_shard, start + 4096))]
                writer.add(ids, rng.standard_normal((len(ids), views, dim), dtype=np.float32))
            writer.close()
        paths.append(path)
    base = status_kb("VmRSS:")
    meta = build_index(paths, work / f"index{n}", overwrite=True)
    index_mb = meta.num_vectors * dim * 4 / 2**20
    return {"kind": kind, "docs": meta.num_docs, "shards": len(paths), "peak_mb": (status_kb("VmHWM:") - base) / 1024,
            "index_mb": index_mb}


def run_child(args: argparse.Namespace, kind: str, n: int, shards: int, work: str) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--docs", str(n), "--shards", str(shards), "--work", work,
           "--views", str(args.views), "--dim", str(args.dim)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=1_000_000, help="N for the reader")
    p.add_argument("--index_docs", type=int, default=20_000, help="N for the index (its vectors are bigger)")
    p.add_argument("--shards", type=int, default=2, help="shards for the index at N (10x N: 10x shards)")
    p.add_argument("--views", type=int, default=8)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.docs, Path(args.work), args.shards, args.views, args.dim)))
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


if __name__ == "__main__":
    main()
