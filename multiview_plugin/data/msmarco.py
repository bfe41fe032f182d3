"""MS MARCO passage files → Tevatron train jsonl with BM25 hard negatives.

Reads the official ``collection.tsv`` (``pid<TAB>passage``), ``queries.train.tsv`` (``qid<TAB>query``) and
``qrels.train.tsv`` (``qid 0 pid 1``), and writes legacy Tevatron records whose negatives are the top BM25
passages (bm25s) that are not judged relevant — what Tevatron's ``msmarco-passage`` train set holds.

    python -m multiview_plugin.data.msmarco --collection collection.tsv --queries queries.train.tsv \
        --qrels qrels.train.tsv --output train.jsonl --num_negatives 30
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from multiview_plugin.atomic import write_jsonl
from multiview_plugin.cli import cli, setup_logging
from multiview_plugin.data.bm25 import bm25_negatives
from multiview_plugin.data.readers import InputFormatError, PathLike, iter_corpus, load_qrels, load_queries

logger = logging.getLogger(__name__)


def convert_msmarco(collection: PathLike, queries: PathLike, qrels: PathLike, output: PathLike,
                    num_negatives: int = 30, max_queries: int | None = None) -> dict[str, int]:
    """Write the train file (atomically); returns counts. ``max_queries`` keeps the first N judged queries."""
    corpus = dict(iter_corpus(collection))
    texts = load_queries(queries)
    judged = load_qrels(qrels)
    qids = [q for q in texts if any(r > 0 for r in judged.get(q, {}).values())][:max_queries]
    index = {d: i for i, d in enumerate(corpus)}
    docids = list(corpus)
    gold = []
    for q in qids:
        missing = [d for d in judged[q] if d not in index]
        if missing:
            raise InputFormatError(str(qrels), None, None, f"query {q}: judged passages {missing[:3]} are not in "
                                   f"{collection}")
        gold.append([index[d] for d, r in judged[q].items() if r > 0])
    negatives = bm25_negatives([corpus[d] for d in docids], [texts[q] for q in qids], gold, num_negatives)
    write_jsonl(output, ({"query_id": q, "query": texts[q],
                          "positive_passages": [{"docid": docids[i], "text": corpus[docids[i]]} for i in g],
                          "negative_passages": [{"docid": docids[i], "text": corpus[docids[i]]} for i in negs]}
                         for q, g, negs in zip(qids, gold, negatives)))
    logger.info("MS MARCO: %d passages, %d train queries with %d BM25 negatives each → %s", len(docids), len(qids),
                num_negatives, output)
    return {"queries": len(qids), "passages": len(docids)}


@cli
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m multiview_plugin.data.msmarco", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--collection", required=True, help="collection.tsv (pid<TAB>passage).")
    p.add_argument("--queries", required=True, help="queries.train.tsv (qid<TAB>query).")
    p.add_argument("--qrels", required=True, help="qrels.train.tsv (TREC: qid 0 pid 1).")
    p.add_argument("--output", required=True, help="Train jsonl to write.")
    p.add_argument("--num_negatives", type=int, default=30, help="BM25 negatives per query (default 30).")
    p.add_argument("--max_queries", type=int, help="Only the first N judged queries.")
    args = p.parse_args(argv)
    setup_logging()
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    convert_msmarco(args.collection, args.queries, args.qrels, args.output, args.num_negatives, args.max_queries)
    return 0

if __name__ == "__main__":
    sys.exit(main())
