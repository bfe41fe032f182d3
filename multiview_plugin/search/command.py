"""What the search command does with its parsed flags (``driver.search``): the checks of the flag combinations,
the query vectors of a run, the depth searched, BM25 fusion and the sharded (in-process or Ray) search.

The driver parses the flags and writes the run; the work in between is here. Faiss and the searchers are imported
in the functions that search, so that ``--help`` loads none of them."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from multiview_plugin.cli import cap_depth
from multiview_plugin.data.topics import load_topics
from multiview_plugin.encoding.shard_sets import load_query_reps
from multiview_plugin.encoding.shards import check_finite_rows
from multiview_plugin.errors import ConfigError
from multiview_plugin.paths import refuse_output_over_input
from multiview_plugin.ray_runtime import DEFAULT_MAX_RESTARTS, DEFAULT_SEARCH_TIMEOUT

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger("multiview_plugin.search")

# the --ray_* flags' defaults (the parser's are None, "not given"): without --ray_address, a flag given at
# all is refused, its default value included
RAY_SEARCH_DEFAULTS = {"ray_shards_per_actor": 1, "ray_cpus_per_actor": 1.0, "ray_max_restarts": DEFAULT_MAX_RESTARTS,
                       "ray_timeout": DEFAULT_SEARCH_TIMEOUT}


def require_positive(value: int, flag: str) -> int:
    if value < 1:
        raise ConfigError(f"{flag} must be a positive number of documents per query, got {value}")
    return value


def aggregation_options(args: argparse.Namespace, extra: dict) -> dict:
    """Aggregator options from the command line; an unset temperature falls back to ``extra`` (the shards'
    record; an index searcher falls back to its own ``multiview.json`` when it gets None)."""
    temperature = args.hasans_temperature if args.hasans_temperature is not None else extra.get("temperature")
    return {"temperature": temperature, "fetch_docs": args.hasans_fetch_docs,
            "mean_sentences": args.hasans_mean_sentences}


def query_vectors(args: argparse.Namespace, searcher, index_dir: str, dim: int) -> tuple[np.ndarray, list[str]]:
    """The run's query vectors: ``--encoded_queries`` (checked against the model of ``index_dir``'s
    ``multiview.json``), or ``--topics`` encoded by the searcher's ``--encoder``."""
    from pathlib import Path

    if args.encoded_queries:
        index_model = (str(Path(index_dir) / "multiview.json"), searcher.meta.model_fingerprint)
        return load_query_reps(args.encoded_queries, args.allow_unsafe_pickle, index_model, dim)
    if args.topics and args.encoder:
        topics = load_topics(args.topics)
        q_ids = list(topics)
        q_reps = searcher.encode(list(topics.values()))
        check_finite_rows(q_reps, q_ids, f"{args.topics} encoded by {args.encoder}", "query")
        return q_reps, q_ids
    raise ConfigError("--index needs --topics with --encoder, or --encoded_queries")


def search_depth(args: argparse.Namespace, num_docs: int) -> int:
    """The depth to search: ``--hits`` (and, with ``--hybrid``, ``--hybrid_depth`` when deeper), each capped at the
    ``num_docs`` documents searched (one index's, or all shards') with a log line; ``args.hits`` is capped too."""
    args.hits = cap_depth(args.hits, num_docs, "--hits")
    return max(args.hits, cap_depth(args.hybrid_depth, num_docs, "--hybrid_depth")) if args.hybrid else args.hits


