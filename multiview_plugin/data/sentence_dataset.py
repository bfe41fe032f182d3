"""DCSR's sentence-level training data (Wu et al., 2022, §3.2).

For each query:

* **positive**: a sentence of a positive passage that contains an answer string (DPR's normalised token
  match). Datasets without answers (MS MARCO, BEIR): the sentence sharing the most content words with the
  query. Only sentences that fit in ``passage_max_len`` count; a query whose positives have no such sentence
  is skipped, and the skips are counted and logged.
* ``in_passage_negatives`` **in-passage negatives**: other sentences of the positive passage without an
  answer; when the passage has too few, sentences of a hard-negative passage stand in (as the paper does).
* ``bm25_negatives`` **hard-negative sentences**: one random sentence from each of that many hard-negative
  passages (preferring sentences without an answer); a mined train file's per-passage ``sentence`` (see
  :mod:`multiview_plugin.driver.mine_negatives`) picks that sentence instead.
* **in-batch negatives**: every other query's selected sentences.

Passages are encoded whole; the selected sentences are picked out of the encodings, so an in-passage
negative costs no extra encoding. Sampling is deterministic in (seed, epoch, item).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Any

import datasets
import torch
from torch.utils.data import Dataset

from multiview_plugin.data.dataset import _error_at, content_keys, require_negatives
from multiview_plugin.data.sentences import answer_sentences, best_overlap_sentence

logger = logging.getLogger(__name__)

PREPARED_VERSION = "dcsr-sentences-1"


def positive_sentences(query: str, answers: Sequence[str], positives: Sequence[str], formatter: Any
                       ) -> list[list[int]]:
    """For each positive passage, the indices of its kept sentences that are positives for ``query``.

    With answers: every kept sentence containing one (possibly none). Without: the best-overlap kept sentence.
    """
    sentence_lists = [formatter.split(p) for p in positives]
    plans = formatter.plan(sentence_lists)
    out = []
    for sentences, kept in zip(sentence_lists, plans):
        sentences = sentences[:len(kept)]
        if not sentences:
            out.append([])
        elif answers:
            out.append(answer_sentences(sentences, answers))
        else:
            out.append([best_overlap_sentence(query, sentences)])
    return out


def prepare_sentence_records(records: datasets.Dataset | Sequence[dict], formatter: Any, num_proc: int = 1
                             ) -> datasets.Dataset:
    """Add ``positive_sentences`` (per positive passage) and drop queries without any positive sentence."""
    if not isinstance(records, datasets.Dataset):
        records = datasets.Dataset.from_list(list(records))

    def add(row: dict) -> dict:
        return {"positive_sentences": positive_sentences(row["query"], row["answers"], row["positives"], formatter)}

    tok = formatter.tokenizer
    fingerprint = datasets.fingerprint.Hasher.hash([
        records._fingerprint, PREPARED_VERSION, tok.name_or_path, len(tok), formatter.passage_max_len,
        formatter.passage_prefix])
    prepared = records.map(add, num_proc=num_proc if num_proc > 1 else None, new_fingerprint=fingerprint,
                           desc="dcsr: splitting positives into sentences")
    usable = prepared.filter(lambda row: any(row["positive_sentences"]), num_proc=num_proc if num_proc > 1 else None,
                             new_fingerprint=datasets.fingerprint.Hasher.hash([fingerprint, "usable"]),
                             desc="dcsr: keeping queries with a positive sentence")
    skipped = len(prepared) - len(usable)
    without_answers = sum(1 for a in prepared["answers"] if not a)
    if without_answers:
        logger.info("dcsr: %d of %d queries have no answer strings: their positive is the sentence with the most "
                    "query words in common", without_answers, len(prepared))
    if skipped:
        logger.warning("dcsr: skipped %d of %d queries whose positive passages have no answer sentence within "
                       "--passage_max_len", skipped, len(prepared))
    if len(usable) == 0:
        raise ValueError("dcsr: no training query has a positive sentence (are answers missing or misspelt?)")
    return usable


_NEEDS_NEGATIVES = ("dcsr needs hard-negative passages with text for its sentence negatives; this query has none "
                    "(use --dcsr_bm25_negatives 0 --dcsr_in_passage_negatives 0 for in-batch only)")


class SentenceTrainDataset(Dataset):
    """Items ``{"query", "passages": [token plans], "selection": [(passage, sentence), ...]}``.

    ``passages[0]`` is the positive passage; ``selection[0]`` the positive sentence, then the in-passage and
    hard-negative sentences: always ``1 + in_passage_negatives + bm25_negatives`` entries.
    """

    def __init__(self, records: datasets.Dataset | Sequence[dict], formatter: Any, in_passage_negatives: int = 1,
                 bm25_negatives: int = 1, seed: int = 42, num_proc: int = 1):
        if in_passage_negatives < 0 or bm25_negatives < 0:
            raise ValueError("dcsr: negative counts must be >= 0")
        self.formatter = formatter
        self.records = prepare_sentence_records(records, formatter, num_proc)
        if bm25_negatives:
            require_negatives(self.records, _NEEDS_NEGATIVES)
        self.in_passage = in_passage_negatives
        self.bm25 = bm25_negatives
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.records)

    @property
    def candidates_per_query(self) -> int:
        return 1 + self.in_passage + self.bm25

    def __getitem__(self, index: int) -> dict:
        rec = self.records[index]
        rng = random.Random(f"{self.seed}:{index}:{self.epoch}")
        usable = [i for i, s in enumerate(rec["positive_sentences"]) if s]
        p = usable[(self.epoch + random.Random(f"{self.seed}:{index}").randrange(len(usable))) % len(usable)]
        answers = rec["answers"]
        pos_sentences = self.formatter.split(rec["positives"][p])
        (pos_plan,) = self.formatter.plan([pos_sentences])
        answer_set = set(rec["positive_sentences"][p])
        positive = rng.choice(sorted(answer_set))
        passages = [pos_plan]
        selection = [(0, positive)]
        # in-passage negatives: sentences of the positive passage that are not positives
        others = [j for j in range(len(pos_plan)) if j not in answer_set]
        rng.shuffle(others)
        selection += [(0, j) for j in others[:self.in_passage]]
        missing = self.in_passage - min(self.in_passage, len(others))

        # hard-negative passages: one sentence from each of `bm25` passages, plus stand-ins for in-passage ones
        need_passages = self.bm25 + (1 if missing and not self.bm25 else 0)
        if need_passages:
            negatives = list(rec["negatives"])
            # passages without text have no sentence to sample (an empty hard negative in the train file)
            order = [i for i, text in enumerate(negatives) if text.strip()]
            if not order:
                raise _error_at(rec["source"], "negative_passages", _NEEDS_NEGATIVES)
            mined = list(rec.get("negative_sentences") or [-1] * len(negatives))
            random.Random(f"{self.seed}:{index}").shuffle(order)
            start = (self.epoch * need_passages) % len(order)
            chosen = [order[(start + i) % len(order)] for i in range(need_passages)]
            texts = [negatives[i] for i in chosen]
            neg_sentences = [self.formatter.split(t) for t in texts]
            plans = self.formatter.plan(neg_sentences)
            for slot, (n, sentences, plan) in enumerate(zip(chosen, neg_sentences, plans), start=1):
                passages.append(plan)
                kept = sentences[:len(plan)]
                with_answer = set(answer_sentences(kept, answers)) if answers else set()
                pool = [j for j in range(len(kept)) if j not in with_answer] or list(range(len(kept)))
                hard = mined[n] if 0 <= mined[n] < len(kept) else None
                picks = ([hard] if hard is not None else []) + rng.sample(pool, len(pool))
                picks = list(dict.fromkeys(picks))
                if not picks:
                    raise _error_at(rec["source"], f"negative_passages[{n}]",
                                    "no sentence of this hard-negative passage fits --passage_max_len")
                take = (1 if slot <= self.bm25 else 0) + (missing if slot == 1 else 0)
                # reuse sentences when a short passage has fewer than needed
                selection += [(slot, picks[i % len(picks)]) for i in range(take)]
        return {"query": rec["query"], "passages": passages, "selection": selection}


class SentenceTrainCollator:
    """Tokenised batch ``{"query", "passage", "sentence_selection": (B, C, 2)}``; passages of all queries are
    flattened and each selection's passage index shifted to its row in the flattened batch."""

    def __init__(self, formatter: Any, passage_keys: bool = False):
        self.formatter = formatter
        self.passage_keys = passage_keys

    def __call__(self, features: list[dict]) -> dict[str, Any]:
        plans, selection = [], []
        for f in features:
            offset = len(plans)
            plans.extend(f["passages"])
            selection.append([(offset + p, s) for p, s in f["selection"]])
        batch = {"query": self.formatter.queries([f["query"] for f in features]),
                 "passage": self.formatter.build(plans),
                 "sentence_selection": torch.tensor(selection, dtype=torch.long)}
        if self.passage_keys:  # one key per selected sentence: its tokens (the same sentence, the same key)
            batch["passage_keys"] = content_keys([plans[p][s] for row in selection for p, s in row])
        return batch
