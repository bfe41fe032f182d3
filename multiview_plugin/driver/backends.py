"""Index-backend and calibration flags shared by the index and search drivers (Faiss or Qdrant)."""

from __future__ import annotations

import argparse
import logging

from multiview_plugin.errors import ConfigError

logger = logging.getLogger("multiview_plugin.index")


def add_index_backend_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Backend (Faiss in the index folder, or a Qdrant collection)")
    g.add_argument("--backend", choices=["faiss", "qdrant"], default="faiss", help="faiss (default): a Faiss index "
                   "in --index_dir. qdrant: one point per document in a Qdrant collection (views as a MAX_SIM "
                   "multivector, plus an HNSW document vector for candidates); --index_dir then holds the docid "
                   "file and multiview.json naming the collection, so search needs no Qdrant flags. Needs "
                   "pip install 'multiview_plugin[qdrant]'.")
    g.add_argument("--qdrant_path", metavar="DIR", help="Embedded Qdrant storage folder (default: INDEX_DIR/qdrant). "
                   "Embedded mode is exact brute force in the process: tests and small corpora.")
    g.add_argument("--qdrant_url", metavar="URL", help="A Qdrant server or cluster (e.g. http://host:6333) instead "
                   "of embedded storage; the API key, if any, is read from $QDRANT_API_KEY.")
    g.add_argument("--qdrant_collection", help="Collection name (default: the index folder's name). An existing "
                   "collection built here from the same model is resumed; one of another model, or not built by "
                   "multiview_plugin, is refused.")
    g.add_argument("--qdrant_shards", type=int, help="Shards of the collection, when --qdrant_url creates it "
                   "(default: the server's; spread a collection over a cluster's nodes).")
    g.add_argument("--qdrant_replication", type=int, help="Replication factor when --qdrant_url creates the "
                   "collection (copies of each shard, for availability).")
    g.add_argument("--qdrant_on_disk", action="store_true", help="Keep the collection's vectors and payload on "
                   "disk (memory-mapped) instead of RAM: for corpora larger than the nodes' memory.")
    g.add_argument("--qdrant_batch_size", type=int, default=256, help="Documents per upsert while ingesting "
                   "(bounds memory and request size; default 256).")


def build_from_args(args: argparse.Namespace, shards: list[str]):
    """Build the index folder with the backend the flags name; returns its IndexMeta."""
    from multiview_plugin.search import build_index

    qdrant_flags = [f for f in ("qdrant_path", "qdrant_url", "qdrant_collection", "qdrant_shards",
                                "qdrant_replication") if getattr(args, f) is not None] + (
        ["qdrant_on_disk"] if args.qdrant_on_disk else [])
    if args.backend != "qdrant":
        if qdrant_flags:
            raise ConfigError(f"--{qdrant_flags[0]} needs --backend qdrant")
        return build_index(shards, args.index_dir, index_factory=args.index_factory, aggregation=args.aggregation,
                           train_size=args.train_size, use_gpu=args.use_gpu, overwrite=args.overwrite,
                           allow_partial=args.allow_partial, unsafe_pickle=args.allow_unsafe_pickle,
                           doc_index_factory=args.doc_index_factory, rescore_store=args.rescore_store,
                           ivf_training=args.ivf_training)
    if (args.index_factory != "Flat" or args.doc_index_factory or args.use_gpu or args.rescore_store != "none"
            or args.ivf_training != "flat"):
        raise ConfigError("--index_factory, --doc_index_factory, --rescore_store, --ivf_training and --use_gpu are "
                          "Faiss flags; "
                          "--backend qdrant builds its own document-vector HNSW")
    if args.qdrant_path and args.qdrant_url:
        raise ConfigError("give --qdrant_path (embedded) or --qdrant_url (server), not both")
    from multiview_plugin.search._qdrant import build_qdrant_index

    return build_qdrant_index(shards, args.index_dir, qdrant_path=args.qdrant_path, qdrant_url=args.qdrant_url,
                              collection=args.qdrant_collection, shard_number=args.qdrant_shards,
                              replication_factor=args.qdrant_replication, on_disk=args.qdrant_on_disk,
                              aggregation=args.aggregation, overwrite=args.overwrite,
                              allow_partial=args.allow_partial, unsafe_pickle=args.allow_unsafe_pickle,
                              batch_size=args.qdrant_batch_size)


