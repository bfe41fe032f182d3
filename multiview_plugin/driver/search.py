"""Search encoded queries against encoded passages or an index folder.

Tevatron style (in-memory flat index over shards, or shard by shard with an exact merge)::

    python -m multiview_plugin.driver.search --query_reps emb/queries.pkl --passage_reps 'emb/corpus.*.pkl' \
        --depth 1000 --batch_size 128 --save_ranking_to run.txt --save_text [--shard_search]

Pyserini style (an index folder from ``multiview_plugin.driver.index``; queries encoded on the fly)::

    python -m multiview_plugin.driver.search --index indexes/mvr --topics queries.tsv --encoder runs/mvr \
        --output run.trec --output-format trec --hits 1000

Hybrid dense + BM25 (Pyserini's hybrid search: score interpolation, or reciprocal rank fusion)::

    python -m multiview_plugin.driver.search --index indexes/dcsr --topics queries.tsv --encoder runs/dcsr \
        --output run.trec --hits 100 --hybrid bm25 --bm25_corpus corpus.jsonl --hybrid_alpha 0.4
"""

from __future__ import annotations

import argparse
import glob
import logging
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from multiview_plugin.atomic import atomic_open
from multiview_plugin.cli import cap_depth, cli, setup_logging
from multiview_plugin.data.topics import load_topics
from multiview_plugin.driver.backends import add_search_backend_flags
from multiview_plugin.encoding.shard_sets import check_query_dim, check_shard_set, load_query_reps, model_identity
from multiview_plugin.encoding.shards import ShardFormatError, check_finite_rows, sidecar_path
from multiview_plugin.errors import ConfigError
from multiview_plugin.evaluation.runs import to_run, write_run
from multiview_plugin.paths import refuse_output_over_input
from multiview_plugin.progress import progress_bar
from multiview_plugin.ray_runtime import DEFAULT_MAX_RESTARTS, DEFAULT_SEARCH_TIMEOUT
from multiview_plugin.search.aggregators import AGGREGATORS
from multiview_plugin.search.hybrid import DEFAULT_ALPHA, DEFAULT_DEPTH

if TYPE_CHECKING:
    import numpy as np

# Faiss, torch and the searchers are imported in the functions that search, so that --help loads none of them.

logger = logging.getLogger("multiview_plugin.search")


