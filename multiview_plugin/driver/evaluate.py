"""Evaluate a run: ranking metrics against qrels and/or DPR top-k answer accuracy.

    python -m multiview_plugin.driver.evaluate --run run.trec --qrels qrels.txt --metrics MRR@10 R@100 nDCG@10
    python -m multiview_plugin.driver.evaluate --run run.trec --answers topics.dpr.nq.test.txt \
        --corpus psgs_w100.tsv --topk 1 5 20 100 --save_retrieval retrieval.json
    python -m multiview_plugin.driver.evaluate --run run.trec --qrels eval_qrels.tsv \
        --answers eval_answers.jsonl --corpus corpus.jsonl --metrics R@1 R@5 R@20 --topk 1 5 20

Ranking metrics average over every query in the qrels (missing ones count as 0, like ``trec_eval -c``);
accuracies over every question in the answers file. DPR QA files have no ids: their qids are the 0-based
line numbers, as in Pyserini. Prints a table, every value in percent; ``--output_json`` also writes
``{metric: value}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from multiview_plugin.cli import cli, setup_logging
from multiview_plugin.data.answers import load_qa
from multiview_plugin.data.readers import iter_corpus, load_qrels, load_queries
from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.evaluation.answers import (
    build_retrieval,
    retrieval_accuracy,
    write_retrieval_json,
)
from multiview_plugin.evaluation.metrics import DEFAULT_METRICS, evaluate_run, to_measure
from multiview_plugin.evaluation.runs import RUN_FORMATS, Run, atomic_open, read_run
from multiview_plugin.paths import refuse_output_over_input

logger = logging.getLogger("multiview_plugin.evaluate")

_SEP = "\x1f"  # joins title and text while streaming the corpus (never part of real text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m multiview_plugin.driver.evaluate",
        description="Evaluate a run file: ranking metrics (ir_measures, trec_eval semantics) against qrels "
                    "and/or DPR top-k answer accuracy.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--run", required=True, help="Run file (trec 'qid Q0 docid rank score tag', msmarco "
                        "'qid docid rank' or tevatron 'qid docid score'; optionally .gz).")
    parser.add_argument("--run_format", choices=RUN_FORMATS, default=None,
                        help="Format of --run. Detected when omitted, only where the content is unambiguous: "
                             "6 columns: trec; 3 columns: tevatron if some third value is not an integer, msmarco "
                             "if the values are ranks 1, 2, ... per query in file order; any other 3-column file "
                             "of integers needs this flag (ranks and scores would give opposite orders).")
    parser.add_argument("--qrels", help="Relevance judgments: TREC 'qid 0 docid rel' or BEIR tsv.")
    parser.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS),
                        help="Ranking metrics (with --qrels): MRR@k, R@k / Recall@k, nDCG@k, P@k, MAP, or any "
                             "ir_measures measure string such as 'Success@5'.")
    parser.add_argument("--rel_level", type=int, default=1,
                        help="Minimum judgment counted as relevant by MRR, R, P and MAP (nDCG uses graded gains).")
    parser.add_argument("--answers",
                        help="Answers for top-k accuracy: an answers jsonl {query_id, answers} (e.g. the SQuAD "
                             "converter's eval_answers.jsonl) or a DPR QA file (qa.csv / anserini "
                             "topics.dpr.*.txt, qid = 0-based line number). Needs --corpus.")
    parser.add_argument("--corpus", help="Corpus the run retrieved from (jsonl or DPR psgs tsv), for --answers.")
    parser.add_argument("--queries", help="Queries file giving question texts for --save_retrieval when the "
                                          "answers file has none.")
    parser.add_argument("--topk", type=int, nargs="+", default=[1, 5, 20, 100],
                        help="Cutoffs of the top-k answer accuracy.")
    parser.add_argument("--regex", action="store_true",
                        help="Answers are regular expressions (CuratedTREC).")
    parser.add_argument("--lenient_match", action="store_true",
                        help="Also ignore punctuation and articles when matching answers (default: DPR's "
                             "exact token-sequence match).")
    parser.add_argument("--save_retrieval",
                        help="Write Pyserini's DPR retrieval json here (readable by "
                             "pyserini.eval.evaluate_dpr_retrieval).")
    parser.add_argument("--retrieval_without_text", action="store_true",
                        help="Leave the passage texts out of --save_retrieval (only docid, score, has_answer: "
                             "much smaller, still evaluable by Pyserini).")
    parser.add_argument("--output_json", help="Also write the metrics as a json object {metric: value}: ranking "
                        "metrics as fractions (as trec_eval and Pyserini report them), answer accuracies (Top*) in "
                        "percent (as DPR's tables; Pyserini's evaluate_dpr_retrieval prints them as fractions). The "
                        "printed table shows every value in percent.")
    parser.add_argument("--log_level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="Logging level (logs go to stderr).")
    return parser


def _require_file(path: str | None, flag: str) -> None:
    if path is not None and not Path(path).is_file():
        raise MultiViewError(f"{flag}: no such file: {path}")


def load_passages(path: str, docids: set[str]) -> dict[str, tuple[str, str]]:
    """Stream a corpus file and keep ``(title, text)`` of the given docids.

    Raises
    ------
    MultiViewError
        Some of ``docids`` are not in the corpus.
    """
    passages: dict[str, tuple[str, str]] = {}
    for docid, joined in iter_corpus(path, passage_field_separator=_SEP):
        if docid in docids:
            title, sep, text = joined.partition(_SEP)
            passages[docid] = (title, text) if sep else ("", joined)
    missing = docids - passages.keys()
    if missing:
        raise MultiViewError(f"{len(missing)} retrieved docids are not in the corpus {path} "
                             f"(e.g. {sorted(missing)[:3]}); was the run made with another corpus?")
    return passages


def answer_accuracy(run: Run, args: argparse.Namespace) -> dict[str, float]:
    """Top-k accuracy of ``run`` for ``--answers`` (and the retrieval json when asked)."""
    questions, answers = load_qa(args.answers)
    if args.queries:
        questions = {**load_queries(args.queries), **questions}
    if not answers:
        raise MultiViewError(f"{args.answers}: no questions")
    if not any(qid in answers for qid in run):
        logger.warning("none of the run's query ids is in %s (e.g. run %s vs answers %s): every accuracy is 0",
                       args.answers, list(run)[:3], list(answers)[:3])
    depth = max(args.topk)
    needed = {docid for qid, ranking in run.items() if qid in answers for docid, _ in ranking[:depth]}
    passages = load_passages(args.corpus, needed)
    retrieval = build_retrieval(run, questions, answers, passages, depth=depth, regex=args.regex,
                                lenient=args.lenient_match, store_text=not args.retrieval_without_text)
    if args.save_retrieval:
        write_retrieval_json(retrieval, args.save_retrieval)
    return retrieval_accuracy(retrieval, args.topk)


def format_table(results: dict[str, float]) -> str:
    """An aligned two-column table, every value in percent with 2 decimals: the ranking metrics (fractions, as
    trec_eval computes them) times 100, the answer accuracies (``Top*``, already percent) as they are."""
    rows = [(name, f"{value if name.startswith('Top') else 100.0 * value:.2f}") for name, value in results.items()]
    w_name = max(len("metric"), *(len(n) for n, _ in rows))
    w_value = max(len("value (%)"), *(len(v) for _, v in rows))
    lines = [f"{'metric':<{w_name}}  {'value (%)':>{w_value}}", f"{'-' * w_name}  {'-' * w_value}"]
    lines += [f"{name:<{w_name}}  {value:>{w_value}}" for name, value in rows]
    return "\n".join(lines)


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(getattr(logging, args.log_level))
    if not args.qrels and not args.answers:
        raise ConfigError("nothing to evaluate: give --qrels (ranking metrics) and/or --answers with --corpus "
                          "(top-k answer accuracy)")
    if args.answers and not args.corpus:
        raise ConfigError("--answers needs --corpus (the passages the run retrieved)")
    if min(args.topk) < 1:
        raise ConfigError(f"--topk values must be positive, got {args.topk}")
    if args.qrels:
        for name in args.metrics:
            to_measure(name, args.rel_level)  # unknown names fail before the (possibly long) reading
    for path, flag in ((args.run, "--run"), (args.qrels, "--qrels"), (args.answers, "--answers"),
                       (args.corpus, "--corpus"), (args.queries, "--queries")):
        _require_file(path, flag)
    refuse_output_over_input({"--output_json": args.output_json, "--save_retrieval": args.save_retrieval},
                             {"--run": args.run, "--qrels": args.qrels, "--answers": args.answers,
                              "--corpus": args.corpus, "--queries": args.queries})

    run = read_run(args.run, args.run_format)
    results: dict[str, float] = {}
    if args.qrels:
        qrels = load_qrels(args.qrels)  # evaluate_run warns about run queries without judgments
        results.update(evaluate_run(run, qrels, args.metrics, rel_level=args.rel_level))
    if args.answers:
        results.update(answer_accuracy(run, args))

    print(format_table(results))
    if args.output_json:
        with atomic_open(args.output_json) as f:
            json.dump(results, f, indent=2)
            f.write("\n")
        logger.info("wrote %s", args.output_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
