"""Encoding input from ``datasets.load_dataset`` (Tevatron's ``--dataset_name``: a hub dataset such as
``Tevatron/msmarco-passage-corpus``, or a builder such as ``parquet``/``csv`` over local ``--dataset_path`` files).

The rows are exported once to a local jsonl beside the output (the fields our readers take: ids, title, text,
query), so the encoder's streaming, sharding and resume work on it as on any local file.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from multiview_plugin.atomic import atomic_open

logger = logging.getLogger(__name__)

# Tevatron's EncodeDataset reads docid/title/text (corpus) and query_id/query_text|query (queries).
FIELDS = ("docid", "_id", "title", "text", "query_id", "query_text", "query")


def export_dataset(name: str, config: str | None, data_files: str | None, split: str, cache_dir: str | None,
                   target: str | Path) -> Path:
    """Write rows of ``load_dataset(name, config, data_files=..., split=...)`` to ``target`` (jsonl); kept when
    already there (a resumed encoding reads the same input)."""
    import datasets

    target = Path(target)
    if target.is_file():
        return target
    rows = datasets.load_dataset(name, config, data_files=data_files or None, split=split, cache_dir=cache_dir)
    with atomic_open(target) as f:
        for row in rows:
            f.write(json.dumps({k: row[k] for k in FIELDS if row.get(k) is not None}, ensure_ascii=False) + "\n")
    logger.info("exported %d rows of %s (split %s) to %s", len(rows), name, split, target)
    return target