# the --ray_* flags' defaults (the parser's are None, "not given"): without --ray_address, a flag given at
# all is refused, its default value included
RAY_SEARCH_DEFAULTS = {"ray_shards_per_actor": 1, "ray_cpus_per_actor": 1.0, "ray_max_restarts": DEFAULT_MAX_RESTARTS,
                       "ray_timeout": DEFAULT_SEARCH_TIMEOUT}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m multiview_plugin.driver.search", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    tev = p.add_argument_group("Tevatron style")
    tev.add_argument("--query_reps", help="Encoded query shard (pickle from the encode driver --encode_is_query).")
    tev.add_argument("--passage_reps", help="Glob of encoded passage shards, e.g. 'emb/corpus.*.pkl' (quote it).")
    tev.add_argument("--depth", type=int, default=1000, help="Documents to return per query (default 1000; capped "
                     "at the number of documents, with a log line).")
    tev.add_argument("--batch_size", type=int, default=128,
                     help="Queries searched at once (bounds memory); -1 or 0: all in one batch (as Tevatron).")
    tev.add_argument("--save_ranking_to", help="Output file of the Tevatron-style invocation.")
    tev.add_argument("--save_text", action="store_true", help="Write 'qid<TAB>docid<TAB>score' lines (Tevatron's "
                     "text ranking); without it, a pickle of (scores, docids) as Tevatron does.")
    tev.add_argument("--shard_search", action="store_true", help="Search shard by shard and merge the per-shard "
                     "top-k (exact: a document never spans shards); memory = one shard.")
    tev.add_argument("--quiet", action="store_true", help="No progress bars.")
    tev.add_argument("--cpu_search", action="store_true", help="Search on CPU (always so here: accepted for "
                     "Tevatron's commands).")
    tev.add_argument("--gpu_float32", action="store_true", help="Keep float32 vectors on GPU (vectors are always "
                     "searched in float32 here: accepted for Tevatron's commands).")
    pys = p.add_argument_group("Pyserini style")
    pys.add_argument("--index", help="Index folder (index, docid, multiview.json); or several shard index folders "
                     "searched as one (a,b,c or @FILE listing one per line; see --ray_address): each built by "
                     "driver.index from part of the encoded shards, merged rank for rank as one index over the "
                     "shards in the order given.")
    pys.add_argument("--topics", help="Queries: jsonl {query_id, query}, BEIR queries.jsonl, qid<TAB>text, or a "
                     "DPR QA file (qids = 0-based line numbers, as Pyserini).")
    pys.add_argument("--encoder", help="Saved model folder used to encode --topics.")
    pys.add_argument("--encoded_queries", "--encoded-queries", dest="encoded_queries",
                     help="Encoded query pickle instead of --encoder.")
    pys.add_argument("--output", help="Run file to write.")
    pys.add_argument("--output_format", "--output-format", dest="output_format", default="trec",
                     choices=["trec", "msmarco", "tevatron"], help="Run format (default trec).")
    pys.add_argument("--hits", type=int, default=1000, help="Documents per query (default 1000; capped at the "
                     "index's number of documents, with a log line).")
    pys.add_argument("--threads", type=int, default=1, help="Faiss search threads.")
    pys.add_argument("--nprobe", type=int, help="IVF indexes: lists probed per query, a lower bound (raised to "
                     "the lists holding 32x the fetch depth on average).")
    pys.add_argument("--ef_search", "--efSearch", dest="ef_search", type=int, help="HNSW indexes: efSearch "
                     "lower bound (it is raised to the fetch depth).")
    pys.add_argument("--overfetch", type=float, help="Approximate indexes: fetch this many times "
                     "the exact rule's depth (k x mean views); more = higher recall, slower. Default: the value "
                     "calibrated at build time (multiview.json search_defaults), else 2.")
    pys.add_argument("--doc_candidates", type=float, help="Index folders with a doc_index, and Qdrant ones: take "
                     "this many x hits (at least 200) candidate documents, re-scored over all their views. "
                     "Default: the value calibrated at build time, else 2 (bench/ann.py: 0.995 of exact "
                     "recall@100).")
    pys.add_argument("--rescore", action=argparse.BooleanOptionalAction, default=None, help="Approximate "
                     "indexes: re-score candidate documents over all their views, reconstructed from the index or "
                     "read from its re-scoring store (driver.index --rescore_store) (default: on for IVF indexes "
                     "and wherever there is a store, off for HNSW, where it was measured not to help).")
    p.add_argument("--aggregation", choices=sorted(AGGREGATORS), help="How a document's vector scores combine "
                   "(default: the index's recorded aggregation, else max).")
    add_shard_safety_flags(p)
    add_search_backend_flags(p)
    ray = p.add_argument_group("Sharded search on a Ray cluster (several --index shards; pip install "
                               "'multiview-plugin[ray]'; see docs/scaling.md)")
    ray.add_argument("--ray_address", help="Serve the --index shards as Ray actors spread over a cluster's nodes and "
                     "fan each query batch out to them: 'auto' (the cluster this machine joined with `ray start`), "
                     "host:port of its head, ray://host:10001 (Ray Client) or 'local' (a one-machine Ray instance). "
                     "Without it several --index shards are searched in this process, one after another. The shard "
                     "folders must be at the same paths on every node.")
    ray.add_argument("--ray_shards_per_actor", type=int, default=None,
                     help="Shard indexes each Ray actor holds "
                     f"(default {RAY_SEARCH_DEFAULTS['ray_shards_per_actor']}).")
    ray.add_argument("--ray_cpus_per_actor", type=float, default=None,
                     help=f"CPUs each Ray actor reserves (default {RAY_SEARCH_DEFAULTS['ray_cpus_per_actor']}; "
                     "its Faiss threads: --threads).")
    ray.add_argument("--ray_max_restarts", type=int, default=None,
                     help="A lost actor (process killed, node lost) is restarted and its call retried at most this "
                     "many times; then the search stops with one error line naming the lost shard (default "
                     f"{RAY_SEARCH_DEFAULTS['ray_max_restarts']}).")
    ray.add_argument("--ray_timeout", type=float, default=None, help="Seconds a "
                     "shard may take to answer a batch, or a lost actor to come back, before the search stops naming "
                     f"the shard (default {RAY_SEARCH_DEFAULTS['ray_timeout']}).")
    has = p.add_argument_group("HasAns aggregation (dcsr; DCSR paper eq. 2)")
    has.add_argument("--hasans_temperature", type=float, help="Softmax temperature over the fetched sentence "
                     "scores (default: the model's training temperature recorded with the index or shards, else 1, "
                     "the paper's raw softmax).")
    has.add_argument("--hasans_fetch_docs", type=int, default=100, help="Fetch max(hits, this) x mean sentences "
                     "per passage sentences before normalising (paper: top 100 x s̄). Default 100.")
    has.add_argument("--hasans_mean_sentences", type=float, help="s̄, sentences per passage (default: the "
                     "index's recorded mean).")
    p.add_argument("--run_tag", default="multiview", help="Tag written in the last column of TREC runs.")
    hyb = p.add_argument_group("Hybrid dense + BM25 (with --index and --topics)")
    hyb.add_argument("--hybrid", choices=["bm25"], help="Fuse the dense ranking with BM25 (bm25s over "
                     "--bm25_corpus; query text from --topics): Pyserini's hybrid search.")
    hyb.add_argument("--hybrid_fusion", choices=["interpolation", "rrf"], default="interpolation",
                     help="'interpolation': per query, each side's top --hybrid_depth scores min-max normalised, "
                     "score = alpha * dense + (1 - alpha) * BM25 (a document missing from one side gets that side's "
                     "lowest); 'rrf': reciprocal rank fusion, sum of 1 / (60 + rank), weighted 2 * alpha and "
                     "2 * (1 - alpha). Default interpolation.")
    hyb.add_argument("--hybrid_alpha", type=float, default=DEFAULT_ALPHA, help="Weight of the dense side in [0, 1]: "
                     "1 = the dense ranking, 0 = the BM25 ranking (default %(default)s; choose it on a dev set, e.g. "
                     "the quickstart's --hybrid does).")
    hyb.add_argument("--hybrid_depth", type=int, default=DEFAULT_DEPTH, help="Documents fetched from each side "
                     "before fusing (at least --hits; default %(default)s).")
    hyb.add_argument("--bm25_corpus", help="Corpus file for BM25 (jsonl/tsv/BEIR): the one the index was encoded "
                     "from, checked against the identity the index records (another file is refused).")
    exp = p.add_argument_group("Explained hits (with --index)")
    exp.add_argument("--explain", metavar="FILE", help="Also write a JSONL side file, one line per hit keyed by qid "
                     "and docid: the winning view's index and score, the runner-up view's score and what the view "
                     "is (dcsr: sentence and span; dce: pseudo-query; mlr: layer; mvr: viewer; mebert: token "
                     "position). The run file is unchanged.")
    exp.add_argument("--corpus", help="Corpus file for the explanations' sentence texts (default: the one recorded "
                     "when the index was encoded).")
    exp.add_argument("--pseudo_queries", help="dce: pseudo-query file for the explanations (default: the one "
                     "recorded when the index was encoded).")
    return p