def search_passage_shards(args: argparse.Namespace) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Tevatron style: --query_reps searched against the --passage_reps shards (all in memory, or shard by shard
    with --shard_search), the shard set and the outputs checked first; the query ids, docids and scores."""
    import glob

    from multiview_plugin.encoding.shard_sets import check_query_dim, check_shard_set, model_identity
    from multiview_plugin.encoding.shards import ShardFormatError, sidecar_path
    from multiview_plugin.index.meta import DEFAULT_AGGREGATION

    shard_paths = sorted(glob.glob(args.passage_reps))
    if not shard_paths:
        raise ShardFormatError(f"no passage shards match {args.passage_reps!r}")
    refuse_output_over_input({"--save_ranking_to": args.save_ranking_to},
                             {"--query_reps": [args.query_reps, str(sidecar_path(args.query_reps))],
                              "--passage_reps": [*shard_paths, *(str(sidecar_path(s)) for s in shard_paths)]})
    infos = check_shard_set(shard_paths, args.allow_partial)
    info = next((i for i in infos if i is not None), None)
    reference = (shard_paths[infos.index(info)], model_identity(info)) if info is not None else None
    dim = next((i.dim for i in infos if i is not None and i.num_vectors), None)
    q_reps, q_ids = load_query_reps(args.query_reps, args.allow_unsafe_pickle, reference, dim)
    aggregation = args.aggregation or DEFAULT_AGGREGATION.get(info.model_name if info else "", "max")
    if args.shard_search:
        ids, scores = _search_shard_by_shard(args, shard_paths, infos, q_reps, aggregation)
    else:
        from multiview_plugin.search import FaissStore, get_aggregator, search_batched

        aggregator = get_aggregator(aggregation, **aggregation_options(args, info.extra if info else {}))
        store = FaissStore.from_shards(shard_paths, args.allow_unsafe_pickle)
        check_query_dim(args.query_reps, q_reps, store.dim, args.passage_reps)  # sidecar-less shards: known now
        args.depth = cap_depth(args.depth, len(store.docids), "--depth")
        ids, scores = search_batched(store, q_reps, args.depth, aggregator, args.batch_size, progress=not args.quiet)
    return q_ids, ids, scores


def _search_shard_by_shard(args: argparse.Namespace, shard_paths: list[str], infos: list, q_reps: np.ndarray,
                           aggregation: str) -> tuple[np.ndarray, np.ndarray]:
    """--shard_search: each shard searched in turn and the per-shard top-k merged (exact for max only)."""
    from multiview_plugin.progress import progress_bar
    from multiview_plugin.search import search_shards

    if aggregation != "max":
        raise ConfigError(f"--shard_search merges per-shard top-k, which is exact only for max aggregation; "
                          f"{aggregation} normalises over the whole collection's top vectors: search without "
                          "--shard_search or build an index")
    if all(i is not None for i in infos):
        args.depth = cap_depth(args.depth, sum(i.num_items for i in infos), "--depth")
    shards = progress_bar(shard_paths, desc="search", unit="shard", enabled=not args.quiet)
    return search_shards(q_reps, shards, args.depth, aggregation, args.batch_size, args.allow_unsafe_pickle,
                         args.query_reps)


def open_index_searcher(args: argparse.Namespace):
    """One --index folder's searcher (``MultiVectorSearcher``), its outputs checked against its inputs and, under
    --hybrid, --bm25_corpus against the corpus the index was encoded from, before any search."""
    from multiview_plugin.index.folder import index_files
    from multiview_plugin.index.meta import check_corpus_is_indexed
    from multiview_plugin.search import MultiVectorSearcher

    if given_ray_flags(args):
        raise ConfigError("--ray_* flags configure a sharded search: give several --index shards (a,b,c or @FILE) "
                          "and --ray_address")
    inputs = {"--topics": args.topics, "--encoded_queries": args.encoded_queries, "--index": index_files(args.index),
              "--corpus": args.corpus, "--pseudo_queries": (args.pseudo_queries or "").split(",")}
    refuse_output_over_input({"--output": args.output, "--explain": args.explain}, inputs)
    refuse_output_over_input({"--explain": args.explain}, {"--output": args.output})
    searcher = MultiVectorSearcher(args.index, args.encoder, aggregation=args.aggregation, nprobe=args.nprobe,
                                   ef_search=args.ef_search, aggregation_options=aggregation_options(args, {}),
                                   corpus=args.corpus, pseudo_queries=args.pseudo_queries,
                                   overfetch=args.overfetch, rescore=args.rescore,
                                   doc_candidates=args.doc_candidates, exact=args.qdrant_exact,
                                   qdrant_url=args.qdrant_url, qdrant_timeout=args.qdrant_timeout)
    if args.hybrid:  # before any search: BM25 over another corpus would fuse other texts without a word
        check_corpus_is_indexed(searcher.meta, args.bm25_corpus, None, "--bm25_corpus")
    return searcher


def search_index(args: argparse.Namespace, searcher) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray, int]:
    """The run's queries searched in one index folder: query vectors, ids, docids, scores and the depth searched."""
    import faiss

    from multiview_plugin.search import search_batched

    q_reps, q_ids = query_vectors(args, searcher, args.index, searcher.meta.dim)
    if args.threads > 0:
        faiss.omp_set_num_threads(args.threads)
    depth = search_depth(args, len(searcher.store.docids))
    ids, scores = search_batched(searcher.store, q_reps, depth, searcher.aggregator, args.batch_size,
                                 progress=not args.quiet)
    return q_reps, q_ids, ids, scores, depth


def given_ray_flags(args: argparse.Namespace) -> list[str]:
    """The --ray_* flags given (None: not given, whatever the value)."""
    return [f"--{name}" for name in RAY_SEARCH_DEFAULTS if getattr(args, name) is not None]


def sharded(args: argparse.Namespace) -> bool:
    """Several --index shards (a,b,c or @FILE), or --ray_address: the sharded searcher."""
    return bool(args.ray_address) or "," in args.index or args.index.startswith("@")


def check_hybrid(args: argparse.Namespace) -> None:
    """The --hybrid flags' combinations, before anything is loaded."""
    from multiview_plugin.search.hybrid import check_fusion

    if not args.hybrid:
        return
    if not args.index:
        raise ConfigError("--hybrid needs --index (Pyserini style); Tevatron-style query shards carry no query text")
    if not args.topics:
        raise ConfigError("--hybrid bm25 needs --topics: BM25 reads the query text")
    if not args.bm25_corpus:
        raise ConfigError("--hybrid bm25 needs --bm25_corpus, the corpus file the index was encoded from")
    if args.explain:
        raise ConfigError("--explain explains dense hits; it is not defined for --hybrid rankings")
    check_fusion(args.hybrid_fusion, args.hybrid_alpha)
    require_positive(args.hybrid_depth, "--hybrid_depth")


