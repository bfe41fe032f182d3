"""SQuAD v1.1 -> Tevatron files, following the "SQuAD-dev multi-view" protocol (docs/data-formats.md).

The corpus is every paragraph of the file (docid ``<article index>_<paragraph index>``, title = article
title with ``_`` -> space). Questions of ``train_articles`` become Tevatron legacy train records with the
gold paragraph as positive and BM25 hard negatives (top-ranked non-gold paragraphs of the whole corpus);
questions of ``eval_articles`` become evaluation queries, answers and qrels against the whole corpus.

CLI::

    python -m multiview_plugin.data.squad --input $DATA/squad/dev-v1.1.json --output_dir DIR
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from multiview_plugin.atomic import write_lines
from multiview_plugin.data.topics import topic_lines

from .bm25 import bm25_negatives
from .readers import InputFormatError, format_passage, open_text

logger = logging.getLogger(__name__)

NEGATIVE_SOURCES = ("bm25", "random")


@dataclass
class SquadSplit:
    """A SQuAD file converted to a retrieval corpus, Tevatron train records and an evaluation set.

    Attributes
    ----------
    corpus : dict[str, dict]
        Docid ``"<article>_<paragraph>"`` -> ``{"docid", "title", "text"}``, every paragraph of the file.
    train : list[dict]
        Tevatron legacy train records: ``{"query_id", "query", "answers", "positive_passages",
        "negative_passages"}``.
    eval_queries : dict[str, str]
        Question id -> question, for the evaluation articles.
    eval_answers : dict[str, list[str]]
        Question id -> unique answer texts (annotation order kept).
    eval_qrels : dict[str, dict[str, int]]
        Question id -> ``{gold docid: 1}``.
    """

    corpus: dict[str, dict] = field(default_factory=dict)
    train: list[dict] = field(default_factory=list)
    eval_queries: dict[str, str] = field(default_factory=dict)
    eval_answers: dict[str, list[str]] = field(default_factory=dict)
    eval_qrels: dict[str, dict[str, int]] = field(default_factory=dict)


def _load_squad(path: str | os.PathLike) -> list[dict]:
    """Read and validate a SQuAD v1.1 json file (gzipped if its name ends in ``.gz``); return its articles."""
    path = str(path)
    try:
        with open_text(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as err:
        raise InputFormatError(path, err.lineno, None,
                               f"not a SQuAD v1.1 json file: invalid JSON ({err.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise InputFormatError(path, None, "data",
                               "not a SQuAD v1.1 json file: expected an object with a 'data' list")
    version = str(data.get("version", "1.1"))
    if not version.lstrip("v").startswith("1."):
        raise InputFormatError(path, None, "version", f"expected SQuAD v1.1, got version {version!r}")
    for ai, article in enumerate(data["data"]):
        where = f"data[{ai}]"
        if not isinstance(article, dict) or not isinstance(article.get("title"), str) \
                or not isinstance(article.get("paragraphs"), list):
            raise InputFormatError(path, None, where,
                                   "expected an article with 'title' and a 'paragraphs' list")
        for pi, para in enumerate(article["paragraphs"]):
            if not isinstance(para, dict) or not isinstance(para.get("context"), str) \
                    or not isinstance(para.get("qas"), list):
                raise InputFormatError(path, None, f"{where}.paragraphs[{pi}]",
                                       "expected a paragraph with a 'context' string and a 'qas' list")
            for qi, qa in enumerate(para["qas"]):
                field_name = f"{where}.paragraphs[{pi}].qas[{qi}]"
                ok = isinstance(qa, dict) and all(isinstance(qa.get(k), str) for k in ("id", "question")) \
                    and isinstance(qa.get("answers"), list) \
                    and all(isinstance(a, dict) and isinstance(a.get("text"), str) for a in qa["answers"])
                if not ok:
                    raise InputFormatError(path, None, field_name, "expected a question with 'id', "
                                           "'question' and 'answers' [{'text'}]")
                if qa.get("is_impossible"):
                    raise InputFormatError(path, None, field_name,
                                           "unanswerable question (SQuAD v2.0?); expected SQuAD v1.1")
    return data["data"]


def _check_ranges(train_articles: range, eval_articles: range, num_articles: int) -> None:
    for name, articles in (("train_articles", train_articles), ("eval_articles", eval_articles)):
        if len(articles) and (min(articles) < 0 or max(articles) >= num_articles):
            raise ValueError(f"{name} {articles} is out of bounds: the file has {num_articles} articles "
                             f"(indices 0-{num_articles - 1})")
    overlap = sorted(set(train_articles) & set(eval_articles))
    if overlap:
        raise ValueError(f"train_articles {train_articles} and eval_articles {eval_articles} overlap "
                         f"(articles {overlap[0]}-{overlap[-1]})")


def _unique(texts: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(t.strip() for t in texts if t.strip()))


def random_negatives(num_passages: int, gold: Sequence[int] | np.ndarray, num_negatives: int,
                     seed: int) -> np.ndarray:
    """Distinct random non-gold passage indices per query, ``[len(gold), num_negatives]``."""
    rng = np.random.default_rng(seed)
    gold = np.asarray(gold, dtype=np.int64)
    # sample from the num_passages - 1 non-gold slots, then shift indices at/after the gold one up by one
    picks = np.stack([rng.choice(num_passages - 1, size=num_negatives, replace=False) for _ in gold]) \
        if len(gold) else np.zeros((0, num_negatives), dtype=np.int64)
    return picks + (picks >= gold[:, None])


def convert_squad(path: str | os.PathLike, train_articles: range = range(32),
                  eval_articles: range = range(32, 48), num_negatives: int = 1,
                  negatives_from: str = "bm25", seed: int = 42) -> SquadSplit:
    """Convert a SQuAD v1.1 file following the SQuAD-dev multi-view protocol (docs/data-formats.md).

    Parameters
    ----------
    path : str or os.PathLike
        SQuAD v1.1 json (e.g. ``dev-v1.1.json``).
    train_articles : range
        Article indices whose questions become train records.
    eval_articles : range
        Article indices whose questions become the evaluation set (must not overlap ``train_articles``).
    num_negatives : int
        Hard negatives per train question.
    negatives_from : {"bm25", "random"}
        ``"bm25"``: top BM25-ranked non-gold paragraphs of the whole corpus (title + text, English
        stopwords removed); ``"random"``: random non-gold paragraphs drawn with ``seed``.
    seed : int
        Seed for ``negatives_from="random"``.

    Returns
    -------
    SquadSplit
        Corpus of every paragraph, train records, evaluation queries / answers / qrels.

    Raises
    ------
    InputFormatError
        The file is not SQuAD v1.1 json.
    ValueError
        Article ranges out of bounds or overlapping, or bad negative settings.
    """
    if negatives_from not in NEGATIVE_SOURCES:
        raise ValueError(f"negatives_from must be one of {NEGATIVE_SOURCES}, got {negatives_from!r}")
    if num_negatives < 0:
        raise ValueError(f"num_negatives must be >= 0, got {num_negatives}")
    articles = _load_squad(path)
    _check_ranges(train_articles, eval_articles, len(articles))

    split = SquadSplit()
    train_set, eval_set = set(train_articles), set(eval_articles)
    train_qas: list[tuple[dict, str]] = []  # (qa, gold docid)
    seen_ids: set[str] = set()
    for ai, article in enumerate(articles):
        title = article["title"].replace("_", " ")
        for pi, para in enumerate(article["paragraphs"]):
            docid = f"{ai}_{pi}"
            split.corpus[docid] = {"docid": docid, "title": title, "text": para["context"]}
            for qa in para["qas"]:
                if ai not in train_set and ai not in eval_set:
                    continue
                if qa["id"] in seen_ids:
                    raise InputFormatError(str(path), None, "id", f"duplicate question id {qa['id']!r}")
                seen_ids.add(qa["id"])
                if ai in train_set:
                    train_qas.append((qa, docid))
                else:
                    split.eval_queries[qa["id"]] = qa["question"].strip()
                    split.eval_answers[qa["id"]] = _unique(a["text"] for a in qa["answers"])
                    split.eval_qrels[qa["id"]] = {docid: 1}
    if num_negatives > len(split.corpus) - 1:
        raise ValueError(f"num_negatives={num_negatives} but the corpus has only "
                         f"{len(split.corpus)} paragraphs")

    docids = list(split.corpus)
    index = {d: i for i, d in enumerate(docids)}
    gold = np.array([index[d] for _, d in train_qas], dtype=np.int64)
    if negatives_from == "bm25":
        passages = [format_passage(p["title"], p["text"]) for p in split.corpus.values()]
        negatives = np.array(bm25_negatives(passages, [qa["question"] for qa, _ in train_qas], gold.tolist(),
                                            num_negatives), dtype=np.int64)
    else:
        negatives = random_negatives(len(docids), gold, num_negatives, seed)
    for (qa, docid), negs in zip(train_qas, negatives.tolist()):
        split.train.append({
            "query_id": qa["id"], "query": qa["question"].strip(),
            "answers": _unique(a["text"] for a in qa["answers"]),
            "positive_passages": [dict(split.corpus[docid])],
            "negative_passages": [dict(split.corpus[docids[j]]) for j in negs],
        })
    logger.info("SQuAD %s: %d articles, %d paragraphs; %d train questions (articles %s, "
                "%d %s negatives each); %d eval questions (articles %s)", path, len(articles),
                len(split.corpus), len(split.train),
                _fmt_range(train_articles), num_negatives, negatives_from, len(split.eval_queries),
                _fmt_range(eval_articles))
    return split


def new_format_record(record: dict) -> dict:
    """A legacy train record in Tevatron's new format: document ids, resolved against corpus.jsonl."""
    return {"query_id": record["query_id"], "query_text": record["query"], "answers": record["answers"],
            "positive_document_ids": [p["docid"] for p in record["positive_passages"]],
            "negative_document_ids": [p["docid"] for p in record["negative_passages"]]}


