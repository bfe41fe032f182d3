"""A BEIR folder with training judgments → Tevatron train file + a carved dev set (the SciFact protocol).

The SciFact protocol (docs/data-formats.md): train on ``qrels/train.tsv``, tune and report on a dev split carved
from it (SciFact's test judgments are kept elsewhere). A fixed, seeded sample of ``dev_size`` judged train
queries becomes the dev set; the other queries are training records with all their judged documents as
positives and the top non-positive BM25 documents as hard negatives.

    python -m multiview_plugin.data.beir --beir_dir $DATA/beir/scifact --output_dir data/scifact
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from multiview_plugin.atomic import write_jsonl, write_lines
from multiview_plugin.cli import cli, setup_logging
from multiview_plugin.data.bm25 import bm25_negatives
from multiview_plugin.data.readers import InputFormatError, PathLike, load_beir
from multiview_plugin.data.topics import topic_lines

logger = logging.getLogger(__name__)


def convert_beir(beir_dir: PathLike, output_dir: PathLike, split: str = "train", dev_size: int = 200,
                 num_negatives: int = 1, seed: int = 42) -> dict[str, Path]:
    """Write ``corpus.jsonl``, ``train.jsonl``, ``eval_queries.jsonl`` (and ``eval_queries.tsv``, ``qid<TAB>text``
    for stock Pyserini) and ``eval_qrels.tsv`` (TREC) under
    ``output_dir`` (each atomically); returns their paths by the same keys as the SQuAD converter."""
    corpus, queries, qrels = load_beir(beir_dir, split)
    judged = [q for q in queries if any(r > 0 for r in qrels[q].values())]
    if dev_size >= len(judged):
        raise InputFormatError(str(beir_dir), None, None, f"--dev_size {dev_size} leaves no training queries "
                               f"({len(judged)} judged in {split})")
    dev = set(random.Random(seed).sample(judged, dev_size))
    train_q = [q for q in judged if q not in dev]
    docids = list(corpus)
    index = {d: i for i, d in enumerate(docids)}
    missing = sorted({d for q in judged for d in qrels[q] if d not in index})
    if missing:
        raise InputFormatError(str(beir_dir), None, None, f"judged documents not in the corpus: {missing[:5]}")
    gold = [[index[d] for d, r in qrels[q].items() if r > 0] for q in train_q]
    negatives = bm25_negatives([corpus[d] for d in docids], [queries[q] for q in train_q], gold, num_negatives)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / name for k, name in (("corpus", "corpus.jsonl"), ("train", "train.jsonl"),
                                           ("eval_queries", "eval_queries.jsonl"), ("eval_topics", "eval_queries.tsv"),
                                           ("eval_qrels", "eval_qrels.tsv"))}

    def passage(docid: str) -> dict:
        return {"docid": docid, "text": corpus[docid]}

    write_jsonl(paths["corpus"], (passage(d) for d in docids))
    write_jsonl(paths["train"], ({"query_id": q, "query": queries[q], "answers": [],
                                  "positive_passages": [passage(docids[i]) for i in g],
                                  "negative_passages": [passage(docids[i]) for i in negs]}
                                 for q, g, negs in zip(train_q, gold, negatives)))
    dev_q = [q for q in queries if q in dev]  # queries-file order
    write_jsonl(paths["eval_queries"], ({"query_id": q, "query": queries[q]} for q in dev_q))
    write_lines(paths["eval_topics"], topic_lines({q: queries[q] for q in dev_q}))
    write_lines(paths["eval_qrels"], (f"{q} 0 {d} {r}" for q in dev_q for d, r in qrels[q].items()))
    logger.info("BEIR %s: %d documents; %d train queries (%d BM25 negatives each), %d dev queries carved from %s",
                beir_dir, len(docids), len(train_q), num_negatives, len(dev_q), split)
    return paths


@cli
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m multiview_plugin.data.beir", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--beir_dir", required=True, help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).")
    p.add_argument("--output_dir", required=True, help="Where the Tevatron/TREC files go.")
    p.add_argument("--split", default="train", help="Judgments to train on (default train).")
    p.add_argument("--dev_size", type=int, default=200, help="Judged queries carved out as the dev set (default 200).")
    p.add_argument("--num_negatives", type=int, default=1, help="BM25 hard negatives per train query (default 1).")
    p.add_argument("--seed", type=int, default=42, help="Seed of the dev sample.")
    args = p.parse_args(argv)
    setup_logging()
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    convert_beir(args.beir_dir, args.output_dir, args.split, args.dev_size, args.num_negatives, args.seed)
    return 0

if __name__ == "__main__":
    sys.exit(main())
