"""DPR's biencoder training files → Tevatron train jsonl (NQ, TriviaQA, SQuAD recipes).

DPR ships ``biencoder-{nq,trivia,squad1}-{train,dev}.json``: one JSON array of
``{"question", "answers", "positive_ctxs": [{"title", "text", "passage_id"}], "negative_ctxs": [...],
"hard_negative_ctxs": [...]}``. The arrays are gigabytes, so they are parsed object by object (memory: one
record), and every record is validated with its array position in errors.

    python -m multiview_plugin.data.dpr biencoder-nq-train.json train.jsonl [--negatives hard]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator, Sequence

from multiview_plugin.atomic import atomic_open
from multiview_plugin.cli import cli, setup_logging
from multiview_plugin.data.readers import InputFormatError, PathLike, open_text

logger = logging.getLogger(__name__)
_WS = " \t\r\n"


def iter_json_array(path: PathLike, chunk_size: int = 1 << 20) -> Iterator[tuple[int, dict]]:
    """Stream the objects of a top-level JSON array as ``(index, object)`` without loading the file."""
    decoder = json.JSONDecoder()
    buf, pos, index, started = "", 0, 0, False
    with open_text(path) as f:
        eof = False
        while True:
            if len(buf) - pos < chunk_size and not eof:
                more = f.read(chunk_size)
                eof = not more
                buf = buf[pos:] + more
                pos = 0
            while pos < len(buf) and buf[pos] in _WS:
                pos += 1
            if pos >= len(buf):
                if eof:
                    raise InputFormatError(str(path), None, None, "unexpected end of file inside the JSON array")
                continue
            ch = buf[pos]
            if not started:
                if ch != "[":
                    raise InputFormatError(str(path), None, None, f"expected a JSON array, found {ch!r}")
                started, pos = True, pos + 1
                continue
            if ch == "]":
                return
            if ch == ",":
                pos += 1
                continue
            try:
                obj, end = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError as err:
                if not eof:  # the object continues past the buffer: read more
                    more = f.read(chunk_size)
                    eof = not more
                    buf = buf[pos:] + more
                    pos = 0
                    continue
                raise InputFormatError(str(path), None, f"[{index}]", f"invalid JSON: {err.msg}") from None
            yield index, obj
            index, pos = index + 1, end


def _passages(path: PathLike, index: int, record: dict, key: str) -> list[dict]:
    out = []
    for j, ctx in enumerate(record.get(key) or []):
        if not isinstance(ctx, dict) or not isinstance(ctx.get("text"), str):
            raise InputFormatError(str(path), None, f"[{index}].{key}[{j}]", "expected an object with 'text'")
        docid = ctx.get("passage_id", ctx.get("psg_id", ctx.get("id", "")))
        out.append({"docid": str(docid), "title": ctx.get("title") or "", "text": ctx["text"]})
    return out


def convert_dpr_biencoder(path: PathLike, output: PathLike, negatives: str = "hard") -> dict[str, int]:
    """Write a Tevatron legacy train file from a DPR biencoder json; returns counts.

    ``negatives``: ``hard`` (DPR's BM25 ``hard_negative_ctxs``, Tevatron's choice), ``random``
    (``negative_ctxs``) or ``both``. Records without a positive are skipped and counted; a file where every
    record lacks one is an error.
    """
    if negatives not in ("hard", "random", "both"):
        raise ValueError(f"negatives must be hard, random or both, got {negatives!r}")
    keys = {"hard": ["hard_negative_ctxs"], "random": ["negative_ctxs"],
            "both": ["hard_negative_ctxs", "negative_ctxs"]}[negatives]
    written = skipped = 0
    with atomic_open(output) as out:
        for index, record in iter_json_array(path):
            if not isinstance(record, dict) or not isinstance(record.get("question"), str):
                raise InputFormatError(str(path), None, f"[{index}].question", "expected a string")
            answers = record.get("answers") or []
            positives = _passages(path, index, record, "positive_ctxs")
            if not positives:
                skipped += 1
                continue
            negs = [p for key in keys for p in _passages(path, index, record, key)]
            out.write(json.dumps({"query_id": str(index), "query": record["question"], "answers": answers,
                                  "positive_passages": positives, "negative_passages": negs},
                                 ensure_ascii=False) + "\n")
            written += 1
        if not written:  # inside the with: no empty output file is left behind
            raise InputFormatError(str(path), None, "positive_ctxs", f"none of its {skipped} records has a positive "
                                   "passage: nothing to train on (is this a DPR biencoder file?)")
    logger.info("%s → %s: %d queries (%d without a positive skipped)", path, output, written, skipped)
    return {"written": written, "skipped": skipped}


@cli
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m multiview_plugin.data.dpr", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="DPR biencoder json (e.g. biencoder-nq-train.json, .gz accepted).")
    p.add_argument("output", help="Tevatron train jsonl to write (atomically).")
    p.add_argument("--negatives", default="hard", choices=["hard", "random", "both"],
                   help="Which DPR negatives become negative_passages (default: hard, the BM25 ones).")
    args = p.parse_args(argv)
    setup_logging()
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    convert_dpr_biencoder(args.input, args.output, args.negatives)
    return 0

if __name__ == "__main__":
    sys.exit(main())
