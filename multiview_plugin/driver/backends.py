"""Index-backend, calibration and shard-safety flags shared by the index and search drivers (Faiss or Qdrant)."""

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
    g.add_argument("--qdrant_path", metavar="DIR", help="Embedded Qdrant storage folder (default: INDEX_DIR/qdrant), "
                   "run in this process by --qdrant_engine.")
    g.add_argument("--qdrant_engine", choices=["client", "edge"], default="client", help="Engine of embedded "
                   "storage. client (default): qdrant-client's local mode, a pure-Python stand-in for the server "
                   "(numpy brute force, no HNSW; tests and small corpora). edge: Qdrant's own Rust engine in the "
                   "process (qdrant-edge-py: pip install 'multiview_plugin[qdrant-edge]'; HNSW on the document "
                   "vectors, one edge shard per collection in DIR/<collection>). Recorded in the index folder, so "
                   "search needs no flag. A server (--qdrant_url) is always reached with the client.")
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
    add_qdrant_timeout_flag(g)


def add_qdrant_timeout_flag(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--qdrant_timeout", type=int, metavar="SECONDS", help="With --qdrant_url: whole seconds one "
                   "request to the server may take before the run stops with an error (default 10).")


def build_from_args(args: argparse.Namespace, shards: list[str]):
    """Build the index folder with the backend the flags name, calibrated as the flags say (a Faiss index before
    it is swapped in, so one refused below target leaves ``--index_dir`` as it was); returns its IndexMeta."""
    from multiview_plugin.index.build import IndexConfig, build_index
    from multiview_plugin.index.meta import DEFAULT_INDEX_FACTORY

    qdrant_flags = [f for f in ("qdrant_path", "qdrant_url", "qdrant_collection", "qdrant_shards",
                                "qdrant_replication", "qdrant_timeout") if getattr(args, f) is not None] + (
        ["qdrant_on_disk"] if args.qdrant_on_disk else []) + (
        ["qdrant_engine"] if args.qdrant_engine != "client" else [])
    if args.backend != "qdrant":
        if qdrant_flags:
            raise ConfigError(f"--{qdrant_flags[0]} needs --backend qdrant")
        return build_index(shards, args.index_dir, IndexConfig(
            index_factory=args.index_factory, aggregation=args.aggregation, train_size=args.train_size,
            use_gpu=args.use_gpu, overwrite=args.overwrite, allow_partial=args.allow_partial,
            unsafe_pickle=args.allow_unsafe_pickle, doc_index_factory=args.doc_index_factory,
            rescore_store=args.rescore_store, ivf_training=args.ivf_training,
            hnsw_ef_construction=args.hnsw_ef_construction,
            before_swap=lambda folder: calibrate_from_args(args, str(folder), args.index_dir)))
    if (args.index_factory != DEFAULT_INDEX_FACTORY or args.doc_index_factory or args.use_gpu
            or args.rescore_store != "none" or args.ivf_training != "flat"):
        raise ConfigError("--index_factory, --doc_index_factory, --rescore_store, --ivf_training and --use_gpu are "
                          "Faiss flags; "
                          "--backend qdrant builds its own document-vector HNSW")
    if args.qdrant_path and args.qdrant_url:
        raise ConfigError("give --qdrant_path (embedded) or --qdrant_url (server), not both")
    if args.qdrant_url and args.qdrant_engine == "edge":
        raise ConfigError("--qdrant_engine edge runs Qdrant's engine in this process on a storage folder; a server "
                          "(--qdrant_url) is reached with the client engine")
    if args.qdrant_timeout is not None and not args.qdrant_url:
        raise ConfigError("--qdrant_timeout applies to a server (--qdrant_url); embedded storage has no requests")
    from multiview_plugin.search._qdrant import build_qdrant_index

    beam = {} if args.hnsw_ef_construction is None else {"ef_construct": args.hnsw_ef_construction}  # else Qdrant's

    meta = build_qdrant_index(shards, args.index_dir, qdrant_path=args.qdrant_path, qdrant_url=args.qdrant_url,
                              collection=args.qdrant_collection, shard_number=args.qdrant_shards,
                              replication_factor=args.qdrant_replication, on_disk=args.qdrant_on_disk,
                              aggregation=args.aggregation, overwrite=args.overwrite,
                              allow_partial=args.allow_partial, unsafe_pickle=args.allow_unsafe_pickle,
                              batch_size=args.qdrant_batch_size, engine=args.qdrant_engine,
                              timeout=args.qdrant_timeout, **beam)
    from multiview_plugin.search.calibrate import BelowTargetError

    try:
        calibrate_from_args(args, args.index_dir)
    except BelowTargetError as err:  # the collection is built (Qdrant writes in place): say what is left
        raise BelowTargetError(f"{err}; the Qdrant collection was built and {args.index_dir} holds no search "
                               "defaults: recalibrate it with --calibrate and --allow_below_target") from None
    return meta