def add_shard_safety_flags(p: argparse.ArgumentParser) -> None:
    """--allow_partial and --allow_unsafe_pickle: the two ways past the shard checks (index and search)."""
    p.add_argument("--allow_partial", action="store_true", help="Use the passage shards given even if their "
                   "sidecars show the set is incomplete (a shard_index of num_shards missing) or a shard has no "
                   "sidecar (default: refuse, naming the missing shards). Shards of another model are always refused.")
    p.add_argument("--allow_unsafe_pickle", action="store_true", help="Load shards with plain pickle, which runs "
                   "any code a crafted file contains; only for trusted files in an older format (default: a "
                   "restricted loader that admits only Tevatron's (ndarray, ids) payload).")


def require_positive(value: int, flag: str) -> int:
    if value < 1:
        raise ConfigError(f"{flag} must be a positive number of documents per query, got {value}")
    return value


def search_tevatron(args: argparse.Namespace) -> None:
    from multiview_plugin.index.meta import DEFAULT_AGGREGATION
    from multiview_plugin.search import FaissStore, get_aggregator, search_batched, search_shards

    if not (args.query_reps and args.passage_reps and args.save_ranking_to):
        raise ConfigError("Tevatron style needs --query_reps, --passage_reps and --save_ranking_to")
    require_positive(args.depth, "--depth")
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
        if aggregation != "max":
            raise ConfigError(f"--shard_search merges per-shard top-k, which is exact only for max aggregation; "
                              f"{aggregation} normalises over the whole collection's top vectors: search without "
                              "--shard_search or build an index")
        if all(i is not None for i in infos):
            args.depth = cap_depth(args.depth, sum(i.num_items for i in infos), "--depth")
        shards = progress_bar(shard_paths, desc="search", unit="shard", enabled=not args.quiet)
        ids, scores = search_shards(q_reps, shards, args.depth, aggregation, args.batch_size, args.allow_unsafe_pickle,
                                     args.query_reps)
    else:
        aggregator = get_aggregator(aggregation, **aggregation_options(args, info.extra if info else {}))
        store = FaissStore.from_shards(shard_paths, args.allow_unsafe_pickle)
        check_query_dim(args.query_reps, q_reps, store.dim, args.passage_reps)  # sidecar-less shards: known now
        args.depth = cap_depth(args.depth, len(store.docids), "--depth")
        ids, scores = search_batched(store, q_reps, args.depth, aggregator, args.batch_size, progress=not args.quiet)
    out = Path(args.save_ranking_to)
    if args.save_text:
        write_run(to_run(q_ids, ids, scores), out, fmt="tevatron")
    else:
        with atomic_open(out, "wb") as f:
            pickle.dump((scores, [[d for d in row if d is not None] for row in ids.tolist()]), f)
    logger.info("wrote %s (%d queries, depth %d)", out, len(q_ids), args.depth)


