"""Mine hard negatives with a trained checkpoint into a new train file (DCSR-hard, ANCE-style).

    python -m multiview_plugin.driver.mine_negatives --model_name_or_path runs/dcsr --index indexes/dcsr \
        --dataset_path train.jsonl --corpus_path corpus.jsonl --output train.dcsr-hard.jsonl

Each train query is searched in the index at the vector level: a passage ranks by its best vector (for dcsr,
its best *sentence*). Positives are left out, and so are passages whose text contains an answer
(DPR's matching; queries without answers only lose their positives). The first ``--num_negatives`` remain.
For dcsr every mined negative passage also records ``"sentence"``: the index of its top-scoring sentence,
which dcsr training then uses as that passage's negative sentence (paper §4.4: sentence-specific hard
negatives beat passage-specific ones). The output is a legacy Tevatron train file; passages are written as
``{"docid", "text"}`` with the title already joined into the text (by ``--passage_field_separator``), so
training reads back the exact same passage strings.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from multiview_plugin.atomic import atomic_open
from multiview_plugin.cli import cap_depth, cli, setup_logging
from multiview_plugin.data.answers import has_answer
from multiview_plugin.data.readers import iter_train_records, load_corpus
from multiview_plugin.encoding.shards import check_finite_rows
from multiview_plugin.errors import ConfigError
from multiview_plugin.paths import refuse_output_over_input
from multiview_plugin.search.aggregators import first_occurrences, take_ranked
from multiview_plugin.text_options import PASSAGE_FIELD_SEPARATOR

if TYPE_CHECKING:
    from multiview_plugin.search import MultiVectorSearcher

logger = logging.getLogger("multiview_plugin.mine_negatives")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m multiview_plugin.driver.mine_negatives", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_name_or_path", required=True, help="Trained model folder (encodes the train queries).")
    p.add_argument("--index", required=True, help="Index folder of the corpus built with that model.")
    p.add_argument("--dataset_path", required=True, help="Train file (Tevatron jsonl, legacy or new format).")
    p.add_argument("--corpus_path", required=True, help="Corpus jsonl/tsv the index was built from (passage texts).")
    p.add_argument("--output", required=True, help="New train file to write (atomically).")
    p.add_argument("--depth", type=int, default=100, help="Passages retrieved per query before filtering "
                   "(default 100).")
    p.add_argument("--num_negatives", type=int, default=30, help="Hard negatives kept per query (default 30).")
    p.add_argument("--batch_size", type=int, default=128, help="Queries encoded and searched at once.")
    p.add_argument("--passage_field_separator", default=PASSAGE_FIELD_SEPARATOR,
                   help="Joins a passage's title and text.")
    p.add_argument("--device", help="cpu, cuda ... (default: cuda if available).")
    return p


def mine(searcher: MultiVectorSearcher, q_reps: np.ndarray, depth: int, first_row: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray]:
    """Top ``depth`` passages per query by their best vector: (document indices (Q, depth), -1 padded;
    the view index of each passage's best vector (Q, depth)). ``first_row``: each document's first index row."""
    store = searcher.store
    fetch = min(store.index.ntotal, int(np.ceil(depth * store.mean_views)) * 2)
    scores, rows = store.index.search(np.ascontiguousarray(q_reps, dtype=np.float32), fetch)
    docs = np.where(rows >= 0, store.row_doc[np.maximum(rows, 0)], -1)
    best_rows, _, _ = take_ranked(first_occurrences(docs), rows, scores, depth)
    doc = np.where(best_rows >= 0, store.row_doc[np.maximum(best_rows, 0)], -1)
    view = np.where(best_rows >= 0, best_rows - first_row[np.maximum(doc, 0)], -1)
    return doc, view


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from multiview_plugin.index.folder import index_files
    from multiview_plugin.index.meta import check_corpus_is_indexed
    from multiview_plugin.search import FaissStore, MultiVectorSearcher  # after --help: torch, Faiss

    setup_logging()
    if args.num_negatives < 1 or args.depth < 1:
        raise ConfigError("--depth and --num_negatives must be >= 1")
    refuse_output_over_input({"--output": args.output},
                             {"--dataset_path": args.dataset_path, "--corpus_path": args.corpus_path,
                              "--index": index_files(args.index)})
    searcher = MultiVectorSearcher(args.index, args.model_name_or_path, aggregation="max", device=args.device)
    if not isinstance(searcher.store, FaissStore):  # mining reads each hit's best view from the Faiss rows
        raise ConfigError(f"--index {args.index}: a {searcher.store.kind} index; mining hard negatives needs a Faiss "
                          "index of the corpus (driver.index without --backend qdrant)")
    sentences = searcher.encoder.config.model_name == "dcsr"
    check_corpus_is_indexed(searcher.meta, args.corpus_path, args.passage_field_separator)
    corpus = load_corpus(args.corpus_path, args.passage_field_separator)
    missing = [d for d in searcher.store.docids[:1000].tolist() if d not in corpus]
    if missing:
        raise ConfigError(f"{args.corpus_path} lacks docids of the index, e.g. {missing[:3]}: is it the same corpus?")
    records = list(iter_train_records(args.dataset_path, corpus, args.passage_field_separator))
    store = searcher.store
    depth = cap_depth(args.depth, len(store.docids), "--depth")
    passage_view = bool(getattr(searcher.encoder, "has_passage_view", False))
    written = short = 0
    with atomic_open(args.output) as out:
        for start in tqdm(range(0, len(records), args.batch_size), desc="mine", unit="batch"):
            batch = records[start:start + args.batch_size]
            q_reps = searcher.encode([r["query"] for r in batch])
            check_finite_rows(q_reps, [r["query_id"] for r in batch], f"{args.dataset_path} encoded by "
                              f"{args.model_name_or_path}", "query")
            doc, view = mine(searcher, q_reps, depth, store.doc_start)
            for rec, row_doc, row_view in zip(batch, doc.tolist(), view.tolist()):
                positives = set(rec["positive_docids"])
                negatives = []
                for d, j in zip(row_doc, row_view):
                    if d < 0 or len(negatives) == args.num_negatives:
                        break
                    docid = str(searcher.store.docids[d])
                    if docid in positives or (rec["answers"] and has_answer(rec["answers"], corpus[docid])):
                        continue
                    # a dcsr_passage_view hit (the document's last view) names no sentence: training then samples one
                    sentence = sentences and not (passage_view and j == store.doc_views[d] - 1)
                    negatives.append({"docid": docid, "text": corpus[docid], **({"sentence": j} if sentence else {})})
                short += len(negatives) < args.num_negatives
                line = {"query_id": rec["query_id"], "query": rec["query"], "answers": rec["answers"],
                        "positive_passages": [{"docid": d, "text": t}
                                              for d, t in zip(rec["positive_docids"], rec["positives"])],
                        "negative_passages": negatives}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                written += 1
    logger.info("wrote %s: %d queries (%d with fewer than %d negatives)%s", args.output, written, short,
                args.num_negatives, "; negatives carry their top sentence" if sentences else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
