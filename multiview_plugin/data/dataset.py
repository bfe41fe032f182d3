"""The training dataset: one (query, positive, hard negatives) group per item.

Records are read and validated once, stored by ``datasets`` (Arrow, memory-mapped, so a large train file is
not held in Python objects), and sampled deterministically: the positive and the negatives an item yields
depend only on (seed, epoch, item), so runs are reproducible and a resumed run sees what it would have.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from torch.utils.data import Dataset

from multiview_plugin.data.readers import (
    InputFormatError,
    first_nonblank_line,
    format_passage,
    iter_train_records,
    load_corpus,
    parse_train_record,
)
from multiview_plugin.text_options import PASSAGE_FIELD_SEPARATOR

logger = logging.getLogger(__name__)

RECORD_FEATURES = datasets.Features({
    "query_id": datasets.Value("string"),
    "query": datasets.Value("string"),
    "answers": datasets.Sequence(datasets.Value("string")),
    "positive_docids": datasets.Sequence(datasets.Value("string")),
    "positives": datasets.Sequence(datasets.Value("string")),
    "negative_docids": datasets.Sequence(datasets.Value("string")),
    "negatives": datasets.Sequence(datasets.Value("string")),
    "negative_sentences": datasets.Sequence(datasets.Value("int32")),
    "source": datasets.Value("string"),
})


# Part of the datasets cache fingerprint: bump when parsing changes what a record holds (2: full-path sources,
# negatives that are also positives dropped), so caches of older versions are not served.
RECORDS_VERSION = 2


def _generate_records(paths: Sequence[str], corpus_path: str | None, separator: str, stamps: Any,
                      version: int = RECORDS_VERSION) -> Iterator[dict]:
    # ``stamps`` (size, mtime of each file) and ``version`` are unused here but part of the datasets cache
    # fingerprint, so an edited file (or a newer parser) is re-read instead of served stale from the cache.
    corpus = load_corpus(corpus_path, separator) if corpus_path else None
    for path in paths:
        yield from iter_train_records(path, corpus=corpus, passage_field_separator=separator)


def _stamp(path: str) -> tuple[str, int, int]:
    st = os.stat(path)
    return (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def load_train_records(
    dataset_path: str | Sequence[str],
    corpus_path: str | None = None,
    passage_field_separator: str = PASSAGE_FIELD_SEPARATOR,
    cache_dir: str | None = None,
) -> datasets.Dataset:
    """Validate local Tevatron train files into a ``datasets.Dataset`` of normalised records.

    ``dataset_path`` is one path, a comma-separated list or a sequence of paths (legacy or new format;
    new-format files need ``corpus_path``). Bad input raises :class:`InputFormatError` naming file, line and
    field.
    """
    paths = [p for p in (dataset_path.split(",") if isinstance(dataset_path, str) else dataset_path) if p]
    if not paths:
        raise ValueError("no training file given: set --dataset_path")
    for p in paths + ([corpus_path] if corpus_path else []):
        if not Path(p).is_file():
            raise FileNotFoundError(f"training input {p} does not exist")
    for p in paths:
        if not first_nonblank_line(p):
            raise InputFormatError(p, None, None, "the training file is empty: no training examples")
    stamps = [_stamp(p) for p in paths] + ([_stamp(corpus_path)] if corpus_path else [])
    try:
        # Tuples, not lists: datasets reads list-valued gen_kwargs as shards to split across, and lists of
        # different lengths (stamps has one more entry with a corpus) fail with "Sharding is ambiguous".
        records = datasets.Dataset.from_generator(
            _generate_records,
            gen_kwargs={"paths": tuple(paths), "corpus_path": corpus_path, "separator": passage_field_separator,
                        "stamps": tuple(stamps), "version": RECORDS_VERSION},
            features=RECORD_FEATURES,
            cache_dir=cache_dir,
        )
    except datasets.exceptions.DatasetGenerationError as err:
        # datasets wraps exceptions raised by the generator; surface our precise message instead.
        cause = err.__cause__ or err.__context__
        while cause is not None and not isinstance(cause, (InputFormatError, FileNotFoundError)):
            cause = cause.__cause__ or cause.__context__
        if cause is not None:
            raise cause from None
        raise
    if len(records) == 0:
        raise InputFormatError(paths[0], None, None, "no training examples found")
    logger.info("loaded %d training queries from %s", len(records), ", ".join(paths))
    return records


def _error_at(source: str, field: str, message: str) -> InputFormatError:
    """An error located at a record's ``source`` ("file:line")."""
    path, _, line = source.rpartition(":")
    return InputFormatError(path or source, int(line) if line.isdigit() else None, field, message)


def require_negatives(records: datasets.Dataset | Sequence[dict], message: str) -> None:
    """Refuse, before training starts, a record without negative passages (``message`` says why they are
    needed); the error names its file and line."""
    if isinstance(records, datasets.Dataset):
        import pyarrow.compute as pc

        # Arrow lengths: no Python strings built, and any select/shuffle of the dataset is respected
        column = records.with_format("arrow")["negatives"]
        counts = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        empty = np.flatnonzero(counts == 0)
        first = int(empty[0]) if len(empty) else None
    else:
        first = next((i for i, rec in enumerate(records) if not rec["negatives"]), None)
    if first is not None:
        raise _error_at(records[first]["source"], "negative_passages", message)