def aggregation_options(args: argparse.Namespace, extra: dict) -> dict:
    """Aggregator options from the command line; an unset temperature falls back to ``extra`` (the shards'
    record; an index searcher falls back to its own ``multiview.json`` when it gets None)."""
    temperature = args.hasans_temperature if args.hasans_temperature is not None else extra.get("temperature")
    return {"temperature": temperature, "fetch_docs": args.hasans_fetch_docs,
            "mean_sentences": args.hasans_mean_sentences}


def query_vectors(args: argparse.Namespace, searcher, index_dir: str, dim: int) -> tuple[np.ndarray, list[str]]:
    """The run's query vectors: ``--encoded_queries`` (checked against the model of ``index_dir``'s
    ``multiview.json``), or ``--topics`` encoded by the searcher's ``--encoder``."""
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


def search_pyserini(args: argparse.Namespace) -> None:
    import faiss

    from multiview_plugin.index.folder import index_files
    from multiview_plugin.index.meta import check_corpus_is_indexed
    from multiview_plugin.search import MultiVectorSearcher, search_batched, write_explanations

    if not args.output:
        raise ConfigError("--index needs --output")
    require_positive(args.hits, "--hits")
    if sharded(args):
        return search_sharded(args)
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
    q_reps, q_ids = query_vectors(args, searcher, args.index, searcher.meta.dim)
    if args.threads > 0:
        faiss.omp_set_num_threads(args.threads)
    depth = search_depth(args, len(searcher.store.docids))
    ids, scores = search_batched(searcher.store, q_reps, depth, searcher.aggregator, args.batch_size,
                                 progress=not args.quiet)
    run = to_run(q_ids, ids, scores)
    if args.hybrid:
        run = hybrid_run(args, run, q_ids, depth)
    write_run(run, args.output, fmt=args.output_format, tag=args.run_tag)
    logger.info("wrote %s (%d queries, %d hits each)", args.output, len(run), args.hits)
    if args.explain:
        n = write_explanations(args.explain, q_ids, ids, scores, searcher.explain(q_reps, ids))
        logger.info("wrote %s (%d explained hits)", args.explain, n)


