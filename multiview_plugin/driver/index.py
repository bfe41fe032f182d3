"""Build a multi-vector Faiss index folder (Pyserini layout) from encoded passage shards.

    python -m multiview_plugin.driver.index --passage_reps 'emb/corpus.*.pkl' --index_dir indexes/mvr \
        [--index_factory Flat|HNSW32|IVF1024,SQ8|SQfp16] [--doc_index_factory HNSW32] [--rescore_store fp16] \
        [--hnsw_ef_construction 200] [--use_gpu]

    python -m multiview_plugin.driver.index --passage_reps 'emb/corpus.*.pkl' --index_dir indexes/mvr-qdrant \
        --backend qdrant [--qdrant_path DIR | --qdrant_url http://host:6333 --qdrant_shards 6 --qdrant_replication 2]

    python -m multiview_plugin.driver.index --report indexes/mvr     # what an index holds
"""

from __future__ import annotations

import argparse
import glob
import sys
from collections.abc import Sequence

from multiview_plugin.cli import cli, setup_logging
from multiview_plugin.driver.backends import (
    add_calibration_flags,
    add_index_backend_flags,
    add_shard_safety_flags,
    build_from_args,
    calibrate_from_args,
    check_calibration_flags,
)
from multiview_plugin.encoding.shards import ShardFormatError
from multiview_plugin.errors import ConfigError
from multiview_plugin.index.meta import DEFAULT_INDEX_FACTORY
from multiview_plugin.search.aggregators import AGGREGATORS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m multiview_plugin.driver.index", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--report", metavar="DIR", help="Print what the index folder DIR holds (model and method "
                   "options, documents, vectors, views-per-document histogram, dcsr dropped/cut sentences, dtype, "
                   "Faiss type, size on disk) and exit; no other flag is needed.")
    p.add_argument("--passage_reps", help="Glob of encoded passage shards (quote it). Required to build.")
    p.add_argument("--index_dir", help="Folder to create (index, docid, multiview.json). Required to build.")
    p.add_argument("--index_factory", default=DEFAULT_INDEX_FACTORY, help="faiss.index_factory string, inner "
                   "product: %(default)s (exact, the default), HNSW32, IVF4096,Flat, IVF4096,PQ64 ... Trained ones "
                   "train on a sample.")
    p.add_argument("--doc_index_factory", help="Also index one vector per document (its views' normalised mean) "
                   "with this factory (HNSW32, Flat); searchers take candidates from it and re-score them over all "
                   "views from the main index, which must reconstruct vectors (Flat, SQfp16, SQ8, HNSW32).")
    p.add_argument("--rescore_store", choices=["none", "fp16", "fp32"], default="none", help="Also write "
                   "rescore_views.npy, an on-disk copy of every view vector, and re-score candidate documents from "
                   "it (memory-mapped) instead of the index's own codes: exact (fp32) or near-exact (fp16) "
                   "max-over-views scores. Costs disk (rows x dim x 2 or 4 bytes), not RAM; useful for SQ8/PQ "
                   "indexes, whose codes are lossy (IVF...,SQ8 then reaches recall that its codes alone cannot). "
                   "Searchers re-score by default when it is there. Default none; refused for Flat (exact).")
    p.add_argument("--train_size", type=int, default=262_144, help="Vectors sampled to train IVF/PQ indexes.")
    p.add_argument("--ivf_training", choices=["flat", "two_level"], default="flat", help="How an IVF index's "
                   "coarse centroids are trained: flat (default; Faiss's k-means over all nlist centroids, cost "
                   "sample x nlist per iteration) or two_level (sqrt(nlist) first-level clusters, each split into "
                   "its share of the lists: sample x 2 sqrt(nlist); for 10^4-10^6 lists, where flat k-means "
                   "dominates the build). Pair it with an HNSW quantiser (IVF131072_HNSW32,SQ8) so the adds do not "
                   "scan every centroid either; bench/ivf_build.log measures both.")
    p.add_argument("--hnsw_ef_construction", type=int, metavar="EF", help="The beam every HNSW graph of the "
                   "build is made with (the index's, an IVF<n>_HNSW32 quantiser's, --doc_index_factory's; with "
                   "--backend qdrant its ef_construct). Default: Faiss's 40 (Qdrant's 100). A wider beam costs build "
                   "time, about linearly, and makes a graph whose search reaches recall a narrow one cannot at any "
                   "efSearch, e.g. on tightly clustered vectors (bench/hnsw_construction.log).")
    p.add_argument("--aggregation", choices=sorted(AGGREGATORS), help="Aggregation recorded for searchers "
                   "(default: the model's, i.e. max).")
    p.add_argument("--use_gpu", action="store_true", help="Build with GPU Faiss (faiss-gpu) when available.")
    p.add_argument("--overwrite", action="store_true", help="Replace an existing index folder written by this "
                   "tool (it must hold nothing else); the new index is built beside it and swapped in only when "
                   "complete. A non-empty folder that is not an index is never replaced.")
    add_shard_safety_flags(p)
    add_index_backend_flags(p)
    add_calibration_flags(p)
    return p


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging()
    if args.report:
        from multiview_plugin.search.report import index_report

        print(index_report(args.report))
        return 0
    if args.calibrate:
        check_calibration_flags(args)
        calibrate_from_args(args, args.calibrate)
        return 0
    if not (args.passage_reps and args.index_dir):
        raise ConfigError("building an index needs --passage_reps and --index_dir (or --report DIR)")
    shards = sorted(glob.glob(args.passage_reps))
    if not shards:
        raise ShardFormatError(f"no passage shards match {args.passage_reps!r}")
    check_calibration_flags(args, shards)  # before the build: a bad flag must not leave an uncalibrated index
    build_from_args(args, shards)  # calibrated as part of the build
    return 0


if __name__ == "__main__":
    sys.exit(main())