class TrainDataset(Dataset):
    """Items ``{"query_id", "query", "passages": [positive, negative_1, ..., negative_{G-1}]}``.

    Sampling (deterministic in seed, epoch and item index):

    * positive: one of the query's positives, a different one each epoch (the first one with
      ``positive_no_shuffle``);
    * negatives: ``group_size - 1`` taken from a fixed per-query shuffle of its hard negatives, a window
      that moves each epoch so all negatives are seen; the first ones with ``negative_no_shuffle``;
      drawn with replacement when the query has fewer than needed.
    """

    def __init__(
        self,
        records: datasets.Dataset | Sequence[dict],
        group_size: int = 8,
        seed: int = 42,
        positive_no_shuffle: bool = False,
        negative_no_shuffle: bool = False,
    ):
        if group_size < 1:
            raise ValueError(f"--train_group_size must be >= 1, got {group_size}")
        self.records = records
        self.group_size = group_size
        self.seed = seed
        self.positive_no_shuffle = positive_no_shuffle
        self.negative_no_shuffle = negative_no_shuffle
        self.epoch = 0
        if group_size > 1:
            require_negatives(records, self._needs_negatives())

    def _needs_negatives(self) -> str:
        return (f"--train_group_size {self.group_size} needs hard negatives, this query has none "
                "(use --train_group_size 1 for in-batch negatives only)")

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict:
        rec = self.records[index]
        rng = random.Random(f"{self.seed}:{index}")  # fixed per item: the epoch moves a window over it
        positives = rec["positives"]
        if self.positive_no_shuffle:
            positive = positives[0]
        else:
            order = list(range(len(positives)))
            rng.shuffle(order)
            positive = positives[order[self.epoch % len(order)]]

        need = self.group_size - 1
        negatives = list(rec["negatives"])
        if need == 0:
            chosen: list[str] = []
        elif not negatives:
            raise _error_at(rec["source"], "negative_passages", self._needs_negatives())
        elif len(negatives) < need:
            chosen = random.Random(f"{self.seed}:{index}:{self.epoch}").choices(negatives, k=need)
        elif self.negative_no_shuffle:
            chosen = negatives[:need]
        else:
            rng.shuffle(negatives)
            start = (self.epoch * need) % len(negatives)
            chosen = (negatives + negatives)[start:start + need]
        return {"query_id": rec["query_id"], "query": rec["query"], "passages": [positive, *chosen]}


def content_keys(items: Sequence[Any]) -> torch.Tensor:
    """Stable 64-bit content hashes (int64), one per text or token-id sequence: equal content, equal key."""
    def key(item: Any) -> int:
        data = item.encode("utf-8") if isinstance(item, str) else np.asarray(item, dtype=np.int64).tobytes()
        return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)

    return torch.tensor([key(item) for item in items], dtype=torch.long)


class TrainCollator:
    """Tokenises a list of dataset items into ``{"query": batch, "passage": batch}`` (passages flattened
    group by group, so query i's positive is passage ``i * group_size``); with ``passage_keys`` also the
    passages' content keys, for ``--mask_duplicate_positives``."""

    def __init__(self, formatter: Any, passage_keys: bool = False):
        self.formatter = formatter
        self.passage_keys = passage_keys

    def __call__(self, features: list[dict]) -> dict[str, Any]:
        queries = [f["query"] for f in features]
        passages = [p for f in features for p in f["passages"]]
        batch = {"query": self.formatter.queries(queries), "passage": self.formatter.passages(passages)}
        if self.passage_keys:
            batch["passage_keys"] = content_keys(passages)
        return batch


def load_hub_train_records(data_args: Any) -> datasets.Dataset:
    """Tevatron-style loading through ``datasets.load_dataset(name, config, data_files=..., split=...)``
    (e.g. ``--dataset_name Tevatron/msmarco-passage``), validated into the same record schema.

    Id-only (new-format) rows are resolved against ``--corpus_name`` (a hub corpus) or ``--corpus_path``.
    """
    name = data_args.dataset_name
    num_proc = getattr(data_args, "num_proc", 1)
    num_proc = num_proc if num_proc > 1 else None  # --num_proc: loading and validating, as Tevatron's load_dataset
    raw = datasets.load_dataset(name, data_args.dataset_config, data_files=data_args.dataset_path or None,
                                split=data_args.dataset_split, cache_dir=data_args.dataset_cache_dir, num_proc=num_proc)
    sep = data_args.passage_field_separator
    corpus = None
    if data_args.corpus_name:
        rows = datasets.load_dataset(data_args.corpus_name, data_args.corpus_config, split=data_args.corpus_split,
                                     cache_dir=data_args.dataset_cache_dir, num_proc=num_proc)
        id_key = "docid" if "docid" in rows.column_names else "_id"
        text_key = "text" if "text" in rows.column_names else "document_text"
        titles = rows["title"] if "title" in rows.column_names else [None] * len(rows)
        corpus = {str(d): format_passage(t, x, sep) for d, t, x in zip(rows[id_key], titles, rows[text_key])}
    elif data_args.corpus_path:
        corpus = load_corpus(data_args.corpus_path, sep)

    def normalise(row: dict, index: int) -> dict:
        return parse_train_record(row, name, index + 1, corpus, sep, source=f"{name}:{index + 1}")

    # A fixed fingerprint: hashing the closure would hash the whole corpus.
    fingerprint = datasets.fingerprint.Hasher.hash(
        [raw._fingerprint, data_args.corpus_name, data_args.corpus_config, data_args.corpus_path, sep])
    records = raw.map(normalise, with_indices=True, remove_columns=raw.column_names, features=RECORD_FEATURES,
                      new_fingerprint=fingerprint, desc="validating train records", num_proc=num_proc)
    logger.info("loaded %d training queries from %s", len(records), name)
    return records