def given_ray_flags(args: argparse.Namespace) -> list[str]:
    """The --ray_* flags given (None: not given, whatever the value)."""
    return [f"--{name}" for name in RAY_SEARCH_DEFAULTS if getattr(args, name) is not None]


def sharded(args: argparse.Namespace) -> bool:
    """Several --index shards (a,b,c or @FILE), or --ray_address: the sharded searcher."""
    return bool(args.ray_address) or "," in args.index or args.index.startswith("@")


def search_sharded(args: argparse.Namespace) -> None:
    """--index a,b,c [--ray_address ...]: the shards searched as one (multiview_plugin.search.sharded)."""
    import faiss

    from multiview_plugin.index.folder import index_files
    from multiview_plugin.index.meta import IndexMeta, check_corpus_is_indexed
    from multiview_plugin.search.sharded import ShardedSearcher, check_sharded_ray_options, parse_index_list

    ray = {name: RAY_SEARCH_DEFAULTS[name] if getattr(args, name) is None else getattr(args, name)
           for name in RAY_SEARCH_DEFAULTS}  # None: not given
    check_sharded_ray_options(ray["ray_shards_per_actor"], ray["ray_cpus_per_actor"], ray["ray_max_restarts"],
                              ray["ray_timeout"])  # finite and in range, before anything starts
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
    with ShardedSearcher(dirs, args.encoder, ray_address=args.ray_address, shards_per_actor=ray["ray_shards_per_actor"],
                         cpus_per_actor=ray["ray_cpus_per_actor"], threads=args.threads,
                         max_restarts=ray["ray_max_restarts"], timeout=ray["ray_timeout"], aggregation=args.aggregation,
                         nprobe=args.nprobe, ef_search=args.ef_search, overfetch=args.overfetch, rescore=args.rescore,
                         doc_candidates=args.doc_candidates, allow_partial=args.allow_partial) as searcher:
        q_reps, q_ids = query_vectors(args, searcher, dirs[0], searcher.dim)
        depth = search_depth(args, searcher.num_docs)  # the documents of all shards
        ids, scores = searcher.search_batched(q_reps, depth, args.batch_size, progress=not args.quiet)
    run = to_run(q_ids, ids, scores)
    if args.hybrid:
        run = hybrid_run(args, run, q_ids, depth)
    write_run(run, args.output, fmt=args.output_format, tag=args.run_tag)
    logger.info("wrote %s (%d queries, %d hits each, %d shards)", args.output, len(run), args.hits, len(dirs))


def check_hybrid(args: argparse.Namespace) -> None:
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


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging()
    if args.explain and not args.index:
        raise ConfigError("--explain needs --index (explanations read what each view is from the index folder)")
    check_hybrid(args)
    if args.index:
        search_pyserini(args)
    elif args.query_reps or args.passage_reps:
        search_tevatron(args)
    else:
        raise ConfigError("give --index (Pyserini style) or --query_reps/--passage_reps (Tevatron style); see --help")
    return 0


if __name__ == "__main__":
    sys.exit(main())
