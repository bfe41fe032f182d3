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
import logging
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

from multiview_plugin.atomic import atomic_open
from multiview_plugin.cli import cli, setup_logging
from multiview_plugin.driver.backends import add_search_backend_flags, add_shard_safety_flags
from multiview_plugin.errors import ConfigError
from multiview_plugin.evaluation.runs import to_run, write_run
from multiview_plugin.search.aggregators import AGGREGATORS
from multiview_plugin.search.command import (
    RAY_SEARCH_DEFAULTS,
    check_hybrid,
    hybrid_run,
    open_index_searcher,
    require_positive,
    search_index,
    search_passage_shards,
    search_sharded,
    sharded,
)
from multiview_plugin.search.hybrid import DEFAULT_ALPHA, DEFAULT_DEPTH

# Faiss, torch and the searchers are imported in the functions that search, so that --help loads none of them.

logger = logging.getLogger("multiview_plugin.search")



def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m multiview_plugin.driver.search", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_tevatron_flags(p)
    add_pyserini_flags(p)
    p.add_argument("--aggregation", choices=sorted(AGGREGATORS), help="How a document's vector scores combine "
                   "(default: the index's recorded aggregation, else max).")
    add_shard_safety_flags(p)
    add_search_backend_flags(p)
    add_ray_flags(p)
    add_hasans_flags(p)
    p.add_argument("--run_tag", default="multiview", help="Tag written in the last column of TREC runs.")
    add_hybrid_flags(p)
    add_explain_flags(p)
    return p


def add_tevatron_flags(p: argparse.ArgumentParser) -> None:
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


def add_pyserini_flags(p: argparse.ArgumentParser) -> None:
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


def add_ray_flags(p: argparse.ArgumentParser) -> None:
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


def add_hasans_flags(p: argparse.ArgumentParser) -> None:
    has = p.add_argument_group("HasAns aggregation (dcsr; DCSR paper eq. 2)")
    has.add_argument("--hasans_temperature", type=float, help="Softmax temperature over the fetched sentence "
                     "scores (default: the model's training temperature recorded with the index or shards, else 1, "
                     "the paper's raw softmax).")
    has.add_argument("--hasans_fetch_docs", type=int, default=100, help="Fetch max(hits, this) x mean sentences "
                     "per passage sentences before normalising (paper: top 100 x s̄). Default 100.")
    has.add_argument("--hasans_mean_sentences", type=float, help="s̄, sentences per passage (default: the "
                     "index's recorded mean).")


def add_hybrid_flags(p: argparse.ArgumentParser) -> None:
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


def add_explain_flags(p: argparse.ArgumentParser) -> None:
    exp = p.add_argument_group("Explained hits (with --index)")
    exp.add_argument("--explain", metavar="FILE", help="Also write a JSONL side file, one line per hit keyed by qid "
                     "and docid: the winning view's index and score, the runner-up view's score and what the view "
                     "is (dcsr: sentence and span; dce: pseudo-query; mlr: layer; mvr: viewer; mebert: token "
                     "position). The run file is unchanged.")
    exp.add_argument("--corpus", help="Corpus file for the explanations' sentence texts (default: the one recorded "
                     "when the index was encoded).")
    exp.add_argument("--pseudo_queries", help="dce: pseudo-query file for the explanations (default: the one "
                     "recorded when the index was encoded).")


def search_tevatron(args: argparse.Namespace) -> None:
    if not (args.query_reps and args.passage_reps and args.save_ranking_to):
        raise ConfigError("Tevatron style needs --query_reps, --passage_reps and --save_ranking_to")
    require_positive(args.depth, "--depth")
    q_ids, ids, scores = search_passage_shards(args)
    out = Path(args.save_ranking_to)
    if args.save_text:
        write_run(to_run(q_ids, ids, scores), out, fmt="tevatron")
    else:
        with atomic_open(out, "wb") as f:
            pickle.dump((scores, [[d for d in row if d is not None] for row in ids.tolist()]), f)
    logger.info("wrote %s (%d queries, depth %d)", out, len(q_ids), args.depth)


def search_pyserini(args: argparse.Namespace) -> None:
    from multiview_plugin.search import write_explanations

    if not args.output:
        raise ConfigError("--index needs --output")
    require_positive(args.hits, "--hits")
    if sharded(args):
        return write_sharded(args)
    searcher = open_index_searcher(args)
    q_reps, q_ids, ids, scores, depth = search_index(args, searcher)
    run = to_run(q_ids, ids, scores)
    if args.hybrid:
        run = hybrid_run(args, run, q_ids, depth)
    write_run(run, args.output, fmt=args.output_format, tag=args.run_tag)
    logger.info("wrote %s (%d queries, %d hits each)", args.output, len(run), args.hits)
    if args.explain:
        n = write_explanations(args.explain, q_ids, ids, scores, searcher.explain(q_reps, ids))
        logger.info("wrote %s (%d explained hits)", args.explain, n)


def write_sharded(args: argparse.Namespace) -> None:
    """--index a,b,c [--ray_address ...]: the shards searched as one, the run written."""
    q_ids, ids, scores, depth, dirs = search_sharded(args)
    run = to_run(q_ids, ids, scores)
    if args.hybrid:
        run = hybrid_run(args, run, q_ids, depth)
    write_run(run, args.output, fmt=args.output_format, tag=args.run_tag)
    logger.info("wrote %s (%d queries, %d hits each, %d shards)", args.output, len(run), args.hits, len(dirs))


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