def add_search_backend_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Qdrant index folders (backend recorded in multiview.json)")
    g.add_argument("--qdrant_exact", action="store_true", help="Score every document by max over all its views "
                   "(a full scan, equal to the Faiss Flat searcher) instead of re-scoring document-vector "
                   "candidates (--doc_candidates).")
    g.add_argument("--qdrant_url", metavar="URL", help="Server address, overriding the one recorded at build time.")


def add_calibration_flags(p: argparse.ArgumentParser) -> None:
    from multiview_plugin.search.calibrate import DEFAULT_K, DEFAULT_QUERIES, DEFAULT_SAMPLER, DEFAULT_TARGET, SAMPLERS

    g = p.add_argument_group("Calibration of approximate indexes (HNSW, IVF, PQ/SQ, --doc_index_factory, Qdrant)")
    g.add_argument("--target_recall", type=float, default=DEFAULT_TARGET, help="After building, choose the "
                   "fastest search settings (over-fetch, efSearch, nprobe, document candidates) that keep this "
                   f"fraction of exact max-over-views top-{DEFAULT_K} documents, measured on a sample of the "
                   "corpus's own views used as queries (whose 95%% lower bound must then miss at most half of what "
                   "the target allows: real queries miss more); recorded in multiview.json (search_defaults, "
                   "calibration), "
                   f"printed, and used by searchers unless their flags say otherwise. Default {DEFAULT_TARGET}; "
                   "0 skips it. Exact indexes (Flat, Qdrant exact) need none.")
    g.add_argument("--calibration_queries", type=int, default=DEFAULT_QUERIES, help="Queries sampled as "
                   f"calibration queries (default {DEFAULT_QUERIES}).")
    g.add_argument("--calibration_k", type=int, default=DEFAULT_K, help="Documents per query whose recall is "
                   f"calibrated (default {DEFAULT_K}).")
    g.add_argument("--calibration_query_reps", metavar="FILE", help="Encoded queries (a query shard from the "
                   "encode driver, same model) to calibrate on instead of sampled corpus views: real queries can sit "
                   "farther from every view, and need more.")
    g.add_argument("--calibration_sampler", choices=SAMPLERS, default=DEFAULT_SAMPLER, help="Without "
                   "--calibration_query_reps, how queries are drawn from the corpus: 'views' (a random view of a "
                   "sampled document, that document left out), 'midpoints' (the midpoint of that view and a view of "
                   "another random document: between documents, as real queries are), 'mixed' (half each; "
                   f"default {DEFAULT_SAMPLER}).")
    g.add_argument("--calibrate", metavar="DIR", help="Only calibrate the existing index folder DIR (its shards "
                   "must still be where they were) and exit.")


def calibrate_from_args(args: argparse.Namespace, index_dir: str) -> None:
    """Calibrate ``index_dir`` as the flags say and print the chosen settings."""
    from multiview_plugin.search.calibrate import calibrate_index

    if args.target_recall == 0:
        return
    if args.calibration_queries < 1 or args.calibration_k < 1:
        raise ConfigError("--calibration_queries and --calibration_k must be >= 1")
    queries = None
    if args.calibration_query_reps:
        from pathlib import Path

        from multiview_plugin.encoding.shard_sets import load_query_reps
        from multiview_plugin.search import IndexMeta

        meta = IndexMeta.load(index_dir)
        queries = load_query_reps(args.calibration_query_reps, args.allow_unsafe_pickle,
                                  (str(Path(index_dir) / "multiview.json"), meta.model_fingerprint), meta.dim)[0]
    record = calibrate_index(index_dir, args.target_recall, args.calibration_queries, args.calibration_k,
                             unsafe_pickle=args.allow_unsafe_pickle, queries=queries,
                             queries_from=args.calibration_query_reps, sampler=args.calibration_sampler)
    if record is None:
        print(f"calibration: {index_dir} searches exactly (or aggregates other than max); nothing to calibrate")
        return
    settings = ", ".join(f"{k}={v}" for k, v in record["settings"].items())
    print(f"calibration: {settings} -> recall@{record['k']} {record['recall']:.4f} of exact "
          f"({'reaches' if record['reached'] else 'BELOW'} target {record['target_recall']}"
          f"{'' if record.get('aim_reached', True) else ', but not its margin'}; 95% lower bound "
          f"{record['recall_lower95']:.4f}, aim {record.get('aim', record['target_recall'])}; "
          f"{record['queries']} queries from {record['queries_from']}, {record['ms_per_query']:.3f} ms/query), "
          f"saved in "
          f"{index_dir}/multiview.json")