def write_squad_split(split: SquadSplit, output_dir: str | os.PathLike,
                      train_format: str = "legacy") -> dict[str, Path]:
    """Write a :class:`SquadSplit` as Tevatron / TREC files, each atomically.

    Parameters
    ----------
    split : SquadSplit
        The converted data.
    output_dir : str or os.PathLike
        Created if missing.
    train_format : {"legacy", "new"}
        train.jsonl in Tevatron's legacy format (passage texts inline) or its new one (``query_text``,
        ``positive_document_ids``, ``negative_document_ids``; train with ``--corpus_path corpus.jsonl``).

    Returns
    -------
    dict[str, Path]
        ``corpus`` (corpus.jsonl ``{"docid","title","text"}``), ``train`` (train.jsonl, Tevatron legacy),
        ``eval_queries`` (eval_queries.jsonl ``{"query_id","query"}``), ``eval_topics`` (the same queries as
        eval_queries.tsv ``qid<TAB>text``, the topics file stock Pyserini reads), ``eval_qrels`` (eval_qrels.tsv,
        TREC ``qid 0 docid 1``, space separated) and ``eval_answers`` (eval_answers.jsonl
        ``{"query_id","answers"}``).
    """
    if train_format not in ("legacy", "new"):
        raise ValueError(f"train_format must be 'legacy' or 'new', got {train_format!r}")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)

    def dumps(obj: object) -> str:
        return json.dumps(obj, ensure_ascii=False)

    contents = {
        "corpus": ("corpus.jsonl", (dumps(p) for p in split.corpus.values())),
        "train": ("train.jsonl", (dumps(r if train_format == "legacy" else new_format_record(r))
                                  for r in split.train)),
        "eval_queries": ("eval_queries.jsonl",
                         (dumps({"query_id": q, "query": t}) for q, t in split.eval_queries.items())),
        "eval_topics": ("eval_queries.tsv", topic_lines(split.eval_queries)),
        "eval_qrels": ("eval_qrels.tsv", (f"{q} 0 {d} {r}" for q, rel in split.eval_qrels.items()
                                          for d, r in rel.items())),
        "eval_answers": ("eval_answers.jsonl",
                         (dumps({"query_id": q, "answers": a}) for q, a in split.eval_answers.items())),
    }
    paths = {}
    for key, (name, lines) in contents.items():
        paths[key] = out / name
        write_lines(paths[key], lines)
    logger.info("Wrote %s to %s", ", ".join(name for name, _ in contents.values()), out)
    return paths