def add_shard_safety_flags(p: argparse.ArgumentParser) -> None:
    """--allow_partial and --allow_unsafe_pickle: the two ways past the shard checks (index and search)."""
    p.add_argument("--allow_partial", action="store_true", help="Use the passage shards given even if their "
                   "sidecars show the set is incomplete (a shard_index of num_shards missing) or a shard has no "
                   "sidecar (default: refuse, naming the missing shards). Shards of another model are always refused.")
    p.add_argument("--allow_unsafe_pickle", action="store_true", help="Load shards with plain pickle, which runs "
                   "any code a crafted file contains; only for trusted files in an older format (default: a "
                   "restricted loader that admits only Tevatron's (ndarray, ids) payload).")


def add_search_backend_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Qdrant index folders (backend recorded in multiview.json)")
    g.add_argument("--qdrant_exact", action="store_true", help="Score every document by max over all its views "
                   "(a full scan, equal to the Faiss Flat searcher) instead of re-scoring document-vector "
                   "candidates (--doc_candidates).")
    g.add_argument("--qdrant_url", metavar="URL", help="Server address, overriding the one recorded at build time.")
    add_qdrant_timeout_flag(g)


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
    g.add_argument("--allow_below_target", action="store_true", help="Keep an index whose best calibrated setting "
                   "stays below --target_recall (its 95%% lower bound; e.g. IVF...,SQ8 without a re-scoring store, "
                   "whose 8-bit codes bound its recall). Without it such an index is refused, with one line naming "
                   "what reaches the target, and --index_dir is left as it was.")
    g.add_argument("--calibrate", metavar="DIR", help="Only calibrate the existing index folder DIR (its shards "
                   "must still be where they were) and exit.")


def check_calibration_flags(args: argparse.Namespace, shards: list[str] | None = None) -> None:
    """Every calibration flag, before any work: a value refused only after the build would leave an uncalibrated
    index that needs --overwrite. ``shards``: the passage shards to build from (the calibration queries must be
    of their model and dim); None with --calibrate (the index folder is then the reference)."""
    import math

    target = args.target_recall
    if not (target == 0 or 0 < target <= 1) or math.isnan(target):
        raise ConfigError(f"--target_recall must be 0 (no calibration) or in (0, 1], got {target}")
    if args.calibration_queries < 1 or args.calibration_k < 1:
        raise ConfigError(f"--calibration_queries and --calibration_k must be >= 1, got {args.calibration_queries} "
                          f"and {args.calibration_k}")
    if not args.calibration_query_reps:
        return
    if target == 0:
        raise ConfigError("--calibration_query_reps with --target_recall 0: no calibration runs to use them; drop "
                          "one of the two")
    if shards is None:
        return  # --calibrate DIR: checked against the index folder by calibrate_from_args
    from multiview_plugin.encoding.shard_sets import load_query_reps, model_identity
    from multiview_plugin.encoding.shards import read_info

    infos = [(s, read_info(s)) for s in shards]
    known = next(((s, i) for s, i in infos if i is not None), None)
    reference = (known[0], model_identity(known[1])) if known is not None else None
    dim = next((i.dim for _, i in infos if i is not None and i.num_vectors), None)
    load_query_reps(args.calibration_query_reps, args.allow_unsafe_pickle, reference, dim)


def calibrate_from_args(args: argparse.Namespace, index_dir: str, shown: str | None = None) -> None:
    """Calibrate ``index_dir`` as the flags say and print the chosen settings (``shown``: the folder's name
    in what is printed, when ``index_dir`` is the build's temporary folder)."""
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
                             queries_from=args.calibration_query_reps, sampler=args.calibration_sampler,
                             refuse_below_target=not args.allow_below_target)
    index_dir = shown or index_dir
    if record is None:
        print(f"calibration: {index_dir} searches exactly (or aggregates other than max); nothing to calibrate")
        return
    settings = ", ".join(f"{k}={v}" for k, v in record["settings"].items())
    print(f"calibration: {settings} -> recall@{record['k']} {record['recall']:.4f} of exact "
          f"({calibration_verdict(record)}; 95% lower bound "
          f"{record['recall_lower95']:.4f}, aim {record.get('aim', record['target_recall'])}; "
          f"{record['queries']} queries from {record['queries_from']}, {record['ms_per_query']:.3f} ms/query), "
          f"saved in "
          f"{index_dir}/multiview.json")


def calibration_verdict(record: dict) -> str:
    """What the calibration found, in words that do not contradict each other: the target and its margin
    reached, the target reached but not the margin, the target missed; and when the exact top k of every query
    ties at its cut-off, that recall could not be measured at all."""
    target, queries, tied = record["target_recall"], record["queries"], record.get("tied_queries", 0)
    if tied and tied == queries:
        return (f"not measurable: every query's exact scores tie at the top-{record['k']} cut-off (constant or "
                "duplicate vectors?), so which documents are its top k is arbitrary and recall by document "
                f"says nothing: target {target} could not be checked")
    if record["reached"]:
        verdict = (f"reaches target {target} and its margin" if record.get("aim_reached", True)
                   else f"reaches target {target}, but not its margin")
    else:
        verdict = f"BELOW target {target}"
    return verdict + (f"; {tied} of {queries} queries tie at the cut-off" if tied else "")
