"""View usage of a multi-vector index: do the views specialise or collapse? (MVR paper §5.2, and more.)

    python -m multiview_plugin.driver.analyze --index indexes/mvr --topics queries.tsv --qrels qrels.txt \
        --encoder runs/mvr --output_dir analysis/mvr

Over the (query, relevant document) pairs of the qrels, with each document's view scores f_i(q, d) read from the
index:

* Local Variation (paper eq. 9) on the view scores normalised over the document's views, softmax(f / τ), as the
  paper (τ = ``--lv_temperature``, 1 by default; also at the model's training τ, and on raw scores);
* view perplexity (eq. 10): per document, exp(entropy) of which view wins over the queries that judge it relevant,
  averaged over documents (also over those with at least two queries, where it can exceed 1);
* per-view win counts: which view index wins for relevant documents, and for the top ``--hits`` hits of a search;
* the distribution of views per document, and the mean normalised score of the best, second, ... view.

Writes ``analysis.json`` (the numbers) and ``view_usage.png`` (the plots) into ``--output_dir``. From Python:
:func:`multiview_plugin.evaluation.view_usage.analyze_index` returns the numbers,
:func:`~multiview_plugin.evaluation.view_usage.write_plots` draws them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from multiview_plugin.atomic import atomic_open
from multiview_plugin.cli import cli, setup_logging
from multiview_plugin.errors import ConfigError
from multiview_plugin.paths import refuse_output_over_input

logger = logging.getLogger("multiview_plugin.analyze")

ANALYSIS_FILE, PLOT_FILE = "analysis.json", "view_usage.png"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m multiview_plugin.driver.analyze", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", help="Index folder (from multiview_plugin.driver.index).")
    p.add_argument("--topics", help="Queries: jsonl {query_id, query}, BEIR queries.jsonl or qid<TAB>text.")
    p.add_argument("--qrels", help="Relevance judgments (TREC qrels or BEIR tsv): the (query, relevant document) "
                   "pairs analysed.")
    p.add_argument("--encoder", help="Saved model folder that encodes the topics.")
    p.add_argument("--output_dir", required=True, help=f"Where {ANALYSIS_FILE} and {PLOT_FILE} go.")
    p.add_argument("--hits", type=int, default=10, help="Top hits per query whose winning views are counted "
                   "(default 10).")
    p.add_argument("--lv_temperature", type=float, default=1.0, help="τ of the softmax normalising view scores for "
                   "Local Variation (default 1, the paper's; the model's τ is also reported).")
    p.add_argument("--aggregation", help="Ranking for the top-hit counts (default: the index's).")
    p.add_argument("--title", help="Plot title (default: model, pairs and queries).")
    p.add_argument("--replot", action="store_true", help=f"Only redraw {PLOT_FILE} from the {ANALYSIS_FILE} "
                   "already in --output_dir (no index, topics or encoder needed).")
    return p


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from multiview_plugin.evaluation.view_usage import analyze_index, write_plots  # after --help: torch, Faiss
    from multiview_plugin.index.folder import index_files

    setup_logging()
    if args.lv_temperature <= 0 or args.hits < 1:
        raise ConfigError("--lv_temperature must be > 0 and --hits >= 1")
    out = Path(args.output_dir)
    if args.replot:
        if not (out / ANALYSIS_FILE).is_file():
            raise ConfigError(f"--replot: {out / ANALYSIS_FILE} does not exist")
        write_plots(json.loads((out / ANALYSIS_FILE).read_text(encoding="utf-8")), out / PLOT_FILE, args.title)
        logger.info("redrew %s", out / PLOT_FILE)
        return 0
    missing = [f"--{k}" for k in ("index", "topics", "qrels", "encoder") if not getattr(args, k)]
    if missing:
        raise ConfigError(f"analysis needs {', '.join(missing)} (or --replot)")
    refuse_output_over_input({f"--output_dir's {ANALYSIS_FILE}": out / ANALYSIS_FILE,
                              f"--output_dir's {PLOT_FILE}": out / PLOT_FILE},
                             {"--topics": args.topics, "--qrels": args.qrels, "--index": index_files(args.index)})
    result = analyze_index(args.index, args.topics, args.qrels, args.encoder, hits=args.hits,
                           lv_temperature=args.lv_temperature, aggregation=args.aggregation)
    with atomic_open(out / ANALYSIS_FILE) as f:
        f.write(json.dumps(result, indent=2) + "\n")
    write_plots(result, out / PLOT_FILE, args.title)
    summary = {k: result[k] for k in ("local_variation", "view_perplexity", "relevant_wins") if k in result}
    logger.info("wrote %s and %s: %s", out / ANALYSIS_FILE, out / PLOT_FILE, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