def _fmt_range(r: range) -> str:
    return f"{r.start}-{r.stop - 1}" if len(r) else "none"


def parse_article_range(text: str) -> range:
    """Parse an inclusive article range ``"A-B"`` (or a single index ``"A"``) into ``range(A, B + 1)``."""
    start, _, stop = text.strip().partition("-")
    try:
        lo, hi = int(start), int(stop or start)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an article range like '0-31', got {text!r}") from None
    if lo < 0 or hi < lo:
        raise argparse.ArgumentTypeError(f"expected 0 <= A <= B in article range 'A-B', got {text!r}")
    return range(lo, hi + 1)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: convert a SQuAD v1.1 file and write the Tevatron / TREC files."""
    parser = argparse.ArgumentParser(
        prog="python -m multiview_plugin.data.squad",
        description="Convert SQuAD v1.1 json to a retrieval corpus, Tevatron train records with hard "
                    "negatives and an evaluation set (the SQuAD-dev multi-view protocol of docs/data-formats.md).")
    parser.add_argument("--input", required=True,
                        help="SQuAD v1.1 json file, e.g. $DATA/squad/dev-v1.1.json")
    parser.add_argument("--output_dir", required=True,
                        help="folder for corpus.jsonl, train.jsonl, eval_queries.jsonl (and .tsv), eval_qrels.tsv, "
                             "eval_answers.jsonl (created if missing)")
    parser.add_argument("--train_articles", type=parse_article_range, default=range(32),
                        help="inclusive range of article indices whose questions are used for training "
                             "(default 0-31)")
    parser.add_argument("--eval_articles", type=parse_article_range, default=range(32, 48),
                        help="inclusive range of article indices whose questions are evaluated "
                             "(default 32-47)")
    parser.add_argument("--num_negatives", type=int, default=1,
                        help="hard negatives per train question (default 1)")
    parser.add_argument("--negatives_from", choices=NEGATIVE_SOURCES, default="bm25",
                        help="'bm25': top BM25-ranked non-gold paragraphs of the whole corpus; "
                             "'random': random non-gold paragraphs (default bm25)")
    parser.add_argument("--seed", type=int, default=42,
                        help="random seed for --negatives_from random (default 42)")
    parser.add_argument("--train_format", choices=["legacy", "new"], default="legacy",
                        help="train.jsonl in Tevatron's legacy format (passages inline) or its new one (document "
                             "ids; train with --corpus_path corpus.jsonl). Default legacy")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    try:
        split = convert_squad(args.input, args.train_articles, args.eval_articles, args.num_negatives,
                              args.negatives_from, args.seed)
    except (ValueError, OSError) as err:
        parser.exit(2, f"error: {err}\n")
    for key, path in write_squad_split(split, args.output_dir, args.train_format).items():
        logger.info("%s: %s", key, path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
