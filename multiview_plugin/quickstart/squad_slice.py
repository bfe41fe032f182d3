"""The quickstart's default data: a slice of SQuAD v1.1 dev shipped with the package (``--data squad-slice``).

``data/squad-dev-slice.json.gz`` holds whole articles of SQuAD v1.1's ``dev-v1.1.json``, copied unchanged
(CC BY-SA 4.0, Rajpurkar et al. 2016; ``data/LICENSE-squad-dev-slice.md`` says which and where from). It is a
valid SQuAD v1.1 file, so :func:`multiview_plugin.data.squad.convert_squad` reads it like the full one and the
quickstart runs the SQuAD-dev protocol (docs/data-formats.md) on it, offline: the corpus is every paragraph of
the slice, the questions of :data:`TRAIN_TITLES` are the training questions, those of :data:`EVAL_TITLES` the
held-out ones. The slice keeps the full file's order, train articles first.

:func:`make_slice` rebuilds the file from ``dev-v1.1.json`` (checked by its sha256), byte for byte::

    python -m multiview_plugin.quickstart.squad_slice ../shared/data/squad/dev-v1.1.json OUT.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["SLICE_PATH", "SOURCE_SHA256", "TRAIN_TITLES", "EVAL_TITLES", "slice_ranges", "make_slice",
           "convert_slice"]

#: The shipped slice (package data, declared in setup.py).
SLICE_PATH = Path(__file__).with_name("data") / "squad-dev-slice.json.gz"

#: sha256 of the source, SQuAD v1.1 ``dev-v1.1.json`` (as in docs/data-formats.md).
SOURCE_SHA256 = "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"

#: Training articles: the first ones of the SQuAD-dev protocol's training range (dev articles 0-31).
TRAIN_TITLES = ("Super_Bowl_50", "Warsaw", "Normans")
#: Held-out articles: the first ones of the protocol's evaluation range (dev articles 32-47), up to >= 500 questions.
EVAL_TITLES = ("Jacksonville,_Florida", "Economic_inequality", "Doctor_Who")


def slice_ranges() -> tuple[range, range]:
    """The slice's train and evaluation article indices (train articles come first in the file)."""
    return range(len(TRAIN_TITLES)), range(len(TRAIN_TITLES), len(TRAIN_TITLES) + len(EVAL_TITLES))


def make_slice(source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write the slice of ``source`` (SQuAD v1.1 dev, checked by :data:`SOURCE_SHA256`) to ``out``: the articles of
    :data:`TRAIN_TITLES` and :data:`EVAL_TITLES`, unchanged, as gzipped json with a fixed header (no time stamp,
    no file name), so the same source always gives the same bytes."""
    raw = Path(source).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SOURCE_SHA256:
        raise ValueError(f"{source}: sha256 {digest}, expected SQuAD v1.1 dev-v1.1.json ({SOURCE_SHA256})")
    data = json.loads(raw.decode("utf-8"))
    by_title = {a["title"]: a for a in data["data"]}
    articles = [by_title[t] for t in (*TRAIN_TITLES, *EVAL_TITLES)]  # present: the sha256 matched
    text = json.dumps({"data": articles, "version": data["version"]}, ensure_ascii=False)
    out = Path(out)
    with open(out, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz:
        gz.write(text.encode("utf-8"))
    return out


def convert_slice(path: str | os.PathLike = SLICE_PATH):
    """The slice as a :class:`multiview_plugin.data.squad.SquadSplit` (BM25 hard negatives, as the protocol)."""
    from multiview_plugin.data.squad import convert_squad

    train, held_out = slice_ranges()
    return convert_squad(path, train_articles=train, eval_articles=held_out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m multiview_plugin.quickstart.squad_slice",
                                description="Rebuild the quickstart's SQuAD v1.1 dev slice from dev-v1.1.json.")
    p.add_argument("source", help=f"SQuAD v1.1 dev-v1.1.json (sha256 {SOURCE_SHA256}).")
    p.add_argument("out", help="The slice to write (gzipped json), e.g. squad-dev-slice.json.gz.")
    args = p.parse_args(argv)
    try:
        print(make_slice(args.source, args.out))
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
