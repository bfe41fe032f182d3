"""Carve a model-selection dev split out of a train file, by groups of passages (e.g. SQuAD articles).

Questions about the same article share paragraphs, so a random sample of questions would leave dev paragraphs
among the training positives. Carving whole groups keeps dev questions *and* their passages unseen: the dev
corpus is every passage of the dev groups (small, so it can be re-encoded at every dev evaluation), and the
remaining train records never mention a dev passage as positive or negative.

    python -m multiview_plugin.data.dev_split --train train.jsonl --corpus corpus.jsonl --output_dir dev \\
        --groups 28-31      # SQuAD-dev protocol: articles 28-31 of the 0-31 training articles
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from multiview_plugin.atomic import write_jsonl, write_lines
from multiview_plugin.cli import cli, setup_logging
from multiview_plugin.data.readers import InputFormatError, iter_jsonl
from multiview_plugin.data.squad import parse_article_range

logger = logging.getLogger(__name__)


def article_of(docid: str) -> str:
    """The group of a SQuAD-protocol docid ``<article>_<paragraph>``."""
    return docid.rsplit("_", 1)[0]


def carve_dev_split(train_path: str | os.PathLike, corpus_path: str | os.PathLike, output_dir: str | os.PathLike,
                    dev_groups: set[str], group_of: Callable[[str], str] = article_of) -> dict[str, Path]:
    """Split a legacy train file into ``train.jsonl`` and a dev split.

    ``train.jsonl`` keeps the records of other groups, minus their negatives from dev groups (a record left
    without negatives is dropped); ``dev_queries.jsonl`` / ``dev_qrels.tsv`` / ``dev_corpus.jsonl`` hold the dev
    groups' questions, their gold passages, and every corpus passage of those groups. Returns the paths by key
    (``train``, ``dev_queries``, ``dev_qrels``, ``dev_corpus``)."""
    out = Path(output_dir)
    train, dev_queries, dev_qrels, dropped = [], [], [], 0
    for line_no, rec in iter_jsonl(train_path):
        positives = [p["docid"] for p in rec.get("positive_passages", [])]
        if not positives:
            raise InputFormatError(str(train_path), line_no, "positive_passages", "expected at least one passage")
        if group_of(positives[0]) in dev_groups:
            dev_queries.append({"query_id": rec["query_id"], "query": rec["query"]})
            dev_qrels += [f"{rec['query_id']} 0 {d} 1" for d in positives]
        else:
            negatives = [p for p in rec.get("negative_passages", []) if group_of(p["docid"]) not in dev_groups]
            if rec.get("negative_passages") and not negatives:
                dropped += 1  # its only negatives were dev passages: keeping it would need them
                continue
            train.append(dict(rec, negative_passages=negatives))
    if not dev_queries:
        raise InputFormatError(str(train_path), None, "positive_passages",
                               f"no train record belongs to the dev groups {sorted(dev_groups)}")
    corpus = [row for _, row in iter_jsonl(corpus_path)
              if group_of(str(row.get("docid", row.get("_id")))) in dev_groups]
    paths = {"train": out / "train.jsonl", "dev_queries": out / "dev_queries.jsonl",
             "dev_qrels": out / "dev_qrels.tsv", "dev_corpus": out / "dev_corpus.jsonl"}
    write_jsonl(paths["train"], train)
    write_jsonl(paths["dev_queries"], dev_queries)
    write_lines(paths["dev_qrels"], dev_qrels)
    write_jsonl(paths["dev_corpus"], corpus)
    logger.info("dev split: %d train records (%d dropped: all their negatives were dev passages); %d dev "
                "questions over %d passages of groups %s", len(train), dropped, len(dev_queries), len(corpus),
                ",".join(sorted(dev_groups)))
    return paths


def parse_groups(text: str) -> set[str]:
    """``28-31`` or ``3,5,9`` (or a mix) → group names."""
    groups: set[str] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part.replace("-", "").isdigit():  # an article number or range: SQuAD's own range parser
            groups.update(map(str, parse_article_range(part)))
        else:
            groups.add(part)
    return groups


@cli
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m multiview_plugin.data.dev_split", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="Legacy Tevatron train jsonl with docids on its passages.")
    p.add_argument("--corpus", required=True, help="Corpus jsonl the train file's passages come from.")
    p.add_argument("--output_dir", required=True, help="Where train.jsonl and the dev_* files are written.")
    p.add_argument("--groups", required=True, help="Dev groups: SQuAD article numbers, e.g. 28-31 or 3,5,9 "
                   "(a docid's group is the part before its last '_').")
    args = p.parse_args(argv)
    setup_logging()
    carve_dev_split(args.train, args.corpus, args.output_dir, parse_groups(args.groups))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