def hybrid_run(args: argparse.Namespace, dense: dict, q_ids: Sequence[str], depth: int) -> dict:
    """The dense run fused with BM25 over --bm25_corpus, cut to --hits."""
    from multiview_plugin.search.hybrid import BM25Searcher, fuse_runs

    topics = load_topics(args.topics)
    missing = [q for q in q_ids if q not in topics]
    if missing:
        raise ConfigError(f"--topics {args.topics} lacks the text of {len(missing)} encoded queries "
                          f"(e.g. {missing[0]!r}): BM25 needs each query's text")
    sparse = BM25Searcher.from_file(args.bm25_corpus).search([topics[q] for q in q_ids], list(q_ids), depth)
    logger.info("hybrid: %s fusion with BM25 (alpha %.2f, depth %d)", args.hybrid_fusion, args.hybrid_alpha, depth)
    return fuse_runs(dense, sparse, args.hybrid_fusion, args.hybrid_alpha, args.hits)


def ray_options(args: argparse.Namespace) -> dict:
    """The --ray_* values (their defaults where not given), checked finite and in range before anything starts."""
    from multiview_plugin.search.sharded import check_sharded_ray_options

    ray = {name: RAY_SEARCH_DEFAULTS[name] if getattr(args, name) is None else getattr(args, name)
           for name in RAY_SEARCH_DEFAULTS}  # None: not given
    check_sharded_ray_options(ray["ray_shards_per_actor"], ray["ray_cpus_per_actor"], ray["ray_max_restarts"],
                              ray["ray_timeout"])
    return ray


def sharded_dirs(args: argparse.Namespace) -> list[str]:
    """The shard folders of --index; the flags a sharded search refuses, its outputs over its inputs and BM25's
    corpus checked before any search."""
    import faiss

    from multiview_plugin.index.folder import index_files
    from multiview_plugin.index.meta import IndexMeta, check_corpus_is_indexed
    from multiview_plugin.search.sharded import parse_index_list

    if args.explain:
        raise ConfigError("--explain reads one index folder's view records; it is not defined for several --index "
                          "shards")
    if args.qdrant_exact or args.qdrant_url:
        raise ConfigError("--qdrant_exact / --qdrant_url: sharded search serves Faiss index folders")
    dirs = parse_index_list(args.index)
    inputs = {"--topics": args.topics, "--encoded_queries": args.encoded_queries,
              "--index": [f for d in dirs for f in index_files(d)]}
    refuse_output_over_input({"--output": args.output}, inputs)
    if args.hybrid:  # as for one index: BM25 over another corpus would fuse other texts without a word
        for d in dirs:
            check_corpus_is_indexed(IndexMeta.load(d), args.bm25_corpus, None, "--bm25_corpus", f"index shard {d}")
    if not args.ray_address:
        set_flags = given_ray_flags(args)
        if set_flags:
            raise ConfigError(f"{', '.join(set_flags)} configure{'s' if len(set_flags) == 1 else ''} the Ray actors: "
                              "add --ray_address (without it the shards are searched in this process)")
        if args.threads > 0:
            faiss.omp_set_num_threads(args.threads)
    if args.hasans_temperature is not None or args.hasans_mean_sentences is not None:
        raise ConfigError("--hasans_*: sharded search merges max-aggregated per-shard top-k lists (HasAns is not "
                          "decomposable over shards)")
    return dirs


def search_sharded(args: argparse.Namespace) -> tuple[list[str], np.ndarray, np.ndarray, int, list[str]]:
    """--index a,b,c [--ray_address ...]: the shards searched as one (``search.sharded``); the query ids, the
    docids and scores found, the depth searched and the shard folders."""
    from multiview_plugin.search.sharded import ShardedSearcher

    ray = ray_options(args)
    dirs = sharded_dirs(args)
    with ShardedSearcher(dirs, args.encoder, ray_address=args.ray_address, shards_per_actor=ray["ray_shards_per_actor"],
                         cpus_per_actor=ray["ray_cpus_per_actor"], threads=args.threads,
                         max_restarts=ray["ray_max_restarts"], timeout=ray["ray_timeout"], aggregation=args.aggregation,
                         nprobe=args.nprobe, ef_search=args.ef_search, overfetch=args.overfetch, rescore=args.rescore,
                         doc_candidates=args.doc_candidates, allow_partial=args.allow_partial) as searcher:
        q_reps, q_ids = query_vectors(args, searcher, dirs[0], searcher.dim)
        depth = search_depth(args, searcher.num_docs)  # the documents of all shards
        ids, scores = searcher.search_batched(q_reps, depth, args.batch_size, progress=not args.quiet)
    return q_ids, ids, scores, depth, dirs
